"""One step of a phase on the busiest device: the pipeline's microbatch count, its bottleneck stage and the
PP bubble (paper §4.2), the GEMM batch tuning behind it, and the step without compute–communication overlap.

A decode step takes max(m, pp) stage-times for m microbatches over pp stages; a prefill takes m + pp − 1.
Prefill is chunked (:func:`~deepstack.models.parallel.chunks.prefill_chunks`): a microbatch is at most one
chunk, a step of the token budget, so a prefill runs at least as many microbatches as it has chunks, one after
another through the pipeline; without PP, the chunks' times add up.
"""

from __future__ import annotations

import math

from deepstack.models import assumptions, memo
from deepstack.models.compute.dispatch import time_op
from deepstack.models.compute.gemm_tuner import prepare_gemms
from deepstack.models.compute.operators import Choice, Gemm
from deepstack.models.compute.workload import LayerOps
from deepstack.models.design import DesignPoint
from deepstack.models.hardware.device import DeviceSpec, timing_device
from deepstack.models.hashing import HashedTuple
from deepstack.models.parallel import communication
from deepstack.models.parallel.chunks import PrefillChunks, prefill_chunks
from deepstack.models.parallel.memory import representative_stages
from deepstack.models.parallel.prefill_budget import budgeted
from deepstack.models.pipeline.rows import CommRow, OpRow, OverlapRow, PhaseResult
from deepstack.models.pipeline.stages import chunk_workload, stage_parts
from deepstack.schema import Scenario, Schedule

PHASE_MEMO_SIZE = 8192  # phases kept (least recently used dropped): evaluations differing only in DVFS/reporting
TUNED_KEPT = 65536  # (phase GEMMs, device) pairs remembered (forgetting one only costs a check of its GEMMs again)

_PHASES = memo.Table("pipeline phases", PHASE_MEMO_SIZE, lru=True)  # (design point, scenario) → PhaseResult
_TUNED = memo.Table("tuned phase GEMMs", TUNED_KEPT)  # (a phase's GEMMs, device) → None once tuned


def run_phase(point: DesignPoint, dev: DeviceSpec, scenario: Scenario) -> PhaseResult:
    """Time one step of ``scenario.phase`` on the busiest device, choosing the PP microbatch count (memoised:
    a phase is a pure function of the design point and the scenario).

    The memo key is the design point itself (a frozen dataclass: its hash and equality cover every field,
    including fields a subclass adds) and the scenario timed, which may be a prefill of a decode point. A
    scenario without a prefill budget is timed with the one the schedule gets on this device's DRAM
    (:func:`~deepstack.models.parallel.prefill_budget.prefill_budget`).
    """
    scenario = budgeted(scenario, point.schedule, dev)
    key = HashedTuple((point, scenario))  # hashed once for the table's lookups
    found = _PHASES.lookup(key)
    if found is None:
        found = _run_phase(point, dev, scenario)
        _PHASES.put(key, found)
    return found


def _run_phase(point: DesignPoint, dev: DeviceSpec, scenario: Scenario) -> PhaseResult:
    s = point.schedule
    topology = communication.topology_of(point.network) if point.network is not None and point.devices > 1 else None
    layout = communication.layouts(scenario.model, scenario, s) if topology is not None else None
    stages, options, micros, context = _phase_shape(scenario, s)
    _tune({_phase_gemms(micros, s.attention, s.ffn, s.pp, stages, context, s.moe_mode): None}, dev)
    best: PhaseResult | None = None
    for m, micro in zip(options, micros, strict=True):
        multiplier = max(m, s.pp) if scenario.phase == "decode" else m + s.pp - 1
        candidate: PhaseResult | None = None  # the bottleneck stage
        # the last option's bottleneck stage first: one stage already as slow as the best option rules this
        # option out (its bottleneck can only be slower), so its other stages need no timing
        order = sorted(stages, key=lambda stage: stage != best.stage) if best is not None else stages
        for stage in order:
            parts, nominal_s = stage_parts(s, dev, micro, stage, layout, topology, context)
            phase = PhaseResult(parts, multiplier, m, stage, nominal_s)
            if candidate is None or phase.nominal_stage_s > candidate.nominal_stage_s or (
                    phase.nominal_stage_s == candidate.nominal_stage_s and stage < candidate.stage):
                candidate = phase
            if best is not None and candidate.time_at(1.0) >= best.time_at(1.0):
                break
        if best is None or candidate.time_at(1.0) < best.time_at(1.0):
            best = candidate
    return best


def serialised(phase: PhaseResult, schedule: Schedule, dev: DeviceSpec, scenario: Scenario) -> PhaseResult:
    """``phase`` without compute–communication overlap: every overlapped row becomes its GEMM alone (re-tuned
    for its fastest stand-alone tiling) followed by the collective's full time, and every FSDP gather that was
    prefetched behind the layer is charged in full. The microbatch count and bottleneck stage stay the
    overlapped phase's."""
    _, options, micros, context = _phase_shape(budgeted(scenario, schedule, dev), schedule)
    micro = micros[options.index(phase.microbatches)]
    gemms = {(layer.kind, op.name): op
             for layer in chunk_workload(micro, schedule.attention, schedule.ffn, schedule.pp, phase.stage, context,
                                         schedule.moe_mode)
             for op in layer.ops if isinstance(op, Gemm)}
    rows: list = []
    for r in phase.rows:
        if isinstance(r, OverlapRow):
            gemm = gemms.get((r.layer, r.timing.name))
            alone = time_op(gemm, dev) if gemm is not None else r.timing
            rows += [OpRow(r.layer, r.count, alone), CommRow(r.layer, r.count, r.name, r.result)]
        elif isinstance(r, CommRow) and r.hidden_behind_s:
            rows.append(CommRow(r.layer, r.count, r.name, r.result))
        else:
            rows.append(r)
    return PhaseResult(rows, phase.time_multiplier, phase.microbatches, phase.stage)


