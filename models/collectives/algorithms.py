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

Plans are memoised by algorithm name: registering or unregistering clears every memo table. The algorithms live
in :data:`deepstack.registry.ALGORITHMS`, which schedules are validated against, so a registered algorithm (here
or by a plugin) is named in files and ``--parallel`` like a built-in one.
"""

from __future__ import annotations

from collections.abc import Sequence

from deepstack.errors import UserInputError
from deepstack.models import memo
from deepstack.models.collectives.steps import Step
from deepstack.registry import ALGORITHMS
from deepstack.schema.schedule import COLLECTIVES

OPS: tuple[str, ...] = COLLECTIVES  # the collectives (the schema's names)


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


def register_algorithm(algorithm: Algorithm | type[Algorithm]) -> Algorithm:
    """Make an algorithm available for each of its ``ops`` (a class is instantiated); returns it.

    Usable as a class decorator. Registering clears every memo table (plans are memoised by name).
    """
    register_built_in(algorithm)
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
        if op not in OPS:
            raise ValueError(f"algorithm {instance.name}: op must be one of {', '.join(OPS)} (got {op!r})")
    ALGORITHMS.declare(instance.name, instance)
    return algorithm


def unregister_algorithm(name: str) -> None:
    """Forget an algorithm for every collective it serves (and every memo table, which may hold its plans)."""
    ALGORITHMS.forget(name)
    memo.clear_caches()


# per collective: its algorithms by name, and their names, in registration order; derived from ALGORITHMS and
# rebuilt only when it changed (algorithms() runs on every collective timed)
_BY_OP: dict = {"generation": -1, "by_op": {}, "names": {}}


def _derived() -> dict:
    if _BY_OP["generation"] != ALGORITHMS.generation:
        table: dict[str, dict[str, Algorithm]] = {op: {} for op in OPS}
        for name, instance in ALGORITHMS.items():
            for op in instance.ops:
                table[op][name] = instance
        _BY_OP.update(by_op=table, names={op: tuple(named) for op, named in table.items()},
                      generation=ALGORITHMS.generation)
    return _BY_OP


def algorithms(op: str) -> tuple[str, ...]:
    """Algorithm names available for a collective (besides "auto"), in registration order (built-ins first)."""
    names = _derived()["names"].get(op)
    if names is None:
        raise CollectiveError(f"op: must be one of {', '.join(OPS)} (got {op!r})")
    return names


def algorithm(op: str, name: str) -> Algorithm:
    """The registered algorithm ``name`` of collective ``op`` (both already checked)."""
    return _derived()["by_op"][op][name]
