"""End-to-end evaluation of one design point (DESIGN.md §3): area → DRAM → workload → operator tuner →
collectives on the mapped network with tile-level overlap → pipeline → power/thermal/DVFS → report."""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import NamedTuple

from deepstack.errors import UserInputError
from deepstack.models import distributed, memo, thermal
from deepstack.models import dram as dram_model
from deepstack.models import power as power_model
from deepstack.models.collectives import CollectiveResult
from deepstack.models.device import DeviceSpec, resolve_device, timing_device
from deepstack.models.hashing import HashedTuple
from deepstack.models.operators import (
    CLOCKS_KEPT,
    OpTiming,
    overlap_time_s,
    prepare_gemms,
    time_op,
    tune_gemm_overlapped,
)
from deepstack.models.parallel import MEMORY_RESERVE, memory_footprint, representative_stages
from deepstack.models.workload import Choice, Gemm, LayerOps, build_workload, device_share
from deepstack.schema import ChipArchitecture, Network, Scenario, Schedule, SramOption

GiB = 1024**3
DVFS_BISECTION_STEPS = 40  # halvings of the frequency interval: far below any meaningful precision
MIN_CLOCK_SCALE = 1e-3  # a design that needs a clock 1000× below nominal to fit its TDP cannot run at all


@dataclass(frozen=True)
class DesignPoint:
    """Everything one evaluation needs. Without a network, devices only replicate data-parallel."""

    chip: ChipArchitecture
    scenario: Scenario
    schedule: Schedule = field(default_factory=Schedule)
    network: Network | None = None
    stacked_layers: int | None = None
    connected_layers: int | None = None
    sram: SramOption | None = None
    noc_bw_scale: float = 1.0

    @property
    def devices(self) -> int:
        return _network_devices(self.network) if self.network is not None else self.schedule.devices


@memo.cached(maxsize=256)
def _network_devices(network: Network) -> int:
    return network.devices


# --- rows of a forward pass: an operator, a collective, or a GEMM overlapped with its collective (eq. 5) ---

class _Timed:
    """A row's time at the nominal clock, and count × it, are kept at construction: a search sums them over
    every row of every stage several times per design point (DVFS re-times rows at other clocks). Rows are
    plain slotted records (built by the thousand per design point) and are never changed once made."""

    __slots__ = ()

    def __post_init__(self) -> None:
        self.nominal_s = nominal = self._time(1.0)
        self.weighted_s = self.count * nominal

    def time_at(self, scale: float) -> float:
        return self.nominal_s if scale == 1.0 else self._time(scale)


@dataclass(slots=True)
class OpRow(_Timed):
    layer: str
    count: int
    timing: OpTiming
    choice: str = ""
    nominal_s: float = field(init=False, repr=False, compare=False)
    weighted_s: float = field(init=False, repr=False, compare=False)

    def _time(self, scale: float) -> float:
        return self.timing.time_at(scale)


@dataclass(slots=True)
class CommRow(_Timed):
    layer: str
    count: int
    name: str
    result: CollectiveResult
    hidden_behind_s: float = 0.0  # compute it is prefetched behind (FSDP)
    nominal_s: float = field(init=False, repr=False, compare=False)
    weighted_s: float = field(init=False, repr=False, compare=False)

    def _time(self, scale: float) -> float:
        return comm_row_s(self.result, self.hidden_behind_s)


@dataclass(slots=True)
class OverlapRow(_Timed):
    layer: str
    count: int
    timing: OpTiming
    name: str
    result: CollectiveResult
    nominal_s: float = field(init=False, repr=False, compare=False)
    weighted_s: float = field(init=False, repr=False, compare=False)

    def _time(self, scale: float) -> float:
        return overlap_row_s(self.timing, self.result, scale)


class OpenOverlap(NamedTuple):
    """An :class:`OverlapRow` not made yet, with what DVFS and energy need of it (a search makes the rows of the
    phases it reports only)."""

    layer: str
    count: int
    timing: OpTiming
    name: str
    result: CollectiveResult

    def make(self) -> OverlapRow:
        return OverlapRow(*self)

    def time_at(self, scale: float) -> float:  # the made row's, at a clock other than nominal
        return overlap_row_s(self.timing, self.result, scale)


class OpenComm(NamedTuple):
    """A :class:`CommRow` not made yet (see :class:`OpenOverlap`)."""

    layer: str
    count: int
    name: str
    result: CollectiveResult
    hidden_behind_s: float = 0.0

    def make(self) -> CommRow:
        return CommRow(*self)

    def time_at(self, scale: float) -> float:
        return comm_row_s(self.result, self.hidden_behind_s)


