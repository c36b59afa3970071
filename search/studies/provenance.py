"""Which code produced a study's results: a digest of the package's source and catalog files.

``run.json`` records it, so a reader of the results (``deepstack accuracy paper``) can tell results computed by
the code it is running from stale ones: any change to a law, a preset or a runner changes the digest.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
from pathlib import Path

_SOURCES = ("*.py", "*.toml")  # the laws and runners, and the presets (chips, NoCs, models, spaces)


@functools.cache
def code_digest() -> str:
    """SHA-256 (hex, first 16 digits) over the path and bytes of every source and preset file of the package."""
    digest = hashlib.sha256()
    for package in map(importlib.import_module, ("deepstack", "deepstack.models", "deepstack.search")):
        root = Path(package.__file__).parent
        files = sorted({f for pattern in _SOURCES for f in root.rglob(pattern) if "__pycache__" not in f.parts})
        for path in files:
            digest.update(f"{package.__name__}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
