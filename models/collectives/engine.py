"""The collective engine: run an algorithm on a topology (:func:`execute`), rank every applicable one for "auto"
without summing every link's bytes, and the public entry points :func:`collective_time` and
:func:`time_on_groups`. Memoised at every level: a sweep re-plans only when the network structure or the groups
change, and re-ranks only when a level the groups cross changed speed."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from deepstack.models import memo
from deepstack.models.collectives.algorithms import CollectiveError, Composite, algorithms
from deepstack.models.collectives.algorithms import algorithm as algorithm_of
from deepstack.models.collectives.plan import (
    Plan,
    joint_plan_of,
    latency_congestion,
    plan_level_bytes,
    plan_of,
    timed_steps,
)
from deepstack.models.collectives.results import CollectiveResult, Run, StepResult
from deepstack.models.network import NetworkTopology, as_topology, readonly


def _run_of(algorithm: str, detail: str, plan: Plan, timed, steps, topology, overhead_s: float) -> Run:
    """A :class:`Run` of the plan's steps ``steps`` (indices) from :func:`.plan.timed_steps`."""
    latency, congestion, peak, loads = timed
    counts = plan.counts[steps]
    results = tuple(
        StepResult(plan.phases[k], int(plan.counts[k]), float(latency[k] + congestion[k] + overhead_s),
                   float(latency[k]), float(congestion[k]), float(peak[k]))
        for k in steps
    )
    totals = tuple(readonly(counts @ level_loads_[steps]) for level_loads_ in loads)
    return Run(algorithm, detail, results, totals)


@memo.cached(maxsize=2048)  # keeps per-link byte totals (a few kB each for 256 devices): ~10s of MB at most
def execute(op: str, algorithm: str, S: float, groups: tuple, topology: NetworkTopology, overhead_s: float) -> Run:
    """Run one algorithm (checked to apply) with the bytes of every link: the full :class:`Run`."""
    chosen = algorithm_of(op, algorithm)
    if isinstance(chosen, Composite):
        return _composite(chosen, op, S, groups, topology, overhead_s)
    plan = plan_of(op, algorithm, groups, topology.structure)
    timed = timed_steps(plan, S, topology)
    if chosen.fastest_step:
        latency, congestion, _, _ = timed
        best = int(np.argmin(plan.counts * (latency + congestion + overhead_s)))  # the first wins ties
        return _run_of(algorithm, chosen.choice(best), plan, timed, [best], topology, overhead_s)
    return _run_of(algorithm, "", plan, timed, list(range(len(plan.counts))), topology, overhead_s)


def _composite(chosen: Composite, op: str, S: float, groups: tuple, topology: NetworkTopology,
               overhead_s: float) -> Run:
    phases = [(role, sub_op, _phase_run(sub_op, size, sub_groups, topology, overhead_s, within))
              for role, sub_op, size, sub_groups, within in chosen.phases(op, S, groups, topology.structure)]
    steps = tuple(
        StepResult(f"{role} {run.algorithm} {s.phase}", s.count, s.time_s, s.latency_s, s.congestion_s,
                   s.max_link_bytes)
        for role, _, run in phases
        for s in run.steps
    )
    totals = tuple(sum(parts) for parts in zip(*(run.link_totals for _, _, run in phases), strict=True))
    for total in totals:
        total.flags.writeable = False
    detail = ", ".join(
        f"{role} {sub_op}={run.algorithm}" + (f" ({run.detail})" if run.detail else "") for role, sub_op, run in phases
    )
    return Run(chosen.name, detail, steps, totals)


def _phase_run(op: str, S: float, groups: tuple, topology: NetworkTopology, overhead_s: float, within: str) -> Run:
    """The run of one phase of a composite: its named algorithm, or the fastest applicable one ("auto")."""
    if within == "auto":
        within = level_algorithm(op, groups, topology)
    if within == "auto":
        return _best(op, S, groups, topology, overhead_s)[0]
    return execute(op, within, S, groups, topology, overhead_s)


def _phase_figures(op: str, S: float, groups: tuple, topology: NetworkTopology, overhead_s: float, within: str):
    """(steps as (count, time, latency, congestion), bytes per level) of one phase of a composite."""
    if within == "auto":
        within = level_algorithm(op, groups, topology)
    if within == "auto":
        _, _, steps, level_bytes = _ranked(op, S, groups, topology, overhead_s)
        return steps, level_bytes
    run = execute(op, within, S, groups, topology, overhead_s)
    steps = tuple((s.count, s.time_s, s.latency_s, s.congestion_s) for s in run.steps)
    return steps, tuple(float(links.sum()) if links.size else 0.0 for links in run.link_totals)


