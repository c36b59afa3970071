"""Per-device workload graph of one transformer forward pass (prefill or one decode step).

The operators themselves (:class:`Gemm`, :class:`Attention`, :class:`Vector`, :class:`Choice`) are defined in
:mod:`.operators` and used from here. Shapes are those one device sees under a schedule (paper §3.3.1): TP
splits heads and FFN/expert intermediates,
EP splits routed experts (acting as DP for attention and dense layers), SP and CP split the tokens of the
linear layers, CP also splits the KV cache, DP splits requests, PP splits layers. Collectives are added by the
distributed model; this module lists compute operators only.

MoE load. Routed experts are not equally popular: a model's ``hot_expert_load`` (the measured max / mean tokens
per expert of a step; 1 for uniform routing) sets a power law in popularity rank, p_r ∝ r^−s with Σ p_r = k, the
probability that a token picks the r-th most popular expert (:func:`expert_pick_probabilities`). Tokens of a
step come from independent requests, so the distinct experts a step of T tokens touches are Σ_r 1 − (1 − p_r)^T
(E·(1 − (1 − k/E)^T) when uniform). The busiest device of an EP group receives, by the balls-into-bins bound of
Raab & Steger (RANDOM 1998), mean + sqrt(2·mean·ln(ep)) routed tokens (uniform placement of the load);
``moe_load_imbalance`` is that ratio to the mean.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from deepstack.models import memo
from deepstack.models.assumptions import reads_all_local_experts
from deepstack.models.compute.operators import (
    RMSNORM_FLOPS_PER_ELEMENT,
    ROPE_FLOPS_PER_ELEMENT,
    SILU_MUL_FLOPS_PER_ELEMENT,
    SOFTMAX_FLOPS_PER_ELEMENT,
    TOPK_FLOPS_PER_ELEMENT,
    Attention,
    Choice,
    Gemm,
    Op,
    Vector,
)
from deepstack.models.hashing import cached_hash, state_without_hash
from deepstack.models.parallel.chunks import boundary_tokens
from deepstack.models.parallel.strategies import pipeline_stage_layers
from deepstack.schema import LLM, Scenario
from deepstack.schema.schedule import ModuleParallel, dense_on_attention


@dataclass(frozen=True)
class DeviceShare:
    """What one device computes: tokens of its linear layers, requests and context of its attention."""

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    tokens: int  # tokens through the linear layers per forward
    requests: int  # requests whose attention this device computes
    q_len: int  # queries per request and head on this device
    kv_len: int  # keys visible per request on this device (decode: its CP shard of the cache)
    layers: int  # layers of this pipeline stage
    dense_layers: int
    moe_layers: int
    first_stage: bool
    last_stage: bool
    q_span: int = 1  # positions of the context the queries are spread over, ending at the last key
    head_split: int = 1  # the attention heads (after TP) are split this many ways (Ulysses SP in prefill)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@memo.cached(maxsize=16384)
def device_share(model: LLM, scenario: Scenario, attention: ModuleParallel, pp: int, stage: int = 0,
                 context_len: int | None = None) -> DeviceShare:
    """Split the scenario over one device; SP and CP split the tokens of the linear layers in both phases.

    Decode: every request contributes one token and sees ``context_len`` cached tokens (default: the mean over
    the generation, input + output/2), of which CP (and SP) ranks hold a shard each (flash decoding across
    ranks).

    Prefill: each request's ``input_len`` new tokens attend causally to ``context_len`` keys (default: the
    same tokens; a chunk also sees the keys its earlier chunks cached) and sit at the end of them. CP (ring or
    all-gather attention, load-balanced zig-zag as in Megatron-LM and Llama 3) gives each rank ⌈S / CP⌉ of the
    S queries, spread evenly over the S positions, and every key through the ring: S(S + 1)/(2·CP) pairs per
    rank and head for a whole prompt. Ulysses SP (an all-to-all after the projections) gives each rank every
    query and key of ⌈heads / SP⌉ heads.
    """
    requests = ceil_div(scenario.batch, attention.replicas)
    tokens = ceil_div(requests * (1 if scenario.phase == "decode" else scenario.input_len),
                      attention.sp * attention.cp)
    if scenario.phase == "decode":
        q_len = q_span = head_split = 1
        kv = context_len if context_len is not None else decode_context(scenario)
        kv_local = ceil_div(kv, attention.cp * attention.sp)
    else:
        q_span, head_split = scenario.input_len, attention.sp
        q_len = ceil_div(q_span, attention.cp)
        kv_local = max(context_len or 0, q_span)
    sizes = pipeline_stage_layers(model.layers, pp)
    first = sum(sizes[:stage])
    last = first + sizes[stage]
    dense = max(0, min(last, model.dense_layers) - first)
    return DeviceShare(tokens=max(tokens, 1), requests=requests, q_len=q_len, kv_len=kv_local, layers=last - first,
                       dense_layers=dense, moe_layers=(last - first) - dense, first_stage=stage == 0,
                       last_stage=stage == pp - 1, q_span=q_span, head_split=head_split)


@memo.cached(maxsize=16384)
def ffn_share(model: LLM, scenario: Scenario, attention: ModuleParallel, ffn: ModuleParallel, pp: int,
              stage: int = 0, context_len: int | None = None) -> DeviceShare:
    """One FFN device's share under a per-module schedule (the attention's under a flat one). Tokens cross the
    module boundary one by one, not request by request: in prefill the FFN's replicas split the stage's prompt
    tokens evenly, ⌈batch · input_len / (DP · EP · SP · CP)⌉ each, even when there are fewer prompts than
    replicas. (In decode a request is one token, so the two splits agree.)"""
    share = device_share(model, scenario, ffn, pp, stage, context_len)
    if ffn == attention or scenario.phase == "decode":
        return share
    tokens = boundary_tokens(scenario.batch * scenario.input_len, ffn.replicas * ffn.sp * ffn.cp)
    return replace(share, tokens=tokens)


def decode_context(scenario: Scenario) -> int:
    """Cached tokens each request attends to in a decode step: the scenario's ``decode_kv_len``, else the mean
    over the generation (input + output/2)."""
    if scenario.decode_kv_len is not None:
        return scenario.decode_kv_len
    return scenario.input_len + scenario.output_len // 2


def moe_load_imbalance(mean_tokens: float, ep: int) -> float:
    """Busiest / mean device load of an EP group under uniform routing (Raab & Steger balls-into-bins)."""
    if ep <= 1 or mean_tokens <= 0:
        return 1.0
    return 1.0 + math.sqrt(2.0 * math.log(ep) / mean_tokens)


@memo.cached(maxsize=64)
def expert_pick_probabilities(experts: int, top_k: int, hot_expert_load: float) -> tuple[float, ...]:
    """Probability that one token picks each routed expert, most popular first: p_r ∝ r^−s, Σ p_r = ``top_k``,
    with the exponent s that gives the most popular expert ``hot_expert_load`` × the mean load (bisection:
    the ratio E / Σ r^−s grows with s from 1 at s = 0 to E)."""
    ranks = [float(r) for r in range(1, experts + 1)]

    def powers(s: float) -> list[float]:  # r^-s for every rank (map: 3× faster than a generator, the same floats)
        return list(map(pow, ranks, itertools.repeat(-s, experts)))

    def hot_ratio(s: float) -> float:
        return experts / math.fsum(powers(s))
    low, high = 0.0, 64.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if hot_ratio(mid) < hot_expert_load else (low, mid)
    weights = powers(low)
    total = math.fsum(weights)
    return tuple(top_k * w / total for w in weights)


def expected_active_experts(experts: int, top_k: int, tokens: float, hot_expert_load: float = 1.0) -> float:
    """Expected distinct experts hit by ``tokens`` independent tokens each routing to ``top_k`` distinct experts
    (uniformly, or by the popularity law of ``hot_expert_load``)."""
    if hot_expert_load == 1.0:
        return experts * (1.0 - (1.0 - top_k / experts) ** tokens)
    return math.fsum(1.0 - (1.0 - p) ** tokens for p in expert_pick_probabilities(experts, top_k, hot_expert_load))


@memo.cached(maxsize=16384)  # schedules that share a device's attention share its operators
def _attention_ops(model: LLM, t: int, requests: int, q_len: int, kv_len: int, tp: int, phase: str, a: float,
                   w: float, kv: float, q_span: int = 1, head_split: int = 1) -> tuple[Op, ...]:
    """Projections and core of one attention block (per layer) for ``t`` tokens and ``requests`` requests of
    ``q_len`` queries spread over the last ``q_span`` of ``kv_len`` visible tokens (a device's share:
    only these, so every stage shares them). The core computes ⌈heads / head_split⌉ of the heads TP leaves
    (Ulysses SP); the projections work on the device's ``t`` tokens with all of them."""
    att = model.attention
    d = model.hidden
    hq = att.heads_per_device(tp)
    span = q_span if q_span > q_len else None  # None: the queries are the last q_len positions
    ops: list[Op] = [Vector("attn_norm", t * d, t * d * a, t * d * a, RMSNORM_FLOPS_PER_ELEMENT, 1.0 / d)]
    if att.kind != "mla":
        hkv = att.kv_heads_per_device(tp)
        hd = att.head_dim
        ops.append(Gemm("qkv_proj", t, (hq + 2 * hkv) * hd, d, a_bytes=a, b_bytes=w, c_bytes=a))
        norm = RMSNORM_FLOPS_PER_ELEMENT if att.qk_norm else 0
        ops.append(Vector("rope", t * (hq + hkv) * hd, t * (hq + hkv) * hd * a, t * (hq + 2 * hkv) * hd * kv,
                          ROPE_FLOPS_PER_ELEMENT + norm))
        # a KV head shared by more SP ranks than it has query heads is replicated on each of them
        groups = ceil_div(hkv, head_split)
        ops.append(Attention("attention", phase, requests, q_len, kv_len, ceil_div(ceil_div(hq, head_split), groups),
                             groups, hd, hd, 2 * hd * kv, act_bytes=a, q_span=span))
        ops.append(Gemm("o_proj", t, d, hq * hd, a_bytes=a, b_bytes=w, c_bytes=a, epilogue_vector_flops=1,
                        epilogue_read_bytes=a))
        return _interned_ops(ops)
    # MLA (DeepSeek-V3): low-rank query and a compressed KV latent; the latent is cached (kv_lora + rope dims)
    q_rank, c_rank = att.q_lora_rank, att.kv_lora_rank
    nope, rope, vd = att.qk_nope_head_dim, att.qk_rope_head_dim, att.v_head_dim
    if q_rank:
        ops.append(Gemm("q_a_proj", t, q_rank, d, a_bytes=a, b_bytes=w, c_bytes=a))
        ops.append(Vector("q_a_norm", t * q_rank, t * q_rank * a, t * q_rank * a, RMSNORM_FLOPS_PER_ELEMENT))
        ops.append(Gemm("q_b_proj", t, hq * (nope + rope), q_rank, a_bytes=a, b_bytes=w, c_bytes=a))
    else:
        ops.append(Gemm("q_proj", t, hq * (nope + rope), d, a_bytes=a, b_bytes=w, c_bytes=a))
    ops.append(Gemm("kv_a_proj", t, c_rank + rope, d, a_bytes=a, b_bytes=w, c_bytes=a))
    ops.append(Vector("kv_a_norm_rope", t * (c_rank + rope), t * (c_rank + rope) * a, t * (c_rank + rope) * kv,
                      RMSNORM_FLOPS_PER_ELEMENT + ROPE_FLOPS_PER_ELEMENT))
    latent_bytes = (c_rank + rope) * kv
    if att.sparse:
        ops.extend(_indexer_ops(att, d, t, requests, q_len, kv_len, span, phase, a, w))
    ops.extend(_mla_core(t, requests, q_len, kv_len, span, phase, hq, ceil_div(hq, head_split), c_rank, nope, rope,
                         vd, a, w, latent_bytes, att.index_topk))
    ops.append(Gemm("o_proj", t, d, hq * vd, a_bytes=a, b_bytes=w, c_bytes=a, epilogue_vector_flops=1,
                    epilogue_read_bytes=a))
    return _interned_ops(ops)


