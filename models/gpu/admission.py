"""How many requests a vLLM engine runs at once when their KV cache does not all fit (docs/model.md §GPU
execution, "Long context").

vLLM's V1 scheduler admits a waiting request only when the KV-cache blocks it needs are free
(``KVCacheManager.allocate_slots`` returns None and the request stays in the waiting queue), and the blocks are what
is left of ``gpu_memory_utilization`` (0.9) of the GPU after the weights and the profiled activation peak. A benchmark
that sends more requests than fit therefore runs as many as fit while the others wait; its decode throughput is
that of the running batch. The running requests are counted here with the memory model's footprint at the end of
their generation (weights + KV cache of input + output tokens + one step's activations within the usable 90 %), so
no running request is ever preempted for want of blocks. At a server's steady state (``scenario.steady_state``)
the running requests are staggered over their generation, each replaced when it ends, so together they hold on
average the KV cache of input + output / 2 tokens each (:func:`resident`). A prefill whose batch does not fit
runs them all, as many at once as fit, the others taking the places that free up (:func:`prefill_in_waves`).
"""

from __future__ import annotations

import math

from deepstack.models.parallel.chunks import choose_budget
from deepstack.models.parallel.memory import memory_footprint, usable_capacity_B
from deepstack.models.parallel.prefill_budget import with_prefill_budget


def resident(scenario):
    """The scenario whose end-of-generation footprint is what its running requests hold: at a steady state the
    mean over their ages (input + ⌈output / 2⌉ tokens each), otherwise the scenario itself."""
    if not (scenario.steady_state and scenario.phase == "decode"):
        return scenario
    return scenario.model_copy(update={"output_len": math.ceil(scenario.output_len / 2)})


def admitted_batch(scenario, schedule, usable_B: float) -> int:
    """The largest number of the scenario's requests (at most ``scenario.batch``) whose footprint fits in
    ``usable_B`` bytes per device; 0 when not even one does."""
    held = resident(scenario)
    return _largest(scenario.batch,
                    lambda batch: memory_footprint(held.model_copy(update={"batch": batch}), schedule).total_B
                    <= usable_B)


def prefill_in_waves(scenario, schedule, capacity_B: float):
    """A GPU prefill of ``scenario`` with its token budget (:func:`~.prefill_budget.with_prefill_budget`), and the
    requests it holds at once (over its data replicas) when its whole batch does not fit (docs/model.md §GPU
    prefill). vLLM admits a waiting request when the KV-cache blocks of its prompt are free, so the others wait
    for places and no budget is halved for them: the budget is vLLM's default unless not even one request fits
    beside a step's activations (then halved as for any prefill), and the places are the most requests whose
    prefill footprint (the memory check's: their prompts' KV cache) fits, the rule a batch that fits is held
    to. Places None: the batch fits (the wave runs as it always has) or not even one request does (the memory
    check refuses the point)."""
    budgeted = with_prefill_budget(scenario, schedule, capacity_B)
    usable_B = usable_capacity_B(capacity_B)
    if memory_footprint(budgeted, schedule).total_B <= usable_B:
        return budgeted, None

    def fits(budget: int, batch: int) -> bool:
        held = scenario.model_copy(update={"prefill_chunk_tokens": budget, "batch": batch})
        return memory_footprint(held, schedule).total_B <= usable_B

    budget = choose_budget(scenario, capacity_B, lambda b: fits(b, 1))
    places = _largest(scenario.batch, lambda batch: fits(budget, batch))
    if not places:
        return budgeted, None
    return scenario.model_copy(update={"prefill_chunk_tokens": budget}), places


def _largest(batch: int, fits) -> int:
    """The largest b ≤ ``batch`` with ``fits(b)`` (0 when not even one fits); a footprint grows with the batch, so
    a bisection finds it."""
    if fits(batch):
        return batch
    low, high = 0, batch  # fits(low) or low == 0; not fits(high)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low
