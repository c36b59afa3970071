"""Collective algorithms behind a registry: what each one runs, for which collectives, and when it cannot.

An algorithm is an :class:`Algorithm` (a flat sequence of traffic matrices in rank space) or a
:class:`Composite` (other collectives run one after another, each with its fastest algorithm). The engine
(:mod:`deepstack.models.collectives.engine`) routes, times and ranks them all the same way; adding one needs
no library edit::

    class ReduceThenBroadcast(Algorithm):
        name, ops = "reduce_then_broadcast", ("all_reduce",)

        def steps(self, op, p):
            others = np.arange(1, p)
            return [step("reduce", others, 0, 1.0), step("broadcast", 0 * others, others, 1.0)]

    register_algorithm(ReduceThenBroadcast())

Plans are memoised by algorithm name: registering or unregistering clears every memo table.
"""

from __future__ import annotations

from collections.abc import Sequence

from deepstack.errors import UserInputError
from deepstack.models import memo
from deepstack.models.collectives.steps import Step
from deepstack.schema.schedule import ALGORITHMS_FOR, declare_algorithm, forget_algorithm

OPS: tuple[str, ...] = tuple(ALGORITHMS_FOR)  # the collectives (the schema's names)


class CollectiveError(UserInputError, ValueError):
    """A bad collective request (unknown op or algorithm, an algorithm that does not apply, bad groups)."""


class Algorithm:
    """A collective algorithm as a sequence of traffic matrices over a group of p ranks.

    Attributes:
        name: the name users ask for (not "auto" or "none").
        ops: the collectives it implements (of :data:`OPS`).
        ranked: whether "auto" considers it (False for one that can never win, to save routing it).
        fastest_step: the steps are alternatives (e.g. one per pipeline chunk count) and only the fastest one
            runs, with :meth:`choice` naming it; otherwise every step runs, in order.
    """

    name: str = ""
    ops: tuple[str, ...] = ()
    ranked: bool = True
    fastest_step: bool = False

    def steps(self, op: str, p: int) -> Sequence[Step]:
        """The steps of ``op`` over ranks 0…p−1 (p ≥ 2), bytes of each flow per byte of the per-rank input S.

        Called once per (op, group shape, network structure): the engine scales the sizes by S.
        """
        raise NotImplementedError

    def unavailable(self, op: str, groups: tuple, structure) -> str | None:
        """Why the algorithm cannot run on these groups (device ids) of a network structure, or None."""
        return None

    def choice(self, index: int) -> str:
        """Detail naming step ``index`` when :attr:`fastest_step` chose it (e.g. "chunks=4")."""
        return ""


class Composite(Algorithm):
    """Other collectives run one after another, each with the fastest applicable algorithm for its groups."""

    def steps(self, op: str, p: int) -> Sequence[Step]:
        raise TypeError(f"{self.name} is composite: it runs phases, not steps of its own")

    def phases(self, op: str, S: float, groups: tuple, structure) -> tuple[tuple[str, str, float, tuple, str], ...]:
        """(role, collective, bytes per rank, groups, algorithm) of every phase, in order, where algorithm is a
        registered name or "auto" (the fastest applicable one); only called when available."""
        raise NotImplementedError


_BY_OP: dict[str, dict[str, Algorithm]] = {op: {} for op in OPS}
_NAMES: dict[str, tuple[str, ...]] = {op: () for op in OPS}  # kept with _BY_OP: algorithms() runs per call


def register_algorithm(algorithm: Algorithm | type[Algorithm]) -> Algorithm:
    """Make an algorithm available for each of its ``ops`` (a class is instantiated); returns it.

    Usable as a class decorator. Registering clears every memo table (plans are memoised by name).
    """
    register_built_in(algorithm)
    declare_algorithm(algorithm.name, algorithm.ops)  # schedules and spaces may name it too
    memo.clear_caches()
    return algorithm


def register_built_in(algorithm: Algorithm | type[Algorithm]) -> Algorithm:
    """:func:`register_algorithm` without clearing the memo tables (for the built-ins, registered on import)."""
    instance = algorithm() if isinstance(algorithm, type) else algorithm
    if not isinstance(instance, Algorithm):
        raise TypeError(f"an algorithm must subclass Algorithm, got {algorithm!r}")
    if not instance.name or instance.name in ("auto", "none"):
        raise ValueError(f"an algorithm needs a name other than auto and none, got {instance.name!r}")
    for op in instance.ops:
        if op not in _BY_OP:
            raise ValueError(f"algorithm {instance.name}: op must be one of {', '.join(OPS)} (got {op!r})")
    for op in instance.ops:
        _BY_OP[op][instance.name] = instance
        _NAMES[op] = tuple(_BY_OP[op])
    return algorithm


def unregister_algorithm(name: str) -> None:
    """Forget an algorithm for every collective it serves (and every memo table, which may hold its plans)."""
    for op, registered in _BY_OP.items():
        if registered.pop(name, None) is not None:
            _NAMES[op] = tuple(registered)
    forget_algorithm(name)
    memo.clear_caches()


def algorithms(op: str) -> tuple[str, ...]:
    """Algorithm names available for a collective (besides "auto"), in registration order (built-ins first)."""
    names = _NAMES.get(op)
    if names is None:
        raise CollectiveError(f"op: must be one of {', '.join(OPS)} (got {op!r})")
    return names


def algorithm(op: str, name: str) -> Algorithm:
    """The registered algorithm ``name`` of collective ``op`` (both already checked)."""
    return _BY_OP[op][name]