Row = OpRow | CommRow | OverlapRow
OPEN_ROWS = (OpenOverlap, OpenComm)
# rows that run an operator, and rows that move bytes on the network (tuples: a union would be built per check)
COMPUTE_ROWS = (OpRow, OverlapRow, OpenOverlap)
NETWORK_ROWS = (CommRow, OverlapRow, OpenOverlap, OpenComm)


def comm_row_s(result: CollectiveResult, hidden_behind_s: float) -> float:
    """A collective's exposed time (the clock does not change it)."""
    if not hidden_behind_s:
        return result.time_s
    # prefetched behind the layer's compute: only the bandwidth time beyond it and the latency show
    return max(0.0, result.time_s - result.latency_s - hidden_behind_s) + result.latency_s


def overlap_row_s(timing: OpTiming, result: CollectiveResult, scale: float) -> float:
    """A GEMM and the collective it overlaps (eq. 5) at ``scale`` × the nominal clock."""
    return overlap_time_s(timing.waves, timing.time_at(scale), result.time_s - result.latency_s, result.latency_s)


class RowRun(tuple):
    """Rows that run alone, in order, with their weighted nominal times: a layer's stand-alone operators are
    one shared run, added to a stage's time without touching each row."""

    def __new__(cls, rows):
        run = super().__new__(cls, rows)
        run.weights = tuple(r.weighted_s for r in run)
        run._scaled, run._energies = {}, {}
        return run

    def scaled_weights(self, scale: float) -> tuple[float, ...]:
        """count × time of each row at ``scale`` × the nominal clock (kept per clock: DVFS settles on one
        clock per device, and the run is shared by every design point on it)."""
        found = self._scaled.get(scale)
        if found is None:
            if len(self._scaled) >= CLOCKS_KEPT:  # the power wall's bisection tries many clocks once each
                self._scaled.clear()
            found = self._scaled[scale] = tuple(r.count * r.time_at(scale) for r in self)
        return found

    def energies(self, coefficients: power_model.EnergyCoefficients) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(core, DRAM) energy of each row at the nominal clock (see :func:`row_energy_J`), kept per device."""
        found = self._energies.get(coefficients)
        if found is None:
            terms = [row_energy_J(r, coefficients) for r in self]
            found = self._energies[coefficients] = (tuple(c for c, _ in terms), tuple(d for _, d in terms))
        return found


def row_energy_J(r: OpRow | OverlapRow, coefficients: power_model.EnergyCoefficients) -> tuple[float, float]:
    """(core energy at the nominal clock, DRAM energy) of a row's operator, count times."""
    t = r.timing
    core = r.count * (t.matrix_flops * coefficients.matrix_J_per_flop
                      + t.vector_flops * coefficients.vector_J_per_flop
                      + t.sfu_ops * coefficients.sfu_J_per_op
                      + t.l0_B * coefficients.l0_J_per_B + t.l1_B * coefficients.l1_J_per_B
                      + t.l2_B * coefficients.l2_J_per_B)
    return core, r.count * t.dram_B * coefficients.dram_J_per_B


def weighted_sum(parts, total: float = 0.0) -> float:
    """Σ count × nominal time over rows and runs of rows, added one row at a time in row order (the very sum
    of the flat list of rows, to the last digit)."""
    for part in parts:
        total = sum(part.weights, total) if isinstance(part, RowRun) else total + part.weighted_s
    return total


@dataclass
class PhaseResult:
    """One step of the phase on the busiest device: prefill of the batch, or one decode step of every request.

    ``parts`` are one microbatch on the bottleneck pipeline stage: rows, runs of rows, and rows still to be made
    (:data:`OPEN_ROWS`: a search makes the rows of the phases it reports only). The step
    takes ``time_multiplier`` such stage-times (pipeline fill and steady state) and the device computes
    ``microbatches`` of them. ``nominal_stage_s`` (the stage time at the nominal clock) is summed from the rows
    when not given.
    """

    parts: list
    time_multiplier: int = 1
    microbatches: int = 1
    stage: int = 0
    nominal_stage_s: float | None = None

    def __post_init__(self) -> None:
        if self.nominal_stage_s is None:
            self.nominal_stage_s = weighted_sum(self.parts)

    @functools.cached_property
    def made(self) -> list:
        """The parts with every row made (runs of rows stay runs)."""
        return [part.make() if isinstance(part, OPEN_ROWS) else part for part in self.parts]

    @functools.cached_property
    def rows(self) -> list[Row]:
        """The rows in order."""
        out: list[Row] = []
        for part in self.made:
            if isinstance(part, RowRun):
                out.extend(part)
            else:
                out.append(part)
        return out

    def stage_time_at(self, scale: float) -> float:
        if scale == 1.0:
            return self.nominal_stage_s
        total = 0  # Σ count × time at this clock, added row by row in order
        for part in self.parts:
            if isinstance(part, RowRun):
                total = sum(part.scaled_weights(scale), total)
            else:
                total += part.count * part.time_at(scale)
        return total

    def time_at(self, scale: float) -> float:
        return self.time_multiplier * self.stage_time_at(scale)

    def energy_J(self, coefficients: power_model.EnergyCoefficients, scale: float,
                 noc_J_per_B: tuple[float, ...], devices: int) -> tuple[float, float, float]:
        """(core energy — ∝ V² ∝ f² —, DRAM energy, network energy) of one step on one device."""
        core = dram = noc = 0.0
        for part in self.parts:
            if isinstance(part, RowRun):
                core_J, dram_J = part.energies(coefficients)
                core, dram = sum(core_J, core), sum(dram_J, dram)
                continue
            if isinstance(part, COMPUTE_ROWS):
                core_J, dram_J = row_energy_J(part, coefficients)
                core, dram = core + core_J, dram + dram_J
            if isinstance(part, NETWORK_ROWS):
                for level, total_bytes in enumerate(part.result.level_bytes):
                    noc += part.count * total_bytes * noc_J_per_B[level] / devices
        m = self.microbatches
        return core * scale**2 * m, dram * m, noc * m


