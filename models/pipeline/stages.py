"""Stage planning: the rows of one pipeline stage on a device, each collective overlapped with the GEMM it feeds
or is fed by when that GEMM is in the layer (eq. 5).

Planning is split by what each step depends on, so that a search's many schedules and devices share it:
which collectives move data and on which device groups (:func:`_stage_routes`: the layout only), the rows of
stand-alone operators (:func:`_segments`: the device), and the collectives' times (the network), which are
added last by :func:`stage_parts`.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepstack.errors import UserInputError
from deepstack.models import assumptions, memo
from deepstack.models.compute.dispatch import time_op
from deepstack.models.compute.gemm_tuner import tune_gemm_overlapped
from deepstack.models.compute.operators import Choice, Gemm
from deepstack.models.compute.timing import OpTiming
from deepstack.models.compute.workload import LayerOps, build_workload, device_share, ffn_share
from deepstack.models.hardware.device import DeviceSpec
from deepstack.models.hashing import HashedTuple
from deepstack.models.parallel import communication
from deepstack.models.pipeline.rows import OpenComm, OpenOverlap, OpRow, RowRun, comm_row_s, overlap_row_s
from deepstack.schema import Scenario, Schedule


def chunk_workload(scenario: Scenario, attention, ffn, pp: int, stage: int = 0,
                   context: int | None = None, moe_mode: str = "none") -> tuple[LayerOps, ...]:
    """The operators of one forward pass on a device of pipeline stage ``stage`` (``build_workload``); in a
    prefill chunk, its requests attend to ``context`` keys each: their own tokens and those of their earlier
    chunks (:func:`~deepstack.models.parallel.chunks.prefill_chunks`; None: their own only). Only the
    attention core sees the context; the linear layers see the chunk's tokens."""
    return build_workload(scenario.model, scenario, attention, ffn, pp, stage, context, moe_mode)


@memo.cached(maxsize=65536)
def _layer_comms(model, scenario: Scenario, schedule: Schedule, share_a, share_f, moe: bool) -> tuple:
    """The collectives of one dense or MoE layer (memoised: the same objects for every evaluation of it)."""
    return HashedTuple(communication.attention_comms(model, scenario, schedule, share_a)
                       + communication.ffn_comms(model, scenario, schedule, share_a, share_f, moe)
                       + communication.fsdp_comms(model, scenario, schedule, moe))


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
    routes: tuple  # their routes (communication.route), in the same order
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
                networked: bool, context: int | None) -> tuple[tuple[_LayerPlan, ...], tuple]:
    """The layers of a pipeline stage on a device and the stage's own collectives (PP sends), as open plans."""
    layers, stage_comms = _stage_routes(scenario, schedule, stage, layout, networked, context)
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
                  networked: bool, context: int | None) -> tuple[tuple[_LayerRoutes, ...], tuple]:
    """The layers of a pipeline stage and the collectives that move data, with their routes (without the
    device's rows): which collectives move data, and on which groups, depends on the layout, not on the device,
    link speeds or latencies. A prefill chunk's collectives move its own tokens only, whatever its context."""
    layers = chunk_workload(scenario, schedule.attention, schedule.ffn, schedule.pp, stage, context,
                            schedule.moe_mode)
    kinds = tuple(dict.fromkeys(layer.kind for layer in layers if layer.kind in ("dense", "moe")))
    per_kind, stage_comms = _comm_routes(assumptions.without_kv_length(scenario), schedule, stage, layout,
                                         networked, kinds)
    return tuple(_LayerRoutes(layer, *per_kind.get(layer.kind, ((), (), {}))) for layer in layers), stage_comms


@memo.cached(maxsize=65536)
def _comm_routes(scenario: Scenario, schedule: Schedule, stage: int, layout, networked: bool,
                 kinds: tuple[str, ...]) -> tuple[dict, tuple]:
    """Per kind of layer the stage holds (dense, MoE: ``kinds``), its collectives that move data, their routes
    and the GEMM each overlaps (name → index); and the stage's own (PP sends) with their routes. Keyed on the
    scenario without a decode step's cached length, which no collective reads: the steps of a paper-set decode
    share them."""
    model = scenario.model
    share_a = device_share(model, scenario, schedule.attention, schedule.pp, stage)
    share_f = ffn_share(model, scenario, schedule.attention, schedule.ffn, schedule.pp, stage)

    def moving(comms) -> tuple[tuple, tuple]:
        """The collectives that move data (one per name) and their routes."""
        out = {}
        for comm in comms if networked else ():
            route = communication.comm_route(comm, layout, schedule)
            if route is not None:
                out[comm.name] = (comm, route)
        return tuple(c for c, _ in out.values()), tuple(r for _, r in out.values())

    per_kind = {}
    for kind in kinds:
        comms, routes = moving(_layer_comms(model, scenario, schedule, share_a, share_f, kind == "moe"))
        partner = {}
        for index, comm in enumerate(comms):
            target = comm.after or comm.before
            if target and target not in partner:
                partner[target] = index
        per_kind[kind] = (comms, routes, partner)
    return per_kind, moving(communication.stage_comms(model, scenario, schedule, share_a))


def stage_parts(schedule: Schedule, dev: DeviceSpec, scenario: Scenario, stage: int, layout,
                topology, context: int | None = None) -> tuple[list, float]:
    """Time one pipeline stage's operators and collectives, overlapping each collective with the GEMM it
    feeds or is fed by when that GEMM is in the layer. ``context``: the keys each request of a prefill chunk
    attends to (:func:`chunk_workload`). Returns the stage's parts in order (see
    :class:`~deepstack.models.pipeline.rows.PhaseResult`) and its time at the nominal clock, summed row by row
    in that order."""
    layers, (stage_comms, stage_routes) = _stage_plan(scenario, schedule, stage, dev, layout, topology is not None,
                                                      context)
    parts: list = []
    total = 0.0
    for plan in layers:
        results = communication.route_times(plan.routes, topology)
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
    for comm, result in zip(stage_comms, communication.route_times(stage_routes, topology), strict=True):
        parts.append(OpenComm("stage", 1, comm.name, result))
        total += 1 * comm_row_s(result, 0.0)
    return parts, total
