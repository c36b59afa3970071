"""The files a study's storage URL names, and where its front files go (``deepstack optimize --storage``,
``--out``). Paths only: the storage itself is opened by :func:`deepstack.search.optimize.open_storage`, so Optuna
stays imported by that module alone."""

from __future__ import annotations

import re
from pathlib import Path

from deepstack.errors import UserInputError
from deepstack.search.files import recorded


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


def storage_identity(url: str) -> str:
    """Which storage a URL names, as a front file records it: a storage file's resolved path, else the URL
    with any password hidden."""
    path = storage_file(url)
    if path is not None:
        return str(path.resolve())
    return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)


def check_front_owner(folder: Path, study: str, storage_url: str) -> None:
    """Refuse, before any trial runs, a folder whose ``<study>.pareto.*`` files are another storage's study of
    the same name: this run's front would replace them. A front file that names no storage (or cannot be read)
    vouches for nothing."""
    path = folder / f"{study}.pareto.json"
    theirs = recorded(path, lambda front: front.get("storage"))
    ours = storage_identity(storage_url)
    if theirs and theirs != ours:
        raise UserInputError(f"--out: {path} is the front of study {study!r} in {theirs}, not in {ours}: give "
                             "another --out (or --study), or remove that study's front files first")


def front_folder(out: str | None, storage_url: str) -> Path:
    """Where a study's front files go: ``--out``, else beside its storage file (``studies/`` for a server)."""
    if out is not None:
        return Path(out)
    path = storage_file(storage_url)
    return path.parent if path is not None else Path("studies")


def check_storage_url(url: str) -> None:
    """Refuse a bare path: it would reach SQLAlchemy as an unparsable URL, after checks that read it as another
    storage."""
    if "://" not in url and not is_journal(url):
        raise UserInputError(f"--storage: {url!r} is not a storage URL; a SQLite file is sqlite:///{url}, a journal "
                             "file journal:PATH, a server postgresql://USER@HOST/DB")


def check_storage_folder(url: str, may_create: bool = False) -> bool:
    """Refuse a storage file whose folder does not exist (unless ``may_create``), or a bare path that is no storage
    URL; True when the folder is to be created."""
    check_storage_url(url)
    path = storage_file(url)
    if path is None or path.parent.is_dir():
        return False
    if not may_create or path.parent.exists():
        raise UserInputError(f"--storage: {path.parent}, the folder of {url!r}, is not an existing folder; create "
                             "it first or give a file in an existing folder")
    return True