@memo.cached(maxsize=65536)
def _layer_comms(model, scenario: Scenario, schedule: Schedule, share_a, share_f, moe: bool) -> tuple:
    """The collectives of one dense or MoE layer (memoised: the same objects for every evaluation of it)."""
    return HashedTuple(distributed.attention_comms(model, scenario, schedule, share_a)
                 + distributed.ffn_comms(model, scenario, schedule, share_a, share_f, moe)
                 + distributed.fsdp_comms(model, scenario, schedule, moe))


@memo.cached(maxsize=65536)
def _segments(layer: LayerOps, dev: DeviceSpec, partnered: frozenset) -> tuple:
    """A layer's operator rows in order: runs of rows that run alone (tuples), separated by the GEMMs that
    overlap a collective (``partnered`` names them; their rows depend on the collective's time)."""
    out, run = [], []
    for op in layer.ops:
        op_rows = _rows_of(layer.kind, layer.layers * op.count, op, dev)
        if op.name in partnered and isinstance(op, Gemm):
            if run:
                out.append(RowRun(run))
                run = []
            out.append(op)
        else:
            run.extend(op_rows)
    if run:
        out.append(RowRun(run))
    return tuple(out)


@memo.cached(maxsize=65536)
def _rows_of(kind: str, count: int, op, dev: DeviceSpec) -> tuple[OpRow, ...]:
    """An operator's rows when it runs alone ``count`` times per pass in layers of ``kind`` (a choice: its fastest
    option's): the same rows for every layer that holds it (a device's stages and schedules repeat an operator in
    many layer variants; rows are never changed once made, so they are shared)."""
    label, timings = _op_timings(op, dev)
    return tuple(OpRow(kind, count, t, label) for t in timings)


@memo.cached(maxsize=65536)
def _op_timings(op, dev: DeviceSpec) -> tuple[str, tuple[OpTiming, ...]]:
    """An operator's timings when it runs alone (a choice: its fastest option's, and that option's label)."""
    if isinstance(op, Choice):
        label, timings = _choose(op, dev)
        return label, tuple(timings)
    return "", (time_op(op, dev),)


def _choose(op: Choice, dev: DeviceSpec) -> tuple[str, list[OpTiming]]:
    """The fastest implementable option of a choice (an option may not fit the device's L1)."""
    timed = []
    for label, option in op.options:
        try:
            timed.append((label, [time_op(o, dev) for o in option]))
        except ValueError:
            continue
    if not timed:
        raise UserInputError(f"{op.name}: no implementation fits this device (L1 {dev.l1_B / 1024:g} KiB)")
    return min(timed, key=lambda item: sum(t.time_s for t in item[1]))


@dataclass(frozen=True, eq=False)
class _LayerRoutes:
    """One layer and the collectives that move data in it: all that every device and network of one structure
    share."""

    layer: LayerOps
    comms: tuple  # the collectives that move data, in order
    routes: tuple  # their routes (distributed.route), in the same order
    partner: dict  # name of a GEMM → index in ``comms`` of the collective it overlaps (eq. 5)


@dataclass(frozen=True, eq=False)
class _LayerPlan:
    """One layer's rows on a device with its collectives left open (their results come from the network)."""

    kind: str
    count: int  # layers of this kind
    routes: tuple  # the collectives' routes, in order
    steps: tuple  # runs of stand-alone rows, and (GEMM, index of its collective, row count, collective's name)
    loose: tuple  # (index, name, whether FSDP prefetches it) of the collectives no GEMM overlaps, in order


