"""Reading a reference file: one CSV reader for every accuracy check, so a file that cannot be read is one
clear error line, not a traceback."""

from __future__ import annotations

import csv
from pathlib import Path

from deepstack.errors import UserInputError


def read_csv(path: Path) -> list[dict[str, str]]:
    """The rows of the CSV file ``path`` (header → value, as strings)."""
    try:
        with path.open(newline="") as handle:
            return list(csv.DictReader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UserInputError(f"reference file: cannot read {path} ({exc}); give a CSV file") from None
