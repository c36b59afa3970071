"""Stage 1 of the dual-stage network abstraction: collectives as sequences of traffic matrices (paper §3.3.3).

Every algorithm is a sequence of steps; a step is one traffic matrix (TM) over the participating devices whose
flows start together, timed with eq. 4 by :mod:`deepstack.models.network` (all steps of an algorithm are
routed in one vectorised batch). A collective's time is the sum of its steps' times. Consecutive identical
steps (the p−1 steps of a ring) are routed once and counted ``count`` times. Several groups of the same
collective run concurrently (e.g. the 64 TP groups of 4 on 256 devices): their TMs are summed step by step, so
contention between groups on shared links shows up — this is how DeepStack aggregates the traffic of all
parallel dimensions (§4.1.4, Stage 1).

Sizes: ``bytes_per_rank`` is each rank's *input* (DESIGN.md §6): the shard for all-gather, the full vector for
reduce-scatter and all-reduce, the whole send buffer for all-to-all (split evenly over the p destinations,
the rank's own part staying local), the message for send/recv. ``S`` below is that size, ``p`` the group size.

Algorithms (p ranks in group order; ring neighbours are consecutive ranks):

* ``all_reduce``
    - ``ring``: reduce-scatter then all-gather around the ring, 2(p−1) steps of S/p per rank.
    - ``halving_doubling``: reduce-scatter by recursive halving, then all-gather by recursive doubling
      (power-of-two p only), ordered for locality: the reduce-scatter's partner distance *doubles* (1, 2, …,
      p/2) while the exchanged half shrinks (S/2, …, S/p), and the all-gather mirrors it — the largest
      exchanges stay between nearby ranks, i.e. on the innermost, fastest level.
    - ``rabenseifner``: the same two phases in the classic order of Thakur, Rabenseifner & Gropp (IJHPCA
      2005): reduce-scatter partners at distance p/2 first (exchanging S/2), all-gather at distance 1 first.
      Same bytes and step count as ``halving_doubling``; the largest exchanges go to the farthest partners.
    - ``double_tree``: two binary trees, each carrying S/2 (Sanders, Speck & Träff, Parallel Computing 2009;
      NCCL's double binary tree). Tree A is the in-order binary tree over the ranks, tree B the same tree
      shifted by one rank, so most interior ranks of one tree are leaves of the other. Chunk model: each
      tree's half is cut into C chunks and reduce (up) and broadcast (down) are pipelined, so after a fill of
      2h−1 steps (h = tree height) every step moves one chunk up and one chunk down every edge of both
      trees; the collective takes C + 2h − 1 such steps, each timed as the steady-state TM (a slight
      over-estimate during fill and drain). C is the power of two in 1…256 that minimises the time.
    - ``hierarchical``: reduce-scatter inside the innermost network level the group spans, all-reduce of the
      S/a shard across the outer levels (a = ranks per inner sub-group), all-gather back inside. Each phase
      uses the fastest algorithm for its sub-groups (so the outer all-reduce may itself be hierarchical, one
      level further out). Needs groups that are a full product of inner positions × outer positions.
* ``all_gather`` / ``reduce_scatter``: ``ring`` (p−1 steps), ``halving_doubling`` (recursive doubling /
  halving, power-of-two p; all-gather goes to far partners first with the smallest blocks, reduce-scatter to
  near partners first with the largest) and ``direct`` (one step: every rank sends its part to every other).
* ``all_to_all``: ``direct`` (one TM, every pair S/p) and ``pairwise`` (p−1 steps; in step k rank i sends
  S/p to rank i+k mod p).
* ``send_recv``: ``direct``, one TM in which rank i sends S to rank i+1 (a 2-rank group is one transfer; a
  longer group is a chain of pipeline-stage boundaries).

``step_overhead_s`` is a fixed software/synchronisation cost added to every step (kernel launch, flag
polling). It defaults to 0 because eq. 4 has no such term; set it to study launch-bound small collectives.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from deepstack.errors import UserInputError
from deepstack.models import memo
from deepstack.models.network import (
    LevelLoad,
    NetworkTopology,
    as_topology,
    flow_link_counts,
    framed_bytes,
    readonly,
    structure_devices,
    summarise_levels,
)
from deepstack.schema.schedule import ALGORITHMS_FOR

ALGORITHMS: dict[str, tuple[str, ...]] = ALGORITHMS_FOR  # one table, shared with the schema's validation
OPS = tuple(ALGORITHMS)

# Largest chunk count tried for the double-tree pipeline (a search bound, not a hardware constant).
_MAX_TREE_CHUNKS = 256


class CollectiveError(UserInputError, ValueError):
    """A bad collective request (unknown op or algorithm, an algorithm that does not apply, bad groups)."""


# --------------------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepResult:
    """One step (one traffic matrix), possibly repeated.

    Attributes:
        phase: what the step does (e.g. "reduce_scatter", "outer ring all_gather").
        count: how many identical consecutive steps this entry stands for.
        time_s: one step: latency + congestion + per-step overhead, s.
        latency_s: one step's zero-load latency L_net (eq. 4), s.
        congestion_s: one step's T_cong (eq. 4), s.
        max_link_bytes: bytes on the busiest link during one step, B.
    """

    phase: str
    count: int
    time_s: float
    latency_s: float
    congestion_s: float
    max_link_bytes: float


@dataclass(frozen=True)
class CollectiveResult:
    """Time of one collective (all its concurrent groups) on a topology.

    Attributes:
        op: the collective.
        algorithm: the algorithm used (picked by "auto", or the one asked for); "none" if nothing moves.
        bytes_per_rank: per-rank input size, B.
        group_size: ranks per group (p).
        num_groups: concurrent groups.
        time_s: Σ over steps of count × step time, s.
        latency_s: the collective's zero-load latency L_net: Σ count × step latency (for eq. 5), s.
        congestion_s: Σ count × step congestion, s.
        overhead_s: Σ count × per-step overhead, s.
        level_bytes: bytes each level's links carry over the whole collective (a flow counts once per link it
            crosses), innermost level first, B.
        candidates: (algorithm, time_s) of every algorithm evaluated (all applicable ones under "auto").

    The per-link detail — ``detail`` (double-tree chunks, hierarchical sub-algorithms), ``steps`` (per-step
    breakdown in execution order, identical consecutive steps merged), ``max_link_bytes`` (bytes the busiest
    link carries over the whole collective) and ``level_utilization`` (per-level load, busy fractions relative
    to ``time_s``) — is worked out when first read: a search needs only the times and the bytes per level.
    """

    op: str
    algorithm: str
    bytes_per_rank: float
    group_size: int
    num_groups: int
    time_s: float
    latency_s: float
    congestion_s: float
    overhead_s: float
    level_bytes: tuple[float, ...]
    candidates: tuple[tuple[str, float], ...]
    source: tuple = field(default=(), repr=False, compare=False)  # (topology, the _Run or _run's arguments)

    @functools.cached_property
    def full_run(self) -> _Run:
        """The executed algorithm with the bytes of every link (built on first use)."""
        _, run = self.source
        return run if isinstance(run, _Run) else _run(*run)

    @property
    def detail(self) -> str:
        return self.full_run.detail

    @property
    def steps(self) -> tuple[StepResult, ...]:
        return self.full_run.steps

    @property
    def max_link_bytes(self) -> float:
        return max((float(links.max()) for links in self.full_run.link_totals if links.size), default=0.0)

    @functools.cached_property
    def level_utilization(self) -> tuple[LevelLoad, ...]:
        peaks = [float(links.max()) if links.size else 0.0 for links in self.full_run.link_totals]
        return summarise_levels(self.source[0], peaks, self.level_bytes, self.time_s)

    @property
    def num_steps(self) -> int:
        """Number of traffic matrices executed (repeats included)."""
        return sum(step.count for step in self.steps)


@dataclass(frozen=True, eq=False)
class _Step:
    """One TM in rank space: rank ``src[i]`` sends ``nbytes[i]`` to rank ``dst[i]``; repeated ``count`` times."""

    phase: str
    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    count: int = 1


@dataclass(frozen=True, eq=False)
class _Run:
    """An executed algorithm: its steps and the bytes every link carried over all of them."""

    algorithm: str
    detail: str
    steps: tuple[StepResult, ...]
    link_totals: tuple[np.ndarray, ...]

    @property
    def time_s(self) -> float:
        return sum(step.count * step.time_s for step in self.steps)


# --------------------------------------------------------------------------------------------------------------
# Stage 1: algorithms as traffic-matrix sequences (rank space)
# --------------------------------------------------------------------------------------------------------------


def _step(phase: str, src, dst, nbytes, count: int = 1) -> _Step:
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    return _Step(phase, src, dst, np.broadcast_to(np.asarray(nbytes, dtype=float), src.shape), count)


def _is_power_of_two(p: int) -> bool:
    return p >= 1 and p & (p - 1) == 0


def _ring(phase: str, p: int, nbytes: float, count: int) -> _Step:
    ranks = np.arange(p)
    return _step(phase, ranks, (ranks + 1) % p, nbytes, count)


def _exchange(phase: str, p: int, distance: int, nbytes: float) -> _Step:
    """Recursive halving/doubling step: every rank exchanges ``nbytes`` with rank XOR ``distance``."""
    ranks = np.arange(p)
    return _step(phase, ranks, ranks ^ distance, nbytes)


def _all_pairs(phase: str, p: int, nbytes: float) -> _Step:
    src, dst = np.divmod(np.arange(p * p), p)
    keep = src != dst
    return _step(phase, src[keep], dst[keep], nbytes)


def _halving(p: int, vector_B: float, near_first: bool) -> list[_Step]:
    """Reduce-scatter by recursive halving: log2 p exchanges of S/2, S/4, …, S/p."""
    distances = [1 << k for k in range(p.bit_length() - 1)]
    if not near_first:
        distances.reverse()
    return [_exchange("reduce_scatter", p, d, vector_B / (2 << k)) for k, d in enumerate(distances)]


def _doubling(p: int, shard_B: float, far_first: bool) -> list[_Step]:
    """All-gather by recursive doubling: log2 p exchanges of 1, 2, …, p/2 shards."""
    distances = [1 << k for k in range(p.bit_length() - 1)]
    if far_first:
        distances.reverse()
    return [_exchange("all_gather", p, d, shard_B * (1 << k)) for k, d in enumerate(distances)]


def _flat_steps(op: str, algorithm: str, p: int, S: float) -> list[_Step]:
    """The TM sequence of every algorithm except double_tree and hierarchical (which need the topology)."""
    match op, algorithm:
        case "all_reduce", "ring":
            return [_ring("reduce_scatter", p, S / p, p - 1), _ring("all_gather", p, S / p, p - 1)]
        case "all_reduce", "halving_doubling":
            return _halving(p, S, near_first=True) + _doubling(p, S / p, far_first=True)
        case "all_reduce", "rabenseifner":
            return _halving(p, S, near_first=False) + _doubling(p, S / p, far_first=False)
        case "all_gather", "ring":
            return [_ring("all_gather", p, S, p - 1)]
        case "all_gather", "halving_doubling":
            return _doubling(p, S, far_first=True)
        case "all_gather", "direct":
            return [_all_pairs("all_gather", p, S)]
        case "reduce_scatter", "ring":
            return [_ring("reduce_scatter", p, S / p, p - 1)]
        case "reduce_scatter", "halving_doubling":
            return _halving(p, S, near_first=True)
        case "reduce_scatter", "direct":
            return [_all_pairs("reduce_scatter", p, S / p)]
        case "all_to_all", "direct":
            return [_all_pairs("all_to_all", p, S / p)]
        case "all_to_all", "pairwise":
            ranks = np.arange(p)
            return [_step("all_to_all", ranks, (ranks + k) % p, S / p) for k in range(1, p)]
        case "send_recv", "direct":
            ranks = np.arange(p - 1)
            return [_step("send_recv", ranks, ranks + 1, S)]
    raise AssertionError(f"no flat TM sequence for {op}/{algorithm}")  # unreachable: names checked before


def _inorder_tree(p: int) -> tuple[np.ndarray, int]:
    """In-order binary tree over ranks 0..p−1: parent of every rank (−1 at the root) and the height in edges."""
    parent = np.full(p, -1, dtype=np.int64)
    height = 0
    stack = [(0, p - 1, -1, 0)]
    while stack:
        lo, hi, up, depth = stack.pop()
        if lo > hi:
            continue
        mid = (lo + hi) // 2
        parent[mid] = up
        height = max(height, depth)
        stack += [(lo, mid - 1, mid, depth + 1), (mid + 1, hi, mid, depth + 1)]
    return parent, height


def _double_tree_step(p: int, chunk_B: float, count: int) -> _Step:
    """Steady state of the pipelined double tree: one chunk up and one down every edge of both trees."""
    parent, _ = _inorder_tree(p)
    child = np.flatnonzero(parent >= 0)
    edges = [(child, parent[child]), ((child + 1) % p, (parent[child] + 1) % p)]  # tree A, tree B = A shifted
    src = np.concatenate([np.concatenate([c, u]) for c, u in edges])
    dst = np.concatenate([np.concatenate([u, c]) for c, u in edges])
    return _step("reduce+broadcast", src, dst, chunk_B, count)


# --------------------------------------------------------------------------------------------------------------
# Stage 2: execution on the topology
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Plan:
    """An algorithm's steps mapped onto the groups' devices and routed on a topology *structure* — independent
    of the collective's size and of link speeds and latencies, so every size, bandwidth and hop latency on the
    same structure reuses it (the NoC sweeps of the search change only those).

    Flows of a step all carry the same share of S; a device pair that several flows of one step share (possible
    only if groups overlap) carries their sum, so flows are grouped into *cells* (step, multiplicity): the
    payload of a flow of cell c is ``multiplicity[c] × fraction[c] × S``.
    """

    phases: tuple[str, ...]  # per step
    counts: np.ndarray  # (steps,) consecutive identical repeats of each step
    cell_starts: np.ndarray  # (steps,) first cell of each step
    cell_payload: np.ndarray  # (cells,) multiplicity × fraction: a flow's bytes per byte of S
    link_counts: tuple[np.ndarray, ...]  # per level (cells × links): flows of each cell crossing each link
    hop_rows: np.ndarray  # (rows × levels) distinct per-level hop counts of each step's flows
    hop_starts: np.ndarray  # (steps,) first row of each step
    cell_peaks: tuple[np.ndarray, ...]  # per level (cells,): flows on the busiest link of each cell
    cell_sums: tuple[np.ndarray, ...]  # per level (cells,): link crossings of each cell's flows, summed
    cell_step: np.ndarray  # (cells,) the step of each cell

    @property
    def uniform(self) -> bool:
        """Every step's flows carry one size (one cell per step)."""
        return len(self.cell_payload) == len(self.counts)


