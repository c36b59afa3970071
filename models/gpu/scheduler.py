"""vLLM's scheduler over one benchmark wave: which tokens each engine step runs, and at which step each request
gets its first token (docs/model.md §GPU prefill).

The benchmark (``vllm bench serve`` with ``--max-concurrency`` = the batch and an infinite request rate) sends
every request at once, each with a prompt of ``prompt`` tokens that asks for ``output_len`` tokens. The engine
runs them as vLLM's V1 engine core does:

* **Arrival.** The engine core waits for work and starts a step as soon as it has any (vllm/v1/engine/core.py,
  ``EngineCoreProc.run_busy_loop``: ``_process_input_queue`` returns once a request is queued). The API server
  hands the requests over one by one, so the first step holds the first request alone; the others, sent at the
  same moment, are queued by the time it ends.
* **One step** (vllm/v1/core/sched/scheduler.py, ``Scheduler.schedule``): a budget of ``budget`` tokens
  (``max_num_batched_tokens``); first the RUNNING requests in the order they were admitted, one token for each
  that is decoding and the rest of the prompt (as much as the budget leaves) for one still prefilling; then the
  WAITING requests in arrival order while the budget lasts and fewer than ``max_running`` (``max_num_seqs``)
  run, the last one admitted taking only a slice of its prompt when the budget ends inside it (chunked prefill).
* A request whose prompt completes in a step samples its first token at the end of that step; it decodes one
  token per step after that and leaves after its ``output_len``-th token, freeing its place.

:func:`wave` runs this until every request has its first token and returns the steps, runs of identical steps
merged. :func:`steady_cycle` gives the steps of a server that keeps its places full instead (continuous
batching at steady state).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import NamedTuple

from deepstack.models import memo

VLLM_MAX_NUM_SEQS = 1024
"""Requests vLLM runs at once (``max_num_seqs``): its default for ``vllm serve`` on GPUs with ≥ 70 GiB
(vllm/engine/arg_utils.py, ``EngineArgs.get_batch_defaults``; docs/calibration.md §GPU execution)."""


class Step(NamedTuple):
    """One engine step of a wave."""

    prefill_tokens: int  # prompt tokens the step runs
    prefill_requests: int  # requests with prompt tokens in the step
    decodes: int  # running requests that decode one token each
    first_tokens: int  # requests whose prompt completes in the step (they get their first token at its end)

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decodes


class Run(NamedTuple):
    """``repeat`` identical steps in a row."""

    step: Step
    repeat: int


def wave(requests: int, prompt: int, output_len: int, budget: int, max_running: int,
         first_alone: bool = True) -> tuple[Run, ...]:
    """The steps from the wave's first request to the last request's first token, runs of identical steps merged.
    ``first_alone``: the first step holds the first request only (the arrival above). vLLM asks
    ``max_num_batched_tokens`` ≥ ``max_num_seqs``, so at most ``budget`` requests run at once."""
    if min(requests, prompt, output_len, budget, max_running) < 1:
        raise ValueError("wave: requests, prompt, output_len, budget and max_running must be ≥ 1")
    max_running = min(max_running, budget)
    arrived = 1 if first_alone else requests  # requests queued when the step starts
    admitted = started = 0  # requests admitted so far (in arrival order); those with their first token
    partial = 0  # prompt tokens left of the one request still prefilling (0: none)
    decoding = 0  # running requests past their prompt
    finishing: dict[int, int] = defaultdict(int)  # step index → requests whose last token that step computes
    index = 0
    runs: list[Run] = []

    def add(step: Step, repeat: int) -> None:
        if runs and runs[-1].step == step:
            runs[-1] = Run(step, runs[-1].repeat + repeat)
        else:
            runs.append(Run(step, repeat))

    while started < requests:
        if not partial and admitted < arrived and decoding >= max_running:
            # full: decode steps only, until the next departure frees a place
            last = min(finishing)
            add(Step(0, 0, decoding, 0), last - index + 1)
            decoding -= finishing.pop(last)
            index = last + 1
            continue
        left = budget - decoding
        prefill = fed = first = 0
        if partial:
            take = min(partial, left)
            partial, left = partial - take, left - take
            prefill, fed, first = take, 1, int(partial == 0)
        if not partial:
            # whole prompts while the budget, the queue and the places allow; then a slice of the next one
            room = max_running - decoding - fed
            whole = min(arrived - admitted, left // prompt, room)
            admitted, left = admitted + whole, left - whole * prompt
            prefill, fed, first = prefill + whole * prompt, fed + whole, first + whole
            if left and admitted < arrived and whole < room:
                admitted, partial = admitted + 1, prompt - left
                prefill, fed = prefill + left, fed + 1
        add(Step(prefill, fed, decoding, first), 1)
        # the end of the step: departures, first tokens
        decoding -= finishing.pop(index, 0)
        started += first
        if output_len > 1:
            decoding += first
            finishing[index + output_len - 1] += first
        arrived = requests
        index += 1
    return tuple(runs)


class Cycle(NamedTuple):
    """A steady state's cycle: its steps, and the requests (per engine) that finish over it."""

    runs: tuple[Run, ...]
    requests: int


