"""Building a report's parts from an evaluated phase: hardware, schedule and scenario summaries (memoised and
shared: they are immutable) and the per-operator breakdown."""

from __future__ import annotations

from deepstack.models import dvfs, memo
from deepstack.models.gpu import power as gpu_power
from deepstack.models.gpu.efficiency import achievable_Bps
from deepstack.models.hardware import dram as dram_model
from deepstack.models.hardware.device import DeviceSpec, resolve_device
from deepstack.models.parallel import communication
from deepstack.models.pipeline.rows import COMPUTE_ROWS, NETWORK_ROWS, CommRow, OverlapRow, PhaseResult, Row
from deepstack.models.results import (
    Breakdown,
    Energy,
    FrozenMap,
    HardwareSummary,
    MemoryUse,
    OperatorEntry,
    ScenarioSummary,
    ScheduleSummary,
    Utilization,
)
from deepstack.schema import ChipArchitecture, Network, Scenario, Schedule, SramOption

GiB = 1024**3


@memo.cached(maxsize=4096)
def device_effective_bw_Bps(dev: DeviceSpec) -> float:
    """Sustained DRAM bandwidth of the device: full-row transactions, half of every PE's L1 in flight (double
    buffering) against the access latency (Little), and the PEs' L1 fill bandwidth (eq. 3)."""
    in_flight = dev.pes * dev.l1_B / 2
    return dram_model.effective_bw_Bps(dev.dram, dev.dram.row_B, in_flight, dev.l1_bw_Bps)


def _effective_bw_Bps(dev: DeviceSpec, gpu) -> float:
    """The DRAM bandwidth a device sustains (:func:`device_effective_bw_Bps`); on a real GPU (its chip's ``gpu``
    table) no more than what a streaming kernel reaches, the floor every operator is timed at
    (:mod:`deepstack.models.gpu.efficiency`)."""
    if gpu is not None:
        return min(device_effective_bw_Bps(dev), achievable_Bps(dev, gpu))
    return device_effective_bw_Bps(dev)


@memo.cached(maxsize=4096)
def hardware_summary(chip: ChipArchitecture, network: Network | None, stacked_layers: int | None,
                     connected_layers: int | None, sram: SramOption | None, noc_bw_scale: float,
                     devices: int) -> HardwareSummary:
    """The report's hardware entries (one hardware point is reported with every schedule of a search)."""
    dev = resolve_device(chip, stacked_layers, connected_layers, network, sram, noc_bw_scale)
    return HardwareSummary(
        chip=chip.name,
        noc=network.name if network is not None else None,
        devices=devices,
        pes_per_device=dev.pes,
        stacked_layers=dev.dram.stacked_layers,
        connected_layers=dev.dram.connected_layers,
        dram_technology=dev.dram.technology,
        dram_bw_TBps=dev.dram.peak_bw_Bps / 1e12,
        dram_effective_bw_TBps=_effective_bw_Bps(dev, chip.gpu) / 1e12,
        dram_capacity_GiB=dev.dram.capacity_B / GiB,
        fp16_tflops_per_device=dev.peak_matrix_flops / 1e12,
        l1_bw_TBps_per_device=dev.l1_bw_Bps / 1e12,
        l2_bw_TBps_per_device=dev.l2_bw_Bps / 1e12,
        nominal_clock_ghz=dev.clock_Hz / 1e9,
        tdp_w_per_device=dev.tdp_W,
        # a real GPU's die is given (its SMs too): the area model sizes only the templates a search may change
        area_per_device_mm2=FrozenMap({"die_mm2": dev.area.budget_mm2} if chip.gpu is not None
                                      else dev.area.as_dict()),
        ambient_c=dev.ambient_c,
        max_temp_c=dev.target_c,
    )


@memo.cached(maxsize=16384)
def schedule_summary(s: Schedule, devices: int, microbatches: int) -> ScheduleSummary:
    """The report's schedule entries."""
    return ScheduleSummary(text=str(s), devices=devices, attention=FrozenMap(s.attention.model_dump()),
                           ffn=FrozenMap(s.ffn.model_dump()), pp=s.pp, fsdp=s.fsdp, microbatches=microbatches,
                           collectives=FrozenMap(s.collectives))


