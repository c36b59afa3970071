"""End-to-end evaluation of one design point (DESIGN.md §3): area → DRAM → workload → operator tuner →
power/thermal/DVFS → report. This module covers the devices' compute; the distributed model adds the network."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from deepstack.models import dram as dram_model
from deepstack.models import power as power_model
from deepstack.models import thermal
from deepstack.models.device import DeviceSpec, resolve_device
from deepstack.models.operators import OpTiming, time_op
from deepstack.models.parallel import MEMORY_RESERVE, memory_footprint
from deepstack.models.workload import Choice, build_workload
from deepstack.schema import ChipArchitecture, Network, Scenario, Schedule, SramOption

GiB = 1024**3
DVFS_BISECTION_STEPS = 40  # halvings of the frequency interval: far below any meaningful precision


@dataclass(frozen=True)
class DesignPoint:
    """Everything one evaluation needs. ``devices`` replicas run data-parallel when the schedule says so."""

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
        return self.network.devices if self.network is not None else self.schedule.devices


@dataclass(frozen=True)
class OperatorRow:
    layer: str
    count: int
    timing: OpTiming
    choice: str = ""


@dataclass
class PhaseResult:
    """One forward pass (prefill, or one decode step) on the busiest device."""

    rows: list[OperatorRow]
    time_nominal_s: float

    def time_at(self, clock_scale: float) -> float:
        return sum(r.count * r.timing.time_at(clock_scale) for r in self.rows)

    def energy_J(self, coefficients: power_model.EnergyCoefficients, clock_scale: float) -> tuple[float, float]:
        """(core energy at ``clock_scale`` — scales with V² ∝ f² —, DRAM energy)."""
        core = dram = 0.0
        for r in self.rows:
            t = r.timing
            core += r.count * (t.matrix_flops * coefficients.matrix_J_per_flop
                               + t.vector_flops * coefficients.vector_J_per_flop
                               + t.sfu_ops * coefficients.sfu_J_per_op
                               + t.l1_B * coefficients.l1_J_per_B + t.l2_B * coefficients.l2_J_per_B)
            dram += r.count * t.dram_B * coefficients.dram_J_per_B
        return core * clock_scale**2, dram


def run_phase(point: DesignPoint, dev: DeviceSpec, scenario: Scenario) -> PhaseResult:
    """Time every operator of one forward pass on one device (MLA form and similar choices by cost)."""
    s = point.schedule
    rows: list[OperatorRow] = []
    for layer in build_workload(scenario.model, scenario, s.attention, s.ffn, s.pp):
        for op in layer.ops:
            if isinstance(op, Choice):
                timed = [(label, [time_op(o, dev) for o in ops]) for label, ops in op.options]
                label, timings = min(timed, key=lambda item: sum(t.time_s for t in item[1]))
                rows.extend(OperatorRow(layer.kind, layer.layers * op.count, t, label) for t in timings)
            else:
                rows.append(OperatorRow(layer.kind, layer.layers * op.count, time_op(op, dev)))
    return PhaseResult(rows, sum(r.count * r.timing.time_s for r in rows))


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

    def as_dict(self) -> dict:
        return {"feasible": self.feasible, "violations": self.violations, "metrics": self.metrics,
                "hardware": self.hardware, "schedule": self.schedule, "scenario": self.scenario,
                "breakdown": self.breakdown}


def device_effective_bw_Bps(dev: DeviceSpec) -> float:
    """Sustained DRAM bandwidth of the device: full-row transactions, half of every PE's L1 in flight (double
    buffering) against the access latency (Little), and the PEs' L1 fill bandwidth (eq. 3)."""
    in_flight = dev.pes * dev.l1_B / 2
    return dram_model.effective_bw_Bps(dev.dram, dev.dram.row_B, in_flight, dev.l1_bw_Bps)


