"""Preset catalog: LLMs, chip architectures (Table 2), NoCs (Table 3) and real GPU systems, as package data,
and the presets of installed plugins (their folders in :data:`deepstack.registry.CATALOGS`).

Anywhere a preset name is taken, a path to the user's own ``.toml``/``.yaml``/``.json`` file works too.
"""

from __future__ import annotations

import functools
import os
from importlib import resources
from pathlib import Path

from deepstack.errors import UserInputError
from deepstack.registry import CATALOGS, load_plugins
from deepstack.schema.loader import SUFFIXES, read_file

KINDS = {"llms": "llm", "chips": "chip", "nocs": "noc", "systems": "system"}
_WHAT = {"llms": "model", "chips": "chip", "nocs": "NoC", "systems": "system"}


def _index(kind: str) -> dict[str, Path]:
    """Every preset of one kind, name → file: the package's, then each plugin's."""
    if kind not in KINDS:
        raise UserInputError(f"catalog kind: must be one of {', '.join(KINDS)} (got {kind!r})")
    load_plugins()
    return _index_of(kind, CATALOGS.generation)


@functools.cache
def _index_of(kind: str, generation: int) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for owner, folder in (("the package", Path(str(resources.files(__package__)))), *CATALOGS.items()):
        for path in sorted((folder / kind).glob("*.toml")):
            name = path.name.removesuffix(".toml").lower()
            if name in found:
                raise UserInputError(f"catalog {owner}: {kind} preset {name!r} ({path}) is already a preset "
                                     f"({found[name]}); give it another name")
            found[name] = path
    return found


def names(kind: str) -> tuple[str, ...]:
    """Preset names of one kind, sorted."""
    _index(kind)
    return _names_of(kind, CATALOGS.generation)


@functools.cache
def _names_of(kind: str, generation: int) -> tuple[str, ...]:
    return tuple(sorted(_index_of(kind, generation)))


def _is_path(value: str) -> bool:
    return value.lower().endswith(SUFFIXES) or "/" in value or "\\" in value


@functools.cache
def _preset_data(kind: str, name: str) -> dict:
    return read_file(_index(kind)[name])


def load_data(kind: str, value: str) -> dict:
    """Raw data of a preset (by name) or of a user file (by path), with its ``kind`` checked: a new dict each call,
    nested tables included, that the caller may change."""
    value = value.strip()
    if _is_path(value):
        data = read_file(value)
        origin = value
    else:
        key = value.lower()
        if key not in names(kind):
            raise UserInputError(
                f"unknown {_WHAT[kind]} {value!r}; allowed: {', '.join(names(kind))} or a path to a "
                f"{'/'.join(SUFFIXES)} file"
            )
        data = _preset_data(kind, key)
        origin = f"{_WHAT[kind]} preset {key}"
    if data.get("kind", KINDS[kind]) != KINDS[kind]:
        raise UserInputError(f"{origin}: kind: expected {KINDS[kind]!r}, got {data.get('kind')!r}")
    return _fresh(data)  # the caller's own copy: editing it never changes the next load (issue 29)


def _fresh(value):
    """A new copy of file data (tables, arrays and scalars), nested tables and arrays included."""
    if isinstance(value, dict):
        return {key: _fresh(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_fresh(item) for item in value]
    return value


def load(kind: str, value: str):
    """Validated preset or user file of one kind. A user file is read and validated again only when it changed
    (its size or modification time): a search asks for its NoC file once per trial."""
    given = value.strip()
    if not _is_path(given) and given.lower() in names(kind):
        return _load_preset(kind, given.lower())
    # None: the file cannot be read, and load_data reports the problem as it does, one line
    return _load_file(kind, value, file_stamp(given))


def file_stamp(path: str) -> tuple | None:
    """(absolute path, modification time, size) of a file, the key under which its loaded content is kept (a
    changed file is another key), or None when it cannot be read."""
    try:
        stamp = os.stat(path)
    except (OSError, ValueError):
        return None
    return os.path.abspath(path), stamp.st_mtime_ns, stamp.st_size


@functools.lru_cache(maxsize=256)
def _load_file(kind: str, value: str, stamp: tuple | None):
    from deepstack.schema import SCHEMAS, validate

    return validate(SCHEMAS[KINDS[kind]], load_data(kind, value), origin=value)


@functools.cache
def _load_preset(kind: str, name: str):
    from deepstack.schema import SCHEMAS, validate

    return validate(SCHEMAS[KINDS[kind]], load_data(kind, name), origin=f"{_WHAT[kind]} preset {name}")


def find(value: str):
    """Any preset by name across all kinds (for ``catalog show``): returns (kind, validated object)."""
    hits = [kind for kind in KINDS if value.strip().lower() in names(kind)]
    if not hits:
        every = ", ".join(n for kind in KINDS for n in names(kind))
        raise UserInputError(f"unknown preset {value!r}; allowed: {every}")
    return hits[0], load(hits[0], value)
