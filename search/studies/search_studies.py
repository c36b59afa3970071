"""Study runners about the search itself (paper §5): the best 3D design against H100*/H200* at equal area, the
cumulative ablation of the search space, NoC sensitivity, and Pareto fronts.

Every runner evaluates (hardware point × schedule) candidates with :func:`search_point`, which enumerates the
composer's feasible flat strategies (and, where asked, bounded per-module schedules), evaluates each in full and
keeps a light :class:`Candidate` per schedule. Infeasible points (area, memory, thermal) are recorded with their
status and never picked.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.models import power as power_model
from deepstack.models import thermal
from deepstack.models.device import DeviceSpec, resolve_device
from deepstack.models.evaluate import (
    CommRow,
    DesignPoint,
    GiB,
    OpRow,
    OverlapRow,
    PhaseResult,
    Report,
    _clock_scale,
    _noc_J_per_B,
    evaluate,
    run_phase,
)
from deepstack.models.operators import time_op
from deepstack.models.parallel import (
    PRUNING_RULES,
    Strategy,
    feasible_strategies,
    memory_footprint,
    usable_capacity_B,
)
from deepstack.models.workload import Gemm, build_workload
from deepstack.schema import Scenario, Schedule
from deepstack.search.pareto import nondominated_mask
from deepstack.search.space import load_space, stacking_pairs
from deepstack.search.studies import StudyContext, figure, runner
from deepstack.search.studies.common import point, scenario
from deepstack.search.sweep import fork_context

FIXED_COLLECTIVES = {"all_reduce": "ring", "all_gather": "ring", "reduce_scatter": "ring", "all_to_all": "direct"}
"""The ASTRA-sim-like baseline's collectives: one user-chosen algorithm per collective, never searched (paper
Table 1 note 3; ASTRA-sim's example system configs set ``all-reduce-implementation: ring`` and a direct
all-to-all)."""

ATTENTION_RULES = ("replicas_exceed_batch", "pp_exceeds_microbatches", "pp_exceeds_layers", "tp_heads",
                   "sequence_overpartitioned")
"""Composer rules (models/parallel.py) an attention layout of a per-module schedule must pass."""
FFN_RULES = ("replicas_exceed_batch", "tp_intermediate", "ep_experts")
"""Composer rules the FFN/MoE layout of a per-module schedule must pass."""
_RULES = dict(PRUNING_RULES)
THERMAL_TOLERANCE_C = 1e-9  # the same rounding slack models.evaluate allows on the temperature limit


# --------------------------------------------------------------------------------------------------------
# Hardware points, candidates, and the per-point schedule search
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hardware:
    """One hardware point: chip preset, NoC preset or file, stacking (m, n; None for 2.5D) and NoC scales."""

    chip: str
    noc: str | None
    stacked_layers: int | None = None
    connected_layers: int | None = None
    hop_latency_scale: float = 1.0
    level_bw_scales: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        # nominal bandwidth has one spelling, so equal networks compare equal
        scales = tuple(float(v) for v in self.level_bw_scales)
        object.__setattr__(self, "level_bw_scales", () if all(v == 1.0 for v in scales) else scales)
        object.__setattr__(self, "hop_latency_scale", float(self.hop_latency_scale))

    def design(self, sc: Scenario, schedule: Schedule | None = None) -> DesignPoint:
        return point(self.chip, sc, self.noc, self.stacked_layers, self.connected_layers,
                     hop_latency_scale=self.hop_latency_scale, level_bw_scales=self.level_bw_scales,
                     schedule=schedule)

    @property
    def noc_name(self) -> str:
        return Path(self.noc).stem if self.noc else "none"

    @property
    def label(self) -> str:
        stack = f"m{self.stacked_layers}n{self.connected_layers}" if self.stacked_layers else "hbm"
        bw = "x".join(f"{s:g}" for s in self.level_bw_scales) or "1"
        return f"{self.chip}/{self.noc_name}/{stack}/lat{self.hop_latency_scale:g}/bw{bw}"

    def columns(self) -> dict:
        return {"chip": self.chip, "noc": self.noc_name, "stacked_layers": self.stacked_layers,
                "connected_layers": self.connected_layers, "hop_latency_scale": self.hop_latency_scale,
                "level_bw_scales": "x".join(f"{s:g}" for s in self.level_bw_scales) or "1"}


@dataclass(frozen=True)
class Candidate:
    """One evaluated (hardware, schedule) point, reduced to what the studies tabulate.

    ``serial`` holds the metrics re-timed without compute–communication overlap (see :func:`retime`) when
    they were asked for.
    """

    hardware: Hardware
    schedule: str
    collectives: str  # "auto" (tuned per collective) or "fixed" (FIXED_COLLECTIVES)
    per_module: bool
    restricted: bool  # EP = SP = CP = 1 in both modules
    feasible: bool
    violations: str
    metrics: dict
    pes_per_device: int
    noc_area_mm2: float
    serial: dict | None = None

    def value(self, metric: str = "stps", serialised: bool = False) -> float:
        return (self.serial if serialised else self.metrics)[metric]

    def ok(self, serialised: bool = False) -> bool:
        return self.serial["feasible"] if serialised else self.feasible

    def columns(self, serialised: bool = False) -> dict:
        values = self.serial if serialised else self.metrics
        return {**self.hardware.columns(), "schedule": self.schedule, "collectives": self.collectives,
                "pes_per_device": self.pes_per_device, "noc_area_mm2": self.noc_area_mm2,
                "stps": values["stps"], "utps": values["utps"], "tokens_per_joule": values["tokens_per_joule"],
                "power_w": values["power_w"], "temperature_c": values["temperature_c"],
                "feasible": self.ok(serialised)}


@dataclass
class PointResult:
    """Every evaluated schedule of one hardware point, or why none could be evaluated."""

    hardware: Hardware
    candidates: list[Candidate] = field(default_factory=list)
    status: str = "ok"
    pes_per_device: int | None = None  # None when no PE fits the area budget

    def best(self, metric: str = "stps", serialised: bool = False,
             keep: Callable[[Candidate], bool] | None = None) -> Candidate | None:
        return best_of(self.candidates, metric, serialised, keep)


def best_of(candidates: Iterable[Candidate], metric: str = "stps", serialised: bool = False,
            keep: Callable[[Candidate], bool] | None = None) -> Candidate | None:
    """The feasible candidate with the largest ``metric`` (None if none is feasible)."""
    pool = [c for c in candidates if c.ok(serialised) and (keep is None or keep(c))]
    return max(pool, key=lambda c: c.value(metric, serialised), default=None)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def flat_schedules(sc: Scenario, devices: int, capacity_B: float, restricted: bool = False) -> list[Schedule]:
    """The composer's feasible flat strategies (rules + memory), optionally only TP/PP/DP/FSDP ones."""
    kept, _ = feasible_strategies(sc, devices, capacity_B)
    if restricted:
        kept = tuple(s for s in kept if s.ep == s.sp == s.cp == 1)
    return [s.to_schedule() for s in kept]


