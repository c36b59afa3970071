"""The inner level of ``deepstack optimize``: a hardware point's schedules, solved by the one schedule engine.

Optuna proposes hardware points (:mod:`deepstack.search.optimize`); each trial evaluates the schedules that fit the
point with :func:`deepstack.search.schedules.evaluate_schedules` (the engine the sweeps and ``evaluate`` use) and
keeps the point's Pareto set of schedules, so the study's front is over designs × schedules.

A trial solves its point in one of two ways (``Inner``):

* ``exact``: every schedule that survives the pruning rules and fits the point's memory (the sweep's set);
* ``screen``: only the *elite* schedules (those on the Pareto sets of the exactly solved points so far) that fit.
  Good schedules transfer between neighbouring hardware points, so a screen costs a few evaluations instead of
  every schedule. The catalog's named designs (the warm start), retried trials and ``--inner exact`` runs are
  solved exactly; a screen whose elite schedules do not fit the point falls back to the exact solve.

Everything here is a pure function of its inputs and runs in a pool worker; rows are memoised per
(problem, hardware point, schedule) so a repeated proposal costs no evaluation.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

from deepstack.models import memo, tune_gc
from deepstack.search import pareto
from deepstack.search.objectives import OBJECTIVES
from deepstack.search.schedules import evaluate_schedules
from deepstack.search.space import HardwarePoint, design_point
from deepstack.search.sweep.points import METRIC_COLUMNS, device_of, space_schedules

ROW_METRICS = ("stps", "utps", "tokens_per_joule", "ttft_s", "power_w", "temperature_c", "power_density_W_per_mm2",
               "memory_gib")
ROWS = memo.Table("search.bilevel.rows", maxsize=200_000, lru=True)  # (problem, hardware, label) → row items
"""Rows this process evaluated: a repeated proposal (or a refine of a screened point) re-uses them."""


@dataclass(frozen=True)
class InnerTask:
    """One trial's inner problem: the problem (space, scenario, objectives), a hardware point and the schedules
    to try (``None``: every schedule that fits, the exact solve)."""

    problem: object  # deepstack.search.problem.Problem (frozen, hashable)
    hardware: HardwarePoint
    only: tuple[str, ...] | None


@dataclass(frozen=True)
class InnerResult:
    """What a trial keeps: the point's Pareto set of thermally feasible schedules (rows with objective values),
    the representative row told to Optuna, its full report, and what it cost."""

    front: tuple[dict, ...]
    representative: dict | None
    report: dict | None
    over_limit_c: float  # the representative's temperature above its limit (> 0: no schedule under the limit)
    evaluations: int  # design points evaluated for this trial (memoised repeats not counted)
    schedules: int  # schedules considered (fit the point's memory and, when screened, in the elite set)
    evaluation_s: float


def solve(task: InnerTask) -> InnerResult:
    """Evaluate the task's schedules on its hardware point and keep the point's Pareto set."""
    started = time.perf_counter()
    problem, hw = task.problem, task.hardware
    dev = device_of(problem.space, hw)
    if dev is None:
        return InnerResult((), None, None, math.inf, 0, 0, time.perf_counter() - started)
    point = design_point(problem.space, hw, problem.scenario)
    strategies = space_schedules(problem.space, problem.scenario, point.devices, dev.dram.capacity_B)
    if task.only is not None:  # a screen; when no elite schedule fits this point, the exact solve instead
        wanted = set(task.only)
        strategies = [s for s in strategies if s.label in wanted] or strategies
    with_ttft = "ttft" in problem.objectives
    missing = [s for s in strategies if (problem, hw, s.label) not in ROWS]
    if missing:
        for strategy, (_, report) in zip(missing, evaluate_schedules(
                point, [s.schedule for s in missing], with_ttft=with_ttft), strict=True):
            metrics = report.metrics
            ROWS.put((problem, hw, strategy.label), (
                ("schedule", strategy.label), ("fsdp", strategy.fsdp), ("feasible", report.feasible),
                ("max_temp_c", report.hardware["max_temp_c"]),
                *((k, metrics[k]) for k in METRIC_COLUMNS if k in metrics and k in ROW_METRICS)))
    rows = [dict(ROWS[(problem, hw, s.label)]) for s in strategies]
    if not rows:
        return InnerResult((), None, None, math.inf, len(missing), 0, time.perf_counter() - started)
    front = local_front(rows, list(problem.objectives))
    if front:
        best = representative(front, list(problem.objectives))
    else:  # every schedule is over the thermal limit: tell the coolest, with its excess as the constraint
        best = min(rows, key=lambda r: r["temperature_c"] - r["max_temp_c"])
    strategy = next(s for s in strategies if s.label == best["schedule"])
    from deepstack.models.evaluate import evaluate

    report = evaluate(design_point(problem.space, hw, problem.scenario, strategy.schedule),
                      with_ttft=with_ttft).as_dict()
    return InnerResult(tuple(front), best, report, best["temperature_c"] - best["max_temp_c"], len(missing),
                       len(strategies), time.perf_counter() - started)


def solve_chunk(tasks: list[InnerTask]) -> list[InnerResult]:
    """A batch's share of tasks, as a pool worker runs it (:func:`deepstack.search.executor.local_session`)."""
    tune_gc()
    return [solve(task) for task in tasks]


