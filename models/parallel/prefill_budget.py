"""The prefill token budget a schedule runs with: the one place it is settled (the timing of a phase, the TTFT
and the memory check all ask here).

A scenario's own ``prefill_chunk_tokens`` is kept; otherwise the largest of vLLM's default halved until weights,
KV cache and one chunk's activations fit in DRAM (:data:`~deepstack.models.parallel.chunks.AUTO_PREFILL_BUDGETS`).
"""

from __future__ import annotations

from deepstack.models import assumptions, memo
from deepstack.models.parallel.memory import _SCENARIO_CACHE, MEMORY_RESERVE, _layout, budget_for
from deepstack.models.parallel.strategies import Strategy
from deepstack.schema.scenario import Scenario
from deepstack.schema.schedule import Schedule


def prefill_budget(scenario: Scenario, plan: Strategy | Schedule, capacity_B: float | None = None,
                   reserve: float = MEMORY_RESERVE) -> int:
    """Prefill tokens per step of each data replica that ``plan`` runs ``scenario``'s prefill with (of a decode
    scenario: the prefill its TTFT times).

    The scenario's ``prefill_chunk_tokens`` when it sets one. Otherwise what an operator does when vLLM will not
    start for want of memory: start from vLLM's default and halve ``max_num_batched_tokens`` until weights + KV
    cache + one chunk's activations fit in ``(1 − reserve) × capacity_B``, down to the floor (kept when nothing
    fits: the memory check then fails); without a capacity, the default
    (:func:`~deepstack.models.parallel.chunks.choose_budget`).
    """
    return budget_for(scenario, _layout(plan, scenario.phase), capacity_B, reserve)


@memo.cached(maxsize=_SCENARIO_CACHE)
def with_prefill_budget(scenario: Scenario, plan: Strategy | Schedule, capacity_B: float,
                        reserve: float = MEMORY_RESERVE) -> Scenario:
    """``scenario`` with ``prefill_chunk_tokens`` set to :func:`prefill_budget` (itself when it sets one; one
    object per input, so the memo tables keyed on scenarios hit by identity)."""
    if scenario.prefill_chunk_tokens is not None:
        return scenario
    budget = prefill_budget(assumptions.without_kv_length(scenario), plan, capacity_B, reserve)
    return scenario.model_copy(update={"prefill_chunk_tokens": budget})


def budgeted(scenario: Scenario, schedule: Schedule, dev) -> Scenario:
    """``scenario`` with the prefill token budget ``schedule`` runs it with on ``dev`` (its own, or the largest
    automatic one that fits the device's DRAM), in either phase."""
    return with_prefill_budget(scenario, schedule, dev.dram.capacity_B)
