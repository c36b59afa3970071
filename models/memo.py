"""The one home of every memo table (evaluators and search alike).

Every stage of an evaluation is a pure function of frozen inputs, so its results can be kept and shared by
every design point that asks again. Two kinds of table exist, both registered here when they are created:

* :func:`cached` — a bounded LRU memo of a pure function (``functools.lru_cache`` underneath). Its key is the
  function's arguments, so it can never fall out of step with the inputs; a value it keeps must not be
  changed by anyone (return tuples, frozen dataclasses or read-only arrays — :func:`cached` refuses to keep a
  ``dict``, ``list``, ``set`` or ``bytearray``), and a key must not change either (:func:`cached` and
  :meth:`Table.put` refuse a key that could: :func:`immutable`).
* :class:`Table` — a bounded dict for memos filled in batches (e.g. all GEMMs of a hardware point tuned at
  once). It forgets everything when full (``lru=False``) or its least recently used entry (``lru=True``).

:func:`clear_caches` empties every table of every module imported so far: a table of a module never imported
holds nothing. Memoisation never changes a number; ``tests/test_memoisation.py`` checks it.
"""

from __future__ import annotations

import enum
import functools
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from deepstack.schema.frozen import FrozenMap

_MUTABLE = (dict, list, set, bytearray)
_REGISTRY: list[Any] = []  # every table made by cached() or Table, in creation order


class MutableMemoValueError(TypeError):
    """A memoised function returned a value its callers could change under every other caller's feet."""


def cached(maxsize: int) -> Callable[[Callable], Callable]:
    """Memoise a pure function in a bounded LRU table registered with :func:`clear_caches`.

    Args:
        maxsize: the most entries kept (a power of two is customary; must be positive: nothing unbounded).
    """
    if maxsize is None or maxsize <= 0:
        raise ValueError("memo tables are bounded: give maxsize > 0")

    def decorate(function: Callable) -> Callable:
        table = functools.lru_cache(maxsize=maxsize)(_refusing_mutable(function))
        functools.update_wrapper(table, function)
        _REGISTRY.append(table)
        return table

    return decorate


class MutableMemoKeyError(TypeError):
    """A memo was asked with a key that could change after the lookup (and then hit the old key's value)."""


_ATOMS = (type(None), bool, int, float, complex, str, bytes, range, enum.Enum, type, np.generic, FrozenMap)
_LOOK_INSIDE = object()  # the verdict of tuples and frozensets: immutable if what they hold is
_PLAIN = frozenset({type(None), bool, int, float, str, bytes})


def _judge(kind: type) -> Any:
    verdict = _verdict(kind)
    if verdict is True:
        _VERDICTS.immutable.add(kind)
    return verdict


def _verdict(kind: type) -> Any:
    if issubclass(kind, tuple | frozenset):
        return _LOOK_INSIDE
    if issubclass(kind, _ATOMS) or getattr(kind, "MEMO_KEY", False):
        return True
    params = getattr(kind, "__dataclass_params__", None)
    if params is not None:
        return bool(params.frozen)
    config = getattr(kind, "model_config", None)
    return isinstance(config, dict) and bool(config.get("frozen"))


def immutable(value: Any) -> bool:
    """Whether ``value`` can key a memo: nothing can change it in place. Numbers, strings, enums, classes,
    :class:`~deepstack.schema.FrozenMap`, tuples and frozensets of such, frozen dataclasses and frozen pydantic
    models (the schemas: their collections are tuples and frozen maps) qualify; dicts, lists, sets, arrays and
    objects that can be changed do not. A class whose instances never change once made, without being a frozen
    dataclass, vouches for it with ``MEMO_KEY = True`` (a key view built once in ``__init__``; a phase keyed by
    identity whose rows are made lazily: filling them in never changes what the phase is). Each value is judged
    by its type (once per type; a frozen record's fields are frozen by its declaration), and a tuple by the
    types it holds, so the check costs little next to the miss it guards.
    """
    kind = type(value)
    verdict = _VERDICTS.get(kind)
    if verdict is None:
        verdict = _VERDICTS[kind] = _judge(kind)  # a few dozen types: never near the bound
    if verdict is not _LOOK_INSIDE:
        return verdict
    kinds = set(map(type, value))
    if kinds <= _PLAIN:  # numbers and strings only: the common case, decided without a Python loop
        return True
    if _JUDGED.get(id(value)) is value:  # a shared tuple (a layout's groups, a network structure) judged before
        return True
    inside = set()
    for inner in kinds:
        judged = _VERDICTS.get(inner)
        if judged is None:
            judged = _VERDICTS[inner] = _judge(inner)
        if judged is False:
            return False
        if judged is _LOOK_INSIDE:
            inside.add(inner)
    if inside:  # nested tuples: one pass over what they hold decides the usual groups of device numbers
        nested = [v for v in value if type(v) in inside]
        if not set(map(type, itertools.chain.from_iterable(nested))) <= _PLAIN and not all(map(immutable, nested)):
            return False
    if len(_JUDGED) >= _JUDGED.maxsize:  # worth remembering: it held more than numbers and strings
        _JUDGED.clear()
    _JUDGED[id(value)] = value  # kept alive while listed, so its id is not reused
    return True