def _indexer_ops(att, d: int, t: int, r: int, q_len: int, kv_len: int, q_span: int | None, phase: str, a: float,
                 w: float) -> list[Op]:
    """DeepSeek Sparse Attention's lightning indexer for ``t`` tokens (DeepSeek-V3.2-Exp tech report §2.1; vLLM
    ``Indexer``), replicated on every TP rank: all its heads on every device.

    Its queries come from the query latent (wq_b: q_lora_rank → heads · head_dim, at the weights' precision) and
    its one key per token and its per-head weights from the hidden state (wk and weights_proj, one BF16 GEMM in
    vLLM); the key is normalised, rotated, quantised to FP8 and written to the indexer's cache. Then every query
    scores every key it may see (causally, no top-k cap) with its FP8 heads: an MQA of ``heads`` query heads over
    one key stream of 132 B per token and no values, ReLU · weight summed over the heads (``softmax`` False).
    The FP32 logits are written and read back by the top-k selection, which writes top-k int32 indices per query.
    """
    h, hd, topk = att.index_n_heads, att.index_head_dim, att.index_topk
    cache_B = att.indexer_cache_bytes_per_token()
    scored = Attention("indexer_logits", phase, r, q_len, kv_len, h, 1, hd, 0, cache_B, act_bytes=1.0,
                       q_span=q_span, softmax=False)
    logits = r * q_len * scored.keys_per_query  # one FP32 logit per query and key it may see
    return [
        Gemm("indexer_q_proj", t, h * hd, att.q_lora_rank, a_bytes=a, b_bytes=w, c_bytes=a),
        Gemm("indexer_k_weights_proj", t, hd + h, d, a_bytes=a, b_bytes=2.0, c_bytes=a),  # BF16 in vLLM
        # LayerNorm on k, RoPE on q's and k's rope dims, FP8 quantisation of q (heads · hd) and of k into the cache
        Vector("indexer_norm_rope_quant", t * (h + 1) * hd, t * (h + 1) * hd * a, t * ((h * hd) + cache_B),
               RMSNORM_FLOPS_PER_ELEMENT + ROPE_FLOPS_PER_ELEMENT),
        scored,
        # top-k of each query's logits: the logits written by the scoring kernel and read here, top-k indices out
        Vector("indexer_topk", logits, 2 * logits * 4.0, r * q_len * min(topk, kv_len) * 4.0, TOPK_FLOPS_PER_ELEMENT),
    ]