@memo.cached(maxsize=65536)
def _stage_plan(scenario: Scenario, schedule: Schedule, stage: int, dev: DeviceSpec, layout,
                networked: bool) -> tuple[tuple[_LayerPlan, ...], tuple]:
    """The layers of a pipeline stage on a device and the stage's own collectives (PP sends), as open plans."""
    layers, stage_comms = _stage_routes(scenario, schedule, stage, layout, networked)
    return tuple(_layer_plan(plan, dev) for plan in layers), stage_comms


def _layer_plan(plan: _LayerRoutes, dev: DeviceSpec) -> _LayerPlan:
    kind, count = plan.layer.kind, plan.layer.layers
    steps, overlapped = [], set()
    for segment in _segments(plan.layer, dev, frozenset(plan.partner)):
        if isinstance(segment, RowRun):
            steps.append(segment)
            continue
        index = plan.partner[segment.name]
        steps.append((segment, index, count * segment.count, plan.comms[index].name))
        overlapped.add(index)
    # FSDP prefetches the next layer's weights behind this layer's compute
    loose = tuple((index, comm.name, comm.name == "fsdp_weight_gather") for index, comm in enumerate(plan.comms)
                  if index not in overlapped)
    return _LayerPlan(kind, count, plan.routes, tuple(steps), loose)


@memo.cached(maxsize=65536)
def _stage_routes(scenario: Scenario, schedule: Schedule, stage: int, layout,
                  networked: bool) -> tuple[tuple[_LayerRoutes, ...], tuple]:
    """The layers of a pipeline stage and the collectives that move data, with their routes (without the
    device's rows): which collectives move data, and on which groups, depends on the layout, not on the device,
    link speeds or latencies."""
    model = scenario.model
    share_a = device_share(model, scenario, schedule.attention, schedule.pp, stage)
    share_f = device_share(model, scenario, schedule.ffn, schedule.pp, stage)

    def moving(comms) -> tuple[tuple, tuple]:
        """The collectives that move data (one per name) and their routes."""
        out = {}
        for comm in comms if networked else ():
            route = distributed.comm_route(comm, layout, schedule)
            if route is not None:
                out[comm.name] = (comm, route)
        return tuple(c for c, _ in out.values()), tuple(r for _, r in out.values())

    layers = []
    for layer in build_workload(model, scenario, schedule.attention, schedule.ffn, schedule.pp, stage):
        comms, routes = moving(_layer_comms(model, scenario, schedule, share_a, share_f, layer.kind == "moe")
                               if layer.kind in ("dense", "moe") else ())
        partner = {}
        for index, comm in enumerate(comms):
            target = comm.after or comm.before
            if target and target not in partner:
                partner[target] = index
        layers.append(_LayerRoutes(layer, comms, routes, partner))
    return tuple(layers), moving(distributed.stage_comms(model, scenario, schedule, share_a))


def _stage_parts(point: DesignPoint, dev: DeviceSpec, scenario: Scenario, stage: int, layout,
                 topology) -> tuple[list, float]:
    """Time one pipeline stage's operators and collectives, overlapping each collective with the GEMM it
    feeds or is fed by when that GEMM is in the layer. Returns the stage's parts in order (see
    :class:`PhaseResult`) and its time at the nominal clock, summed row by row in that order."""
    layers, (stage_comms, stage_routes) = _stage_plan(scenario, point.schedule, stage, dev, layout,
                                                      topology is not None)
    parts: list = []
    total = 0.0
    for plan in layers:
        results = distributed.route_times(plan.routes, topology)
        kind, count = plan.kind, plan.count
        layer_s = 0  # the layer's compute rows, which FSDP's weight prefetch hides behind
        for step in plan.steps:
            if isinstance(step, RowRun):
                parts.append(step)
                total, layer_s = sum(step.weights, total), sum(step.weights, layer_s)
                continue
            gemm, index, n, name = step
            result = results[index]
            timing = tune_gemm_overlapped(gemm, dev, result.time_s - result.latency_s, result.latency_s)
            parts.append(OpenOverlap(kind, n, timing, name, result))
            weighted = n * overlap_row_s(timing, result, 1.0)
            total, layer_s = total + weighted, layer_s + weighted
        for index, name, prefetched in plan.loose:
            result = results[index]
            hidden = layer_s / max(count, 1) if prefetched else 0.0
            parts.append(OpenComm(kind, count, name, result, hidden))
            total += count * comm_row_s(result, hidden)
    for comm, result in zip(stage_comms, distributed.route_times(stage_routes, topology), strict=True):
        parts.append(OpenComm("stage", 1, comm.name, result))
        total += 1 * comm_row_s(result, 0.0)
    return parts, total