def check_key(where: str, key: Any) -> None:
    """Refuse (:class:`MutableMemoKeyError`) a memo key that could change after the lookup."""
    parts = key if type(key) is tuple else (key,)  # the arguments, each judged (the call's own tuple is new)
    whole = _VERDICTS.immutable
    if set(map(type, parts)) <= whole:  # records, numbers, strings: one comparison
        return
    for culprit in parts:
        if type(culprit) in whole or _JUDGED.get(id(culprit)) is culprit or immutable(culprit):
            continue
        raise MutableMemoKeyError(
            f"{where}: memo key holds a {type(culprit).__name__}, which can be changed after the lookup (and would "
            "then return the old value); key memos on immutable inputs (tuples, frozen records, FrozenMap)")


def _refusing_mutable(function: Callable) -> Callable:
    """``function`` with a check of its arguments (the memo key) and of what it returns (runs on a memo miss
    only, so it costs nothing on a hit; a key type that could change is refused on its first, missing, call)."""
    where = f"{function.__module__}.{function.__qualname__}"

    @functools.wraps(function)
    def checked(*args, **kwargs):
        check_key(where, args)
        if kwargs:
            check_key(where, tuple(kwargs.values()))
        value = function(*args, **kwargs)
        if isinstance(value, _MUTABLE):
            raise MutableMemoValueError(
                f"{function.__module__}.{function.__qualname__} returned a {type(value).__name__}; a memoised "
                "value is shared by every caller, so return an immutable one (tuple, frozen dataclass, ...)")
        return value

    return checked


class Table(dict):
    """A bounded memo dict registered with :func:`clear_caches`.

    Use :meth:`put` to add (it enforces the bound); reads are plain dict reads. ``lru=True`` keeps the
    most recently used entries (a read through :meth:`lookup` refreshes one); otherwise the table is emptied
    when full, which costs nothing per read. The LRU order is the dict's own insertion order: a refreshed entry
    is moved to the end, and the first one is the least recently used.
    """

    def __init__(self, name: str, maxsize: int, lru: bool = False) -> None:
        super().__init__()
        if maxsize <= 0:
            raise ValueError("memo tables are bounded: give maxsize > 0")
        self.name, self.maxsize, self.lru = name, maxsize, lru
        _REGISTRY.append(self)

    def put(self, key, value) -> None:
        check_key(self.name, key)
        if key in self:
            del self[key]  # re-inserted below, at the most recently used end
        elif len(self) >= self.maxsize:
            if self.lru:
                del self[next(iter(self))]
            else:
                self.clear()
        self[key] = value

    def lookup(self, key, default=None):
        """The value kept for ``key`` (refreshing it in an LRU table), or ``default``."""
        if not self.lru:
            return self.get(key, default)
        found = self.pop(key, _MISSING)
        if found is _MISSING:
            return default
        self[key] = found
        return found

    def cache_clear(self) -> None:
        self.clear()

    def cache_info(self) -> tuple[int, int]:
        """(entries, bound)."""
        return len(self), self.maxsize


_MISSING = object()
# what immutable() learnt: a type → True, False or _LOOK_INSIDE (judged once per type: keys are checked often), and
# id → a tuple judged immutable (memo keys reuse the same groups and network structures; listed, it stays alive, so
# its id is not reused). Filled with plain dict writes: Table.put would check its own keys.
class _Verdicts(Table):
    """Types judged for memo keys (a type → its verdict), with the set of those that are immutable whole: a key
    made of such types only is decided by one set comparison."""

    def __init__(self, name: str, maxsize: int) -> None:
        super().__init__(name, maxsize)
        self.immutable: set[type] = set()

    def cache_clear(self) -> None:
        self.clear()
        self.immutable.clear()


_VERDICTS = _Verdicts("memo key verdicts per type", maxsize=4096)
_JUDGED = Table("memo keys judged immutable", maxsize=8192)


def registered() -> tuple[Any, ...]:
    """Every memo table created so far (for tests and benchmarks)."""
    return tuple(_REGISTRY)


def entries() -> int:
    """Entries held by every table together (0 right after :func:`clear_caches`)."""
    total = 0
    for table in _REGISTRY:
        total += len(table) if isinstance(table, Table) else table.cache_info().currsize
    return total


def clear_caches() -> int:
    """Forget every memoised result of every imported module (for cold timings and memo-identity checks).

    Returns the number of tables cleared.
    """
    for table in _REGISTRY:
        table.cache_clear()
    for hook in _CLEAR_HOOKS:
        hook()
    return len(_REGISTRY)


_CLEAR_HOOKS: list[Callable[[], None]] = []


def on_clear(hook: Callable[[], None]) -> Callable[[], None]:
    """Also run ``hook`` on :func:`clear_caches` (for state that is not a table, e.g. interned objects kept on
    instances). Returns the hook, so it can decorate."""
    _CLEAR_HOOKS.append(hook)
    return hook