def _chunks(scenario: Scenario, schedule: Schedule) -> PrefillChunks | None:
    """A prefill's chunks on the schedule's data replicas (the engines of attention); None in decode."""
    if scenario.phase != "prefill":
        return None
    return prefill_chunks(scenario, schedule.attention.replicas)


def microbatch_options(scenario: Scenario, schedule: Schedule) -> list[int]:
    """Microbatch counts worth trying: 1 without PP; with PP, from filling the pipeline to 4× its depth. A
    prefill runs at least its chunks (a microbatch holds at most a step's token budget), and exactly its chunks
    when they are slices of prompts."""
    chunks = _chunks(scenario, schedule)
    fewest = chunks.count if chunks else 1
    if schedule.pp == 1 or (chunks and chunks.tokens < scenario.input_len):
        return [fewest]
    fixed = schedule.microbatches or assumptions.pipeline_microbatches(scenario, schedule.pp)
    if fixed:
        return [max(fixed, fewest)]
    per_replica = math.ceil(scenario.batch / schedule.attention.replicas)
    options = [m for m in (schedule.pp, 2 * schedule.pp, 4 * schedule.pp) if m <= per_replica] or [per_replica]
    return sorted({max(m, fewest) for m in options})


@memo.cached(maxsize=16384)
def _microbatch_scenario(scenario: Scenario, microbatches: int, tokens: int, sliced_on: int = 0) -> Scenario:
    """The scenario of one microbatch of ``tokens`` prompt tokens per request (one shared object per input, so
    memo lookups hit by identity). A microbatch holds the batch's share of its requests; with prompts cut into
    slices (``sliced_on``: the engines, attention's data replicas) a step holds one slice of one request on
    every engine that still has one, on average ⌈batch / ⌈batch / engines⌉⌉ requests: the microbatches are
    then each engine's requests times its slices, so the batch's share would drop the other engines' slices."""
    if microbatches == 1 and tokens == scenario.input_len:
        return scenario
    if sliced_on:
        requests = math.ceil(scenario.batch / math.ceil(scenario.batch / sliced_on))
    else:
        requests = math.ceil(scenario.batch / microbatches)
    return scenario.model_copy(update={"batch": requests, "input_len": tokens})


@memo.cached(maxsize=16384)
def _phase_shape(scenario: Scenario, s: Schedule) -> tuple[tuple[int, ...], tuple[int, ...], tuple[Scenario, ...],
                                                           int | None]:
    """The pipeline stages a phase times, its microbatch options, the scenario of one microbatch of each and
    the keys each request of a prefill microbatch attends to (None in decode)."""
    stages = tuple(representative_stages(scenario.model.layers, s.pp, scenario.model.dense_layers))
    options = tuple(microbatch_options(scenario, s))
    chunks = _chunks(scenario, s)
    tokens = chunks.tokens if chunks else scenario.input_len
    sliced_on = chunks.replicas if chunks and chunks.tokens < scenario.input_len else 0
    return (stages, options, tuple(_microbatch_scenario(scenario, m, tokens, sliced_on) for m in options),
            chunks.context if chunks else None)


# --- GEMM tuning: every GEMM of a phase tuned in one vectorised batch per device ---

def prepare_phases(points) -> None:
    """Tune every GEMM of the phases these design points time (a search's schedules of one hardware point) in
    one vectorised batch per device: a batch costs about what five GEMMs tuned apart do, and each schedule
    alone brings only a few new ones."""
    batches: dict[DeviceSpec, dict] = {}
    for point in points:
        dev = timing_device(point.device)
        s = point.schedule
        for scenario in assumptions.averaged_steps(point.scenario) or (point.scenario,):  # the steps timed
            stages, _, micros, context = _phase_shape(budgeted(scenario, s, dev), s)
            gemms = _phase_gemms(micros, s.attention, s.ffn, s.pp, stages, context, s.moe_mode)
            batches.setdefault(dev, {})[gemms] = None
    for dev, phases in batches.items():
        _tune(phases, dev)


def _tune(phases: dict, dev: DeviceSpec) -> None:
    """Tune the GEMMs of the phases (``_phase_gemms`` tuples) not yet tuned on ``dev``, in one batch."""
    todo = [gemms for gemms in phases if (gemms, dev) not in _TUNED]
    if not todo:
        return
    prepare_gemms(dict.fromkeys(g for gemms in todo for g in gemms), dev)
    for gemms in todo:
        _TUNED.put((gemms, dev), None)


@memo.cached(maxsize=16384)
def _phase_gemms(micros: tuple[Scenario, ...], attention, ffn, pp: int, stages: tuple[int, ...],
                 context: int | None, moe_mode: str = "none") -> HashedTuple:
    """The distinct GEMMs of a phase's workloads (the same on every device)."""
    layers = dict.fromkeys(layer for micro in micros for stage in stages
                           for layer in chunk_workload(micro, attention, ffn, pp, stage, context, moe_mode))
    return HashedTuple(dict.fromkeys(g for layer in layers for g in _layer_gemms(layer)))


@memo.cached(maxsize=65536)
def _layer_gemms(layer: LayerOps) -> tuple:
    return tuple(dict.fromkeys(_gemms(layer.ops)))


def _gemms(ops):
    """The GEMMs among operators (including every option of a choice), to tune them in one batch."""
    for op in ops:
        if isinstance(op, Gemm):
            yield op
        elif isinstance(op, Choice):
            for _, option in op.options:
                yield from (o for o in option if isinstance(o, Gemm))