def _clock_scale(phase: PhaseResult, dev: DeviceSpec, coefficients) -> tuple[float, float, float]:
    """DVFS of §4.1.2: thermal frequency first, then the power wall. Returns (scale, time_s, power_w)."""
    static = thermal.static_power_w(dev.tdp_W)
    layers = dev.dram.stacked_layers if dev.is_3d else 0

    def power(scale: float) -> tuple[float, float]:
        t = phase.time_at(scale)
        core, dram = phase.energy_J(coefficients, scale)
        return t, static + (core + dram) / t

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
        t, p = power(scale)
    return scale, t, p


def evaluate(point: DesignPoint) -> Report:
    """Evaluate one design point on identical data-parallel devices (no network traffic)."""
    scenario = point.scenario
    dev = resolve_device(point.chip, point.stacked_layers, point.connected_layers, point.network, point.sram,
                         point.noc_bw_scale)
    coefficients = power_model.coefficients(dev)
    main = run_phase(point, dev, scenario)
    scale, step_s, power_w = _clock_scale(main, dev, coefficients)
    if scenario.phase == "decode":
        prefill = run_phase(point, dev, scenario.model_copy(update={"phase": "prefill"}))
        ttft_s = prefill.time_at(scale)
    else:
        ttft_s = step_s
    s = point.schedule
    replicas = s.attention.dp * s.attention.ep
    requests = math.ceil(scenario.batch / replicas) * replicas  # padded batch the system actually serves
    if scenario.phase == "decode":
        stps, utps = requests / step_s, 1.0 / step_s
    else:
        stps, utps = requests * scenario.input_len / step_s, scenario.input_len / step_s
    devices = point.devices
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
        hardware=_hardware(point, dev, devices), schedule=_schedule(s, devices), scenario=_scenario(scenario),
        breakdown=_breakdown(main, dev, scale, step_s, power_w, memory, coefficients),
    )


def _hardware(point: DesignPoint, dev: DeviceSpec, devices: int) -> dict:
    return {
        "chip": point.chip.name,
        "noc": point.network.name if point.network is not None else None,
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
        "area_per_device_mm2": dev.area.as_dict(),
    }


def _schedule(s: Schedule, devices: int) -> dict:
    return {"text": str(s), "devices": devices, "attention": s.attention.model_dump(), "ffn": s.ffn.model_dump(),
            "pp": s.pp, "fsdp": s.fsdp}


def _scenario(sc: Scenario) -> dict:
    return {"model": sc.model.name, "phase": sc.phase, "batch": sc.batch, "input_len": sc.input_len,
            "output_len": sc.output_len, "precision": str(sc.precision)}


def _breakdown(phase: PhaseResult, dev: DeviceSpec, scale: float, time_s: float, power_w: float, memory,
               coefficients) -> dict:
    operators = []
    flops = dram_B = l2_B = 0.0
    for r in phase.rows:
        t = r.timing
        op_time = r.count * t.time_at(scale)
        flops += r.count * t.matrix_flops
        dram_B += r.count * t.dram_B
        l2_B += r.count * t.l2_B
        each = t.time_at(scale)
        operators.append({
            "layer": r.layer, "name": t.name, "count": r.count, "time_s": op_time,
            "share": op_time / time_s if time_s else 0.0, "bound": t.bound,
            "compute_utilization": t.matrix_flops / (dev.peak_matrix_flops * scale * each) if each else 0.0,
            "dram_utilization": t.dram_B / (dev.dram.peak_bw_Bps * each) if each else 0.0,
            "config": t.config + (f" ({r.choice})" if r.choice else ""),
        })
    core, dram = phase.energy_J(coefficients, scale)
    static_J = thermal.static_power_w(dev.tdp_W) * time_s
    return {
        "phase_time_s": time_s,
        "clock_scale": scale,
        "utilization": {
            "compute": flops / (dev.peak_matrix_flops * scale * time_s),
            "l2": l2_B / (dev.l2_bw_Bps * scale * time_s),
            "dram": dram_B / (dev.dram.peak_bw_Bps * time_s),
        },
        "energy_J_per_device": {"core": core, "dram": dram, "static": static_J},
        "power_w_per_device": power_w,
        "memory_GiB_per_device": {"weights": memory.weights_B / GiB, "kv_cache": memory.kv_cache_B / GiB,
                                  "activations": memory.activations_B / GiB},
        "operators": operators,
    }
