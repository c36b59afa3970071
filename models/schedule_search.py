"""Best schedule for a hardware point: every feasible flat strategy of the composer (paper §3.1, §4.2.3),
each evaluated in full, ranked by an objective. This is what ``deepstack evaluate`` does without
``--parallel``; the search layer uses the same function per hardware point."""

from __future__ import annotations

from dataclasses import dataclass

from deepstack.errors import InfeasibleError
from deepstack.models import network
from deepstack.models.device import resolve_device
from deepstack.models.evaluate import DesignPoint, Report, evaluate, prepare_phases
from deepstack.models.parallel import enumerate_strategies, feasible_strategies

OBJECTIVES = {  # name → (metric key, larger is better)
    "stps": ("stps", True),
    "utps": ("utps", True),
    "tokens_per_joule": ("tokens_per_joule", True),
    "ttft": ("ttft_s", False),
}
TOP_REPORTED = 5


@dataclass
class ScheduleSearch:
    best: Report
    considered: int
    evaluated: int
    pruned: dict[str, int]
    ranking: list[dict]  # the best few: schedule text and their objective values

    def summary(self) -> dict:
        return {"strategies": self.considered, "evaluated": self.evaluated, "pruned": self.pruned,
                "feasible_after_evaluation": sum(1 for r in self.ranking_all if r["feasible"]),
                "top": self.ranking}

    ranking_all: list[dict] | None = None


def _score(report: Report, objective: str) -> float:
    key, larger = OBJECTIVES[objective]
    value = report.metrics[key]
    return value if larger else -value


def best_schedule(point: DesignPoint, objective: str = "stps") -> ScheduleSearch:
    """Evaluate every strategy that survives the pruning rules and the memory check; return the best report
    (thermally feasible ones first) with the search statistics. Raises InfeasibleError if none fits."""
    devices = point.devices
    dev = resolve_device(point.chip, point.stacked_layers, point.connected_layers, point.network, point.sram,
                         point.noc_bw_scale)
    kept, pruned = feasible_strategies(point.scenario, devices, dev.dram.capacity_B)
    if not kept:
        raise InfeasibleError(
            f"no schedule of {devices} devices fits: {dict(pruned)} strategies pruned by rule "
            f"(memory: {dev.dram.capacity_B / 2**30:.1f} GiB per device)"
        )
    candidates = [DesignPoint(**{**point.__dict__, "schedule": strategy.to_schedule().model_copy(
        update={"collectives": point.schedule.collectives})}) for strategy in kept]
    prepare_phases(candidates)
    if point.network is not None:
        network.prepare(point.network)  # every strategy's collectives are planned on it
    evaluated = [(evaluate(candidate, with_ttft=False, breakdown=False), candidate) for candidate in candidates]
    evaluated.sort(key=lambda item: (item[0].feasible, _score(item[0], objective)), reverse=True)
    results = [report for report, _ in evaluated]
    best = evaluate(evaluated[0][1], with_ttft=True)
    ranking = [{"schedule": r.schedule["text"], "feasible": r.feasible, OBJECTIVES[objective][0]:
                r.metrics[OBJECTIVES[objective][0]]} for r in results]
    return ScheduleSearch(best=best, considered=len(enumerate_strategies(devices)), evaluated=len(results),
                          pruned=dict(pruned), ranking=ranking[:TOP_REPORTED], ranking_all=ranking)

