"""Shared pieces of the study runners: scenarios from parameters, design points, best-schedule evaluation."""

from __future__ import annotations

from deepstack import catalog
from deepstack.errors import InfeasibleError, UserInputError
from deepstack.models import memo
from deepstack.models.evaluate import DesignPoint, Report, evaluate
from deepstack.models.schedule_search import OBJECTIVES, best_schedule
from deepstack.schema import Scenario, Schedule, SramOption, validate
from deepstack.search.space import scaled_network

PHASES = ("prefill", "decode")


def scenario(model: str, phase: str, batch: int, input_len: int = 1024, output_len: int = 1024,
             precision: str | None = None) -> Scenario:
    data = {"model": model, "phase": phase, "batch": batch, "input_len": input_len, "output_len": output_len}
    if precision:
        data["precision"] = precision
    return validate(Scenario, data, origin="study scenario")


def point(chip: str, sc: Scenario, noc: str | None = None, stacked_layers: int | None = None,
          connected_layers: int | None = None, sram: SramOption | None = None, hop_latency_scale: float = 1.0,
          level_bw_scales: tuple[float, ...] = (), schedule: Schedule | None = None,
          noc_bw_scale: float = 1.0) -> DesignPoint:
    """A design point from preset names (a scaled network when latency or bandwidth multipliers are given)."""
    architecture = catalog.load("chips", chip)
    network = scaled_network(noc, hop_latency_scale, tuple(level_bw_scales)) if noc else None
    if not architecture.is_3d:
        stacked_layers = connected_layers = None
    return DesignPoint(chip=architecture, scenario=sc, schedule=schedule or Schedule(), network=network,
                       stacked_layers=stacked_layers, connected_layers=connected_layers, sram=sram,
                       noc_bw_scale=noc_bw_scale)


@memo.cached(maxsize=4096)
def best(design: DesignPoint, objective: str = "stps") -> Report | None:
    """The best schedule's report for a hardware point (None when nothing fits the point)."""
    if objective not in OBJECTIVES:
        raise UserInputError(f"objective: must be one of {', '.join(OBJECTIVES)} (got {objective!r})")
    try:
        search = best_schedule(design, objective)
    except InfeasibleError:
        return None
    except UserInputError:
        return None  # e.g. no PE fits the area budget at this stacking
    report = search.best
    report.search = search.summary()
    return report


def fixed(design: DesignPoint) -> Report | None:
    """The report of a point with its own schedule (None when the hardware cannot exist)."""
    try:
        return evaluate(design, with_ttft=False)
    except UserInputError:
        return None


def row(report: Report, **extra) -> dict:
    """A flat CSV row: the extra columns, the schedule, the hardware summary and every metric."""
    hw = report.hardware
    out = {**extra, "schedule": report.schedule["text"], "feasible": report.feasible,
           "pes_per_device": hw["pes_per_device"], "dram_bw_TBps": hw["dram_bw_TBps"],
           "dram_effective_bw_TBps": hw["dram_effective_bw_TBps"]}
    out.update({k: v for k, v in report.metrics.items()})
    out["violations"] = "; ".join(report.violations)
    return out