def values(row: dict, objectives: list[str]) -> list[float]:
    return [float(row[OBJECTIVES[o][0]]) for o in objectives]


def local_front(rows: list[dict], objectives: list[str]) -> list[dict]:
    """The thermally feasible rows no other dominates (one per distinct objective vector)."""
    feasible = [r for r in rows if r["feasible"]]
    if not feasible:
        return []
    v = np.array([values(r, objectives) for r in feasible], dtype=float)
    mask = pareto.nondominated_mask(v, objectives)
    out, seen = [], set()
    for row, keep in zip(feasible, mask, strict=True):
        key = tuple(values(row, objectives))
        if keep and key not in seen:
            seen.add(key)
            out.append(row)
    return out


def representative(front: list[dict], objectives: list[str]) -> dict:
    """The row told to Optuna for the point: the largest product of objectives (smaller-is-better ones inverted),
    i.e. the largest box it dominates from the origin; scale-free, and a real evaluated schedule."""
    def key(row: dict) -> float:
        return sum((1 if OBJECTIVES[o][1] else -1) * math.log(max(v, 1e-300))
                   for o, v in zip(objectives, values(row, objectives), strict=True))

    return max(front, key=key)


def front_row(row: dict, objectives: list[str]) -> dict:
    """A kept schedule as the trial stores it: the objectives by name, the schedule and its metrics."""
    return {**{o: row[OBJECTIVES[o][0]] for o in objectives}, "schedule": row["schedule"], "fsdp": row["fsdp"],
            **{k: row[k] for k in ROW_METRICS if k in row}}


def trial_params(problem, hw: HardwarePoint) -> dict:
    """The trial parameters that propose ``hw`` (levels the hardware's NoC lacks at the nominal bandwidth)."""
    bws = _padded(problem, hw.level_bw_scales, problem.feasibility.levels)
    return {"chip": hw.chip, "noc": hw.noc, "stacked_layers": str(hw.stacked_layers),
            "connected_layers": hw.connected_layers, "sram": hw.sram, "hop_latency_scale": f"{hw.hop_latency_scale:g}",
            **{f"bw_scale_L{i + 1}": f"{bw:g}" for i, bw in enumerate(bws)}}


def _padded(problem, bws: tuple[float, ...], levels: int) -> tuple[float, ...]:
    """``bws`` cut or filled to ``levels`` levels, a missing level at the space's nominal bandwidth."""
    nominal = _nearest(list(problem.space.hardware.level_bw_scale), 1.0)
    return (*bws[:levels], *[nominal] * (levels - len(bws)))


def _nearest(options, target):
    return min(options, key=lambda v: (abs(v - target), v))


def _steps(options: list, value) -> list:
    """The values next to ``value`` in the ordered ``options``."""
    i = options.index(value)
    return [options[j] for j in (i - 1, i + 1) if 0 <= j < len(options)]


