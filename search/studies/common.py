"""Shared pieces of the study runners: scenarios from parameters, design points, best-schedule evaluation,
preset references and figure axes."""

from __future__ import annotations

from pathlib import Path

from deepstack import catalog
from deepstack.errors import InfeasibleError, UserInputError
from deepstack.models import memo
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate
from deepstack.models.results import Report
from deepstack.schema import Scenario, Schedule, SramOption, build_scenario
from deepstack.search.objectives import OBJECTIVES
from deepstack.search.schedules import best_schedule
from deepstack.search.space import scaled_network
from deepstack.search.studies import StudyContext

PHASES = ("prefill", "decode")
# `deepstack accuracy paper` reads a run's tables whose title starts so: the paper's findings the run answers
FINDINGS_TITLE = "The paper's findings"
FINDINGS_COLUMNS = ["finding", "what", "paper", "ours", "verdict"]


def findings_table(ctx: StudyContext, rows: list[dict]) -> str:
    """Record the paper's findings this run answers (under its assumption set) and return their Markdown."""
    chosen = ctx.param("assumptions", "default")
    return ctx.key_table(f"{FINDINGS_TITLE} this run answers, under the {chosen} assumption set", rows,
                         FINDINGS_COLUMNS)


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
    report = report.with_search(search.summary())
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


def scenario_of(ctx: StudyContext, model: str, phase: str, batch: int) -> Scenario:
    """The scenario of a recipe's model, phase and batch, with its ``input_len``, ``output_len`` and ``precision``
    parameters (1024, 1024 and the model's default when absent)."""
    return build_scenario(model, phase, batch, ctx.param("input_len", 1024), ctx.param("output_len", 1024),
                          ctx.params.get("precision"), origin="study scenario",
                          assumptions=ctx.param("assumptions", "default"))


def preset_ref(ctx: StudyContext, ref: str) -> str:
    """A preset name, or the absolute path of a recipe-relative file (one spelling per file)."""
    resolved = ctx.path(ref)
    return str(Path(resolved).resolve()) if resolved != ref or Path(ref).is_absolute() else ref


def subplots(count: int, width: float = 6.0, height: float = 4.8):
    """A row of ``count`` matplotlib axes on the non-interactive backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, count, figsize=(width * count, height), squeeze=False)
    return fig, list(axes[0])
