"""Read-only collections for frozen schemas and results: a frozen model must hold nothing a caller can change in
place (a plain dict inside a frozen schema let an edited schedule hit the memo of its old value, issue 29)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any


class FrozenMap(Mapping):
    """A read-only mapping (for entries whose keys are data: a schedule's collective algorithms, the area terms,
    a module's degrees). Its entries cannot be set, deleted or reached through a mutable dict; it hashes and
    compares by its items, whatever their order."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping | None = None) -> None:
        object.__setattr__(self, "_data", MappingProxyType(dict(data) if data else {}))

    def __getitem__(self, key):
        return self._data[key]

    def __iter__(self) -> Iterator:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key) -> bool:
        return key in self._data

    def get(self, key, default=None):
        return self._data.get(key, default)

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __delattr__(self, name):
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    def __reduce__(self):
        return (type(self), (dict(self._data),))

    def __repr__(self) -> str:
        return f"FrozenMap({dict(self._data)!r})"

    def as_dict(self) -> dict:
        """A plain (new, mutable) dict of the entries, nested frozen maps and records as dicts, tuples as lists."""
        return {key: plain(value) for key, value in self._data.items()}


def plain(value: Any) -> Any:
    """The JSON form of a frozen value: frozen maps and result records (mappings with ``as_dict``) as dicts, tuples
    as lists."""
    if isinstance(value, Mapping) and hasattr(value, "as_dict"):
        return value.as_dict()
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    return value


def frozen(value: Any) -> Any:
    """``value`` with every dict made a :class:`FrozenMap` and every list a tuple, recursively."""
    if isinstance(value, dict):
        return FrozenMap({key: frozen(v) for key, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(frozen(v) for v in value)
    return value
