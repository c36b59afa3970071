"""A GPU prefill as vLLM serves a batch of requests (docs/model.md §GPU prefill).

vLLM does not prefill a batch in one pass: its scheduler (:mod:`.scheduler`) runs engine steps of at most
``max_num_batched_tokens`` tokens, the decodes of the requests already past their prompt first, the prompts in
chunks after them; each request gets its first token at the end of the step that completes its prompt. The prefill
of a batch is therefore the sequence of steps from the first request to the last first token, and each step is
timed as the GPU runs it:

* a step with prompt tokens runs **without a CUDA graph** unless all its tokens fit the largest captured size
  (vLLM captures graphs for at most ``min(2 × max_num_seqs, 512)`` tokens and dispatches a larger step to no
  graph at all: vllm/config/vllm.py ``_set_cudagraph_sizes``, vllm/v1/cudagraph_dispatcher.py); it is the
  operator model's forward pass over the step's tokens (the linear layers, norms and all-reduces see every token,
  attention is flash-style prefill over the prompt chunks) with the GPU's terms (:func:`~.gpu_phase`): no
  overlap, the HBM floor, vLLM's all-reduce of the step's activations, one boundary per kernel, and the host's
  launches of every kernel where the GPU does not hide them;
* a step small enough for a graph (≤ ``graph_max_batch`` tokens, graphs on) and a step of decodes only are timed
  as a decode step of that many tokens (:func:`~.gpu_phase` of a decode).

A step holding d decodes and p prompt tokens is timed as a prompt chunk of p + d tokens: the decodes add the same
linear work as prompt tokens; their attention reads ~``input_len`` cached keys each instead of attending causally
to the prompt, a difference of a few per cent of such a step (docs/calibration.md §GPU prefill).

:func:`prefill_wave` returns the whole wave as one :class:`Wave` (a :class:`PhaseResult` whose rows are every
step's, counted as often as the step runs), so its time is the last request's TTFT; :meth:`Wave.user_tps` gives
the per-request prefill speed the benchmark reports, mean over requests of input tokens / TTFT.
:func:`steady_state` times a decode the same way when the scenario asks for a server's steady state (finished
requests replaced at once, their successors' prompts prefilled in the decode steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from deepstack.models import memo
from deepstack.models.gpu.scheduler import VLLM_MAX_NUM_SEQS, Run, cycle_steps, steady_cycle, wave
from deepstack.models.hashing import HashedTuple
from deepstack.models.pipeline.rows import CommRow, OpRow, OverlapRow, PhaseResult

_WAVES = memo.Table("gpu prefill waves", 1024, lru=True)  # (design point, scenario) → Wave/SteadyCycle


@dataclass(eq=False)
class EngineSteps(PhaseResult):
    """A phase made of vLLM engine steps: every step's rows, ``steps`` the steps in order (each with the phase
    that times it)."""

    steps: tuple = ()  # ((Run, PhaseResult of one such step), ...)

    @property
    def engine_steps(self) -> int:
        return cycle_steps(tuple(run for run, _ in self.steps))


@dataclass(eq=False)
class Wave(EngineSteps):
    """A batch's prefill as vLLM runs it, from the first request to the last first token."""

    prompt: int = 0  # input tokens per request

    def ttfts(self, scale: float = 1.0) -> list[tuple[float, int]]:
        """(TTFT, requests that have it) in order: each request's first token comes at the end of the step that
        completes its prompt."""
        out, now = [], 0.0
        for run, phase in self.steps:
            step_s = phase.time_at(scale)
            for _ in range(run.repeat if run.step.first_tokens else 0):
                now += step_s
                out.append((now, run.step.first_tokens))
            if not run.step.first_tokens:
                now += run.repeat * step_s
        return out

    def user_tps(self, scale: float = 1.0) -> float:
        """Mean over requests of input tokens / TTFT (the benchmark's "user prefill" speed)."""
        pairs = self.ttfts(scale)
        return sum(n * self.prompt / t for t, n in pairs) / sum(n for _, n in pairs)


def prefill_wave(point, dev, scenario, step_phase, places: int | None = None) -> Wave:
    """The prefill of ``scenario`` (its batch on each data replica of the schedule, its token budget) as vLLM
    runs it; ``step_phase(scenario)`` times one step of a scenario on the GPU (memoised). ``places``: the
    requests the replicas hold at once when the KV cache has room for fewer than ``max_num_seqs`` each
    (:func:`~.admission.prefill_in_waves`; None: ``max_num_seqs``)."""
    key = HashedTuple((point, scenario, places))
    found = _WAVES.lookup(key)
    if found is None:
        engines = point.schedule.attention.replicas  # each data replica is an engine
        requests = math.ceil(scenario.batch / engines)
        held = VLLM_MAX_NUM_SEQS if places is None else min(VLLM_MAX_NUM_SEQS, math.ceil(places / engines))
        runs = wave(requests, scenario.input_len, scenario.output_len, scenario.prefill_chunk_tokens, held)
        steps, rows = _timed(point, scenario, runs, step_phase)
        found = Wave(rows, 1, 1, 0, steps=steps, prompt=scenario.input_len)
        _WAVES.put(key, found)
    return found


