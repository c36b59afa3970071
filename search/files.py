"""Writing result files so that a killed run leaves either the whole file or the previous one, never half."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


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
