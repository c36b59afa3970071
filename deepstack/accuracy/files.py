"""Reading a reference file: one CSV reader for every accuracy check, so a file that cannot be read is one
clear error line, not a traceback; and one loop over its rows that tells a progress bar."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

from deepstack.errors import UserInputError


def read_csv(path: Path) -> list[dict[str, str]]:
    """The rows of the CSV file ``path`` (header → value, as strings)."""
    try:
        with path.open(newline="") as handle:
            return list(csv.DictReader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UserInputError(f"reference file: cannot read {path} ({exc}); give a CSV file") from None


def each(fn: Callable, items: list, progress: Callable[[int, int], None] | None = None) -> list:
    """``[fn(item) for item in items]``, telling ``progress(done, total)`` after each (the command's bar)."""
    out = []
    for item in items:
        out.append(fn(item))
        if progress is not None:
            progress(len(out), len(items))
    return out