@dataclass(eq=False)
class SteadyCycle(EngineSteps):
    """A server's steady-state cycle of ``engine_steps`` engine steps (:func:`~.scheduler.steady_cycle`): every
    step's rows, counted as often as the step runs; over it every running request gets ``tokens_per_request``
    tokens on average: its ``output_len`` (one a step but in the steps that prefill the first chunks of its
    prompt), or fewer when the server is busy and newcomers wait for the budget (the requests that finish in the
    cycle times ``output_len``, over the running ones)."""

    running: int = 1  # requests in the engine (per engine)
    finished: int = 1  # requests that finish over the cycle (per engine)
    output_len: int = 1

    @property
    def tokens_per_request(self) -> float:
        return self.finished * self.output_len / self.running

    def ttft(self, scale: float = 1.0) -> float:
        """A newcomer's time to its first token: the steps it waits in the queue, at the cycle's mean step, then
        the steps that run its prompt (each of those it is in, at that step's time). Over the cycle every
        finished request is in the steps that touch its prompt (``prefill_requests``), so its prompt takes
        Σ repeat · prefill_requests · t / finished; it lives running · cycle / finished steps (Little's law), of
        which ``output_len`` − 1 decode and the rest wait or prefill (no wait unless the server is busy)."""
        in_prompt = sum(run.repeat * run.step.prefill_requests for run, _ in self.steps) / self.finished
        prompt_s = sum(run.repeat * run.step.prefill_requests * phase.time_at(scale)
                       for run, phase in self.steps) / self.finished
        life = self.running * self.engine_steps / self.finished
        waiting = max(0.0, life - (self.output_len - 1) - in_prompt)
        return waiting * self.time_at(scale) / self.engine_steps + prompt_s


def steady_state(point, dev, scenario, step_phase) -> SteadyCycle:
    """A decode of ``scenario`` as a vLLM server keeps it going: its batch running on each data replica, every
    finished request replaced at once, so the steps also prefill the newcomers' prompts, whole or in chunks, or
    fill every step's budget when they queue for it (:func:`~.scheduler.steady_cycle`), each step timed by
    ``step_phase`` as a wave's steps are."""
    key = HashedTuple((point, scenario))  # the scenario's phase and steady_state set it apart from a wave
    found = _WAVES.lookup(key)
    if found is None:
        engines = point.schedule.attention.replicas
        running = math.ceil(scenario.batch / engines)
        cycle = steady_cycle(running, scenario.input_len, scenario.output_len, scenario.prefill_chunk_tokens)
        steps, rows = _timed(point, scenario, cycle.runs, step_phase)
        found = SteadyCycle(rows, 1, 1, 0, steps=steps, running=running, finished=cycle.requests,
                            output_len=scenario.output_len)
        _WAVES.put(key, found)
    return found


def _timed(point, scenario, runs, step_phase) -> tuple[tuple, list]:
    """Each run of steps with the phase that times its step (equal steps share one), and the rows of them all,
    each counted as often as its steps run."""
    gpu, s = point.chip.gpu, point.schedule
    timed: dict = {}  # the scenario that times a step → its phase
    steps = []
    for run in runs:
        step = step_scenario(run, scenario, gpu.graph_max_batch, s.attention.replicas)
        if step not in timed:
            phase = step_phase(step)
            if phase.microbatches > 1:  # a long prompt's slices: one of them (at their mean context) per step
                phase = PhaseResult(phase.parts, s.pp, 1, phase.stage)
            timed[step] = phase
        steps.append((run, timed[step]))
    repeats: dict[int, list] = {}  # id of a step's phase → [phase, steps timed by it]
    for run, phase in steps:
        repeats.setdefault(id(phase), [phase, 0])[1] += run.repeat
    rows = [scaled(r, phase.time_multiplier * n) for phase, n in repeats.values() for r in phase.rows]
    return tuple(steps), rows


def step_scenario(run: Run, scenario, graph_max: int, engines: int):
    """The scenario that times one step of ``run`` on every one of the schedule's ``engines`` (its data replicas,
    each an engine running the same step at once): a decode of the step's tokens on each engine when it has no
    prompt tokens or, with CUDA graphs, fits the largest graph; otherwise a prefill chunk of its tokens on each
    engine (as many requests as it has prompts, the tokens spread evenly over them). A prompt longer than the
    budget is cut into slices that attend to the slices before them: such a step is one request's prefill per
    engine in slices of the step's tokens (the budget; fewer for a prompt's last slice), each timed at the
    prompt's mean context (:func:`~deepstack.models.parallel.chunks.prefill_chunks`), one slice per step."""
    step = run.step
    if step.prefill_tokens == 0 or (scenario.cuda_graphs and step.tokens <= graph_max):
        return scenario.model_copy(update={"phase": "decode", "batch": step.tokens * engines})
    if scenario.prefill_chunk_tokens and scenario.input_len > scenario.prefill_chunk_tokens:
        # a slice of the step's tokens (the budget, or less for a prompt's last slice)
        return scenario.model_copy(update={"phase": "prefill", "batch": engines, "prefill_chunk_tokens": step.tokens})
    requests = max(1, step.prefill_requests)
    tokens = math.ceil(step.tokens / requests)
    return scenario.model_copy(update={"phase": "prefill", "batch": requests * engines, "input_len": tokens,
                                       "prefill_chunk_tokens": requests * tokens})


def scaled(row, n: int):
    """``row`` counted ``n`` times as often."""
    if n == 1:
        return row
    if isinstance(row, OpRow):
        return OpRow(row.layer, row.count * n, row.timing, row.choice)
    if isinstance(row, CommRow):
        return CommRow(row.layer, row.count * n, row.name, row.result, row.hidden_behind_s)
    if isinstance(row, OverlapRow):
        return OverlapRow(row.layer, row.count * n, row.timing, row.name, row.result)
    raise TypeError(f"not a row: {type(row).__name__}")