def level_algorithm(op: str, groups: tuple, topology: NetworkTopology) -> str:
    """The algorithm the network's levels name for ``op`` on ``groups`` ("auto" where they leave it open), as
    ASTRA-sim runs one algorithm per network dimension: groups on one level run that level's algorithm where
    it implements ``op`` and applies to them; groups across several levels, of which one names an algorithm,
    run the hierarchical algorithm, whose phases on each level resolve the same way. Anything else is "auto"."""
    named = topology.level_algorithms
    if named is None:
        return "auto"
    structure = topology.structure
    crossed = [i for i, across in enumerate(_crossed_levels(groups, structure)) if across]
    if len(crossed) == 1:
        candidates = (named[crossed[0]],)
    elif any(named[i] != "auto" for i in crossed):
        candidates = ("hierarchical",)
    else:
        return "auto"
    return next((name for name in candidates if name != "auto" and name in algorithms(op)
                 and _unavailable(op, name, groups, structure) is None), "auto")


def _unavailable(op: str, algorithm: str, groups: tuple, structure) -> str | None:
    return algorithm_of(op, algorithm).unavailable(op, groups, structure)


def _steps_of(fastest_step: bool, counts, latency, congestion, overhead_s: float):
    """(count, time, latency, congestion of one step) of an algorithm's steps from eq. 4's per-step latency and
    congestion, and which of the plan's steps run (None: all of them)."""
    if fastest_step:  # the steps are alternatives (e.g. the double tree's chunk counts): the first fastest runs
        k = int(np.argmin(counts * (latency + congestion + overhead_s)))
        return ((int(counts[k]), float(latency[k] + congestion[k] + overhead_s), float(latency[k]),
                 float(congestion[k])),), k
    return tuple((c, lat + cong + overhead_s, lat, cong)  # Python numbers: the same doubles, made faster
                 for c, lat, cong in zip(counts.tolist(), latency.tolist(), congestion.tolist(), strict=True)), None


@memo.cached(maxsize=1024)
def _usable(op: str, groups: tuple, structure) -> tuple[str, ...]:
    """The algorithms "auto" ranks: the applicable ones, but for those that can never win (``ranked`` False)."""
    return tuple(name for name in algorithms(op) if algorithm_of(op, name).ranked
                 and _unavailable(op, name, groups, structure) is None)


@dataclass(frozen=True, eq=False)
class _Ranking:
    """The plans an "auto" ranking times, per collective, groups and network structure."""

    usable: tuple[str, ...]  # algorithms ranked, in listed order
    composites: tuple[str, ...]  # the composite ones among them
    plans: dict  # flat algorithm → its plan
    uniform: tuple[str, ...]  # flat algorithms whose steps each carry one flow size: timed in one joint pass
    joint: Plan | None  # their plans joined
    starts: tuple[int, ...]  # where each one's steps start in the joint plan (plus the end)


@memo.cached(maxsize=8192)
def _ranking(op: str, groups: tuple, structure) -> _Ranking:
    usable = _usable(op, groups, structure)
    composites = tuple(name for name in usable if isinstance(algorithm_of(op, name), Composite))
    flat = [algorithm for algorithm in usable if algorithm not in composites]
    plans = {algorithm: plan_of(op, algorithm, groups, structure) for algorithm in flat}
    uniform = tuple(algorithm for algorithm in flat if plans[algorithm].uniform)
    joint, starts = joint_plan_of(op, uniform, groups, structure) if uniform else (None, ())
    return _Ranking(usable, composites, plans, uniform, joint, starts)


