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
average the KV cache of input + output / 2 tokens each (:func:`resident`).
"""

from __future__ import annotations

import math

from deepstack.models.parallel.memory import memory_footprint


def resident(scenario):
    """The scenario whose end-of-generation footprint is what its running requests hold: at a steady state the
    mean over their ages (input + ⌈output / 2⌉ tokens each), otherwise the scenario itself."""
    if not (scenario.steady_state and scenario.phase == "decode"):
        return scenario
    return scenario.model_copy(update={"output_len": math.ceil(scenario.output_len / 2)})


def admitted_batch(scenario, schedule, usable_B: float) -> int:
    """The largest number of the scenario's requests (at most ``scenario.batch``) whose footprint fits in
    ``usable_B`` bytes per device; 0 when not even one does. The footprint grows with the batch, so a bisection
    finds it."""
    held = resident(scenario)

    def fits(batch: int) -> bool:
        return memory_footprint(held.model_copy(update={"batch": batch}), schedule).total_B <= usable_B

    if fits(scenario.batch):
        return scenario.batch
    low, high = 0, scenario.batch  # fits(low) or low == 0; not fits(high)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low