@memo.cached(maxsize=4096)
def _plan(op: str, algorithm: str, groups: tuple, structure) -> _Plan:
    """Route the steps of ``op``/``algorithm`` (double_tree: one step per chunk count) once per structure."""
    p = len(groups[0])
    steps = _tree_steps(p, 1.0) if algorithm == "double_tree" else _flat_steps(op, algorithm, p, 1.0)
    members = np.asarray(groups, dtype=np.int64)  # (groups, p)
    devices = structure_devices(structure)
    disjoint = np.bincount(members.ravel(), minlength=devices).max() == 1
    # steps that repeat a traffic pattern with other sizes (the double tree's chunk counts, a ring's two
    # phases) are routed once: cells are (pattern, multiplicity class); a step's cells scale its pattern's
    patterns: dict[tuple[bytes, bytes], int] = {}
    pattern_of = [patterns.setdefault((step.src.tobytes(), step.dst.tobytes()), len(patterns)) for step in steps]
    representative = {index: step for step, index in zip(steps, pattern_of, strict=True)}
    flow_src, flow_dst, flow_cell, classes_of, first_cell = [], [], [], [], []
    cells = 0
    for index in range(len(patterns)):
        step = representative[index]
        if disjoint:  # device pairs repeat exactly as rank pairs do: count them in rank space (no sort)
            ranks = np.bincount(step.src * p + step.dst, minlength=p * p)
            rank_pairs = np.flatnonzero(ranks)
            src, dst = members[:, rank_pairs // p].ravel(), members[:, rank_pairs % p].ravel()
            multiplicity = np.tile(ranks[rank_pairs], len(members))
        else:
            pairs, multiplicity = np.unique((members[:, step.src] * devices + members[:, step.dst]).ravel(),
                                            return_counts=True)
            src, dst = pairs // devices, pairs % devices
        if multiplicity.min() == multiplicity.max():  # the usual case: every pair carries one flow's bytes
            classes, class_of = multiplicity[:1], np.zeros(len(multiplicity), dtype=np.int64)
        else:
            classes, class_of = np.unique(multiplicity, return_inverse=True)
        first_cell.append(cells)
        flow_src.append(src)
        flow_dst.append(dst)
        flow_cell.append(cells + class_of)
        classes_of.append(classes)
        cells += len(classes)
    cell = np.concatenate(flow_cell)
    counts, hops = flow_link_counts(structure, np.concatenate(flow_src), np.concatenate(flow_dst), cell, cells)
    pattern_of_cell = np.repeat(np.arange(len(patterns)), [len(c) for c in classes_of])
    rows, row_starts = _distinct_hops(hops, pattern_of_cell[cell], len(patterns))
    row_ends = [*row_starts[1:], len(rows)]
    step_cells = np.concatenate([first_cell[k] + np.arange(len(classes_of[k])) for k in pattern_of])
    step_rows = [rows[row_starts[k]:row_ends[k]] for k in pattern_of]
    cell_starts = np.cumsum([0] + [len(classes_of[k]) for k in pattern_of[:-1]])
    plan = _Plan(tuple(step.phase for step in steps), np.array([step.count for step in steps]), cell_starts,
                 np.concatenate([classes_of[k] * float(step.nbytes[0]) for step, k in zip(steps, pattern_of,
                                                                                           strict=True)]),
                 tuple(level[step_cells].astype(float) for level in counts), np.vstack(step_rows),
                 np.cumsum([0] + [len(r) for r in step_rows[:-1]]),
                 tuple((level.max(axis=1).astype(float) if level.shape[1] else np.zeros(cells))[step_cells]
                       for level in counts),
                 tuple(level.sum(axis=1).astype(float)[step_cells] for level in counts),
                 np.repeat(np.arange(len(steps)), [len(classes_of[k]) for k in pattern_of]))
    for array in (plan.counts, plan.cell_starts, plan.cell_payload, plan.hop_rows, plan.hop_starts, *plan.link_counts,
                  *plan.cell_peaks, *plan.cell_sums, plan.cell_step):
        array.flags.writeable = False
    return plan


def _distinct_hops(hops: np.ndarray, step: np.ndarray, n_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct per-level hop vectors of each step's flows (all a step's latency depends on), grouped by
    step: (rows × levels, first row of each step)."""
    radix = int(hops.max()) + 1 if hops.size else 1
    code = step * radix ** len(hops) + np.ravel_multi_index(tuple(hops), (radix,) * len(hops))
    distinct = np.unique(code)
    step_of, flat = np.divmod(distinct, radix ** len(hops))
    rows = np.stack(np.unravel_index(flat, (radix,) * len(hops)), axis=1)
    starts = np.searchsorted(step_of, np.arange(n_steps))
    return rows.astype(float), starts


def _timed_steps(plan: _Plan, S: float, topology: NetworkTopology):
    """Eq. 4 for every step of a plan at size S: (latency, congestion, busiest-link bytes) per step and the
    bytes on every link of one execution of each step (per level, steps × links)."""
    n_steps = len(plan.counts)
    congestion = np.zeros(n_steps)
    peak = np.zeros(n_steps)
    loads = []
    for level, counts in zip(topology.levels, plan.link_counts, strict=True):
        wire = level.wire_bytes(plan.cell_payload * S)
        per_cell = wire[:, None] * counts
        level_loads_ = per_cell if plan.uniform else np.add.reduceat(per_cell, plan.cell_starts, axis=0)
        loads.append(level_loads_)
        if level_loads_.shape[1]:
            level_peak = level_loads_.max(axis=1)
            congestion = np.maximum(congestion, level_peak / level.link_bw_Bps)
            peak = np.maximum(peak, level_peak)
    return _step_latency(plan, topology.hop_latencies_s), congestion, peak, loads


@memo.cached(maxsize=8192)
def _step_latency(plan: _Plan, hop_latencies_s: tuple[float, ...]) -> np.ndarray:
    """Eq. 4's latency of every step: its slowest flow's Σ hops·δ (shared by every size and bandwidth)."""
    return readonly(np.maximum.reduceat(plan.hop_rows @ np.array(hop_latencies_s), plan.hop_starts))


@memo.cached(maxsize=8192)
def _busiest_link_bytes(plan: _Plan, S: float, framing: tuple) -> np.ndarray:
    """(levels × steps) wire bytes on each step's busiest link of each level at size S: eq. 4's congestion but
    for the link speeds, so a bandwidth sweep computes it once. When each step's flows carry one size, the
    busiest link of a level is the one most flows cross (so its bytes are that count × the flow's wire bytes,
    exactly what the full sum gives); otherwise every link's bytes are summed."""
    payload = plan.cell_payload * S
    if plan.uniform:
        return readonly(np.array([framed_bytes(payload, packet, header) * peaks
                                  for (packet, header), peaks in zip(framing, plan.cell_peaks, strict=True)]))
    busiest = np.zeros((len(framing), len(plan.counts)))
    for level, ((packet, header), counts) in enumerate(zip(framing, plan.link_counts, strict=True)):
        if counts.shape[1]:
            per_cell = framed_bytes(payload, packet, header)[:, None] * counts
            busiest[level] = np.add.reduceat(per_cell, plan.cell_starts, axis=0).max(axis=1)
    return readonly(busiest)


def _latency_congestion(plan: _Plan, S: float, topology: NetworkTopology) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 4's latency and congestion of every step, without keeping the bytes of every link."""
    congestion = (_busiest_link_bytes(plan, S, topology.framing) / topology.link_bw_column).max(axis=0)
    return _step_latency(plan, topology.hop_latencies_s), congestion


def _run_of(algorithm: str, detail: str, plan: _Plan, timed, steps, topology, overhead_s: float) -> _Run:
    """A :class:`_Run` of the plan's steps ``steps`` (indices) from :func:`_timed_steps`."""
    latency, congestion, peak, loads = timed
    counts = plan.counts[steps]
    results = tuple(
        StepResult(plan.phases[k], int(plan.counts[k]), float(latency[k] + congestion[k] + overhead_s),
                   float(latency[k]), float(congestion[k]), float(peak[k]))
        for k in steps
    )
    totals = tuple(readonly(counts @ level_loads_[steps]) for level_loads_ in loads)
    return _Run(algorithm, detail, results, totals)


def _execute(op: str, algorithm: str, S: float, groups: tuple, topology: NetworkTopology, overhead_s: float) -> _Run:
    plan = _plan(op, algorithm, groups, topology.structure)
    return _run_of(algorithm, "", plan, _timed_steps(plan, S, topology), list(range(len(plan.counts))), topology,
                   overhead_s)


def _tree_chunk_counts() -> list[int]:
    return [1 << k for k in range(_MAX_TREE_CHUNKS.bit_length())]


def _tree_steps(p: int, S: float) -> list[_Step]:
    """One steady-state step per chunk count C (repeated C + 2h − 1 times), each carrying S / 2C per edge."""
    _, height = _inorder_tree(p)
    return [_double_tree_step(p, S / (2 * chunks), chunks + 2 * height - 1) for chunks in _tree_chunk_counts()]


def _double_tree(S: float, groups: tuple, topology: NetworkTopology, overhead_s: float) -> _Run:
    plan = _plan("all_reduce", "double_tree", groups, topology.structure)
    timed = _timed_steps(plan, S, topology)
    latency, congestion, _, _ = timed
    times = plan.counts * (latency + congestion + overhead_s)
    best = int(np.argmin(times))  # the fewest chunks wins ties
    return _run_of("double_tree", f"chunks={_tree_chunk_counts()[best]}", plan, timed, [best], topology, overhead_s)


def _split_at(groups: tuple, radix: int):
    """Split every group into inner sub-groups (same outer position) and rails (same inner position)."""
    inner_groups, rails, shape = [], [], None
    for group in groups:
        inner_keys = list(dict.fromkeys(d % radix for d in group))
        outer_keys = list(dict.fromkeys(d // radix for d in group))
        a, b = len(inner_keys), len(outer_keys)
        if a < 2 or b < 2 or a * b != len(group) or shape not in (None, (a, b)):
            return None
        shape = (a, b)
        inner_groups += [tuple(d for d in group if d // radix == o) for o in outer_keys]
        rails += [tuple(d for d in group if d % radix == i) for i in inner_keys]
    return tuple(inner_groups), tuple(rails), shape[0]


def _hierarchy(groups: tuple, topology: NetworkTopology):
    """(inner sub-groups, rails, inner size) at the innermost level boundary that splits the groups, or None."""
    return _hierarchy_on(groups, topology.structure)


@memo.cached(maxsize=1024)
def _hierarchy_on(groups: tuple, structure):
    radix = 1
    for _, dims in structure[:-1]:
        radix *= math.prod(dims)
        split = _split_at(groups, radix)
        if split is not None:
            return split
    return None


def _hierarchical(S: float, groups: tuple, topology: NetworkTopology, overhead_s: float) -> _Run:
    inner_groups, rails, a = _hierarchy(groups, topology)
    phases = [
        ("inner", "reduce_scatter", _best("reduce_scatter", S, inner_groups, topology, overhead_s)[0]),
        ("outer", "all_reduce", _best("all_reduce", S / a, rails, topology, overhead_s)[0]),
        ("inner", "all_gather", _best("all_gather", S / a, inner_groups, topology, overhead_s)[0]),
    ]
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
        f"{role} {op}={run.algorithm}" + (f" ({run.detail})" if run.detail else "") for role, op, run in phases
    )
    return _Run("hierarchical", detail, steps, totals)


def _unavailable(op: str, algorithm: str, groups: tuple, structure) -> str | None:
    """Why an algorithm cannot run on these groups of a network structure (None if it can)."""
    p = len(groups[0])
    if algorithm in ("halving_doubling", "rabenseifner") and not _is_power_of_two(p):
        return f"{algorithm} needs a power-of-two group size (got {p})"
    if algorithm == "hierarchical" and _hierarchy_on(groups, structure) is None:
        return (
            "hierarchical needs groups spanning more than one network level, each a full product of inner "
            "and outer positions of equal shape"
        )
    return None


# The two caches below keep per-link byte totals (a few kB each for 256 devices): 2048 entries stay ~10s of MB.
@memo.cached(maxsize=2048)
def _run(op: str, algorithm: str, S: float, groups: tuple, topology: NetworkTopology, overhead_s: float) -> _Run:
    if algorithm == "double_tree":
        return _double_tree(S, groups, topology, overhead_s)
    if algorithm == "hierarchical":
        return _hierarchical(S, groups, topology, overhead_s)
    return _execute(op, algorithm, S, groups, topology, overhead_s)


@memo.cached(maxsize=4096)
def _joint_plan(op: str, algorithms: tuple[str, ...], groups: tuple, structure) -> tuple[_Plan, tuple[int, ...]]:
    """The plans of several algorithms of one collective as one plan (steps concatenated, in order), so their
    step times come out of one vectorised pass; and where each algorithm's steps start (plus the end)."""
    plans = [_plan(op, algorithm, groups, structure) for algorithm in algorithms]
    starts = np.cumsum([0] + [len(plan.counts) for plan in plans])
    cells = np.cumsum([0] + [len(plan.cell_payload) for plan in plans])
    rows = np.cumsum([0] + [len(plan.hop_rows) for plan in plans])
    joint = _Plan(
        tuple(phase for plan in plans for phase in plan.phases),
        np.concatenate([plan.counts for plan in plans]),
        np.concatenate([plan.cell_starts + offset for plan, offset in zip(plans, cells, strict=False)]),
        np.concatenate([plan.cell_payload for plan in plans]),
        tuple(np.vstack(level) for level in zip(*(plan.link_counts for plan in plans), strict=True)),
        np.vstack([plan.hop_rows for plan in plans]),
        np.concatenate([plan.hop_starts + offset for plan, offset in zip(plans, rows, strict=False)]),
        tuple(np.concatenate(level) for level in zip(*(plan.cell_peaks for plan in plans), strict=True)),
        tuple(np.concatenate(level) for level in zip(*(plan.cell_sums for plan in plans), strict=True)),
        np.concatenate([plan.cell_step + offset for plan, offset in zip(plans, starts, strict=False)]),
    )
    return joint, tuple(int(k) for k in starts)


def _steps_of(algorithm: str, counts, latency, congestion, overhead_s: float):
    """(count, time, latency, congestion of one step) of an algorithm's steps from eq. 4's per-step latency and
    congestion, and which of the plan's steps run (None: all of them)."""
    if algorithm == "double_tree":  # one steady-state step per chunk count: the fastest is run (fewest on ties)
        k = int(np.argmin(counts * (latency + congestion + overhead_s)))
        return ((int(counts[k]), float(latency[k] + congestion[k] + overhead_s), float(latency[k]),
                 float(congestion[k])),), k
    return tuple((c, lat + cong + overhead_s, lat, cong)  # Python numbers: the same doubles, made faster
                 for c, lat, cong in zip(counts.tolist(), latency.tolist(), congestion.tolist(), strict=True)), None


@memo.cached(maxsize=8192)
def _plan_level_bytes(plan: _Plan, step: int | None, S: float, framing: tuple) -> tuple[float, ...]:
    """Bytes each level's links carry when the plan's steps run (each its count times) at size S — only step
    ``step`` of them when given (the double tree's chosen chunk count). Link speeds do not enter."""
    chosen = slice(None) if step is None else plan.cell_step == step
    weights = plan.counts[plan.cell_step[chosen]]
    payload = plan.cell_payload[chosen] * S
    return tuple(float(np.dot(weights * framed_bytes(payload, packet, header), sums[chosen]))
                 for (packet, header), sums in zip(framing, plan.cell_sums, strict=True))


@memo.cached(maxsize=1024)
def _usable(op: str, groups: tuple, structure) -> tuple[str, ...]:
    """The algorithms "auto" ranks (see :func:`_ranked` for why pairwise all-to-all is left out)."""
    return tuple(algorithm for algorithm in ALGORITHMS[op] if _unavailable(op, algorithm, groups, structure) is None
                 and (op, algorithm) != ("all_to_all", "pairwise"))


@dataclass(frozen=True, eq=False)
class _Ranking:
    """The plans an "auto" ranking times, per collective, groups and network structure."""

    usable: tuple[str, ...]  # algorithms ranked, in listed order
    plans: dict  # flat algorithm → its plan
    uniform: tuple[str, ...]  # flat algorithms whose steps each carry one flow size: timed in one joint pass
    joint: _Plan | None  # their plans joined
    starts: tuple[int, ...]  # where each one's steps start in the joint plan (plus the end)


@memo.cached(maxsize=8192)
def _ranking(op: str, groups: tuple, structure) -> _Ranking:
    usable = _usable(op, groups, structure)
    flat = [algorithm for algorithm in usable if algorithm != "hierarchical"]
    plans = {algorithm: _plan(op, algorithm, groups, structure) for algorithm in flat}
    uniform = tuple(algorithm for algorithm in flat if plans[algorithm].uniform)
    joint, starts = _joint_plan(op, uniform, groups, structure) if uniform else (None, ())
    return _Ranking(usable, plans, uniform, joint, starts)


@memo.cached(maxsize=4096)
def _crossed_levels(groups: tuple, structure) -> tuple[bool, ...]:
    """Per level, whether any flow among the groups' members crosses it: a flow crosses a level exactly when
    its two devices differ in that level's digit of the device id (every device has a port into every level)."""
    members = np.asarray(groups, dtype=np.int64)
    crossed, stride = [], 1
    for _, dims in structure:
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

    def __init__(self, topology: NetworkTopology, groups: tuple):
        crossed = _crossed_levels(groups, topology.structure)
        self.topology = topology
        self._key = (topology.structure, topology.framing,
                     tuple((level.link_bw_Bps, level.hop_latency_s) if used else None
                           for level, used in zip(topology.levels, crossed, strict=True)))
        self._hash = hash(self._key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, _SeenBy) and self._key == other._key


def _ranked(op: str, S: float, groups: tuple, topology: NetworkTopology, overhead_s: float):
    """The fastest applicable algorithm (first listed wins ties); (algorithm, time) of every applicable one; the
    winner's steps as (count, time, latency, congestion of one step) — the figures its full :class:`_Run`
    holds — and the bytes it puts on each level, all without summing the bytes of every link.

    Pairwise all-to-all is skipped: its p−1 steps partition the direct algorithm's flows, so under eq. 4 each
    link's bytes are spread over steps (Σ of per-step maxima ≥ the maximum of the sum) and it pays p−1 latencies
    instead of one — it can never be faster than direct here, and it is the costliest to route.
    """
    return _ranked_on(op, S, groups, _SeenBy(topology, groups), overhead_s)


@memo.cached(maxsize=8192)
def _ranked_on(op: str, S: float, groups: tuple, seen: _SeenBy, overhead_s: float):
    topology = seen.topology
    r = _ranking(op, groups, topology.structure)
    timed: dict[str, tuple] = {}  # algorithm → (counts, latency, congestion) of its steps
    totals: dict[str, float] = {}
    if r.uniform:
        latency, congestion = _latency_congestion(r.joint, S, topology)
        # count × step time, summed one step at a time: the very figures the winner's steps below add up to
        weighted = (r.joint.counts * (latency + congestion + overhead_s)).tolist()
        for algorithm, first, end in zip(r.uniform, r.starts, r.starts[1:], strict=False):
            part = slice(first, end)
            timed[algorithm] = (r.joint.counts[part], latency[part], congestion[part])
            totals[algorithm] = _algorithm_time(algorithm, weighted[part])
    for algorithm, plan in r.plans.items():
        if algorithm not in timed:
            timed[algorithm] = (plan.counts, *_latency_congestion(plan, S, topology))
            counts, latency, congestion = timed[algorithm]
            totals[algorithm] = _algorithm_time(algorithm, (counts * (latency + congestion + overhead_s)).tolist())
    phases = []
    if "hierarchical" in r.usable:  # reduce-scatter inside, all-reduce across, all-gather inside: each the fastest
        inner_groups, rails, a = _hierarchy(groups, topology)
        phases = [_ranked("reduce_scatter", S, inner_groups, topology, overhead_s),
                  _ranked("all_reduce", S / a, rails, topology, overhead_s),
                  _ranked("all_gather", S / a, inner_groups, topology, overhead_s)]
        hierarchical_steps = tuple(step for phase in phases for step in phase[2])
        totals["hierarchical"] = sum(step[0] * step[1] for step in hierarchical_steps)
    times = [(algorithm, totals[algorithm]) for algorithm in r.usable]
    best = min(times, key=lambda item: item[1])[0]
    if best == "hierarchical":
        steps = hierarchical_steps
        level_bytes = tuple(sum(parts) for parts in zip(*(phase[3] for phase in phases), strict=True))
    else:
        steps, chosen = _steps_of(best, *timed[best], overhead_s)
        level_bytes = _plan_level_bytes(r.plans[best], chosen, S, topology.framing)
    return best, tuple(times), steps, level_bytes


def _algorithm_time(algorithm: str, weighted: list[float]) -> float:
    """An algorithm's time from its steps' count × step time: their sum, added one step at a time — but the
    double tree runs only its fastest chunk count (one step per count)."""
    return min(weighted) if algorithm == "double_tree" else sum(weighted)


def _best(op: str, S: float, groups: tuple, topology: NetworkTopology, overhead_s: float):
    """The full run of the fastest applicable algorithm and the time of every applicable one."""
    best, candidates, _, _ = _ranked(op, S, groups, topology, overhead_s)
    return _run(op, best, S, groups, topology, overhead_s), candidates


# --------------------------------------------------------------------------------------------------------------
# Public interface
# --------------------------------------------------------------------------------------------------------------


def algorithms(op: str) -> tuple[str, ...]:
    """Algorithm names available for a collective (besides "auto")."""
    if op not in ALGORITHMS:
        raise CollectiveError(f"op: must be one of {', '.join(OPS)} (got {op!r})")
    return ALGORITHMS[op]


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
        return _result_of_run(op, S, groups, topology, _Run(name, "no communication", (), empty), (), overhead_s)
    if algorithm == "auto":
        best, candidates, steps, level_bytes = _ranked(op, S, groups, topology, overhead_s)
        return _result(op, S, groups, best, steps, level_bytes, candidates, overhead_s,
                       (topology, (op, best, S, groups, topology, overhead_s)))
    reason = _unavailable(op, algorithm, groups, topology.structure)
    if reason is not None:
        usable = [name for name in ALGORITHMS[op] if _unavailable(op, name, groups, topology.structure) is None]
        raise CollectiveError(f"algorithm for {op}: {reason}; usable here: auto, {', '.join(usable)}")
    run = _run(op, algorithm, S, groups, topology, overhead_s)
    return _result_of_run(op, S, groups, topology, run, ((algorithm, run.time_s),), overhead_s)


def _result_of_run(op: str, S: float, groups: tuple, topology: NetworkTopology, run: _Run, candidates,
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
