"""Kernels and host work a serving framework spends per decoder layer and per step on a GPU (docs/model.md §GPU
execution).

Counted from vLLM's model implementations as they ran in 2025 (V1 engine; vllm/model_executor/models/llama.py, qwen3.py,
deepseek_v2.py, layers/fused_moe/fused_moe.py, layers/quantization/utils/fp8_utils.py, the MLA attention backend,
layers/rotary_embedding.py) for a decode step, four counts per part of a layer:

* ``graph``: kernels inside the CUDA graph (torch.compile fuses the element-wise chains: rotary, grouped top-k);
* ``eager``: GPU kernels launched one by one (vLLM ``--enforce-eager``: no torch.compile of the model);
* ``triton``: Triton JIT kernel launches among them, each paying Triton's Python launcher (``TRITON_LAUNCH_S``);
* ``host_ops``: every other PyTorch call the step makes from Python, at the level where the host spends its time:
  ATen ops that launch a kernel, views/reshapes/slices/casts/allocations that launch none but still cross the
  dispatcher, and custom C++ ops (``torch.ops._C``), ``eager_op_us`` each.

Each tuple below is (graph, eager, triton, host_ops); the comments list what is counted.
"""

from __future__ import annotations

from typing import NamedTuple

from deepstack.schema import LLM


class Kernels(NamedTuple):
    graph: int
    eager: int
    triton: int
    host_ops: int = 0

    def __add__(self, other):  # element-wise, so parts of a layer add up
        return Kernels(*(a + b for a, b in zip(self, other, strict=True)))

    def times(self, n: int) -> Kernels:
        return Kernels(*(n * a for a in self))


# ---- shared parts ---------------------------------------------------------------------------------------------
# fused_add_rms_norm: one kernel, one custom op
NORM = Kernels(1, 1, 0, 1)
# the TP all-reduce (vLLM's custom all-reduce): one kernel; torch.empty_like + the custom op
ALL_REDUCE = Kernels(1, 1, 0, 2)
# a BF16 linear: one GEMM, one F.linear
BF16_LINEAR = Kernels(1, 1, 0, 1)
# one block-FP8 linear (apply_w8a8_block_fp8_linear, CUTLASS block-scaled GEMM on sm100): host ops input.view,
# torch.empty x_q and x_s, torch.empty out, cutlass_scaled_mm, output.to(dtype), output.view (7); the
# per_token_group_quant_fp8 before it is a Triton launch. Kernels: quant + GEMM.
FP8_LINEAR = Kernels(2, 2, 1, 7)
# silu_and_mul: one kernel; its torch.empty + the op
SILU_AND_MUL = Kernels(1, 1, 0, 2)

# ---- attention -------------------------------------------------------------------------------------------------
# LlamaAttention (llama.py) besides its norm, its two linears (qkv, o_proj) and its all-reduce: kernels rotary,
# reshape_and_cache_flash, decode attention (split-KV + combine); host ops (13): qkv.split;
# cos_sin_cache.to + rotary_embedding; Attention.forward: output torch.empty, q/k/v/output .view (4),
# unified_attention_with_output; FlashAttentionImpl: kv_cache.unbind, reshape_and_cache_flash,
# flash_attn_varlen_func, output .view
GQA_CORE = Kernels(4, 4, 0, 13)
# Qwen3's per-head q and k RMSNorm (qwen3.py): for each of q and k a view, the norm (torch.empty_like + rms_norm)
# and a view back: 2 kernels, 8 host ops
QK_NORM = Kernels(2, 2, 0, 8)
# DeepseekV2MLAAttention + the MLA decode backend (Triton MLA) besides its four linears (q_a, q_b, kv_a, o_proj).
# Kernels (13): fused_add_rms_norm, q_a_layernorm, kv_c contiguous copy, kv_a_layernorm, rotary (compiled: 1),
# q_pe copy-back, concat_and_cache_mla, q·W_UK bmm, MLA decode (2: split-KV + reduce, Triton), o·W_UV bmm, output
# copy, custom all-reduce. Eager: DeepseekScalingRotaryEmbedding runs its native forward (cos_sin_cache index,
# repeat_interleave ×2, and for q and k: x·cos, _rotate_gptj's neg + stack, ·sin, add: 14 kernels, not 1).
# Host ops (65): fused_add_rms_norm; q_a_layernorm (empty_like + rms_norm); kv split, .contiguous,
# kv_a_layernorm (2); q.view, k_pe.unsqueeze, q[..., nope:] slice; rotary (24: q/k rot slices 2, cache index 1,
# chunk 1, cos/sin repeat_interleave + unsqueeze 4, per q and k: mul, _rotate_gptj's 2 slices + neg + stack +
# flatten, mul, add = 8 × 2); q_pe setitem; the MLA attention (28: output empty, 3 views, output view,
# unified_attention_with_output, 4 slices to the actual tokens, decode slice, concat_and_cache_mla, q split,
# _k_up_proj transpose + bmm + transpose, Triton MLA's q cat, o zeros, attn_logits and lse empty, cache unsqueeze
# and slice, _v_up_proj view + transpose + bmm + transpose + reshape, output setitem); all-reduce (2)
MLA_CORE = Kernels(13, 26, 2, 65)

