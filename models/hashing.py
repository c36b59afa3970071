"""A memo-key hash computed once per instance, for the frozen dataclasses the evaluators are memoised on."""

from __future__ import annotations

from dataclasses import fields


def cached_hash(self) -> int:
    """``__hash__`` for a frozen dataclass (assign it in the class body: ``__hash__ = cached_hash``).

    The same value as the dataclass' own hash (its compared fields), kept in the instance after the first call:
    operators, devices and collectives are looked up in memo tables millions of times in a search, and hashing
    a device spec field by field each time cost more than the lookup saved. The stored hash is dropped when
    pickling (see :func:`state_without_hash`): string hashes differ between processes.
    """
    state = self.__dict__
    value = state.get("_hash")
    if value is None:
        names = _COMPARED.get(type(self))
        if names is None:
            names = _COMPARED[type(self)] = tuple(f.name for f in fields(self) if f.compare)
        value = state["_hash"] = hash(tuple([state[name] for name in names]))  # frozen: bypass __setattr__
    return value


_COMPARED: dict[type, tuple[str, ...]] = {}  # per class, the names of the fields its equality compares


def state_without_hash(self) -> dict:
    """``__getstate__`` partner of :func:`cached_hash`."""
    state = dict(self.__dict__)
    state.pop("_hash", None)
    return state


class HashedTuple(tuple):
    """A tuple whose hash is computed once: device groups (up to 256 ids) key the collective memo tables on
    every call. Pickles as a plain tuple's contents, so the stored hash never crosses a process boundary."""

    def __hash__(self) -> int:
        try:
            return self.__dict__["_hash"]
        except KeyError:
            value = self.__dict__["_hash"] = tuple.__hash__(self)
            return value

    def __reduce__(self):
        return (HashedTuple, (tuple(self),))
