"""The files a study's storage URL names, and where its front files go (``deepstack optimize --storage``,
``--out``). Paths only: the storage itself is opened by :func:`deepstack.search.optimize.open_storage`, so Optuna
stays imported by that module alone."""

from __future__ import annotations

from pathlib import Path

from deepstack.errors import UserInputError


def default_storage(study: str) -> str:
    return f"sqlite:///studies/{study}.db"


def is_journal(url: str) -> bool:
    return url.startswith("journal:") or url.endswith((".log", ".journal"))


def storage_file(url: str) -> Path | None:
    """The file a storage URL keeps its study in (``sqlite:///PATH``, ``journal:PATH``, ``PATH.log``); None for
    a database server (PostgreSQL) or an in-memory SQLite."""
    if is_journal(url):
        return Path(url.removeprefix("journal:"))
    if url.startswith("sqlite:///") and url.removeprefix("sqlite:///") not in ("", ":memory:"):
        return Path(url.removeprefix("sqlite:///"))
    return None


def front_folder(out: str | None, storage_url: str) -> Path:
    """Where a study's front files go: ``--out``, else beside its storage file (``studies/`` for a server)."""
    if out is not None:
        return Path(out)
    path = storage_file(storage_url)
    return path.parent if path is not None else Path("studies")


def check_storage_folder(url: str, may_create: bool = False) -> bool:
    """Refuse a storage file whose folder does not exist (unless ``may_create``); True when it is to be created."""
    path = storage_file(url)
    if path is None or path.parent.is_dir():
        return False
    if not may_create or path.parent.exists():
        raise UserInputError(f"--storage: {path.parent}, the folder of {url!r}, is not an existing folder; create "
                             "it first or give a file in an existing folder")
    return True