def _microbatch_options(scenario: Scenario, schedule: Schedule) -> list[int]:
    """Microbatch counts worth trying: 1 without PP; with PP, from filling the pipeline to 4× its depth."""
    if schedule.pp == 1:
        return [1]
    if schedule.microbatches:
        return [schedule.microbatches]
    per_replica = math.ceil(scenario.batch / (schedule.attention.dp * schedule.attention.ep))
    options = [m for m in (schedule.pp, 2 * schedule.pp, 4 * schedule.pp) if m <= per_replica]
    return options or [per_replica]


_PHASES: OrderedDict = OrderedDict()  # memo of run_phase: evaluations differing only in DVFS/reporting reuse it
PHASE_MEMO_SIZE = 8192


def _point_key(point: DesignPoint, scenario: Scenario) -> tuple:
    s = point.schedule
    return (point.chip, point.network, point.stacked_layers, point.connected_layers, point.sram,
            point.noc_bw_scale, scenario, s.attention, s.ffn, s.pp, s.fsdp, s.microbatches,
            tuple(sorted(s.collectives.items())))


def run_phase(point: DesignPoint, dev: DeviceSpec, scenario: Scenario) -> PhaseResult:
    """Time one step of ``scenario.phase`` on the busiest device, choosing the PP microbatch count (memoised:
    a phase is a pure function of the design point and the scenario)."""
    key = _point_key(point, scenario)
    if key in _PHASES:
        _PHASES.move_to_end(key)
        return _PHASES[key]
    result = _run_phase(point, dev, scenario)
    _PHASES[key] = result
    if len(_PHASES) > PHASE_MEMO_SIZE:
        _PHASES.popitem(last=False)
    return result


def clear_phase_memo() -> None:
    _PHASES.clear()
    _TUNED.clear()


def _gemms(ops):
    """The GEMMs among operators (including every option of a choice), to tune them in one batch."""
    for op in ops:
        if isinstance(op, Gemm):
            yield op
        elif isinstance(op, Choice):
            for _, option in op.options:
                yield from (o for o in option if isinstance(o, Gemm))


@memo.cached(maxsize=4096)
def _microbatch_scenario(scenario: Scenario, microbatches: int) -> Scenario:
    """The scenario of one microbatch (one shared object per input, so memo lookups hit by identity)."""
    if microbatches == 1:
        return scenario
    return scenario.model_copy(update={"batch": math.ceil(scenario.batch / microbatches)})


@memo.cached(maxsize=4096)
def _phase_gemms(micros: tuple[Scenario, ...], attention, ffn, pp: int, stages: tuple[int, ...]) -> HashedTuple:
    """The distinct GEMMs of a phase's workloads (the same on every device)."""
    layers = dict.fromkeys(layer for micro in micros for stage in stages
                           for layer in build_workload(micro.model, micro, attention, ffn, pp, stage))
    return HashedTuple(dict.fromkeys(g for layer in layers for g in _layer_gemms(layer)))


@memo.cached(maxsize=65536)
def _layer_gemms(layer: LayerOps) -> tuple:
    return tuple(dict.fromkeys(_gemms(layer.ops)))


_TUNED: set = set()  # (a phase's GEMMs, device) pairs already tuned
TUNED_KEPT = 65536  # pairs remembered (forgetting one only costs a check of its GEMMs again)


def _tune(phases: dict, dev: DeviceSpec) -> None:
    """Tune the GEMMs of the phases (``_phase_gemms`` tuples) not yet tuned on ``dev``, in one batch."""
    todo = [gemms for gemms in phases if (gemms, dev) not in _TUNED]
    if not todo:
        return
    prepare_gemms(dict.fromkeys(g for gemms in todo for g in gemms), dev)
    if len(_TUNED) + len(todo) > TUNED_KEPT:
        _TUNED.clear()
    _TUNED.update((gemms, dev) for gemms in todo)


@memo.cached(maxsize=16384)
def _phase_shape(scenario: Scenario, s: Schedule) -> tuple[tuple[int, ...], tuple[int, ...], tuple[Scenario, ...]]:
    """The pipeline stages a phase times, its microbatch options and the scenario of one microbatch of each."""
    stages = tuple(representative_stages(scenario.model.layers, s.pp, scenario.model.dense_layers))
    options = tuple(_microbatch_options(scenario, s))
    return stages, options, tuple(_microbatch_scenario(scenario, m) for m in options)


def prepare_phases(points) -> None:
    """Tune every GEMM of the phases these design points time (a search's schedules of one hardware point) in
    one vectorised batch per device: a batch costs about what five GEMMs tuned apart do, and each schedule
    alone brings only a few new ones."""
    batches: dict[DeviceSpec, dict] = {}
    for point in points:
        dev = timing_device(resolve_device(point.chip, point.stacked_layers, point.connected_layers, point.network,
                                           point.sram, point.noc_bw_scale))
        s = point.schedule
        stages, _, micros = _phase_shape(point.scenario, s)
        batches.setdefault(dev, {})[_phase_gemms(micros, s.attention, s.ffn, s.pp, stages)] = None
    for dev, phases in batches.items():
        _tune(phases, dev)


