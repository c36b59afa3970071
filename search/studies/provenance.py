"""Which code produced a study's results: a digest of the package's source and catalog files.

``run.json`` records it, so a reader of the results (``deepstack accuracy paper``) can tell results computed by
the code it is running from stale ones: any change to a law, a preset or a runner changes the digest.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
from pathlib import Path

_PACKAGES = ("deepstack", "deepstack.models", "deepstack.search")  # three folders: models/ and search/ sit beside
_SOURCES = ("*.py", "*.toml")  # the laws and runners, and the presets (chips, NoCs, models, spaces)


def digest_of(roots: dict[str, Path]) -> str:
    """SHA-256 (hex, first 16 digits) over the name and bytes of every source and preset file under each root."""
    digest = hashlib.sha256()
    for name, root in sorted(roots.items()):
        files = sorted({f for pattern in _SOURCES for f in root.rglob(pattern) if "__pycache__" not in f.parts})
        for path in files:
            digest.update(f"{name}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@functools.cache
def code_digest() -> str:
    """The digest of the code now running (its three package folders)."""
    return digest_of({name: Path(importlib.import_module(name).__file__).parent for name in _PACKAGES})
