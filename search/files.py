"""Writing result files so that a killed run leaves either the whole file or the previous one, never half."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from deepstack.errors import UserInputError

T = TypeVar("T")


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same folder and a rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def recorded(path: Path, field: Callable[[dict], T]) -> T | None:
    """What a run's JSON record in an output folder says of who owns the folder (``field`` of its contents), or
    None when there is no record or it cannot be read: such a record vouches for nothing. The one check behind
    every refusal to write over another run's output (a sweep's stamp, a study's record, a front's file)."""
    try:
        return field(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def save_figure(fig, path: str, dpi: int) -> str | None:
    """Save a matplotlib figure as a PNG and close it; None when the file cannot be written (a picture is never
    worth failing a run for)."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    try:
        fig.savefig(path, dpi=dpi)
    except OSError:
        return None
    finally:
        plt.close(fig)
    return path


def check_output_folder(folder: str | Path, flag: str = "--out") -> Path:
    """Refuse, before any work starts, an output folder that cannot be created or written (one line naming
    ``flag``): an existing file, or a place no file can be created in (``/proc``, a read-only mount). Nothing is
    created: a file is tried in the folder, or in its nearest existing parent, and removed at once."""
    path = Path(folder)
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        what = "is a file" if probe == path else f"cannot be created: {probe} is a file"
        raise UserInputError(f"{flag}: {path} {what}, not a folder; give a folder to write into")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        where = "" if probe == path else f" (nothing can be created in {probe})"
        raise UserInputError(f"{flag}: cannot write to the folder {path}{where}: {exc.strerror or exc}; "
                             "give a folder you can write to") from None
    return path
