"""Chunked prefill (as vLLM and SGLang run it): a data replica's prompts in scheduler steps of at most a token
budget, and the budgets an unset ``prefill_chunk_tokens`` may take. Which one a schedule runs with is settled in
:mod:`~deepstack.models.parallel.prefill_budget`; the memory check (:mod:`~deepstack.models.parallel.memory`)
counts one chunk's activations.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

from deepstack.schema.scenario import Scenario

DEFAULT_PREFILL_CHUNK_TOKENS = 8192
"""Prefill tokens per scheduler step a scenario without a budget starts from: vLLM's ``max_num_batched_tokens``
for ``vllm serve`` on GPUs of 70 GiB or more, H100/H200/MI300x (vllm-project/vllm, vllm/engine/arg_utils.py,
``EngineArgs.get_batch_defaults``; docs/calibration.md §10). Halved while the schedule does not fit
(:func:`prefill_budget`)."""

MIN_PREFILL_CHUNK_TOKENS = 64
"""The smallest budget the automatic halving tries: the tallest minimum matrix tile of the catalog's chips
(Hopper's ``wgmma`` is m64nNk16, NVIDIA PTX ISA "Asynchronous Warpgroup Level Matrix Multiply-Accumulate";
h100-star, large-matrix). A step of fewer tokens pads every GEMM to 64 rows there, so it costs what 64 tokens
cost and only adds steps. vLLM sets no floor of its own (it only asks ``max_num_batched_tokens`` ≥
``max_num_seqs``)."""

AUTO_PREFILL_BUDGETS = tuple(DEFAULT_PREFILL_CHUNK_TOKENS >> k
                             for k in range((DEFAULT_PREFILL_CHUNK_TOKENS // MIN_PREFILL_CHUNK_TOKENS).bit_length()))
"""The budgets an unset ``prefill_chunk_tokens`` may take, largest first: 8,192, 4,096, …, 64."""


class PrefillChunks(NamedTuple):
    """A data replica's prompts split into scheduler steps of at most the token budget (chunked prefill, as
    vLLM and SGLang run it). Every chunk has the same shape.

    Attributes:
        replicas: Data replicas (attention DP·EP): each is one engine with its own budget.
        count: Chunks (steps) per replica.
        requests: Requests in one chunk.
        tokens: Prompt tokens of each of those requests in the chunk (the whole prompt, or a slice of it).
        context: Keys each request attends to in the chunk: its own tokens and those of its earlier chunks,
            the mean over a prompt's chunks (the prompt's length when prompts are whole).
    """

    replicas: int
    count: int
    requests: int
    tokens: int
    context: int


def prefill_chunks(scenario: Scenario, replicas: int, budget: int | None = None) -> PrefillChunks:
    """The chunks of a prefill on ``replicas`` data replicas under ``budget`` tokens per step (default:
    ``scenario.prefill_chunk_tokens``, else :data:`DEFAULT_PREFILL_CHUNK_TOKENS`).

    Prompts that fit the budget stay whole: each chunk holds as many as the budget takes, spread evenly, so
    ⌈requests / ⌊budget / prompt⌋⌉ chunks (= ⌈tokens / budget⌉ when the prompt divides the budget; vLLM would
    also fill the rest of a step with the start of the next prompt). A longer prompt is cut into
    ⌈prompt / budget⌉ equal slices, one request per chunk; the j-th slice attends to j slices of keys. The
    work of attention is linear in its keys, so every slice is timed at the mean, (slices + 1) / 2 slices.
    """
    budget = budget or scenario.prefill_chunk_tokens or DEFAULT_PREFILL_CHUNK_TOKENS
    requests = math.ceil(scenario.batch / replicas)
    prompt = scenario.input_len
    if prompt <= budget:
        count = math.ceil(requests / min(requests, budget // prompt))
        return PrefillChunks(replicas, count, math.ceil(requests / count), prompt, prompt)
    slices = math.ceil(prompt / budget)
    tokens = math.ceil(prompt / slices)
    return PrefillChunks(replicas, requests * slices, 1, tokens, math.ceil(tokens * (slices + 1) / 2))


def boundary_tokens(step_tokens: int, devices: int) -> int:
    """Prompt tokens one FFN device takes of a prefill step under a per-module schedule: tokens cross the module
    boundary one by one, not request by request, so the step's ``step_tokens`` split evenly over the FFN's
    ``devices`` (DP·EP·SP·CP), even when there are fewer prompts than FFN replicas. At least one."""
    return max(1, math.ceil(step_tokens / devices))


def choose_budget(scenario: Scenario, capacity_B: float | None, fits: Callable[[int], bool]) -> int:
    """The prefill budget of ``scenario``: its own ``prefill_chunk_tokens`` when it sets one; without a DRAM
    capacity vLLM's default; otherwise what an operator does when vLLM will not start for want of memory, the
    default halved until ``fits(budget)`` (the memory check), down to :data:`MIN_PREFILL_CHUNK_TOKENS`, kept
    when nothing fits (the memory check then fails)."""
    if scenario.prefill_chunk_tokens is not None:
        return scenario.prefill_chunk_tokens
    if capacity_B is None:
        return DEFAULT_PREFILL_CHUNK_TOKENS
    # the footprint only shrinks with the budget, so the first of the halvings that fits is found by bisection
    # (3 footprints for 8 budgets; the memory check runs for thousands of schedules)
    lo, hi = 0, len(AUTO_PREFILL_BUDGETS) - 1  # the answer lies in [lo, hi]; the floor when nothing fits
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(AUTO_PREFILL_BUDGETS[mid]):
            hi = mid
        else:
            lo = mid + 1
    return AUTO_PREFILL_BUDGETS[lo]
