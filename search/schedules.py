"""Every feasible schedule of a hardware point, evaluated: the one engine behind the best-schedule search
(``deepstack evaluate`` without ``--parallel``, paper §3.1, §4.2.3), the sweeps (one hardware point per task)
and the study runners (which add per-module and fixed-collective schedules to the flat ones).

:func:`evaluate_schedules` is the shared core: a hardware point once per schedule, prepared together (every
GEMM of every schedule tuned in one batch per device, the network's routes planned once), each evaluated in full.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from deepstack.errors import InfeasibleError
from deepstack.models import network
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate
from deepstack.models.parallel.memory import feasible_strategies, fits
from deepstack.models.parallel.strategies import Strategy, enumerate_strategies, expert_folded
from deepstack.models.pipeline import prepare_phases
from deepstack.models.results import Report
from deepstack.schema import Scenario, Schedule
from deepstack.search.objectives import OBJECTIVES, score
from deepstack.wording import counted, per_rule

TOP_REPORTED = 5


def with_schedules(point: DesignPoint, schedules: Iterable[Schedule]) -> list[DesignPoint]:
    """``point`` once per schedule, ready to evaluate: the phases' GEMMs tuned in one batch per device and the
    network's routes planned (every schedule's collectives run on it)."""
    candidates = [dataclasses.replace(point, schedule=schedule) for schedule in schedules]
    prepare_phases(candidates)
    if point.network is not None:
        network.prepare(point.network)
    return candidates


def evaluate_schedules(point: DesignPoint, schedules: Iterable[Schedule], *, with_ttft: bool = False,
                       breakdown: bool = False) -> list[tuple[DesignPoint, Report]]:
    """Each schedule on ``point``'s hardware, evaluated: (design point, report) pairs in the schedules' order."""
    return [(candidate, evaluate(candidate, with_ttft=with_ttft, breakdown=breakdown))
            for candidate in with_schedules(point, schedules)]


@dataclass(frozen=True)
class PointSchedule:
    """One schedule a hardware point is searched over: its row label (what sweeps and trials record, and what
    ``--parallel`` reads back), whether FSDP is on, the schedule, and whether it is a flat strategy in vLLM's form."""

    label: str
    fsdp: bool
    schedule: Schedule
    folded: bool = False


def point_schedules(scenario: Scenario, strategies: Iterable[Strategy], capacity_B: float,
                    per_module: bool = True, memory_batch: int | None = None) -> list[PointSchedule]:
    """The schedules one hardware point is searched over, the one list behind the best-schedule search, the
    sweeps, ``optimize``'s trials and the studies' flat family: every strategy given (those that survived the
    pruning rules and the memory check), then, with ``per_module`` and a MoE model, each one's vLLM form that
    fits: the MoE block's TP folded into EP (:func:`~deepstack.models.parallel.strategies.expert_folded`) where
    that differs from the flat strategy. ``memory_batch``: the requests the memory check counts (None: the
    scenario's batch; :func:`~deepstack.models.parallel.memory.feasible_strategies`)."""
    strategies = tuple(strategies)
    held = scenario if memory_batch is None else scenario.model_copy(update={"batch": memory_batch})
    out = [PointSchedule(s.label, s.fsdp, s.to_schedule()) for s in strategies]
    if per_module:
        folded = (expert_folded(scenario, strategy) for strategy in strategies)
        out += [PointSchedule(str(f), f.fsdp, f, folded=True)
                for f in folded if f is not None and fits(held, f, capacity_B)]
    return out


@dataclass
class ScheduleSearch:
    """The outcome of :func:`best_schedule`: the best report (with TTFT and breakdown), how many strategies N
    devices have, how many were evaluated, how many each pruning rule removed, and the ranking by the
    objective (the best few, and all of them in ``ranking_all``)."""

    best: Report
    considered: int
    evaluated: int  # strategies evaluated (those no rule pruned)
    pruned: dict[str, int]
    ranking: list[dict]  # the best few: schedule text and their objective values
    folded: int = 0  # schedules evaluated besides them: strategies in vLLM's form (:func:`point_schedules`)

    def summary(self) -> dict:
        return {"strategies": self.considered, "evaluated": self.evaluated, "moe_tp_folded": self.folded,
                "pruned": self.pruned,
                "feasible_after_evaluation": sum(1 for r in self.ranking_all if r["feasible"]),
                "top": self.ranking}

    ranking_all: list[dict] | None = None


NOT_IN_VLLM = "not_in_vllm"  # the best-schedule search's rule on a real GPU (counted with the pruning rules)


def runs_in_vllm(strategy: Strategy) -> bool:
    """Whether vLLM can serve with ``strategy``: it shards by tensor, expert, data and pipeline parallelism
    (``--tensor-parallel-size``, ``--enable-expert-parallel``, ``--data-parallel-size``,
    ``--pipeline-parallel-size``) and splits a long context's KV cache (context parallelism); it never shards
    weights FSDP-style or splits a sequence's attention heads over devices (Ulysses sequence parallelism)."""
    return not strategy.fsdp and strategy.sp == 1


def best_schedule(point: DesignPoint, objective: str = "stps") -> ScheduleSearch:
    """Evaluate every strategy that survives the pruning rules and the memory check, and for a MoE model each one's
    vLLM form with the MoE block's TP folded into EP (:func:`point_schedules`); return the best report
    (thermally feasible ones first) with the search statistics. Raises InfeasibleError if none fits."""
    devices = point.devices
    dev = point.device
    # a GPU runs a batch whose KV cache does not fit as many requests at a time as fit (models/gpu/admission.py):
    # a schedule is out only when not even one request fits
    memory_batch = 1 if dev.gpu else None
    kept, pruned = feasible_strategies(point.scenario, devices, dev.dram.capacity_B, memory_batch=memory_batch)
    if dev.gpu:  # a real GPU server runs what vLLM can: TP, EP, DP and PP
        runnable = tuple(strategy for strategy in kept if runs_in_vllm(strategy))
        if len(runnable) < len(kept):
            pruned = {**pruned, NOT_IN_VLLM: len(kept) - len(runnable)}
        kept = runnable
    if not kept:
        raise InfeasibleError(
            f"no schedule of {counted(devices, 'device')} fits: strategies pruned by rule {per_rule(pruned) or 'none'} "
            f"(memory: {dev.dram.capacity_B / 2**30:.1f} GiB per device)"
        )
    candidates = point_schedules(point.scenario, kept, dev.dram.capacity_B, memory_batch=memory_batch)
    schedules = [c.schedule.model_copy(update={"collectives": point.schedule.collectives}) for c in candidates]
    evaluated = [(report, candidate) for candidate, report in evaluate_schedules(point, schedules)]
    evaluated.sort(key=lambda item: (item[0].feasible, score(item[0].metrics, objective)), reverse=True)
    results = [report for report, _ in evaluated]
    best = evaluate(evaluated[0][1], with_ttft=True)
    key = OBJECTIVES[objective][0]
    ranking = [{"schedule": r.schedule["text"], "feasible": r.feasible, key: r.metrics[key]} for r in results]
    return ScheduleSearch(best=best, considered=len(enumerate_strategies(devices)), evaluated=len(kept),
                          pruned=dict(pruned), ranking=ranking[:TOP_REPORTED], ranking_all=ranking,
                          folded=sum(c.folded for c in candidates))
