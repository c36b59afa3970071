"""The study runners' per-point schedule search: a hardware point × a scenario, every schedule of the asked
families (the composer's flat strategies, TP/PP/DP-only ones, bounded per-module schedules; tuned or fixed
collectives) evaluated in full by the shared engine (:func:`deepstack.search.schedules.evaluate_schedules`) and
kept as a light :class:`Candidate` each. Infeasible points (area, memory, thermal) are recorded with their status
and never picked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from deepstack.errors import UserInputError
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate
from deepstack.models.parallel.memory import feasible_strategies, fits
from deepstack.models.parallel.strategies import PRUNING_RULES, Strategy, divisors
from deepstack.models.reporting import GiB
from deepstack.models.results import Report
from deepstack.schema import Scenario, Schedule
from deepstack.search import executor
from deepstack.search.schedules import evaluate_schedules, point_schedules
from deepstack.search.studies.common import point

FIXED_COLLECTIVES = {"all_reduce": "ring", "all_gather": "ring", "reduce_scatter": "ring", "all_to_all": "direct"}
"""The ASTRA-sim-like baseline's collectives: one user-chosen algorithm per collective, never searched (paper
Table 1 note 3; ASTRA-sim's example system configs set ``all-reduce-implementation: ring`` and a direct
all-to-all)."""

ATTENTION_RULES = ("replicas_exceed_batch", "pp_exceeds_microbatches", "pp_exceeds_layers", "tp_heads",
                   "sequence_overpartitioned")
"""Composer rules (models/parallel/strategies.py) an attention layout of a per-module schedule must pass."""
FFN_RULES = ("replicas_exceed_batch", "tp_intermediate", "ep_experts")
"""Composer rules the FFN/MoE layout of a per-module schedule must pass."""
_RULES = dict(PRUNING_RULES)


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

    ``serial`` holds the metrics without compute–communication overlap (see :func:`serialised_metrics`) when
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


def flat_schedules(sc: Scenario, devices: int, capacity_B: float, restricted: bool = False) -> list[Schedule]:
    """The composer's feasible flat strategies (rules + memory), optionally only TP/PP/DP/FSDP ones."""
    kept, _ = feasible_strategies(sc, devices, capacity_B)
    if restricted:
        kept = tuple(s for s in kept if s.ep == s.sp == s.cp == 1)
    return [s.to_schedule() for s in kept]