@memo.cached(maxsize=4096)
def _crossed_levels(groups: tuple, structure) -> tuple[bool, ...]:
    """Per level, whether any flow among the groups' members crosses it: a flow crosses a level exactly when
    its two devices differ in that level's digit of the device id (every device has a port into every level)."""
    members = np.asarray(groups, dtype=np.int64)
    crossed, stride = [], 1
    for _, dims, _ in structure:
        radix = math.prod(dims)
        digit = (members // stride) % radix
        crossed.append(bool((digit.min(axis=1) != digit.max(axis=1)).any()))
        stride *= radix
    return tuple(crossed)


class _SeenBy:
    """A topology as the collectives on some groups see it: the speeds and hop latencies of levels their flows
    never cross cannot change their times or bytes (those levels carry nothing and add no hops), so rankings
    are memoised on this view: a bandwidth sweep re-ranks a collective only when a level it crosses changed."""

    __slots__ = ("_hash", "_key", "topology")
    MEMO_KEY: ClassVar[bool] = True  # set once in __init__, never changed: keys the rankings' memo

    def __init__(self, topology: NetworkTopology, groups: tuple):
        crossed = _crossed_levels(groups, topology.structure)
        self.topology = topology
        self._key = (topology.structure, topology.framing,
                     tuple((bw, hop_s) if used else None for bw, hop_s, used
                           in zip(topology.level_bw_Bps, topology.hop_latencies_s, crossed, strict=True)))
        self._hash = hash(self._key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, _SeenBy) and self._key == other._key


def _ranked(op: str, S: float, groups: tuple, topology: NetworkTopology, overhead_s: float):
    """The fastest applicable algorithm (first listed wins ties); (algorithm, time) of every applicable one; the
    winner's steps as (count, time, latency, congestion of one step) — the figures its full :class:`Run`
    holds — and the bytes it puts on each level, all without summing the bytes of every link."""
    return _ranked_on(op, S, groups, _SeenBy(topology, groups), overhead_s)


@memo.cached(maxsize=8192)
def _ranked_on(op: str, S: float, groups: tuple, seen: _SeenBy, overhead_s: float):
    topology = seen.topology
    r = _ranking(op, groups, topology.structure)
    timed: dict[str, tuple] = {}  # algorithm → (counts, latency, congestion) of its steps
    totals: dict[str, float] = {}
    if r.uniform:
        latency, congestion = latency_congestion(r.joint, S, topology)
        # count × step time, summed one step at a time: the very figures the winner's steps below add up to
        weighted = (r.joint.counts * (latency + congestion + overhead_s)).tolist()
        for algorithm, first, end in zip(r.uniform, r.starts, r.starts[1:], strict=False):
            part = slice(first, end)
            timed[algorithm] = (r.joint.counts[part], latency[part], congestion[part])
            totals[algorithm] = _algorithm_time(algorithm_of(op, algorithm).fastest_step, weighted[part])
    for algorithm, plan in r.plans.items():
        if algorithm not in timed:
            timed[algorithm] = (plan.counts, *latency_congestion(plan, S, topology))
            counts, latency, congestion = timed[algorithm]
            totals[algorithm] = _algorithm_time(algorithm_of(op, algorithm).fastest_step,
                                                (counts * (latency + congestion + overhead_s)).tolist())
    composed = {}  # composite algorithm → its phases' steps and bytes per level
    for name in r.composites:
        phases = [_phase_figures(sub_op, size, sub_groups, topology, overhead_s, within)
                  for _, sub_op, size, sub_groups, within
                  in algorithm_of(op, name).phases(op, S, groups, topology.structure)]
        composed[name] = phases, tuple(step for phase in phases for step in phase[0])
        totals[name] = sum(step[0] * step[1] for step in composed[name][1])
    times = [(algorithm, totals[algorithm]) for algorithm in r.usable]
    best = min(times, key=lambda item: item[1])[0]
    if best in composed:
        phases, steps = composed[best]
        level_bytes = tuple(sum(parts) for parts in zip(*(phase[1] for phase in phases), strict=True))
    else:
        steps, chosen = _steps_of(algorithm_of(op, best).fastest_step, *timed[best], overhead_s)
        level_bytes = plan_level_bytes(r.plans[best], chosen, S, topology.framing)
    return best, tuple(times), steps, level_bytes


def _algorithm_time(fastest_step: bool, weighted: list[float]) -> float:
    """An algorithm's time from its steps' count × step time: their sum, added one step at a time — but only the
    fastest step of an algorithm whose steps are alternatives (the double tree's chunk counts)."""
    return min(weighted) if fastest_step else sum(weighted)


def _best(op: str, S: float, groups: tuple, topology: NetworkTopology, overhead_s: float):
    """The full run of the fastest applicable algorithm and the time of every applicable one."""
    best, candidates, _, _ = _ranked(op, S, groups, topology, overhead_s)
    return execute(op, best, S, groups, topology, overhead_s), candidates


def _normalise_groups(groups, devices: int) -> tuple[tuple[int, ...], ...]:
    groups = [groups] if len(groups) and np.ndim(groups[0]) == 0 else list(groups)
    normal = tuple(tuple(int(d) for d in group) for group in groups)
    if not normal or not normal[0]:
        raise CollectiveError("groups: need at least one non-empty group of device ids")
    p = len(normal[0])
    for group in normal:
        if len(group) != p:
            raise CollectiveError(f"groups: all groups must have the same size (got {len(group)} and {p})")
        if len(set(group)) != p:
            raise CollectiveError(f"groups: a device appears twice in group {group}")
        if min(group) < 0 or max(group) >= devices:
            raise CollectiveError(f"groups: device ids must be in 0..{devices - 1} (got group {group})")
    return normal


def collective_time(
    op: str,
    bytes_per_rank: float,
    groups,
    topology,
    algorithm: str = "auto",
    step_overhead_s: float = 0.0,
) -> CollectiveResult:
    """Time a collective run by every group at once on a topology (paper §3.3.3 and eq. 4).

    Args:
        op: ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all`` or ``send_recv``.
        bytes_per_rank: per-rank input size, B (see the module docstring for what it means per op).
        groups: device ids of each concurrent group (equal sizes, rank order), e.g. from
            :func:`deepstack.models.network.device_groups`; a flat sequence of ids is one group.
        topology: a :class:`~deepstack.models.network.NetworkTopology` or schema ``Network``.
        algorithm: "auto" (the fastest applicable one) or one of :func:`algorithms` (op).
        step_overhead_s: fixed software/synchronisation cost added to every step, s (default 0).

    Returns:
        The time, the algorithm used, per-step breakdown, busiest-link bytes and per-level utilisation.
        Results are memoised on (op, bytes, groups, topology, algorithm, overhead); sub-results (every
        algorithm's run, the hierarchical phases) are shared between calls.

    Raises:
        CollectiveError: unknown op or algorithm, an algorithm that does not apply, or malformed groups.
    """
    topology = as_topology(topology)
    allowed = algorithms(op)
    if algorithm != "auto" and algorithm not in allowed:
        raise CollectiveError(f"algorithm for {op}: must be auto or one of {', '.join(allowed)} (got {algorithm!r})")
    size = float(bytes_per_rank)
    if not (math.isfinite(size) and size >= 0):
        raise CollectiveError(f"bytes_per_rank: must be finite and ≥ 0 (got {bytes_per_rank!r})")
    overhead = float(step_overhead_s)
    if not (math.isfinite(overhead) and overhead >= 0):
        raise CollectiveError(f"step_overhead_s: must be finite and ≥ 0 (got {step_overhead_s!r})")
    return _collective(op, size, _normalise_groups(groups, topology.devices), topology, algorithm, overhead)


def time_on_groups(op: str, bytes_per_rank: float, groups: tuple, topology: NetworkTopology,
                   algorithm: str = "auto") -> CollectiveResult:
    """:func:`collective_time` for callers that already hold valid groups (tuples of device ids, as from
    :func:`deepstack.models.network.device_groups`), a topology and a checked algorithm: skips re-validating
    them on every call of the search's inner loop."""
    return _collective(op, float(bytes_per_rank), groups, topology, algorithm, 0.0)


@memo.cached(maxsize=8192)
def _collective(
    op: str, S: float, groups: tuple, topology: NetworkTopology, algorithm: str, overhead_s: float
) -> CollectiveResult:
    if len(groups[0]) == 1 or S == 0:
        name = "none" if algorithm == "auto" else algorithm
        empty = tuple(np.zeros(n) for n in topology.level_links)
        return _result_of_run(op, S, groups, topology, Run(name, "no communication", (), empty), (), overhead_s)
    if algorithm == "auto":
        algorithm = level_algorithm(op, groups, topology)
    if algorithm == "auto":
        best, candidates, steps, level_bytes = _ranked(op, S, groups, topology, overhead_s)
        return _result(op, S, groups, best, steps, level_bytes, candidates, overhead_s,
                       (topology, (op, best, S, groups, topology, overhead_s)))
    reason = _unavailable(op, algorithm, groups, topology.structure)
    if reason is not None:
        usable = [name for name in algorithms(op) if _unavailable(op, name, groups, topology.structure) is None]
        raise CollectiveError(f"algorithm for {op}: {reason}; usable here: auto, {', '.join(usable)}")
    run = execute(op, algorithm, S, groups, topology, overhead_s)
    return _result_of_run(op, S, groups, topology, run, ((algorithm, run.time_s),), overhead_s)


def _result_of_run(op: str, S: float, groups: tuple, topology: NetworkTopology, run: Run, candidates,
                   overhead_s: float) -> CollectiveResult:
    steps = tuple((s.count, s.time_s, s.latency_s, s.congestion_s) for s in run.steps)
    level_bytes = tuple(float(links.sum()) if links.size else 0.0 for links in run.link_totals)
    return _result(op, S, groups, run.algorithm, steps, level_bytes, candidates, overhead_s, (topology, run))


def _result(op: str, S: float, groups: tuple, algorithm: str, steps, level_bytes, candidates, overhead_s: float,
            source: tuple) -> CollectiveResult:
    """``steps`` are (count, time, latency, congestion of one step) in execution order."""
    return CollectiveResult(
        op=op,
        algorithm=algorithm,
        bytes_per_rank=S,
        group_size=len(groups[0]),
        num_groups=len(groups),
        time_s=sum(count * time for count, time, _, _ in steps),
        latency_s=sum(count * latency for count, _, latency, _ in steps),
        congestion_s=sum(count * congestion for count, _, _, congestion in steps),
        overhead_s=overhead_s * sum(count for count, _, _, _ in steps),
        level_bytes=level_bytes,
        candidates=tuple(candidates),
        source=source,
    )