@memo.cached(maxsize=4096)
def scenario_summary(sc: Scenario, running_batch: int | None = None) -> ScenarioSummary:
    return ScenarioSummary(model=sc.model.name, phase=sc.phase, batch=sc.batch, input_len=sc.input_len,
                           output_len=sc.output_len, precision=str(sc.precision),
                           prefill_chunk_tokens=sc.prefill_chunk_tokens, running_batch=running_batch)


def _row_entry(r: Row, dev: DeviceSpec, scale: float, time_s: float, multiplier: int) -> OperatorEntry:
    each = r.time_at(scale)
    op_time = r.count * each * multiplier
    share = op_time / time_s if time_s else 0.0
    if isinstance(r, CommRow):
        busiest = max(r.result.level_utilization, key=lambda load: load.max_busy_fraction, default=None)
        return OperatorEntry(r.layer, r.count, op_time, share, r.name,
                             "network" + (f" L{busiest.level + 1}" if busiest else ""), 0.0, 0.0,
                             f"{r.result.op} {r.result.algorithm}, {r.result.num_groups}×{r.result.group_size} ranks")
    t = r.timing
    alone = t.time_at(scale)
    bound, config = t.bound, t.config
    if isinstance(r, OverlapRow):
        config += f"; overlapped with {r.name} ({r.result.algorithm}), {(each - alone) * 1e6:.1f} µs exposed"
        if each > alone * 1.05:
            bound = "network"
    elif r.choice:
        config += f" ({r.choice})"
    return OperatorEntry(r.layer, r.count, op_time, share, t.name, bound,
                         t.matrix_flops / (dev.peak_matrix_flops * scale * each) if each else 0.0,
                         t.dram_B / (dev.dram.peak_bw_Bps * each) if each else 0.0, config)


@memo.cached(maxsize=1024)  # a report re-asked for (same phase and clock) shares its breakdown
def breakdown(phase: PhaseResult, dev: DeviceSpec, scale: float, time_s: float, power_w: float,
              temperature_c: float, memory, coefficients, noc_J_per_B: tuple[float, ...], devices: int,
              network: Network | None) -> Breakdown:
    """Where the step's time, energy and memory go on the busiest device.

    Args:
        phase: the step evaluated; ``scale`` its clock relative to nominal, ``time_s`` its time (s) and
            ``power_w`` the device's power (W) at that clock, ``temperature_c`` its junction as judged (°C:
            at the ambient the assumption set or a named coolant gives, which may not be the chip's own).
        memory: the device's :class:`~deepstack.models.parallel.memory.MemoryFootprint`.
        coefficients, noc_J_per_B, devices: as for :func:`~deepstack.models.dvfs.clock_scale`.
        network: the device network (its links set the network utilization), or None.
    """
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
    noc: tuple[float, ...] = ()
    if network is not None:
        topology = communication.topology_of(network)
        capacities = [links * bw * time_s for links, bw in zip(topology.level_links, topology.level_bw_Bps,
                                                                strict=True)]
        noc = tuple(level_bytes.get(index, 0.0) / capacity if capacity else 0.0
                    for index, capacity in enumerate(capacities))
    utilization = Utilization(compute=flops / (dev.peak_matrix_flops * scale * time_s),
                              l2=l2_B / (dev.l2_bw_Bps * scale * time_s),
                              dram=dram_B / (dev.dram.peak_bw_Bps * time_s), noc=noc)
    core, dram, network_J = phase.energy_J(coefficients, scale, noc_J_per_B, devices)
    if dev.gpu:  # the SMs' clocking while they wait is core energy (models/gpu/power.py)
        core += gpu_power.waiting_energy_J(phase, dev, coefficients, scale)
    return Breakdown(
        phase_time_s=time_s,
        stage_time_s=phase.stage_time_at(scale),
        bottleneck_stage=phase.stage,
        clock_scale=scale,
        clock_limit=dvfs.clock_limit(dev, scale, power_w, temperature_c),
        utilization=utilization,
        energy_J_per_device=Energy(core=core, dram=dram, network=network_J,
                                   static=gpu_power.idle_power_w(dev) * time_s),
        power_w_per_device=power_w,
        memory_GiB_per_device=MemoryUse(weights=memory.weights_B / GiB, kv_cache=memory.kv_cache_B / GiB,
                                        activations=memory.activations_B / GiB),
        operators=tuple(_row_entry(r, dev, scale, time_s, phase.time_multiplier) for r in phase.rows),
        engine_steps=phase.engine_steps,
    )
