"""Strict JSON for files and stdout: NaN and infinities (e.g. a TTFT that was not computed) become null."""

from __future__ import annotations

import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None, recursively through dicts, lists and tuples."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value
