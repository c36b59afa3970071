"""DRAM footprint of a parallel strategy and the feasible strategies of a scenario (paper §4.2.3).

Weights + KV cache + peak activations of the most loaded device must fit in DRAM with a 10 % reserve. Prefill
runs in chunks of at most a token budget per step (:mod:`~deepstack.models.parallel.chunks`): activations are
those of one chunk, the KV cache that of the whole batch. Which budget a schedule runs with is settled in
:mod:`~deepstack.models.parallel.prefill_budget`.
:func:`memory_footprint` also accepts per-module :class:`~deepstack.schema.schedule.Schedule` objects (attention
and FFN with different layouts); :func:`feasible_strategies` combines the pruning rules of
:mod:`deepstack.models.parallel.strategies` with this check.

Everything is a pure function of frozen inputs and is memoised. Sizes are in bytes (SI).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import NamedTuple

from deepstack.errors import UserInputError
from deepstack.models import assumptions, memo
from deepstack.models.parallel.chunks import (
    MIN_PREFILL_CHUNK_TOKENS,
    PrefillChunks,
    boundary_tokens,
    choose_budget,
    prefill_chunks,
)
from deepstack.models.parallel.strategies import (
    PRUNING_RULES,
    Strategy,
    enumerate_strategies,
    pipeline_stage_layers,
    prune_reason,
)
from deepstack.schema.llm import LLM
from deepstack.schema.scenario import Scenario
from deepstack.schema.schedule import Schedule

MEMORY_RESERVE = 0.10
"""Fraction of DRAM kept free for CUDA graphs and fragmentation (paper §4.2.3; docs/calibration.md §1)."""

ACTIVATION_BUFFERS = 2
"""Live copies of the peak activation. Under the tile-wave compute–communication overlap of eq. 5
(paper §4.1.5) an operator's output coexists with the collective's send/receive copy of it (double
buffering), so the peak working set is counted twice."""

FSDP_GATHERED_LAYERS = 1
"""Fully gathered layers an FSDP device holds on top of its shards: layers are all-gathered one at a time
and freed after use (paper §3.3.1: FSDP all-gathers layer by layer). Prefetching the next layer to overlap
the gather with compute would make this 2 (PyTorch FSDP's ``limit_all_gathers`` caps in-flight gathers at 2)."""

_SCENARIO_CACHE = 16384  # (scenario, layout, budget) footprints: > 2,574 strategies of a scenario at N = 256, each
# at the few prefill budgets tried

MEMORY_RULE = "memory"
"""Key under which :func:`feasible_strategies` counts strategies that pass the rules but do not fit."""

# --------------------------------------------------------------------------------------------------------
# Memory footprint
# --------------------------------------------------------------------------------------------------------


class _Module(NamedTuple):
    """Degrees of one module inside a pipeline stage (hashable, for the memo)."""

    tp: int
    ep: int
    sp: int
    cp: int
    dp: int


class _Layout(NamedTuple):
    """A strategy or schedule reduced to plain integers: the memo key of :func:`_footprint` (collective choices
    do not change the footprint)."""

    attention: _Module
    ffn: _Module
    pp: int
    fsdp: bool
    dense_tp: int  # TP of the dense FFN layers and shared experts: the FFN's, or the attention's (moe_mode)
    microbatches: int  # decode: the PP microbatches a stage works through one at a time (1 without PP)


def _layout(plan: Strategy | Schedule, phase: str) -> _Layout:
    """The plan as the footprint's memo key. A prefill's microbatches are its chunks, whatever the plan says, so
    its key leaves the count out (1): plans differing only in it share one footprint."""
    if isinstance(plan, Strategy):
        module = _Module(plan.tp, plan.ep, plan.sp, plan.cp, plan.dp)
        attention = ffn = module
        fsdp, dense_tp, microbatches = plan.fsdp, plan.tp, plan.pp
    else:
        a, f = plan.attention, plan.ffn
        attention, ffn = _Module(a.tp, a.ep, a.sp, a.cp, a.dp), _Module(f.tp, f.ep, f.sp, f.cp, f.dp)
        fsdp, dense_tp = plan.fsdp, a.tp if plan.dense_on_attention else f.tp
        # a tuned count is never below the pipeline's depth (pp: the largest microbatches, the footprint to check)
        microbatches = plan.microbatches or plan.pp
    return _Layout(attention, ffn, plan.pp, fsdp, dense_tp, microbatches if phase == "decode" else 1)


@dataclass(frozen=True, slots=True)
class MemoryFootprint:
    """DRAM one device needs, in bytes: that of the most loaded device (the pipeline stage ``stage``).

    Attributes:
        weights_B: Parameters held (with FSDP: shards plus one gathered layer), bytes.
        kv_cache_B: KV cache at its largest (decode: end of generation; prefill: the prompt), bytes.
        activations_B: Peak live activations including MoE dispatch buffers and logits (prefill: of one
            chunk), bytes.
        stage: Index of the pipeline stage these figures belong to.
        total_B: Sum of the three, bytes.
    """

    weights_B: float
    kv_cache_B: float
    activations_B: float
    stage: int = 0
    total_B: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total_B", self.weights_B + self.kv_cache_B + self.activations_B)


def _attention_activation_width(model: LLM, tp: int) -> int:
    """Elements per token live inside attention on one device, beyond the normed input: queries, keys and
    values, the attention output and the output projection. Scores are never materialised (flash-style
    prefill, KV-streaming decode; docs/model.md). MLA counts the query latent, the KV latent and the larger of
    the non-absorbed (decompressed K/V) and absorbed (queries in latent space) paths."""
    att, hidden = model.attention, model.hidden
    heads = att.heads_per_device(tp)
    if att.kind == "mla":
        latent = att.kv_cache_elements_per_token(tp)
        expanded = heads * max(att.qk_nope_head_dim + att.v_head_dim, latent)
        return (att.q_lora_rank or 0) + heads * att.qk_head_dim + latent + expanded + heads * att.v_head_dim + hidden
    return 2 * heads * att.head_dim + att.kv_cache_elements_per_token(tp) + hidden


def _requests(scenario: Scenario, module: _Module) -> int:
    """Requests one device serves: the batch over the module's data replicas (DP·EP)."""
    return math.ceil(scenario.batch / (module.dp * module.ep))


def _chunk_requests(scenario: Scenario, module: _Module, chunk: PrefillChunks) -> int:
    """Requests of one prefill chunk on a device of ``module``: the module's share of a chunk's requests (a
    per-module schedule may split requests over more or fewer replicas than attention, whose replicas are the
    engines the chunks are planned for)."""
    engine_requests = math.ceil(scenario.batch / chunk.replicas)
    return math.ceil(_requests(scenario, module) * chunk.requests / engine_requests)


def _tokens(scenario: Scenario, module: _Module, chunk: PrefillChunks | None, microbatches: int) -> int:
    """Tokens one device processes at once: in decode (``chunk`` None) one per request of a PP microbatch (a
    stage holds the activations of the microbatch it works on; the others' wait as KV cache only); in prefill
    the shard of one chunk (:func:`prefill_chunks`), the step's token budget. PP microbatches are no larger
    than a chunk."""
    if chunk is None:
        return math.ceil(_requests(scenario, module) / microbatches)
    return _chunk_requests(scenario, module, chunk) * math.ceil(chunk.tokens / (module.sp * module.cp))


def _ffn_tokens(scenario: Scenario, layout: _Layout, chunk: PrefillChunks | None) -> int:
    """Tokens one FFN device processes at once. A per-module FFN in prefill takes its share of the step's prompt
    tokens (the chunk's requests on every engine), split token by token as the timing splits them
    (:func:`~deepstack.models.parallel.chunks.boundary_tokens`); otherwise as attention counts them."""
    ffn = layout.ffn
    if chunk is None or ffn == layout.attention:
        return _tokens(scenario, ffn, chunk, layout.microbatches)
    step_tokens = min(scenario.batch, chunk.replicas * chunk.requests) * chunk.tokens
    return boundary_tokens(step_tokens, ffn.dp * ffn.ep * ffn.sp * ffn.cp)


def _representative_stages(sizes: tuple[int, ...], starts: tuple[int, ...], dense_layers: int) -> tuple[int, ...]:
    """Stage indices, ascending, that cover every distinct stage composition (so ties go to the earliest).

    A stage's footprint depends only on its layer count, how many of them are dense (the leading
    ``dense_layers``) and whether it is the first or the last. Besides those two and the stages touching the
    dense prefix, every stage holds MoE layers only and has one of vLLM's two sizes (the larger ones form one
    block just before the last stage), so one stage of each size suffices.
    """
    pp = len(sizes)
    stages = {0, pp - 1}
    middle = 1
    while middle < pp - 1 and starts[middle] < dense_layers:
        stages.add(middle)
        middle += 1
    if middle < pp - 1:
        stages.add(middle)
        larger = pp - 1 - (sum(sizes) % pp)  # first stage of the larger size (vLLM split)
        if middle < larger < pp - 1:
            stages.add(larger)
    return tuple(sorted(stages))


@memo.cached(maxsize=_SCENARIO_CACHE)
def _footprint(scenario: Scenario, layout: _Layout, budget: int | None) -> MemoryFootprint:
    """The footprint of the scenario's decode step (``budget`` None) or of its prefill in steps of ``budget``
    tokens (whatever the scenario's phase: a decode scenario's TTFT is a prefill)."""
    model, precision = scenario.model, scenario.precision
    att, ffn = layout.attention, layout.ffn
    hidden, moe = model.hidden, model.moe

    # Weights per layer on one device, in parameters, in three FSDP shard groups: attention side (attention,
    # norms, embeddings) over the attention replicas, FFN non-expert (dense FFN, shared experts, router) over
    # the FFN replicas, routed experts over the FFN DP group.
    attention_layer = model.attention.parameter_count(hidden, att.tp) + 2 * hidden  # + the two RMSNorms (replicated)
    dense_layer = 3 * hidden * math.ceil((model.dense_intermediate or 0) / layout.dense_tp)
    moe_shared = moe_routed = 0
    if moe:
        expert = 3 * hidden * math.ceil(moe.expert_intermediate / ffn.tp)  # one SwiGLU expert's TP shard
        router = hidden * moe.routed_experts + (moe.routed_experts if moe.router_bias else 0)  # replicated
        moe_shared = moe.shared_experts * 3 * hidden * math.ceil(moe.expert_intermediate / layout.dense_tp) + router
        moe_routed = math.ceil(moe.routed_experts / ffn.ep) * expert
    vocab_shard = math.ceil(model.vocab / att.tp) * hidden  # vocab-parallel embedding / LM head

    # KV cache per layer (bytes) and activation peak per block (elements).
    kv_tokens = scenario.input_len + (scenario.output_len if budget is None else 0)
    # + DSA's indexer key cache (FP8 keys and their scales, whatever the KV precision), replicated like the latent
    kv_layer_B = (
        _requests(scenario, att) * math.ceil(kv_tokens / (att.sp * att.cp))
        * (model.attention.kv_cache_elements_per_token(att.tp) * precision.kv_bytes
           + model.attention.indexer_cache_bytes_per_token())
    )
    chunk = None if budget is None else prefill_chunks(scenario, att.dp * att.ep, budget)
    t_att = _tokens(scenario, att, chunk, layout.microbatches)
    t_ffn = _ffn_tokens(scenario, layout, chunk)
    residual = t_att * hidden
    attention_peak = t_att * (hidden + _attention_activation_width(model, att.tp))
    dense_peak = t_ffn * (hidden + 2 * math.ceil((model.dense_intermediate or 0) / ffn.tp))  # SwiGLU gate + up
    if moe:
        # Each token goes to top-k experts: dispatch send + receive copies, gate + up per routed copy, the
        # shared experts' gate + up and the router logits. Balanced routing: EP·T tokens × top-k spread over EP
        # devices leaves T × top-k per device on average (load imbalance is the timing model's concern).
        up = 2 * math.ceil(moe.expert_intermediate / ffn.tp)
        moe_peak = t_ffn * (hidden + moe.top_k * (2 * hidden + up) + moe.shared_experts * up + moe.routed_experts)
    else:
        moe_peak = 0
    # the last position of each request of the step (vLLM also samples a partial prefill's last token)
    logit_rows = t_att if chunk is None else _chunk_requests(scenario, att, chunk)
    logits_peak = logit_rows * math.ceil(model.vocab / att.tp)

    sizes = pipeline_stage_layers(model.layers, layout.pp)
    starts = tuple(itertools.accumulate(sizes, initial=0))
    worst: tuple[float, int, float, float, float] | None = None  # (total, stage, weights, KV, activations)
    gathered_layers = FSDP_GATHERED_LAYERS if assumptions.fsdp_counts_gathered_layer(scenario) else 0
    for stage in _representative_stages(sizes, starts, model.dense_layers):
        count = sizes[stage]
        n_dense = max(0, min(starts[stage + 1], model.dense_layers) - starts[stage])
        n_moe = count - n_dense
        first, last = stage == 0, stage == layout.pp - 1
        side = count * attention_layer + (vocab_shard if first else 0)
        if last:
            side += hidden  # final norm
            # LM head. Tied embeddings are one tensor on a single stage; with PP the last stage keeps a copy.
            side += vocab_shard if layout.pp > 1 or not model.tied_embeddings else 0
        ffn_shared = n_dense * dense_layer + n_moe * moe_shared
        routed = n_moe * moe_routed
        if layout.fsdp:
            units = [vocab_shard] if first or last else []
            units += [attention_layer + dense_layer] if n_dense else []
            units += [attention_layer + moe_shared + moe_routed] if n_moe else []
            gathered = gathered_layers * max(units, default=0)
            weights = side / (att.dp * att.ep) + ffn_shared / (ffn.dp * ffn.ep) + routed / ffn.dp + gathered
        else:
            weights = side + ffn_shared + routed
        weights_B = weights * precision.weight_bytes

        peaks = [attention_peak] if count else []
        peaks += [dense_peak] if n_dense else []
        peaks += [moe_peak] if n_moe else []
        peaks += [logits_peak] if last else []
        activations_B = (residual + max(peaks, default=0)) * ACTIVATION_BUFFERS * precision.activation_bytes

        kv_B = count * kv_layer_B
        total_B = weights_B + kv_B + activations_B
        if worst is None or total_B > worst[0]:
            worst = (total_B, stage, weights_B, kv_B, activations_B)
    _, stage, weights_B, kv_B, activations_B = worst
    return MemoryFootprint(weights_B=weights_B, kv_cache_B=kv_B, activations_B=activations_B, stage=stage)


def memory_footprint(scenario: Scenario, plan: Strategy | Schedule, capacity_B: float | None = None,
                     reserve: float = MEMORY_RESERVE) -> MemoryFootprint:
    """DRAM needed by the most loaded device (paper §4.2.3 memory-footprint check), in bytes.

    - Weights: the stage's layers (vLLM split, :func:`pipeline_stage_layers`); attention / TP, dense FFN / TP,
      routed experts / (EP·TP), shared experts / TP; router, norms and MLA down-projections replicated;
      vocab-parallel embeddings on the first stage and LM head + final norm on the last. With FSDP, weights
      are sharded over DP (DP·EP for non-expert weights) plus one fully gathered layer (the shards alone under
      the paper set, :func:`~deepstack.models.assumptions.fsdp_counts_gathered_layer`). Every parameter is
      stored at ``precision.weight_bytes`` (norms and router kept wider in practice are a rounding error).
    - KV cache: ⌈batch / (DP·EP)⌉ requests × ⌈tokens / (SP·CP)⌉ × per-token elements per layer (split by TP
      for GQA/MQA/MHA, MLA latent replicated) × layers × ``precision.kv_bytes``, plus DSA's FP8 indexer keys
      (:meth:`~deepstack.schema.llm.Attention.indexer_cache_bytes_per_token`); tokens = input + output in
      decode, input in prefill. Ring-style SP keeps each rank's own K/V shard like CP does. In prefill the
      cache grows chunk by chunk; it is counted full, as it stands after the last chunk.
    - Activations: tokens in flight × (residual + the largest block's live elements: attention, SwiGLU FFN,
      MoE with dispatch buffers, or the last stage's logits) × :data:`ACTIVATION_BUFFERS` ×
      ``precision.activation_bytes``; in flight: in decode one token per request of one PP microbatch (the
      schedule's count, else the pipeline's depth: the fewest a tuned count takes), in prefill one chunk's
      tokens (:func:`prefill_chunks`) under the budget :func:`budget_for` gives.

    Args:
        scenario: The workload (model, phase, batch, lengths, precision).
        plan: A flat :class:`Strategy` or a (possibly per-module) :class:`Schedule`.
        capacity_B: DRAM per device, bytes: a prefill without a budget of its own runs with the largest
            automatic one that fits it (:func:`budget_for`); None: vLLM's default.
        reserve: Fraction of DRAM kept free.

    Returns:
        The footprint of the pipeline stage with the largest total.
    """
    layout = _layout(plan, scenario.phase)
    if scenario.phase == "decode":
        return _footprint(assumptions.without_kv_length(scenario), layout, None)  # counted at the end of generation
    return _footprint(scenario, layout, budget_for(scenario, layout, capacity_B, reserve))


def budget_for(scenario: Scenario, layout: _Layout, capacity_B: float | None, reserve: float) -> int:
    """The prefill budget ``layout`` runs ``scenario`` with on ``capacity_B`` of DRAM (:func:`choose_budget`
    with this memory check)."""
    limit = None if capacity_B is None else usable_capacity_B(capacity_B, reserve)
    return choose_budget(scenario, capacity_B,
                         lambda budget: _footprint(scenario, layout, budget).total_B <= limit)


def _smallest_footprint(scenario: Scenario, layout: _Layout) -> MemoryFootprint:
    """The footprint at the smallest budget the scenario may run with (the scenario's own, or the floor of the
    automatic ones): the footprint only shrinks as the budget does, so a plan fits iff this fits."""
    if scenario.phase == "decode":
        return _footprint(scenario, layout, None)
    return _footprint(scenario, layout, scenario.prefill_chunk_tokens or MIN_PREFILL_CHUNK_TOKENS)


def _check_capacity(capacity_B: float, reserve: float) -> None:
    if not capacity_B > 0:
        raise UserInputError(f"capacity_B: must be > 0 bytes (got {capacity_B})")
    if not 0 <= reserve < 1:
        raise UserInputError(f"reserve: must be in [0, 1) (got {reserve})")


def usable_capacity_B(capacity_B: float, reserve: float = MEMORY_RESERVE) -> float:
    """DRAM a schedule may use: (1 − reserve) × capacity, in bytes (paper §4.2.3: 10 % kept free)."""
    _check_capacity(capacity_B, reserve)
    return (1 - reserve) * capacity_B


def fits(scenario: Scenario, plan: Strategy | Schedule, capacity_B: float, reserve: float = MEMORY_RESERVE) -> bool:
    """Whether the most loaded device's footprint fits in ``(1 − reserve) × capacity_B`` (a prefill without a
    budget of its own: under some automatic budget, :func:`prefill_budget`).

    Args:
        scenario: The workload.
        plan: A flat strategy or a schedule.
        capacity_B: DRAM per device, bytes.
        reserve: Fraction kept free (default 10 %, docs/calibration.md §1).
    """
    needed_B = _smallest_footprint(scenario, _layout(plan, scenario.phase)).total_B
    return needed_B <= usable_capacity_B(capacity_B, reserve)


# --------------------------------------------------------------------------------------------------------
# Composer
# --------------------------------------------------------------------------------------------------------


@memo.cached(maxsize=64)  # (scenario, N, capacity) triples: one search touches a few
def _feasible(
    scenario: Scenario, n: int, capacity_B: float | None, reserve: float, memory_batch: int | None
) -> tuple[tuple[Strategy, ...], tuple[tuple[str, int], ...]]:
    limit = None if capacity_B is None else usable_capacity_B(capacity_B, reserve)
    held = scenario if memory_batch is None else scenario.model_copy(update={"batch": memory_batch})
    kept: list[Strategy] = []
    dropped = dict.fromkeys([name for name, _ in PRUNING_RULES] + [MEMORY_RULE], 0)
    for strategy in enumerate_strategies(n):
        pruned = prune_reason(scenario, strategy)
        if pruned is not None:
            dropped[pruned[0]] += 1
        elif limit is not None and _smallest_footprint(held, _layout(strategy, scenario.phase)).total_B > limit:
            dropped[MEMORY_RULE] += 1
        else:
            kept.append(strategy)
    return tuple(kept), tuple((name, count) for name, count in dropped.items() if count)


def feasible_strategies(
    scenario: Scenario, n: int, capacity_B: float | None, reserve: float = MEMORY_RESERVE,
    memory_batch: int | None = None,
) -> tuple[tuple[Strategy, ...], dict[str, int]]:
    """The strategies on ``n`` devices that survive every pruning rule and, if given a capacity, fit in DRAM
    (:func:`fits`: a prefill without a budget of its own fits under some automatic budget).

    Args:
        scenario: The workload.
        n: Number of devices.
        capacity_B: DRAM per device in bytes, or None to apply the rules only.
        reserve: Fraction of DRAM kept free (default 10 %).
        memory_batch: The requests the memory check counts (None: the scenario's batch); a GPU's vLLM runs a
            batch whose KV cache does not fit a place at a time, so one request is what it must hold.

    Returns:
        (kept strategies in enumeration order, {rule name: strategies it dropped}); each dropped strategy is
        counted once, under the first rule of :data:`PRUNING_RULES` that fires, or under ``"memory"``.
        Rules that dropped nothing are left out.
    """
    kept, dropped = _feasible(scenario, n, capacity_B, reserve, memory_batch)
    return kept, dict(dropped)


def representative_stages(layers: int, pp: int, dense_layers: int) -> tuple[int, ...]:
    """Pipeline stages whose composition differs (first, last, dense-prefix, each MoE stage size)."""
    sizes = pipeline_stage_layers(layers, pp)
    starts = tuple(itertools.accumulate(sizes, initial=0))
    return _representative_stages(sizes, starts, dense_layers)