def _run_phase(point: DesignPoint, dev: DeviceSpec, scenario: Scenario) -> PhaseResult:
    s = point.schedule
    topology = distributed.topology_of(point.network) if point.network is not None and point.devices > 1 else None
    layout = distributed.layouts(scenario.model, scenario, s) if topology is not None else None
    stages, options, micros = _phase_shape(scenario, s)
    _tune({_phase_gemms(micros, s.attention, s.ffn, s.pp, stages): None}, dev)
    best: PhaseResult | None = None
    for m, micro in zip(options, micros, strict=True):
        multiplier = max(m, s.pp) if scenario.phase == "decode" else m + s.pp - 1
        candidate: PhaseResult | None = None  # the bottleneck stage
        # the last option's bottleneck stage first: one stage already as slow as the best option rules this
        # option out (its bottleneck can only be slower), so its other stages need no timing
        order = sorted(stages, key=lambda stage: stage != best.stage) if best is not None else stages
        for stage in order:
            parts, nominal_s = _stage_parts(point, dev, micro, stage, layout, topology)
            phase = PhaseResult(parts, multiplier, m, stage, nominal_s)
            if candidate is None or phase.nominal_stage_s > candidate.nominal_stage_s or (
                    phase.nominal_stage_s == candidate.nominal_stage_s and stage < candidate.stage):
                candidate = phase
            if best is not None and candidate.time_at(1.0) >= best.time_at(1.0):
                break
        if best is None or candidate.time_at(1.0) < best.time_at(1.0):
            best = candidate
    return best


@dataclass
class Report:
    """The evaluation report of DESIGN.md §6 (``as_dict`` gives the JSON form)."""

    feasible: bool
    violations: list[str]
    metrics: dict
    hardware: dict
    schedule: dict
    scenario: dict
    breakdown: dict = field(default_factory=dict)
    search: dict | None = None

    def as_dict(self) -> dict:
        out = {"feasible": self.feasible, "violations": self.violations, "metrics": self.metrics,
               "hardware": self.hardware, "schedule": self.schedule, "scenario": self.scenario,
               "breakdown": self.breakdown}
        if self.search is not None:
            out["search"] = self.search
        return out


@memo.cached(maxsize=4096)
def device_effective_bw_Bps(dev: DeviceSpec) -> float:
    """Sustained DRAM bandwidth of the device: full-row transactions, half of every PE's L1 in flight (double
    buffering) against the access latency (Little), and the PEs' L1 fill bandwidth (eq. 3)."""
    in_flight = dev.pes * dev.l1_B / 2
    return dram_model.effective_bw_Bps(dev.dram, dev.dram.row_B, in_flight, dev.l1_bw_Bps)


def _noc_J_per_B(point: DesignPoint) -> tuple[float, ...]:
    if point.network is None:
        return ()
    return tuple(level.energy_pJ_per_bit * 8e-12 for level in point.network.levels)


def _clock_scale(phase: PhaseResult, dev: DeviceSpec, coefficients, noc_J_per_B, devices: int):
    """DVFS of §4.1.2: thermal frequency first, then the power wall. Returns (scale, time_s, power_w)."""
    static = thermal.static_power_w(dev.tdp_W)
    layers = dev.dram.stacked_layers if dev.is_3d else 0

    def power(scale: float) -> tuple[float, float]:
        t = phase.time_at(scale)
        return t, static + sum(phase.energy_J(coefficients, scale, noc_J_per_B, devices)) / t

    scale = thermal.thermal_frequency_scale(dev.tdp_W, layers)
    t, p = power(scale)
    if p > dev.tdp_W:  # power wall: the largest clock at which the device stays within its TDP
        low, high = 0.0, scale
        for _ in range(DVFS_BISECTION_STEPS):
            mid = (low + high) / 2
            if power(mid)[1] > dev.tdp_W:
                high = mid
            else:
                low = mid
        scale = low
        if scale < MIN_CLOCK_SCALE:
            raise UserInputError(f"tdp_W: the device cannot run within {dev.tdp_W:g} W (it would need a clock below "
                                 f"{MIN_CLOCK_SCALE:.1%} of nominal)")
        t, p = power(scale)
    return scale, t, p


def check_schedule(point: DesignPoint) -> None:
    """Reject schedules the machine cannot run (user errors, one line each)."""
    s = point.schedule
    if point.network is not None and s.devices != point.network.devices:
        raise UserInputError(
            f"--parallel: the schedule uses {s.devices} devices but {point.network.name} has {point.network.devices}"
        )
    if point.network is None and (s.devices != s.attention.dp or s.ffn.devices != s.ffn.dp or s.pp > 1):
        raise UserInputError("--parallel: TP, SP, CP, EP and PP need a network: add --noc or use --system")