def _mla_core(t: int, r: int, q_len: int, kv_len: int, q_span: int | None, phase: str, hq: int, heads: int,
              c_rank: int, nope: int, rope: int, vd: int, a: float, w: float, latent_bytes: float,
              topk: int | None = None) -> list[Op]:
    """MLA attention in the absorbed and the non-absorbed form; the evaluator times both and keeps the faster.
    The core attends for ``heads`` of the ``hq`` heads (fewer under Ulysses SP); absorbing and un-absorbing
    work on the device's ``t`` tokens with all ``hq`` (the same work as S / (SP·CP) queries of hq / SP heads).

    Absorbed: fold W_UK into the query and W_UV after the output, attend over the latent (MQA-like, one KV
    stream shared by all heads). Non-absorbed: decompress every visible token into per-head K and V
    (kv_b_proj) and run ordinary MHA — cheap when the context is only the new tokens (prefill), costly in
    decode; under CP every rank decompresses all the keys it sees.

    Sparse (``topk``, DSA): every query attends to at most ``topk`` latent entries the indexer selected, gathered
    from the cache, in the absorbed form only (FlashMLA's sparse kernels run MQA over the latent in prefill and
    decode alike; a non-absorbed form would decompress keys no query reads).
    """
    absorbed: list[Op] = [
        Gemm("q_absorb", t, c_rank, nope, groups=hq, a_bytes=a, b_bytes=w, c_bytes=a),
        Attention("attention_mla_absorbed", phase, r, q_len, kv_len, heads, 1, c_rank + rope, c_rank,
                  latent_bytes, act_bytes=a, q_span=q_span, topk=topk),
        Gemm("v_unabsorb", t, vd, c_rank, groups=hq, a_bytes=a, b_bytes=w, c_bytes=a),
    ]
    if topk is not None:
        return [Choice("mla_core", (("absorbed, sparse", _interned_ops(absorbed)),))]
    kv_tokens = r * kv_len
    plain: list[Op] = [
        Gemm("kv_b_proj", kv_tokens, heads * (nope + vd), c_rank, a_bytes=latent_bytes / (c_rank + rope),
             b_bytes=w, c_bytes=a),
        Attention("attention_mla_plain", phase, r, q_len, kv_len, 1, heads, nope + rope, vd,
                  (nope + rope + vd) * a, act_bytes=a, q_span=q_span),
    ]

    # the options' operators interned too: other attention shapes repeat these GEMMs, and memo tables and the
    # GEMM batches of a phase then find them by identity
    return [Choice("mla_core", (("absorbed", _interned_ops(absorbed)), ("non-absorbed", _interned_ops(plain))))]


