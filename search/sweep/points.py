"""A sweep's unit of work: one hardware point with every schedule that fits it, evaluated into flat rows
(the columns of ``points.csv``), and a chunk of such points as a pool worker runs it."""

from __future__ import annotations

from dataclasses import dataclass

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.models import memo
from deepstack.models.parallel.memory import feasible_strategies
from deepstack.schema import DesignSpace, Scenario
from deepstack.search.schedules import PointSchedule, evaluate_schedules, point_schedules
from deepstack.search.space import HardwarePoint, design_point, load_space, scaled_network, sram_option

HARDWARE_COLUMNS = ("chip", "noc", "stacked_layers", "connected_layers", "sram", "hop_latency_scale",
                    "level_bw_scales")
METRIC_COLUMNS = ("stps", "utps", "tokens_per_joule", "ttft_s", "power_w", "temperature_c",
                  "power_density_W_per_mm2", "frequency_ghz", "memory_gib")


def metric_columns(with_ttft: bool) -> list[str]:
    """The metrics a sweep records: it times TTFT only when an objective needs it (a decode sweep would otherwise
    time a prefill per schedule), and without it the column is left out rather than filled with NaN."""
    return [c for c in METRIC_COLUMNS if with_ttft or c != "ttft_s"]


def points_columns(with_ttft: bool) -> list[str]:
    """The columns of points.csv."""
    return [*HARDWARE_COLUMNS, "schedule", "fsdp", "feasible", *metric_columns(with_ttft)]


@dataclass(frozen=True)
class SweepTask:
    space_ref: str
    scenario_json: str
    hardware: HardwarePoint
    with_ttft: bool


def device_of(space: DesignSpace, hw: HardwarePoint):
    """The device a hardware point resolves to, or None when no PE fits the area budget (the area model
    decides, as in the CP-SAT tables)."""
    from deepstack.models.hardware.device import resolve_device

    try:
        return resolve_device(catalog.load("chips", hw.chip), hw.stacked_layers, hw.connected_layers,
                              scaled_network(hw.noc, hw.hop_latency_scale, hw.level_bw_scales),
                              sram_option(space, hw))
    except UserInputError:
        return None


def affinity_order(space: DesignSpace, points: list[HardwarePoint]) -> list[HardwarePoint]:
    """The points with those that time alike next to each other (same chip, stacking, SRAM and PE count: the
    NoC variants of a tier differ in area, which may or may not cost a PE), so a worker's block of chunks
    reuses one device's operator tables. A pure function of the points: a resumed sweep cuts the same chunks."""
    def key(hw: HardwarePoint) -> tuple:
        dev = device_of(space, hw)
        return (hw.chip, hw.stacked_layers or 0, hw.connected_layers or 0, hw.sram, dev.pes if dev else 0)

    return sorted(points, key=key)


@memo.cached(maxsize=64)
def _scenario(text: str) -> Scenario:
    """One scenario object per worker (memo lookups keyed on it then match by identity)."""
    return Scenario.model_validate_json(text)


def space_schedules(space: DesignSpace, scenario: Scenario, devices: int, capacity_B: float) -> list[PointSchedule]:
    """The schedules a space searches on one hardware point of ``devices`` devices with ``capacity_B`` of DRAM
    each: the strategies that pass the pruning rules and fit memory, with the space's FSDP choices, and with
    ``per_module`` each MoE strategy's vLLM form too (:func:`point_schedules`)."""
    kept, _ = feasible_strategies(scenario, devices, capacity_B)
    strategies = [strategy for strategy in kept if strategy.fsdp in space.schedule.fsdp]
    return point_schedules(scenario, strategies, capacity_B, space.schedule.per_module)


def evaluate_hardware(task: SweepTask) -> list[dict]:
    """Every schedule that fits one hardware point, evaluated: one row per schedule."""
    space = load_space(task.space_ref)
    scenario = _scenario(task.scenario_json)
    hw = task.hardware
    dev = device_of(space, hw)
    if dev is None:
        return []
    point = design_point(space, hw, scenario)
    candidates = space_schedules(space, scenario, point.devices, dev.dram.capacity_B)
    evaluated = evaluate_schedules(point, [c.schedule for c in candidates], with_ttft=task.with_ttft)
    hardware = hw.as_dict()
    columns = metric_columns(task.with_ttft)
    rows = []
    for candidate, (_, report) in zip(candidates, evaluated, strict=True):
        metrics = report.metrics
        rows.append({**hardware, "schedule": candidate.label, "fsdp": candidate.fsdp,
                     "feasible": report.feasible, **{k: metrics[k] for k in columns if k in metrics}})
    return rows