def evaluate(point: DesignPoint, with_ttft: bool = True, breakdown: bool = True) -> Report:
    """Evaluate one design point. ``with_ttft`` also times the prefill of a decode scenario (its TTFT);
    ``breakdown=False`` leaves out the per-operator breakdown (searches rank on the metrics alone)."""
    check_schedule(point)
    scenario = point.scenario
    dev = resolve_device(point.chip, point.stacked_layers, point.connected_layers, point.network, point.sram,
                         point.noc_bw_scale)
    timed_on = timing_device(dev)
    coefficients = power_model.coefficients(timed_on)
    devices = point.devices
    noc_J_per_B = _noc_J_per_B(point)
    main = run_phase(point, timed_on, scenario)
    scale, step_s, power_w = _clock_scale(main, dev, coefficients, noc_J_per_B, devices)
    if scenario.phase == "decode" and with_ttft:
        ttft_s = run_phase(point, timed_on, scenario.model_copy(update={"phase": "prefill"})).time_at(scale)
    elif scenario.phase == "decode":
        ttft_s = math.nan
    else:
        ttft_s = step_s
    s = point.schedule
    replicas = s.attention.dp * s.attention.ep
    requests = math.ceil(scenario.batch / replicas) * replicas  # padded batch the system actually serves
    if scenario.phase == "decode":
        stps, utps = requests / step_s, 1.0 / step_s
    else:
        stps, utps = requests * scenario.input_len / step_s, scenario.input_len / step_s
    system_power_w = power_w * devices
    layers = dev.dram.stacked_layers if dev.is_3d else 0
    temperature = thermal.temperature_c(dev.ambient_c, layers, power_w, dev.device_area_mm2)
    memory = memory_footprint(scenario, s)
    usable = dev.dram.capacity_B * (1 - MEMORY_RESERVE)
    violations = []
    if memory.total_B > usable:
        violations.append(
            f"memory: needs {memory.total_B / GiB:.2f} GiB per device but {usable / GiB:.2f} GiB is usable "
            f"({dev.dram.capacity_B / GiB:.2f} GiB less the {MEMORY_RESERVE:.0%} reserve)"
        )
    if temperature > dev.target_c + 1e-9:
        violations.append(f"thermal: {temperature:.1f} °C exceeds the {dev.target_c:g} °C limit")
    metrics = {
        "ttft_s": ttft_s,
        "utps": utps,
        "stps": stps,
        "tokens_per_joule": stps / system_power_w,
        "power_w": system_power_w,
        "temperature_c": temperature,
        "frequency_ghz": dev.clock_Hz * scale / 1e9,
        "area_mm2": dev.device_area_mm2 * devices,
        "memory_gib": memory.total_B / GiB,
    }
    return Report(
        feasible=not violations, violations=violations, metrics=metrics,
        hardware=_hardware(point, devices), schedule={**_schedule(s, devices), "microbatches": main.microbatches,
                                                           "collectives": dict(s.collectives)},
        scenario=_scenario(scenario),
        breakdown=_breakdown(main, dev, scale, step_s, power_w, memory, coefficients, noc_J_per_B, devices, point)
        if breakdown else {},
    )


def _hardware(point: DesignPoint, devices: int) -> dict:
    entries = _hardware_entries(point.chip, point.network, point.stacked_layers, point.connected_layers, point.sram,
                                point.noc_bw_scale, devices)
    out = dict(entries)  # a fresh dict per report: the memo keeps items, which no caller can change
    out["area_per_device_mm2"] = dict(out["area_per_device_mm2"])
    return out


@memo.cached(maxsize=4096)
def _hardware_entries(chip: ChipArchitecture, network: Network | None, stacked_layers: int | None,
                      connected_layers: int | None, sram: SramOption | None, noc_bw_scale: float,
                      devices: int) -> tuple:
    """The report's hardware entries as (key, value) pairs (one hardware point is reported with every schedule
    of a search)."""
    dev = resolve_device(chip, stacked_layers, connected_layers, network, sram, noc_bw_scale)
    return tuple({
        "chip": chip.name,
        "noc": network.name if network is not None else None,
        "devices": devices,
        "pes_per_device": dev.pes,
        "stacked_layers": dev.dram.stacked_layers,
        "connected_layers": dev.dram.connected_layers,
        "dram_technology": dev.dram.technology,
        "dram_bw_TBps": dev.dram.peak_bw_Bps / 1e12,
        "dram_effective_bw_TBps": device_effective_bw_Bps(dev) / 1e12,
        "dram_capacity_GiB": dev.dram.capacity_B / GiB,
        "fp16_tflops_per_device": dev.peak_matrix_flops / 1e12,
        "l1_bw_TBps_per_device": dev.l1_bw_Bps / 1e12,
        "l2_bw_TBps_per_device": dev.l2_bw_Bps / 1e12,
        "nominal_clock_ghz": dev.clock_Hz / 1e9,
        "tdp_w_per_device": dev.tdp_W,
        "area_per_device_mm2": tuple(dev.area.as_dict().items()),
    }.items())