@memo.cached(maxsize=16384)
def _ffn_ops(model: LLM, t: int, ffn: ModuleParallel, a: float, w: float, moe: bool,
             group_tokens: int | None = None, shared_on: tuple[int, int] | None = None,
             all_local: bool = False) -> tuple[Op, ...]:
    """The FFN (dense or MoE) of one layer for ``t`` tokens; ``group_tokens``: the distinct tokens the EP group
    routes (default ``t`` × EP); ``shared_on``: the (TP, tokens) the shared experts run with (default the FFN's);
    ``all_local``: every local expert's weights are read, not only the expected active ones' (the paper set)."""
    d = model.hidden
    tp = ffn.tp
    ops: list[Op] = [Vector("ffn_norm", t * d, t * d * a, t * d * a, RMSNORM_FLOPS_PER_ELEMENT, 1.0 / d)]
    if not moe:
        inter = ceil_div(model.dense_intermediate, tp)
        ops.append(Gemm("gate_up_proj", t, 2 * inter, d, a_bytes=a, b_bytes=w, c_bytes=a,
                        epilogue_vector_flops=SILU_MUL_FLOPS_PER_ELEMENT / 2, epilogue_sfu_ops=0.5))
        ops.append(Gemm("down_proj", t, d, inter, a_bytes=a, b_bytes=w, c_bytes=a, epilogue_vector_flops=1,
                        epilogue_read_bytes=a))
        return _interned_ops(ops)
    m = model.moe
    experts = m.routed_experts
    ops.append(Gemm("router", t, experts, d, a_bytes=a, b_bytes=w, c_bytes=4.0))
    ops.append(Vector("topk_gate", t * experts, t * experts * 4.0, t * m.top_k * 8.0,
                      math.log2(max(m.top_k, 2)) + 2, 1.0))
    ep = ffn.ep
    local_experts = max(1, experts // ep)
    # tokens of the whole EP group are routed; each device receives their slots for its local experts
    group_tokens = group_tokens or t * ep
    mean_slots = group_tokens * m.top_k / ep
    slots = math.ceil(mean_slots * moe_load_imbalance(mean_slots, ep))
    active = max(1.0, expected_active_experts(experts, m.top_k, group_tokens, m.hot_expert_load)
                 * local_experts / experts)
    groups = local_experts if all_local else max(1, min(local_experts, round(active)))
    per_expert = max(1, math.ceil(slots / groups))
    inter = ceil_div(m.expert_intermediate, tp)
    ops.append(Vector("moe_dispatch", slots * d, t * d * a, slots * d * a, 0.0))
    ops.append(Gemm("expert_gate_up", per_expert, 2 * inter, d, groups=groups, a_bytes=a, b_bytes=w, c_bytes=a,
                    epilogue_vector_flops=SILU_MUL_FLOPS_PER_ELEMENT / 2, epilogue_sfu_ops=0.5))
    ops.append(Gemm("expert_down", per_expert, d, inter, groups=groups, a_bytes=a, b_bytes=w, c_bytes=a))
    ops.append(Vector("moe_combine", t * m.top_k * d, slots * d * a, t * d * a, 2.0))
    if m.shared_experts:
        shared_tp, shared_t = shared_on or (tp, t)
        shared = ceil_div(m.shared_experts * m.expert_intermediate, shared_tp)
        ops.append(Gemm("shared_gate_up", shared_t, 2 * shared, d, a_bytes=a, b_bytes=w, c_bytes=a,
                        epilogue_vector_flops=SILU_MUL_FLOPS_PER_ELEMENT / 2, epilogue_sfu_ops=0.5))
        ops.append(Gemm("shared_down", shared_t, d, shared, a_bytes=a, b_bytes=w, c_bytes=a, epilogue_vector_flops=1,
                        epilogue_read_bytes=a))
    return _interned_ops(ops)


@dataclass(frozen=True)
class LayerOps:
    """Operators of one layer kind, and how many such layers the device runs."""

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    kind: str  # "dense", "moe", "embedding", "lm_head"
    layers: int
    ops: tuple[Op, ...]


@memo.cached(maxsize=65536)
def _interned(item):
    """The first of equal operators (or layers) built: memo tables keyed on them then find them by identity
    instead of comparing equal ones field by field (each schedule builds its own, mostly equal, operators)."""
    return item


def _interned_ops(ops) -> tuple[Op, ...]:
    return tuple(_interned(op) for op in ops)


def _layer(kind: str, layers: int, ops: tuple) -> LayerOps:
    """A layer of interned operators (the memoised builders below intern theirs once, when they make them)."""
    return _interned(LayerOps(kind, layers, ops))


@memo.cached(maxsize=16384)
def build_workload(model: LLM, scenario: Scenario, attention: ModuleParallel, ffn: ModuleParallel, pp: int,
                   stage: int = 0, context_len: int | None = None, moe_mode: str = "none") -> tuple[LayerOps, ...]:
    """Operators of one forward pass on one device of pipeline stage ``stage``; ``context_len``: the keys each
    request attends to (:func:`device_share`; a prefill chunk's include those of its earlier chunks).
    ``moe_mode`` "replace_only": only the routed experts take the FFN layout; dense FFN layers, shared experts
    and the vocabulary-parallel embedding and head run on the attention's (Schedule.moe_mode)."""
    prec = scenario.precision
    a, w, kv = prec.activation_bytes, prec.weight_bytes, prec.kv_bytes
    share = device_share(model, scenario, attention, pp, stage, context_len)
    phase = scenario.phase
    attn = _attention_ops(model, share.tokens, share.requests, share.q_len, share.kv_len, attention.tp, phase, a, w,
                          kv, share.q_span, share.head_split)
    out: list[LayerOps] = []
    if share.first_stage:
        d = model.hidden
        out.append(_layer("embedding", 1, _interned_ops((Vector("embedding", share.tokens * d, share.tokens * d * w,
                                                                  share.tokens * d * a, segment_bytes=d * w),))))
    # the FFN's tokens per device follow its own layout: a per-module schedule whose FFN has more (fewer)
    # replicas than its attention splits (gathers) the tokens at the module boundary, as its collectives do
    ffn_tokens = ffn_share(model, scenario, attention, ffn, pp, stage, context_len).tokens
    # an EP group routes the distinct tokens its devices hold: its EP devices' FFN shares; in decode only real
    # requests' tokens, replicas beyond a step's requests holding padding (docs/model.md §13). (A prefill
    # micro-batch of prompt slices counts one slice per replica, not the step's requests: no cap there.)
    group_tokens = ffn_tokens * ffn.ep
    if phase == "decode":
        group_tokens = min(group_tokens, ceil_div(scenario.batch, ffn.dp * ffn.sp * ffn.cp))
    dense, dense_tokens = (attention, share.tokens) if dense_on_attention(moe_mode) else (ffn, ffn_tokens)
    if share.dense_layers:
        out.append(_layer("dense", share.dense_layers, attn + _ffn_ops(model, dense_tokens, dense, a, w, False)))
    if share.moe_layers:
        out.append(_layer("moe", share.moe_layers, attn + _ffn_ops(model, ffn_tokens, ffn, a, w, True, group_tokens,
                                                                   (dense.tp, dense_tokens),
                                                                   reads_all_local_experts(scenario))))
    if share.last_stage:
        d = model.hidden
        rows = share.requests if phase == "prefill" else share.tokens  # logits of the last position only
        vocab = ceil_div(model.vocab, dense.tp)
        out.append(_layer("lm_head", 1, _interned_ops((
            Vector("final_norm", rows * d, rows * d * a, rows * d * a, RMSNORM_FLOPS_PER_ELEMENT, 1.0 / d),
            Gemm("lm_head", rows, vocab, d, a_bytes=a, b_bytes=w, c_bytes=4.0),
            Vector("sampling", rows * vocab, rows * vocab * 4.0, rows * 8.0, SOFTMAX_FLOPS_PER_ELEMENT, 1.0),
        ))))
    return tuple(out)