def per_module_schedules(sc: Scenario, devices: int, capacity_B: float, max_pp: int) -> list[Schedule]:
    """Per-module schedules: attention TP·DP × FFN/MoE TP·EP (TP·DP for a dense FFN) on the same devices per
    pipeline stage, for PP ≤ ``max_pp``, FSDP off, collectives auto.

    Each module's layout must pass the composer's rules that concern it (:data:`ATTENTION_RULES`,
    :data:`FFN_RULES`, checked as flat strategies with the same PP), and the schedule must fit in memory. Pairs
    with the same TP in both modules split tokens the same way as the flat TP·EP (or TP·DP) strategy and are
    left to the flat search.
    """
    second = "ep" if sc.model.is_moe else "dp"
    usable = usable_capacity_B(capacity_B)
    out = []
    for pp in _divisors(devices):
        if pp > max_pp:
            break
        per_stage = devices // pp
        for tp_a in _divisors(per_stage):
            attention = Strategy(tp=tp_a, dp=per_stage // tp_a, pp=pp)
            if any(_RULES[name](sc, attention) for name in ATTENTION_RULES):
                continue
            for tp_f in _divisors(per_stage):
                if tp_f == tp_a:
                    continue
                ffn = Strategy(tp=tp_f, pp=pp, **{second: per_stage // tp_f})
                if any(_RULES[name](sc, ffn) for name in FFN_RULES):
                    continue
                schedule = Schedule(attention=attention.module(), ffn=ffn.module(), pp=pp)
                if memory_footprint(sc, schedule).total_B <= usable:
                    out.append(schedule)
    return out


def retime(design: DesignPoint, report: Report, serialise: bool = True) -> dict:
    """Metrics of ``design`` with compute–communication overlap switched off, without touching the model.

    The model always overlaps (eq. 5 for a GEMM and its collective; FSDP weight gathers prefetched behind the
    layer). Here the phase is re-run (:func:`~deepstack.models.evaluate.run_phase`), every overlapped row is
    split into the GEMM alone — re-tuned for its fastest stand-alone tiling — followed by the collective's full
    time, every prefetched FSDP gather is charged in full, and the model's own DVFS step (thermal frequency,
    then power wall) sets the clock of the serialised step. STPS, UTPS and tokens/J scale with the step time
    and power; memory feasibility is the report's, the temperature is recomputed. With ``serialise=False``
    the rows are kept, which reproduces the report (a consistency check).
    """
    dev: DeviceSpec = resolve_device(design.chip, design.stacked_layers, design.connected_layers, design.network,
                                     design.sram, design.noc_bw_scale)
    sc, s = design.scenario, design.schedule
    phase = run_phase(design, dev, sc)
    rows = list(phase.rows)
    if serialise:
        micro = sc if phase.microbatches == 1 else sc.model_copy(
            update={"batch": math.ceil(sc.batch / phase.microbatches)})
        gemms = {(layer.kind, op.name): op
                 for layer in build_workload(sc.model, micro, s.attention, s.ffn, s.pp, phase.stage)
                 for op in layer.ops if isinstance(op, Gemm)}
        rows = []
        for r in phase.rows:
            if isinstance(r, OverlapRow):
                gemm = gemms.get((r.layer, r.timing.name))
                alone = time_op(gemm, dev) if gemm is not None else r.timing
                rows += [OpRow(r.layer, r.count, alone), CommRow(r.layer, r.count, r.name, r.result)]
            elif isinstance(r, CommRow) and r.hidden_behind_s:
                rows.append(CommRow(r.layer, r.count, r.name, r.result))
            else:
                rows.append(r)
    serial = PhaseResult(rows, phase.time_multiplier, phase.microbatches, phase.stage)
    _, step_s, power_w = _clock_scale(serial, dev, power_model.coefficients(dev), _noc_J_per_B(design),
                                      design.devices)
    speed = report.breakdown["phase_time_s"] / step_s
    layers = dev.dram.stacked_layers if dev.is_3d else 0
    temperature = thermal.temperature_c(dev.ambient_c, layers, power_w, dev.device_area_mm2)
    memory_ok = not any(v.startswith("memory") for v in report.violations)
    stps = report.metrics["stps"] * speed
    return {"stps": stps, "utps": report.metrics["utps"] * speed, "power_w": power_w * design.devices,
            "tokens_per_joule": stps / (power_w * design.devices), "temperature_c": temperature,
            "step_s": step_s, "feasible": memory_ok and temperature <= dev.target_c + THERMAL_TOLERANCE_C}


@dataclass(frozen=True)
class PointTask:
    """What :func:`search_point` evaluates: a hardware point, a scenario and which schedules.

    ``scopes`` picks schedule families: ``restricted`` (flat with EP = SP = CP = 1), ``flat`` (every flat
    strategy), ``per_module`` (:func:`per_module_schedules`). ``collectives`` lists "fixed" and/or "auto".
    """

    hardware: Hardware
    scenario: Scenario
    scopes: tuple[str, ...] = ("flat",)
    collectives: tuple[str, ...] = ("auto",)
    serialise: bool = False
    max_pp: int = 1


def search_point(task: PointTask) -> PointResult:
    """Evaluate every schedule of ``task`` on its hardware point (a pure function: safe in a process pool)."""
    hw, sc = task.hardware, task.scenario
    result = PointResult(hw)
    base = hw.design(sc)
    try:
        dev = resolve_device(base.chip, base.stacked_layers, base.connected_layers, base.network, base.sram,
                             base.noc_bw_scale)
    except UserInputError as exc:  # e.g. no PE fits the area budget at this stacking and NoC
        result.status = f"area: {exc}"
        return result
    result.pes_per_device = dev.pes
    devices, capacity = base.devices, dev.dram.capacity_B
    schedules: list[tuple[Schedule, bool, bool]] = []  # (schedule, per_module, restricted)
    if "flat" in task.scopes:
        schedules += [(s, False, s.attention.ep == s.attention.sp == s.attention.cp == 1)
                      for s in flat_schedules(sc, devices, capacity)]
    elif "restricted" in task.scopes:
        schedules += [(s, False, True) for s in flat_schedules(sc, devices, capacity, restricted=True)]
    if "per_module" in task.scopes:
        schedules += [(s, True, s.ffn.ep == 1) for s in per_module_schedules(sc, devices, capacity, task.max_pp)]
    if not schedules:
        result.status = f"memory: no schedule of {devices} devices fits {capacity / GiB:.1f} GiB per device"
        return result
    for schedule, per_module, restricted in schedules:
        for choice in task.collectives:
            sched = schedule.model_copy(update={"collectives": dict(FIXED_COLLECTIVES) if choice == "fixed" else {}})
            design = replace(base, schedule=sched)
            report = evaluate(design, with_ttft=False, breakdown=task.serialise)  # retime reads it
            result.candidates.append(Candidate(
                hardware=hw, schedule=str(sched), collectives=choice, per_module=per_module,
                restricted=restricted, feasible=report.feasible, violations="; ".join(report.violations),
                metrics=dict(report.metrics), pes_per_device=report.hardware["pes_per_device"],
                noc_area_mm2=report.hardware["area_per_device_mm2"]["noc_mm2"],
                serial=retime(design, report) if task.serialise else None))
    if not any(c.feasible for c in result.candidates):  # every schedule fits memory, so a limit was broken
        result.status = (f"no feasible schedule of {len(result.candidates)} evaluated, e.g. "
                         f"{result.candidates[0].violations}")
    return result


def run_tasks(tasks: list[PointTask], workers: int = 1) -> list[PointResult]:
    """:func:`search_point` over ``tasks``, in order; on a process pool when ``workers`` > 1."""
    if workers <= 1 or len(tasks) <= 1:
        return [search_point(t) for t in tasks]
    with ProcessPoolExecutor(min(workers, len(tasks)), mp_context=fork_context()) as pool:
        return list(pool.map(search_point, tasks))


def _scenario(ctx: StudyContext, model: str, phase: str, batch: int) -> Scenario:
    return scenario(model, phase, batch, ctx.param("input_len", 1024), ctx.param("output_len", 1024),
                    ctx.params.get("precision"))


def _system_area_mm2(hw: Hardware) -> float:
    """Silicon of the whole system: devices × the chip's device area (which must match the NoC's endpoint)."""
    net, chip = catalog.load("nocs", hw.noc), catalog.load("chips", hw.chip)
    if not math.isclose(chip.device.area_mm2, net.device_area_mm2):
        raise UserInputError(f"{hw.chip} devices are {chip.device.area_mm2:g} mm² but {net.name} connects "
                             f"{net.device_area_mm2:g} mm² endpoints")
    return net.devices * chip.device.area_mm2


# --------------------------------------------------------------------------------------------------------
# 1. The best 3D design against H100* / H200* at equal area (paper §5, "3D vs 2.5D")
# --------------------------------------------------------------------------------------------------------


@runner("baseline_comparison")
def baseline_comparison(ctx: StudyContext) -> None:
    """Best 3D design (chips × NoCs × flat schedules at fixed m, n) vs the 2.5D baselines, per scenario."""
    models, phases, batches = ctx.param("models"), ctx.param("phases"), ctx.param("batches")
    m = ctx.param("stacked_layers", 4)
    n = ctx.param("connected_layers", m)
    hw_3d = [Hardware(chip, _ref(ctx, noc), m, n) for chip in ctx.param("chips_3d") for noc in ctx.param("nocs_3d")]
    baseline_noc = _ref(ctx, ctx.param("baseline_noc"))
    hw_2p5d = [Hardware(chip, baseline_noc) for chip in ctx.param("baselines")]
    areas = {hw.label: _system_area_mm2(hw) for hw in hw_3d + hw_2p5d}
    if len(set(areas.values())) != 1:
        raise UserInputError(f"study {ctx.recipe.name}: the 3D and 2.5D networks must have equal area (mm²), "
                             f"got {areas}")
    area_mm2 = next(iter(areas.values()))
    scenarios = [(model, phase, batch) for model in models for phase in phases for batch in batches]
    tasks = [PointTask(hw, _scenario(ctx, *key)) for key in scenarios for hw in hw_3d + hw_2p5d]
    results = iter(run_tasks(tasks, ctx.param("workers", 1)))
    points, rows = [], []
    for model, phase, batch in scenarios:
        best_3d: Candidate | None = None
        by_baseline: dict[str, tuple[Candidate | None, str]] = {}
        for hw in hw_3d + hw_2p5d:
            result = next(results)
            top = result.best()
            status = "ok" if top else result.status
            points.append({"model": model, "phase": phase, "batch": batch, "kind": "3d" if hw in hw_3d else "2.5d",
                           **hw.columns(), "status": status, "evaluated": len(result.candidates),
                           **({k: v for k, v in top.columns().items() if k not in hw.columns()} if top else {})})
            if hw in hw_3d:
                if top and (best_3d is None or top.value() > best_3d.value()):
                    best_3d = top
            else:
                by_baseline[hw.chip] = (top, status)
        feasible_2p5d = [c for c, _ in by_baseline.values() if c]
        best_2p5d = max(feasible_2p5d, key=lambda c: c.value(), default=None)
        row = {"model": model, "phase": phase, "batch": batch, "area_mm2": area_mm2,
               "stps_3d": best_3d.value() if best_3d else math.nan,
               "utps_3d": best_3d.value("utps") if best_3d else math.nan,
               "design_3d": f"{best_3d.hardware.label} {best_3d.schedule}" if best_3d else "infeasible"}
        for chip, (top, status) in by_baseline.items():
            row[f"stps_{chip}"] = top.value() if top else math.nan
            row[f"utps_{chip}"] = top.value("utps") if top else math.nan
            row[f"schedule_{chip}"] = top.schedule if top else ""
            row[f"status_{chip}"] = status
        row.update({"stps_2p5d": best_2p5d.value() if best_2p5d else math.nan,
                    "utps_2p5d": best_2p5d.value("utps") if best_2p5d else math.nan,
                    "best_2p5d": best_2p5d.hardware.chip if best_2p5d else "infeasible"})
        row["speedup"] = (row["stps_3d"] / row["stps_2p5d"]) if best_3d and best_2p5d else math.nan
        rows.append(row)
    ctx.write_csv("comparison.csv", rows)
    ctx.write_csv("points.csv", points)
    _plot_speedups(ctx, rows, models, phases, batches)
    shown = [{"model": r["model"], "phase": r["phase"], "batch": r["batch"], "3D STPS": r["stps_3d"],
              "2.5D STPS": r["stps_2p5d"], "best 2.5D": r["best_2p5d"], "3D UTPS": r["utps_3d"],
              "2.5D UTPS": r["utps_2p5d"], "speed-up": r["speedup"]} for r in rows]
    valid = [r["speedup"] for r in rows if math.isfinite(r["speedup"])]
    infeasible = [f"{r['model']} {r['phase']} b{r['batch']}" for r in rows if not math.isfinite(r["speedup"])]
    text = (f"Equal area: {area_mm2:,.0f} mm² on both sides. 3D: {len(ctx.param('chips_3d'))} chips × "
            f"{len(ctx.param('nocs_3d'))} NoCs at m = {m}, n = {n}, each with its best flat schedule; 2.5D: "
            f"{', '.join(ctx.param('baselines'))} on {Path(baseline_noc).stem}.\n\n")
    if valid:
        text += (f"Speed-up (best 3D STPS / best 2.5D STPS) over {len(valid)} scenarios: min {min(valid):.2f}×, "
                 f"median {float(np.median(valid)):.2f}×, max {max(valid):.2f}×.\n\n")
    if infeasible:
        text += "No feasible design on one side (speed-up not defined): " + ", ".join(infeasible) + ".\n\n"
    ctx.write_summary(text + ctx.key_table("Best 3D against best 2.5D design per scenario, at equal area", shown))


def _plot_speedups(ctx: StudyContext, rows: list[dict], models: list[str], phases: list[str],
                   batches: list[int]) -> None:
    fig, axes = figure(4.0 + 1.6 * len(models) * len(phases), 4.5)
    ax = axes
    groups = [(model, phase) for phase in phases for model in models]
    width = 0.8 / len(batches)
    lookup = {(r["model"], r["phase"], r["batch"]): r["speedup"] for r in rows}
    for i, batch in enumerate(batches):
        values = [lookup.get((model, phase, batch), math.nan) for model, phase in groups]
        x = np.arange(len(groups)) + (i - (len(batches) - 1) / 2) * width
        heights = [v if math.isfinite(v) else 0.0 for v in values]
        ax.bar(x, heights, width, label=f"batch {batch}")
        for xi, v in zip(x, values, strict=True):
            if not math.isfinite(v):
                ax.text(xi, 0.02, "n/f", ha="center", va="bottom", fontsize=7, rotation=90)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(np.arange(len(groups)), [f"{model}\n{phase}" for model, phase in groups], fontsize=8)
    ax.set_ylabel("speed-up: best 3D STPS / best 2.5D STPS")
    ax.set_title("3D vs 2.5D at equal area (n/f: no feasible design on a side)")
    ax.legend(fontsize=8)
    ctx.save_png("speedup.png", fig)


# --------------------------------------------------------------------------------------------------------
# 2. Cumulative ablation of the search space (paper §5.6)
# --------------------------------------------------------------------------------------------------------

STEPS = (
    "1 TP/PP/DP/FSDP, fixed collectives",
    "2 + EP/SP/CP, collective auto-tuning",
    "3 + per-module parallelism",
    "4 + on-chip architecture search",
    "5 + compute-communication overlap",
    "6 + DRAM stacking search",
    "7 + NoC search",
)
STEP_LABELS = ("TP/PP/DP\nFSDP", "+EP/SP/CP\n+coll. tuning", "+per-\nmodule", "+chip", "+overlap", "+DRAM\nstacking",
               "+NoC")


@runner("ablation")
def ablation(ctx: StudyContext) -> None:
    """STPS as the search space grows step by step; each step's candidate pool contains the previous one's."""
    model, phase = ctx.param("model"), ctx.param("phase", "decode")
    space = load_space(_ref(ctx, ctx.param("space", "default")))
    m = ctx.param("stacked_layers", 4)
    base = Hardware(ctx.param("chip"), _ref(ctx, ctx.param("noc")), m, ctx.param("connected_layers", m))
    step_rows, point_rows = [], []
    for batch in ctx.param("batches"):
        search = _Ablation(_scenario(ctx, model, phase, batch), base, ctx.param("per_module_max_pp", 4),
                           ctx.param("workers", 1))
        search.run(space, [_ref(ctx, noc) for noc in space.hardware.nocs], ctx.param("stacking_top_chips", 2),
                   ctx.param("noc_top_points", 2))
        point_rows += [{"batch": batch, **row} for row in search.point_rows]
        for name, chosen, serialised, considered, fixed in search.picks:
            row = {"batch": batch, "step": name, "overlap": "off (serialised)" if serialised else "on",
                   "candidates": considered,
                   "stps_fixed_collectives": fixed.value("stps", serialised) if fixed else math.nan}
            if chosen is None:
                why = "" if considered else " (no schedule passes the composer's rules and the memory check)"
                row.update(stps=math.nan, status="no feasible candidate" + why)
            else:
                row.update(chosen.columns(serialised), per_module=chosen.per_module,
                           stps_overlapped=chosen.value("stps"),
                           stps_serialised=chosen.serial["stps"] if chosen.serial else math.nan, status="ok")
            step_rows.append(row)
    ctx.write_csv("steps.csv", step_rows)
    ctx.write_csv("points.csv", point_rows)
    _plot_ablation(ctx, step_rows)
    shown = [{"batch": r["batch"], "step": r["step"], "STPS": r["stps"], "overlap": r["overlap"],
              "STPS, fixed collectives": r["stps_fixed_collectives"],
              "design": (f"{r['chip']}/{r['noc']}/m{r['stacked_layers']}n{r['connected_layers']}"
                         f"/lat{r['hop_latency_scale']:g}/bw{r['level_bw_scales']}") if r["status"] == "ok" else "-",
              "schedule": r.get("schedule", r["status"]), "candidates": r["candidates"]} for r in step_rows]
    gains = []
    for batch in ctx.param("batches"):
        mine = [r for r in step_rows if r["batch"] == batch and math.isfinite(r["stps"])]
        if len(mine) > 1:
            first, last = mine[0], mine[-1]
            gains.append(f"batch {batch}: step {last['step'].split()[0]} / step {first['step'].split()[0]} "
                         f"(the first with a feasible design) = {last['stps'] / first['stps']:.2f}×")
    ctx.write_summary(
        f"{model} {phase}, base point {base.label}. Steps 1-4 are ranked with compute-communication overlap "
        "removed (serialised re-timing, see the README); step 5 ranks the same candidates with the model's "
        "overlap; steps 6-7 keep it on. Every step's candidate pool contains the previous one's, so STPS never "
        "drops.\n\n" + ("; ".join(gains) + ".\n\n" if gains else "")
        + ctx.key_table("The design each step of the search space picks", shown))


class _Ablation:
    """The growing candidate pool of one scenario and the design each step picks from it."""

    def __init__(self, sc: Scenario, base: Hardware, max_pp: int, workers: int):
        self.sc, self.base, self.max_pp, self.workers = sc, base, max_pp, workers
        self.pool: list[Candidate] = []
        self.point_rows: list[dict] = []
        self.picks: list[tuple[str, Candidate | None, bool, int, Candidate | None]] = []

    def add(self, tasks: list[PointTask], step: int, skip: Callable[[Candidate], bool] | None = None) -> None:
        for result in run_tasks(tasks, self.workers):
            fresh = [c for c in result.candidates if skip is None or not skip(c)]
            self.pool.extend(fresh)
            self.point_rows += [{"step_added": step, **c.columns(), "per_module": c.per_module,
                                 "stps_serialised": c.serial["stps"] if c.serial else math.nan} for c in fresh]

    def add_hardware(self, hardware: Iterable[Hardware], step: int) -> None:
        """Full schedule search (flat + per-module, auto collectives, overlap on) on points not yet searched."""
        seen = {c.hardware for c in self.pool}
        fresh = [hw for hw in dict.fromkeys(hardware) if hw not in seen]
        self.add([PointTask(hw, self.sc, ("flat", "per_module"), max_pp=self.max_pp) for hw in fresh], step)

    def pick(self, step: int, serialised: bool, keep: Callable[[Candidate], bool] | None = None) -> None:
        """Record the step's best candidate, its pool size, and its best with the fixed collectives only."""
        keep = keep or (lambda c: True)
        fixed = best_of(self.pool, "stps", serialised, lambda c: keep(c) and c.collectives == "fixed")
        self.picks.append((STEPS[step - 1], best_of(self.pool, "stps", serialised, keep), serialised,
                           sum(1 for c in self.pool if keep(c)), fixed))

    def ranked(self, key: Callable[[Candidate], object]) -> list:
        """Distinct ``key`` values of the feasible (overlapped) candidates, best STPS first."""
        best: dict = {}
        for c in self.pool:
            if c.feasible:
                best[key(c)] = max(best.get(key(c), -math.inf), c.value())
        return sorted(best, key=lambda k: -best[k])

    def run(self, space, nocs: list[str], top_chips: int, top_points: int) -> None:
        base, sc, serial = self.base, self.sc, True
        # Steps 1-4 are ranked without overlap (serialised re-timing); step 5 switches it on.
        self.add([PointTask(base, sc, ("restricted",), ("fixed",), serial)], 1)
        self.pick(1, serial, lambda c: c.restricted and c.collectives == "fixed")
        self.add([PointTask(base, sc, ("flat",), ("fixed", "auto"), serial)], 2,
                 skip=lambda c: c.restricted and c.collectives == "fixed")
        self.pick(2, serial, lambda c: not c.per_module and c.hardware == base)
        self.add([PointTask(base, sc, ("per_module",), ("auto",), serial, self.max_pp)], 3)
        self.pick(3, serial, lambda c: c.hardware == base)
        others = [replace(base, chip=chip) for chip in space.hardware.chips if chip != base.chip]
        self.add([PointTask(hw, sc, ("flat", "per_module"), ("auto",), serial, self.max_pp) for hw in others], 4)
        self.pick(4, serial)
        self.pick(5, False)
        # Step 6: stacking (m <= 10, n <= m) on the chips that rank best after step 5 (hierarchical, §4.2.3).
        chips = self.ranked(lambda c: c.hardware.chip)[:top_chips]
        self.add_hardware((replace(base, chip=chip, stacked_layers=m, connected_layers=n) for chip in chips
                           for m, n in stacking_pairs(space, catalog.load("chips", chip))), 6)
        self.pick(6, False)
        # Step 7: NoC topology on the best few points, then hop latency, then per-level bandwidth (§4.2.3).
        points = self.ranked(lambda c: c.hardware)[:top_points]
        self.add_hardware((replace(hw, noc=noc) for hw in points for noc in nocs), 7)
        best = best_of(self.pool)
        if best is not None:
            self.add_hardware((replace(best.hardware, hop_latency_scale=s) for s in space.hardware.hop_latency_scale),
                              7)
            best = best_of(self.pool)
            levels = len(catalog.load("nocs", best.hardware.noc).levels)
            self.add_hardware((replace(best.hardware, level_bw_scales=scales)
                               for scales in itertools.product(space.hardware.level_bw_scale, repeat=levels)), 7)
        self.pick(7, False)


def _ref(ctx: StudyContext, ref: str) -> str:
    """A preset name, or the absolute path of a recipe-relative file (one spelling per file)."""
    resolved = ctx.path(ref)
    return str(Path(resolved).resolve()) if resolved != ref or Path(ref).is_absolute() else ref


def _plot_ablation(ctx: StudyContext, rows: list[dict]) -> None:
    batches = list(dict.fromkeys(r["batch"] for r in rows))
    fig, axes = _subplots(len(batches))
    for ax, batch in zip(axes, batches, strict=True):
        mine = [r for r in rows if r["batch"] == batch]
        values = [r["stps"] if math.isfinite(r["stps"]) else 0.0 for r in mine]
        colors = ["#4477aa" if r["overlap"] == "on" else "#bbbbbb" for r in mine]
        labels = [f"{i}\n{STEP_LABELS[i - 1]}" for i in (int(r["step"].split(" ", 1)[0]) for r in mine)]
        ax.bar(labels, values, color=colors)
        ax.tick_params(axis="x", labelsize=7)
        for i, (r, v) in enumerate(zip(mine, values, strict=True)):
            ax.text(i, v, f"{v:,.0f}" if math.isfinite(r["stps"]) else "n/f", ha="center", va="bottom", fontsize=7)
        ax.set_xlabel("cumulative step (grey: overlap off, blue: on; n/f: nothing feasible)")
        ax.set_ylabel("STPS (tokens/s)")
        ax.set_title(f"batch {batch}")
    ctx.save_png("ablation.png", fig)


def _subplots(count: int, width: float = 6.0, height: float = 4.8):
    """A row of ``count`` matplotlib axes on the non-interactive backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, count, figsize=(width * count, height), squeeze=False)
    return fig, list(axes[0])


# --------------------------------------------------------------------------------------------------------
# 3. NoC sensitivity (paper §5.5)
# --------------------------------------------------------------------------------------------------------


@runner("noc_sensitivity")
def noc_sensitivity(ctx: StudyContext) -> None:
    """STPS (best flat schedule per point) and PE count as NoC bandwidth and hop latency are scaled."""
    model, phase = ctx.param("model"), ctx.param("phase", "decode")
    noc = _ref(ctx, ctx.param("noc"))
    m = ctx.param("stacked_layers", 4)
    base = Hardware(ctx.param("chip"), noc, m, ctx.param("connected_layers", m))
    levels = len(catalog.load("nocs", noc).levels)
    sweeps: list[tuple[str, str, float, Hardware]] = []
    for s in ctx.param("bandwidth_scales"):
        sweeps.append(("bandwidth", "all", s, replace(base, level_bw_scales=(float(s),) * levels)))
    for s in ctx.param("hop_latency_scales"):
        sweeps.append(("hop_latency", "all", s, replace(base, hop_latency_scale=float(s))))
    for level in range(levels):
        for s in ctx.param("level_bandwidth_scales"):
            scales = tuple(float(s) if i == level else 1.0 for i in range(levels))
            sweeps.append(("bandwidth", f"L{level + 1}", s, replace(base, level_bw_scales=scales)))
    rows = []
    for batch in ctx.param("batches"):
        sc = _scenario(ctx, model, phase, batch)
        unique = list(dict.fromkeys(hw for *_, hw in sweeps))
        results = dict(zip(unique, run_tasks([PointTask(hw, sc) for hw in unique], ctx.param("workers", 1)),
                           strict=True))
        for sweep, level, scale, hw in sweeps:
            result = results[hw]
            top = result.best()
            row = {"batch": batch, "sweep": sweep, "level": level, "scale": scale, **hw.columns(),
                   "status": "ok" if top else result.status}
            if top:
                row.update({k: v for k, v in top.columns().items() if k not in hw.columns()})
            else:  # the PE count still tells what the NoC costs
                any_point = result.candidates[0] if result.candidates else None
                row.update(pes_per_device=any_point.pes_per_device if any_point else math.nan, stps=math.nan)
            rows.append(row)
    ctx.write_csv("points.csv", rows)
    batches = ctx.param("batches")
    _plot_sensitivity(ctx, rows, batches, "bandwidth", "link bandwidth scale (×)", "stps_vs_bandwidth.png")
    _plot_sensitivity(ctx, rows, batches, "hop_latency", "hop latency scale (×)", "stps_vs_latency.png")
    shown = [{"batch": r["batch"], "sweep": r["sweep"], "level": r["level"], "scale": r["scale"],
              "PEs/device": r["pes_per_device"], "STPS": r["stps"], "schedule": r.get("schedule", r["status"])}
             for r in rows]
    ctx.write_summary(
        f"{model} {phase} on {base.label} (best flat schedule per point). Bandwidth scales every link of the "
        "named level(s); the NoC area grows with it, so fewer PEs fit. Hop latency scales every level's "
        "per-hop delay.\n\n" + ctx.key_table("STPS and PEs per device at each NoC bandwidth and hop-latency scale",
                                               shown))


def _plot_sensitivity(ctx: StudyContext, rows: list[dict], batches: list[int], sweep: str, xlabel: str,
                      name: str) -> None:
    fig, axes = _subplots(len(batches))
    for ax, batch in zip(axes, batches, strict=True):
        mine = [r for r in rows if r["batch"] == batch and r["sweep"] == sweep]
        for level in dict.fromkeys(r["level"] for r in mine):
            line = sorted((r for r in mine if r["level"] == level), key=lambda r: r["scale"])
            ax.plot([r["scale"] for r in line], [r["stps"] for r in line], marker="o",
                    linestyle="-" if level == "all" else ":", label=f"{level} levels" if level == "all" else level)
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("STPS (tokens/s)")
        ax.set_title(f"batch {batch}")
        ax.legend(fontsize=8)
        if sweep == "bandwidth":
            line = sorted((r for r in mine if r["level"] == "all"), key=lambda r: r["scale"])
            twin = ax.twinx()
            twin.plot([r["scale"] for r in line], [r["pes_per_device"] for r in line], color="grey",
                      linestyle="--", marker="x")
            twin.set_ylabel("PEs per device (grey)")
    ctx.save_png(name, fig)


# --------------------------------------------------------------------------------------------------------
# 4. Pareto fronts (paper §5.4)
# --------------------------------------------------------------------------------------------------------

FRONTS = {"front_stps_utps": ["stps", "utps"], "front_stps_tokens_per_joule": ["stps", "tokens_per_joule"]}


@runner("pareto_fronts")
def pareto_fronts(ctx: StudyContext) -> None:
    """Every (hardware × flat schedule) point per model and batch, with its STPS–UTPS and STPS–tokens/J fronts."""
    phase = ctx.param("phase", "decode")
    hardware = [Hardware(chip, _ref(ctx, noc), m, m) for chip in ctx.param("chips") for noc in ctx.param("nocs")
                for m in ctx.param("stacked_layers")]
    groups = [(model, batch) for model in ctx.param("models") for batch in ctx.param("batches")]
    tasks = [PointTask(hw, _scenario(ctx, model, phase, batch)) for model, batch in groups for hw in hardware]
    results = iter(run_tasks(tasks, ctx.param("workers", 1)))
    rows = []
    for model, batch in groups:
        group = []
        for _ in hardware:
            result = next(results)
            group += [{"model": model, "batch": batch, **c.columns(), "violations": c.violations}
                      for c in result.candidates]
        feasible = [r for r in group if r["feasible"]]
        for column, objectives in FRONTS.items():
            values = np.array([[r[k] for k in objectives] for r in feasible], dtype=float).reshape(-1, 2)
            mask = nondominated_mask(values, objectives)
            for r in group:
                r[column] = False
            for r, flag in zip(feasible, mask, strict=True):
                r[column] = bool(flag)
        rows += group
    # Across batches the STPS-UTPS trade-off is real (at one batch STPS = padded batch × UTPS in decode).
    for model in ctx.param("models"):
        feasible = [r for r in rows if r["model"] == model and r["feasible"]]
        values = np.array([[r["stps"], r["utps"]] for r in feasible], dtype=float).reshape(-1, 2)
        for r, flag in zip(feasible, nondominated_mask(values, ["stps", "utps"]), strict=True):
            r["front_stps_utps_all_batches"] = bool(flag)
    for r in rows:
        r.setdefault("front_stps_utps_all_batches", False)
    ctx.write_csv("points.csv", rows)
    for model, batch in groups:
        _plot_front(ctx, [r for r in rows if r["model"] == model and r["batch"] == batch], model, batch)
    _front_html(ctx, rows, groups)
    summary_rows = []
    for model, batch in groups:
        group = [r for r in rows if r["model"] == model and r["batch"] == batch]
        front = sorted((r for r in group if r["front_stps_tokens_per_joule"]), key=lambda r: -r["stps"])
        for r in front:
            summary_rows.append({"model": model, "batch": batch, "chip": r["chip"], "noc": r["noc"],
                                 "m=n": r["stacked_layers"], "schedule": r["schedule"], "STPS": r["stps"],
                                 "tokens/J": r["tokens_per_joule"], "UTPS": r["utps"]})
    counts = []
    for model, batch in groups:
        group = [r for r in rows if r["model"] == model and r["batch"] == batch]
        counts.append(f"{model} b{batch}: {len(group)} points, {sum(1 for r in group if r['feasible'])} feasible")
    ctx.write_summary(
        f"{len(hardware)} hardware points ({len(ctx.param('chips'))} chips × {len(ctx.param('nocs'))} NoCs × m = n "
        f"in {ctx.param('stacked_layers')}) × every feasible flat schedule, {phase}. {'; '.join(counts)}.\n\n"
        "STPS–tokens/J front per model and batch:\n\n"
        + ctx.key_table("STPS–tokens/J front per model and batch", summary_rows))


def _plot_front(ctx: StudyContext, group: list[dict], model: str, batch: int) -> None:
    fig, axes = _subplots(2, 5.5, 4.5)
    feasible = [r for r in group if r["feasible"]]
    for ax, (column, (x_key, y_key)) in zip(axes, FRONTS.items(), strict=True):
        ax.scatter([r[y_key] for r in feasible], [r[x_key] for r in feasible], s=8, color="#99bbdd",
                   label="feasible points")
        front = sorted((r for r in feasible if r[column]), key=lambda r: r[y_key])
        ax.plot([r[y_key] for r in front], [r[x_key] for r in front], color="#cc3311", marker="o", markersize=4,
                label="non-dominated")
        ax.set_xlabel("UTPS (tokens/s per user)" if y_key == "utps" else "tokens per joule")
        ax.set_ylabel("STPS (tokens/s)")
        ax.legend(fontsize=8)
    fig.suptitle(f"{model}, batch {batch}: {len(feasible)} feasible of {len(group)} points")
    ctx.save_png(f"front_{model}_b{batch}.png", fig)


def _front_html(ctx: StudyContext, rows: list[dict], groups: list[tuple[str, int]]) -> None:
    import plotly.graph_objects as go

    fig = go.Figure()
    for model, batch in groups:
        feasible = [r for r in rows if r["model"] == model and r["batch"] == batch and r["feasible"]]
        text = [f"{r['chip']}/{r['noc']}/m{r['stacked_layers']} {r['schedule']}" for r in feasible]
        fig.add_trace(go.Scatter(x=[r["tokens_per_joule"] for r in feasible], y=[r["stps"] for r in feasible],
                                 mode="markers", name=f"{model} b{batch}", text=text, marker={"size": 5},
                                 hovertemplate="%{text}<br>tokens/J %{x:.3g}<br>STPS %{y:.4g}"))
        front = sorted((r for r in feasible if r["front_stps_tokens_per_joule"]), key=lambda r: r["tokens_per_joule"])
        fig.add_trace(go.Scatter(x=[r["tokens_per_joule"] for r in front], y=[r["stps"] for r in front],
                                 mode="lines+markers", name=f"front {model} b{batch}"))
    fig.update_layout(title="STPS vs tokens/J (every feasible point; lines: non-dominated)",
                      xaxis_title="tokens per joule", yaxis_title="STPS (tokens/s)", yaxis_type="log")
    ctx.save_html("fronts.html", fig)