def _attention_layouts(per_stage: int, pp: int, with_cp: bool) -> list[Strategy]:
    """Attention layouts of one pipeline stage: TP·DP, or TP·CP·DP with ``with_cp``."""
    layouts = []
    for tp in divisors(per_stage):
        for cp in divisors(per_stage // tp) if with_cp else (1,):
            layouts.append(Strategy(tp=tp, cp=cp, dp=per_stage // (tp * cp), pp=pp))
    return layouts


def per_module_schedules(sc: Scenario, devices: int, capacity_B: float, max_pp: int,
                         attention_cp: bool = False) -> list[Schedule]:
    """Per-module schedules: attention TP·DP (TP·CP·DP with ``attention_cp``) × FFN/MoE TP·EP (TP·DP for a dense
    FFN) on the same devices per pipeline stage, for PP ≤ ``max_pp``, FSDP off, collectives auto.

    Each module's layout must pass the composer's rules that concern it (:data:`ATTENTION_RULES`,
    :data:`FFN_RULES`, checked as flat strategies with the same PP), and the schedule must fit in memory. Pairs
    with the same TP in both modules split tokens the same way as the flat TP·EP (or TP·DP) strategy and are
    left to the flat search (with attention CP only for a dense FFN: a flat CP strategy does not shard experts).
    """
    second = "ep" if sc.model.is_moe else "dp"
    out = []
    for pp in divisors(devices):
        if pp > max_pp:
            break
        per_stage = devices // pp
        for attention in _attention_layouts(per_stage, pp, attention_cp):
            if any(_RULES[name](sc, attention) for name in ATTENTION_RULES):
                continue
            flat_like = attention.cp == 1 or second == "dp"  # CP splits a dense FFN's tokens like DP
            for tp_f in divisors(per_stage):
                if tp_f == attention.tp and flat_like:
                    continue
                ffn = Strategy(tp=tp_f, pp=pp, **{second: per_stage // tp_f})
                if any(_RULES[name](sc, ffn) for name in FFN_RULES):
                    continue
                schedule = Schedule(attention=attention.module(), ffn=ffn.module(), pp=pp)
                if fits(sc, schedule, capacity_B):
                    out.append(schedule)
    return out


def serialised_metrics(design: DesignPoint, report: Report) -> dict:
    """The metrics of ``design`` with compute–communication overlap switched off (``evaluate(overlap=False)``:
    each GEMM alone at its best stand-alone tiling, then its collective in full; FSDP gathers charged in full),
    given ``report``, its overlapped evaluation with the breakdown.

    STPS and UTPS are the overlapped ones scaled by the ratio of the two step times (the ablation's steps 1-4
    rank on them); power, tokens/J, temperature and feasibility are the serialised evaluation's.
    """
    serial = evaluate(design, with_ttft=False, breakdown=True, overlap=False)
    step_s = serial.breakdown.phase_time_s
    speed = report.breakdown.phase_time_s / step_s
    stps = report.metrics.stps * speed
    power_w = serial.metrics.power_w
    return {"stps": stps, "utps": report.metrics.utps * speed, "power_w": power_w,
            "tokens_per_joule": stps / power_w, "temperature_c": serial.metrics.temperature_c, "step_s": step_s,
            "feasible": serial.feasible}


@dataclass(frozen=True)
class PointTask:
    """What :func:`search_point` evaluates: a hardware point, a scenario and which schedules.

    ``scopes`` picks schedule families: ``restricted`` (flat with EP = SP = CP = 1), ``flat`` (the best-schedule
    search's: every flat strategy, and for a MoE model each in vLLM's form,
    :func:`~deepstack.search.schedules.point_schedules`, the folded ones counted as per-module), ``per_module``
    (:func:`per_module_schedules`; ``attention_cp`` adds CP to its attention layouts).
    ``collectives`` lists "fixed" and/or "auto".
    """

    hardware: Hardware
    scenario: Scenario
    scopes: tuple[str, ...] = ("flat",)
    collectives: tuple[str, ...] = ("auto",)
    serialise: bool = False
    max_pp: int = 1
    attention_cp: bool = False


def search_point(task: PointTask) -> PointResult:
    """Evaluate every schedule of ``task`` on its hardware point (a pure function: safe in a process pool)."""
    hw, sc = task.hardware, task.scenario
    result = PointResult(hw)
    base = hw.design(sc)
    try:
        dev = base.device
    except UserInputError as exc:  # e.g. no PE fits the area budget at this stacking and NoC
        result.status = f"area: {exc}"
        return result
    result.pes_per_device = dev.pes
    devices, capacity = base.devices, dev.dram.capacity_B
    schedules: list[tuple[Schedule, bool, bool]] = []  # (schedule, per_module, restricted)
    if "flat" in task.scopes:  # the best-schedule search's set: flat strategies, and in vLLM's form (per-module)
        for c in point_schedules(sc, feasible_strategies(sc, devices, capacity)[0], capacity):
            s = c.schedule
            schedules.append((s, c.folded, not c.folded and s.attention.ep == s.attention.sp == s.attention.cp == 1))
    elif "restricted" in task.scopes:
        schedules += [(s, False, True) for s in flat_schedules(sc, devices, capacity, restricted=True)]
    if "per_module" in task.scopes:
        schedules += [(s, True, s.ffn.ep == 1 and s.attention.cp == 1)
                      for s in per_module_schedules(sc, devices, capacity, task.max_pp, task.attention_cp)]
    if not schedules:
        result.status = f"memory: no schedule of {devices} devices fits {capacity / GiB:.1f} GiB per device"
        return result
    variants = [(schedule.model_copy(update={"collectives": dict(FIXED_COLLECTIVES) if choice == "fixed" else {}}),
                 choice, per_module, restricted)
                for schedule, per_module, restricted in schedules for choice in task.collectives]
    # serialised_metrics reads the step time in the breakdown
    evaluated = evaluate_schedules(base, [v[0] for v in variants], breakdown=task.serialise)
    for (sched, choice, per_module, restricted), (design, report) in zip(variants, evaluated, strict=True):
        result.candidates.append(Candidate(
            hardware=hw, schedule=str(sched), collectives=choice, per_module=per_module,
            restricted=restricted, feasible=report.feasible, violations="; ".join(report.violations),
            metrics=dict(report.metrics), pes_per_device=report.hardware["pes_per_device"],
            noc_area_mm2=report.hardware["area_per_device_mm2"]["noc_mm2"],
            serial=serialised_metrics(design, report) if task.serialise else None))
    if not any(c.feasible for c in result.candidates):  # every schedule fits memory, so a limit was broken
        result.status = (f"no feasible schedule of {len(result.candidates)} evaluated, e.g. "
                         f"{result.candidates[0].violations}")
    return result


def run_tasks(tasks: list[PointTask], workers: int = 1, done=None) -> list[PointResult]:
    """:func:`search_point` over ``tasks``, in order; on forked processes when ``workers`` > 1; ``done()`` after
    each (StudyContext.planned)."""
    return executor.map_in_order(search_point, tasks, workers, done)