# DeepSeek Sparse Attention (DeepSeek-V3.2-Exp; vllm deepseek_v2.py Indexer.forward on CUDA, the fused q path, and
# the SparseAttnIndexer custom op's decode path; v1/attention/backends/mla/flashmla_sparse.py) besides the
# indexer's two linears (wq_b at the weights' precision, the fused BF16 wk + weights_proj: counted with the
# linears). Kernels (8): k LayerNorm, fused_indexer_q_rope_quant, rotary of the key's rope part, cat of k,
# indexer_k_quant_and_cache, fp8_paged_mqa_logits (DeepGEMM), top_k_per_row, and the Triton conversion of the
# top-k's request-local indices to cache slots; the MLA decode kernels stay two (FlashMLA sparse split-KV +
# combine instead of Triton MLA's two, which leave the Triton count: -2 + 1). Host ops (22): q view, 2 slices of
# the fused projection, k_norm, split, the fused q op (its 2 empties + call), unsqueeze, empty_like, rotary (2),
# reshape, cat, the indexer custom op and inside it the cache insert, the logits empty + call, the top-k buffer
# slice + fill + call, the index conversion
DSA_INDEXER = Kernels(8, 8, -1, 22)

# ---- attention in a step with prompt tokens (vLLM runs such a step without a CUDA graph) ------------------------
# GQA: the prompt's attention is one flash-attention varlen kernel (no split-KV + combine): 3 kernels, 13 host ops
GQA_PREFILL_CORE = Kernels(3, 3, 0, 13)
# MLA prefill (MLACommonImpl._forward_prefill with the TRT-LLM ragged DeepSeek prefill, vLLM's Blackwell default
# since PR #32339): the latent is expanded to per-head keys and values by kv_b_proj (a fifth linear, counted with
# the linears), then k = cat(k_nope, k_pe expanded), one ragged prefill kernel, the output copy. Kernels: the 7 of
# the decode core before its attention (norms, copies, rotary, cache write), cat, prefill attention, output copy,
# all-reduce = 11 (eager 24: the native rotary's 14 for 1); no Triton. Host ops: the decode core's 65 with its 28
# attention calls replaced by 21 (output empty, 3 views, output view, unified_attention_with_output, 4 slices,
# prefill slice, concat_and_cache_mla, kv view, k/v split, k_pe expand, cat, output and lse empties, the ragged
# call, output flatten, output setitem)
MLA_PREFILL_CORE = Kernels(11, 24, 0, 58)