def _schedule(s: Schedule, devices: int) -> dict:
    """The report's schedule entries but the microbatch count and the collectives (a fresh dict every call:
    a report's caller may change it)."""
    return {"text": str(s), "devices": devices, "attention": s.attention.model_dump(), "ffn": s.ffn.model_dump(),
            "pp": s.pp, "fsdp": s.fsdp}


def _scenario(sc: Scenario) -> dict:
    return {"model": sc.model.name, "phase": sc.phase, "batch": sc.batch, "input_len": sc.input_len,
            "output_len": sc.output_len, "precision": str(sc.precision)}


def _row_entry(r: Row, dev: DeviceSpec, scale: float, time_s: float, multiplier: int) -> dict:
    each = r.time_at(scale)
    op_time = r.count * each * multiplier
    entry = {"layer": r.layer, "count": r.count, "time_s": op_time, "share": op_time / time_s if time_s else 0.0}
    if isinstance(r, CommRow):
        busiest = max(r.result.level_utilization, key=lambda load: load.max_busy_fraction, default=None)
        entry.update(name=r.name, bound="network" + (f" L{busiest.level + 1}" if busiest else ""),
                     compute_utilization=0.0, dram_utilization=0.0,
                     config=f"{r.result.op} {r.result.algorithm}, {r.result.num_groups}×{r.result.group_size} ranks")
        return entry
    t = r.timing
    alone = t.time_at(scale)
    entry.update(name=t.name, bound=t.bound,
                 compute_utilization=t.matrix_flops / (dev.peak_matrix_flops * scale * each) if each else 0.0,
                 dram_utilization=t.dram_B / (dev.dram.peak_bw_Bps * each) if each else 0.0,
                 config=t.config)
    if isinstance(r, OverlapRow):
        entry["config"] += (f"; overlapped with {r.name} ({r.result.algorithm}), "
                            f"{(each - alone) * 1e6:.1f} µs exposed")
        if each > alone * 1.05:
            entry["bound"] = "network"
    elif r.choice:
        entry["config"] += f" ({r.choice})"
    return entry


def _breakdown(phase: PhaseResult, dev: DeviceSpec, scale: float, time_s: float, power_w: float, memory,
               coefficients, noc_J_per_B, devices: int, point: DesignPoint) -> dict:
    m = phase.microbatches
    flops = dram_B = l2_B = 0.0
    level_bytes: dict[int, float] = {}
    for r in phase.rows:
        if isinstance(r, COMPUTE_ROWS):
            flops += r.count * r.timing.matrix_flops * m
            dram_B += r.count * r.timing.dram_B * m
            l2_B += r.count * r.timing.l2_B * m
        if isinstance(r, NETWORK_ROWS):
            for level, total_bytes in enumerate(r.result.level_bytes):
                level_bytes[level] = level_bytes.get(level, 0.0) + r.count * total_bytes * m
    utilization = {
        "compute": flops / (dev.peak_matrix_flops * scale * time_s),
        "l2": l2_B / (dev.l2_bw_Bps * scale * time_s),
        "dram": dram_B / (dev.dram.peak_bw_Bps * time_s),
    }
    if point.network is not None:
        topology = distributed.topology_of(point.network)
        for index, level in enumerate(point.network.levels):
            capacity = topology.level_links[index] * level.link_bw_Bps * time_s
            utilization[f"noc_L{index + 1}"] = level_bytes.get(index, 0.0) / capacity if capacity else 0.0
    core, dram, noc = phase.energy_J(coefficients, scale, noc_J_per_B, devices)
    return {
        "phase_time_s": time_s,
        "stage_time_s": phase.stage_time_at(scale),
        "bottleneck_stage": phase.stage,
        "clock_scale": scale,
        "utilization": utilization,
        "energy_J_per_device": {"core": core, "dram": dram, "network": noc,
                                "static": thermal.static_power_w(dev.tdp_W) * time_s},
        "power_w_per_device": power_w,
        "memory_GiB_per_device": {"weights": memory.weights_B / GiB, "kv_cache": memory.kv_cache_B / GiB,
                                  "activations": memory.activations_B / GiB},
        "operators": [_row_entry(r, dev, scale, time_s, phase.time_multiplier) for r in phase.rows],
    }