def steady_cycle(running: int, prompt: int, output_len: int, budget: int) -> Cycle:
    """The steps of a server at steady state (continuous batching, every finished request replaced at once by a
    waiting one): ``running`` requests, each in the engine for ``output_len`` steps (the step completing its
    prompt, whose end gives its first token, then one decode per step), so ``running`` new prompts join over any
    ``output_len`` steps — ``running / output_len`` per step (Little's law). The cycle of ``output_len`` steps
    spreads them as evenly as whole prompts allow: ``running mod output_len`` steps prefill one prompt more than
    the others. In a step with k prompts the other ``running − k`` requests decode; every step gives each running
    request one token.

    When a newcomer's whole prompt does not fit beside the others' decodes, vLLM chunks it: a prompt at a time,
    each chunk the ``budget`` less the other ``running − 1`` decodes, so a prompt spans n = ⌈prompt / chunk⌉
    steps and a request is in the engine for ``output_len + n − 1`` steps (no token in its first n − 1). Over that
    cycle the ``running`` prompts take n steps each and the other steps decode every request.

    When neither form fits (prompts that overlap in the steps, or more prefill than the budget leaves), the cycle
    is the busy server's mean (:func:`_busy_cycle`)."""
    if min(running, prompt, output_len, budget) < 1:
        raise ValueError("steady_cycle: running, prompt, output_len and budget must be ≥ 1")
    fewer, more = divmod(running, output_len)
    if _whole_prompts_fit(running, prompt, output_len, budget):
        return Cycle(tuple(Run(Step(k * prompt, k, running - k, k), repeat)
                           for k, repeat in ((fewer + 1, more), (fewer, output_len - more)) if repeat), running)
    chunking = _chunking(running, prompt, output_len, budget)
    if chunking is None:
        return _busy_cycle(running, prompt, output_len, budget)
    chunk, n = chunking
    cycle = output_len + n - 1
    runs = (Run(Step(chunk, 1, running - 1, 0), running * (n - 1)),
            Run(Step(prompt - (n - 1) * chunk, 1, running - 1, 1), running),
            Run(Step(0, 0, running, 0), cycle - running * n))
    return Cycle(tuple(r for r in runs if r.repeat), running)


@memo.cached(maxsize=256)
def _busy_cycle(running: int, prompt: int, output_len: int, budget: int) -> Cycle:
    """The mean cycle of a server whose newcomers' prompts overlap in its steps, as vLLM's chunked prefill runs
    them: every step decodes the requests past their prompt, then feeds the queued prompts, first come first
    served, as far as the budget allows. The prompts are one stream cut at every step's end, so each step holds
    the prompt it cuts besides those it completes. A request's work is its prompt and ``output_len − 1`` decodes
    (W = prompt + output_len − 1 tokens), and requests finish at λ = min((running − 1) / output_len, budget / W)
    per step: the first while the budget keeps up (Little's law with every running request decoding, or in the
    step that completes its prompt, but for the one prompt cut at each step's end: running = λ·output_len + 1),
    the second when it does not (every step full, the newcomers queueing for it; a request lives running / λ
    steps). Over a cycle of c steps in which q = λ·c requests finish, the steps share the q prompts' tokens and
    q·(output_len − 1) decodes as evenly as whole tokens allow; each step's first tokens and prompts touched are
    those of its slice of the prompts' stream."""
    work = prompt + output_len - 1
    keeping_up = (running - 1) * work <= output_len * budget
    finished, steps = (running - 1, output_len) if keeping_up else (budget, work)
    common = math.gcd(finished, steps)
    finished, steps = finished // common, steps // common
    counts: Counter[Step] = Counter()
    done = 0  # prompt tokens fed before the step
    for i in range(steps):
        tokens = _share(finished * work, steps, i)
        decodes = _share(finished * (output_len - 1), steps, i)
        fed = tokens - decodes
        first = (done + fed) // prompt - done // prompt
        touched = (done + fed - 1) // prompt - done // prompt + 1 if fed else 0
        counts[Step(fed, touched, decodes, first)] += 1
        done += fed
    return Cycle(tuple(Run(step, repeat) for step, repeat in counts.items()), finished)


def _share(total: int, parts: int, index: int) -> int:
    """The ``index``-th of ``parts`` whole shares of ``total`` spread as evenly as possible."""
    return (index + 1) * total // parts - index * total // parts


def cycle_steps(runs: tuple[Run, ...]) -> int:
    """The engine steps of a cycle (or wave)."""
    return sum(run.repeat for run in runs)


def _whole_prompts_fit(running: int, prompt: int, output_len: int, budget: int) -> bool:
    """Whether the steps taking the most whole prompts (⌈running / output_len⌉) fit the budget with the
    decodes beside them."""
    most = -(-running // output_len)
    return most * prompt + running - most <= budget


def _chunking(running: int, prompt: int, output_len: int, budget: int) -> tuple[int, int] | None:
    """(chunk, steps per prompt) of prompts chunked one at a time beside the other requests' decodes; None when
    the chunks would overlap in the cycle (or no room is left for them)."""
    chunk = budget - (running - 1)
    if chunk < 1:
        return None
    n = -(-prompt // chunk)
    return (chunk, n) if running * n <= output_len + n - 1 else None