# ---- MoE block (FusedMoE, fused_moe.py) ------------------------------------------------------------------------
# Every MoE block: kernels fused_add_rms_norm, router GEMM (BF16), moe_align_block_size, fused_moe w13 (Triton),
# silu_and_mul, fused_moe w2 (Triton), moe_sum, custom all-reduce. Host ops (25): fused_add_rms_norm; hidden
# view; router F.linear; moe_forward custom op; fused_experts (18: inplace_fused_experts op, cache13 empty + 3
# views, intermediate_cache2 empty, 3 chunk slices, moe_align_block_size's 3 empties + fill_ + op, silu_and_mul
# view + op, moe_sum view + op); all-reduce (2); output view
MOE_BASE = Kernels(8, 8, 2, 25)
# block-FP8 experts: the per-token-group quant (Triton) before each of the two GEMMs, with its 2 empties
MOE_FP8_QUANT = Kernels(2, 2, 2, 4)
# DeepSeek's grouped top-k over sigmoid scores with the correction bias (grouped_topk; router_bias): compiled
# into 3 kernels; eager 10 (sigmoid, bias add, group top-2 sum, group top-k, scatter mask, masked_fill, top-k,
# gather, normalise, scale); host ops 15 (sigmoid, unsqueeze + bias add, view, topk(2), sum, topk over groups,
# zeros_like, scatter_, unsqueeze + expand + reshape, masked_fill, topk, gather, sum + div)
GROUPED_TOPK = Kernels(3, 10, 0, 15)
# softmax top-k with renormalisation (fused_topk: Mixtral, Qwen3 MoE): the topk_softmax op and the
# renormalising sum and divide (compiled: 1 kernel); host ops: topk_weights, topk_ids and token_expert_indices
# empties, topk_softmax, sum, div_
SOFTMAX_TOPK = Kernels(2, 3, 0, 6)
# DeepSeek's shared expert besides its two linears: silu_and_mul (+ its empty), the routed scaling and the routed
# + shared add (compiled into one kernel with the scaling; eager 2); host ops silu_and_mul 2, scale 1, add 1
SHARED_EXPERT = Kernels(2, 3, 0, 4)

# ---- dense FFN -------------------------------------------------------------------------------------------------
# LlamaMLP (and DeepSeek's first layers) besides its two linears: fused_add_rms_norm, silu_and_mul, all-reduce
DENSE_MLP_CORE = NORM + SILU_AND_MUL + ALL_REDUCE

# once per step: embedding (TP vocab mask ops, F.embedding, all-reduce), final norm, lm_head GEMM, logits
# all-gather, sampler (temperature, softmax, top-k/p masks, argmax: 5), input and position copies (3); host ops
# of the model's forward outside the layers (embedding 9, final norm 2, lm_head and gather 4)
PER_STEP = Kernels(12, 12, 0, 15)


def layer_kernels(model: LLM, kind: str, block_fp8: bool, prefill: bool = False) -> Kernels:
    """Kernels and host ops of one decoder layer of ``kind`` ("dense" or "moe"), assembled from the model's
    attention (MLA or GQA, q/k norm; its prefill form in a step with prompt tokens), FFN (dense, or MoE with its
    routing and shared experts) and linears (BF16 or block-FP8)."""
    linear = FP8_LINEAR if block_fp8 else BF16_LINEAR
    att = model.attention
    if att.kind == "mla":
        attention = MLA_PREFILL_CORE + linear.times(5) if prefill else MLA_CORE + linear.times(4)
        if att.sparse:  # the indexer; its wq_b at the weights' precision, wk + weights_proj one BF16 GEMM
            attention = attention + DSA_INDEXER + linear + BF16_LINEAR
    else:
        core = GQA_PREFILL_CORE if prefill else GQA_CORE
        attention = NORM + core + ALL_REDUCE + linear.times(2) + (QK_NORM if att.qk_norm else Kernels(0, 0, 0))
    if kind != "moe":
        return attention + DENSE_MLP_CORE + linear.times(2)
    moe = model.moe
    ffn = MOE_BASE + (GROUPED_TOPK if moe.router_bias else SOFTMAX_TOPK)
    if block_fp8:
        ffn = ffn + MOE_FP8_QUANT
    if moe.shared_experts:
        ffn = ffn + SHARED_EXPERT + linear.times(2)
    return attention + ffn


def step_kernels(model: LLM, layers: dict[str, int], block_fp8: bool, prefill: bool = False) -> Kernels:
    """Kernels and host ops of one step of ``layers`` ({kind: count}) on one device, per-step ones included: a
    decode step, or (``prefill``) a step with prompt tokens."""
    total = PER_STEP
    for kind, count in layers.items():
        if count and kind in ("dense", "moe"):
            total = total + layer_kernels(model, kind, block_fp8, prefill).times(count)
    return total