def neighbours(problem, hw: HardwarePoint) -> list[HardwarePoint]:
    """The hardware points one move from ``hw``: another chip, NoC or SRAM option, one step of m, n or the hop
    latency, any other bandwidth of one level, or the levels' bandwidths at which more PEs fit (:func:`area_steps`)
    (the refinement's neighbourhood; the caller repairs them). A
    level's bandwidth may jump because its best value is not where its neighbours are: the area a cheaper level
    frees buys PEs or another level's bandwidth, so the optimum is often at the far end of one level's range."""
    from deepstack.search.ask_tell import _noc_levels

    f, space = problem.feasibility, problem.space.hardware
    replace = dataclasses.replace
    out = [replace(hw, chip=c) for c in f.chips if c != hw.chip]
    out += [replace(hw, noc=noc, level_bw_scales=_padded(problem, hw.level_bw_scales, _noc_levels(noc)))
            for noc in f.nocs if noc != hw.noc]
    out += [replace(hw, sram=s) for s in f.srams if s != hw.sram]
    if hw.stacked_layers:
        for m in _steps(f.stacked, hw.stacked_layers):
            out.append(replace(hw, stacked_layers=m, connected_layers=min(hw.connected_layers, m)))
        ns = list(range(1, hw.stacked_layers + 1)) if f.connected == "all" else [
            n for n in f.connected if n <= hw.stacked_layers]
        if hw.connected_layers in ns:
            out += [replace(hw, connected_layers=n) for n in _steps(ns, hw.connected_layers)]
    out += [replace(hw, hop_latency_scale=h) for h in _steps(list(space.hop_latency_scale), hw.hop_latency_scale)]
    for level, bw in enumerate(hw.level_bw_scales):
        for step in (v for v in space.level_bw_scale if v != bw):
            bws = list(hw.level_bw_scales)
            bws[level] = step
            out.append(replace(hw, level_bw_scales=tuple(bws)))
    return out + area_steps(problem, hw)


def area_steps(problem, hw: HardwarePoint) -> list[HardwarePoint]:
    """For each PE count above ``hw``'s that some per-level link bandwidths leave room for (the NoC's area, which
    the levels set together, decides how many PEs fit), the bandwidths nearest ``hw``'s that give it: a move of
    several levels at once, which single-level moves reach only through points that may not be on the front."""
    current = device_of(problem.space, hw)
    if current is None or not hw.level_bw_scales:
        return []
    best: dict[int, tuple] = {}  # PEs → (levels changed, bandwidths)
    for scales in itertools.product(problem.space.hardware.level_bw_scale, repeat=len(hw.level_bw_scales)):
        dev = device_of(problem.space, dataclasses.replace(hw, level_bw_scales=scales))
        if dev is None or dev.pes <= current.pes:
            continue
        pairs = list(zip(scales, hw.level_bw_scales, strict=True))
        key = (sum(a != b for a, b in pairs), sum(abs(math.log(a / b)) for a, b in pairs))  # fewest, nearest
        if dev.pes not in best or key < best[dev.pes][0]:
            best[dev.pes] = (key, scales)
    return [dataclasses.replace(hw, level_bw_scales=scales) for _, (_, scales) in sorted(best.items())]


def warm_start(problem) -> list[dict]:
    """Trial parameters of the catalog's named designs, evaluated first: every 3D chip of the space at
    m = n = 4 on TMS1 (the paper's Table 2 setting; the space's nearest stacking and first NoC where it has no
    m = 4 or no TMS1) with nominal SRAM, hop latency and bandwidth, then the space's centre (the middle value of
    every axis). Repair maps any that the space cannot hold to the nearest feasible point."""
    from deepstack import catalog

    f = problem.feasibility
    hw = problem.space.hardware

    def params(chip: str, noc: str, m: int, n: int, sram: str, hop: float, bw: float) -> dict:
        out = {"chip": chip, "noc": noc, "stacked_layers": str(m), "connected_layers": n, "sram": sram,
               "hop_latency_scale": f"{hop:g}"}
        return {**out, **{f"bw_scale_L{i + 1}": f"{bw:g}" for i in range(f.levels)}}

    m4 = _nearest(f.stacked, 4)
    noc = "tms1" if "tms1" in f.nocs else f.nocs[0]
    hop1, bw1 = _nearest(list(hw.hop_latency_scale), 1.0), _nearest(list(hw.level_bw_scale), 1.0)
    out = [params(chip, noc, m4, m4, f.srams[0], hop1, bw1) for chip in f.chips if catalog.load("chips", chip).is_3d]
    m = f.stacked[len(f.stacked) // 2]
    ns = list(range(1, m + 1)) if f.connected == "all" else [n for n in f.connected if n <= m] or [1]
    hops, bws = sorted(hw.hop_latency_scale), sorted(hw.level_bw_scale)
    centre = params(f.chips[len(f.chips) // 2], f.nocs[len(f.nocs) // 2], m, ns[(len(ns) - 1) // 2],
                    f.srams[len(f.srams) // 2], hops[len(hops) // 2], bws[len(bws) // 2])
    return [p for i, p in enumerate([*out, centre]) if p not in out[:i]]
