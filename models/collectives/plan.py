"""Plans: an algorithm's steps mapped onto its groups' devices and routed once per network structure, and eq. 4
for every step of a plan at a size S (latency, congestion, the bytes on each level)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from deepstack.models import memo
from deepstack.models.collectives.algorithms import algorithm as algorithm_of
from deepstack.models.network import NetworkTopology, flow_link_counts, framed_bytes, readonly, structure_devices


@dataclass(frozen=True, eq=False)
class Plan:
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
def plan_of(op: str, algorithm: str, groups: tuple, structure) -> Plan:
    """Route the steps of ``op``/``algorithm`` (their sizes per byte of S) once per network structure."""
    p = len(groups[0])
    steps = list(algorithm_of(op, algorithm).steps(op, p))
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
    rows, row_starts = distinct_hops(hops, pattern_of_cell[cell], len(patterns))
    row_ends = [*row_starts[1:], len(rows)]
    step_cells = np.concatenate([first_cell[k] + np.arange(len(classes_of[k])) for k in pattern_of])
    step_rows = [rows[row_starts[k]:row_ends[k]] for k in pattern_of]
    cell_starts = np.cumsum([0] + [len(classes_of[k]) for k in pattern_of[:-1]])
    plan = Plan(tuple(step.phase for step in steps), np.array([step.count for step in steps]), cell_starts,
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


def distinct_hops(hops: np.ndarray, step: np.ndarray, n_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct per-level hop vectors of each step's flows (all a step's latency depends on), grouped by
    step: (rows × levels, first row of each step)."""
    radix = int(hops.max()) + 1 if hops.size else 1
    code = step * radix ** len(hops) + np.ravel_multi_index(tuple(hops), (radix,) * len(hops))
    distinct = np.unique(code)
    step_of, flat = np.divmod(distinct, radix ** len(hops))
    rows = np.stack(np.unravel_index(flat, (radix,) * len(hops)), axis=1)
    starts = np.searchsorted(step_of, np.arange(n_steps))
    return rows.astype(float), starts


def timed_steps(plan: Plan, S: float, topology: NetworkTopology):
    """Eq. 4 for every step of a plan at size S: (latency, congestion, busiest-link bytes) per step and the
    bytes on every link of one execution of each step (per level, steps × links)."""
    n_steps = len(plan.counts)
    congestion = np.zeros(n_steps)
    peak = np.zeros(n_steps)
    loads = []
    for level, bw, counts in zip(topology.levels, topology.level_bw_Bps, plan.link_counts, strict=True):
        wire = level.wire_bytes(plan.cell_payload * S)
        per_cell = wire[:, None] * counts
        level_loads_ = per_cell if plan.uniform else np.add.reduceat(per_cell, plan.cell_starts, axis=0)
        loads.append(level_loads_)
        if level_loads_.shape[1]:
            level_peak = level_loads_.max(axis=1)
            congestion = np.maximum(congestion, level_peak / bw)
            peak = np.maximum(peak, level_peak)
    return step_latency(plan, topology.hop_latencies_s), congestion, peak, loads


@memo.cached(maxsize=8192)
def step_latency(plan: Plan, hop_latencies_s: tuple[float, ...]) -> np.ndarray:
    """Eq. 4's latency of every step: its slowest flow's Σ hops·δ (shared by every size and bandwidth)."""
    return readonly(np.maximum.reduceat(plan.hop_rows @ np.array(hop_latencies_s), plan.hop_starts))


@memo.cached(maxsize=8192)
def busiest_link_bytes(plan: Plan, S: float, framing: tuple) -> np.ndarray:
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


def latency_congestion(plan: Plan, S: float, topology: NetworkTopology) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 4's latency and congestion of every step, without keeping the bytes of every link."""
    congestion = (busiest_link_bytes(plan, S, topology.framing) / topology.link_bw_column).max(axis=0)
    return step_latency(plan, topology.hop_latencies_s), congestion


@memo.cached(maxsize=4096)
def joint_plan_of(op: str, algorithms: tuple[str, ...], groups: tuple, structure) -> tuple[Plan, tuple[int, ...]]:
    """The plans of several algorithms of one collective as one plan (steps concatenated, in order), so their
    step times come out of one vectorised pass; and where each algorithm's steps start (plus the end)."""
    plans = [plan_of(op, algorithm, groups, structure) for algorithm in algorithms]
    starts = np.cumsum([0] + [len(plan.counts) for plan in plans])
    cells = np.cumsum([0] + [len(plan.cell_payload) for plan in plans])
    rows = np.cumsum([0] + [len(plan.hop_rows) for plan in plans])
    joint = Plan(
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


@memo.cached(maxsize=8192)
def plan_level_bytes(plan: Plan, step: int | None, S: float, framing: tuple) -> tuple[float, ...]:
    """Bytes each level's links carry when the plan's steps run (each its count times) at size S — only step
    ``step`` of them when given (the double tree's chosen chunk count). Link speeds do not enter."""
    chosen = slice(None) if step is None else plan.cell_step == step
    weights = plan.counts[plan.cell_step[chosen]]
    payload = plan.cell_payload[chosen] * S
    return tuple(float(np.dot(weights * framed_bytes(payload, packet, header), sums[chosen]))
                 for (packet, header), sums in zip(framing, plan.cell_sums, strict=True))
