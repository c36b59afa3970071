"""Kernels and host work a serving framework spends per decoder layer and per step on a GPU (docs/model.md §GPU
execution).

Counted from vLLM's model implementations as they ran in 2025 (V1 engine; vllm/model_executor/models/llama.py,
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


# ---- Llama (BF16, llama.py) ---------------------------------------------------------------------------------
# LlamaAttention: kernels fused_add_rms_norm, qkv GEMM, rotary, reshape_and_cache_flash, decode attention (split-KV
# + combine), o_proj GEMM, custom all-reduce. Host ops (18): fused_add_rms_norm; qkv F.linear; qkv.split;
# cos_sin_cache.to + rotary_embedding; Attention.forward: output torch.empty, q/k/v/output .view (4),
# unified_attention_with_output; FlashAttentionImpl: kv_cache.unbind, reshape_and_cache_flash,
# flash_attn_varlen_func, output .view; o_proj F.linear; all-reduce: torch.empty_like + custom_ar all_reduce
GQA_ATTENTION = Kernels(8, 8, 0, 18)
# LlamaMLP: fused_add_rms_norm, gate_up GEMM, silu_and_mul (+ its torch.empty), down GEMM, all-reduce (2 host ops)
DENSE_MLP = Kernels(5, 5, 0, 7)

# ---- DeepSeek-V3 (block-FP8 weights, deepseek_v2.py) ---------------------------------------------------------
# One block-FP8 linear (apply_w8a8_block_fp8_linear, CUTLASS block-scaled GEMM on sm100): host ops input.view,
# torch.empty x_q and x_s, torch.empty out, cutlass_scaled_mm, output.to(dtype), output.view (7); the
# per_token_group_quant_fp8 before it is a Triton launch. Kernels: quant + GEMM.
FP8_LINEAR = Kernels(2, 2, 1, 7)
# DeepseekV2MLAAttention + the MLA decode backend (Triton MLA). Kernels (graph 21): fused_add_rms_norm, q_a (2),
# q_a_layernorm, q_b (2), kv_a (2), kv_c contiguous copy, kv_a_layernorm, rotary (compiled: 1), q_pe copy-back,
# concat_and_cache_mla, q·W_UK bmm, MLA decode (2: split-KV + reduce, Triton), o·W_UV bmm, output copy, o_proj
# (2), custom all-reduce. Eager: DeepseekScalingRotaryEmbedding runs its native forward (cos_sin_cache index,
# repeat_interleave ×2, and for q and k: x·cos, _rotate_gptj's neg + stack, ·sin, add: 14 kernels, not 1).
# Host ops besides the 4 linears (4 × 7): fused_add_rms_norm; q_a_layernorm (empty_like + rms_norm);
# kv split, .contiguous, kv_a_layernorm (2); q.view, k_pe.unsqueeze, q[..., nope:] slice; rotary (24: q/k rot
# slices 2, cache index 1, chunk 1, cos/sin repeat_interleave + unsqueeze 4, per q and k: mul, _rotate_gptj's
# 2 slices + neg + stack + flatten, mul, add = 8 × 2); q_pe setitem; the MLA attention (28: output empty, 3
# views, output view, unified_attention_with_output, 4 slices to the actual tokens, decode slice,
# concat_and_cache_mla, q split, _k_up_proj transpose + bmm + transpose, Triton MLA's q cat, o zeros,
# attn_logits and lse empty, cache unsqueeze and slice, _v_up_proj view + transpose + bmm + transpose + reshape,
# output setitem); all-reduce (2)
MLA_ATTENTION = Kernels(13, 26, 2, 65) + FP8_LINEAR.times(4)
# DeepseekV2MoE + FusedMoE (fused_moe.py). Kernels (graph 19): fused_add_rms_norm, router GEMM (BF16), grouped
# top-k (compiled: 3), moe_align_block_size, quant (Triton), fused_moe w13 (Triton), silu_and_mul, quant
# (Triton), fused_moe w2 (Triton), moe_sum, shared expert gate_up (2) + silu_and_mul + down (2), routed scale,
# routed + shared add, custom all-reduce; eager: the grouped top-k as 10 kernels (sigmoid, bias add, group top-2
# sum, group top-k, scatter mask, masked_fill, top-k, gather, normalise, scale).
# Host ops besides the 2 shared-expert linears (2 × 7): fused_add_rms_norm; hidden view; silu_and_mul (+ empty);
# router F.linear; moe_forward custom op; grouped_topk (15: sigmoid, unsqueeze + bias add, view, topk(2),
# sum, topk over groups, zeros_like, scatter_, unsqueeze + expand + reshape, masked_fill, topk, gather, sum +
# div); fused_experts (22: inplace_fused_experts op, cache13 empty + 3 views, intermediate_cache2 empty, 3 chunk
# slices, moe_align_block_size's 3 empties + fill_ + op, per GEMM the quant's 2 empties, silu_and_mul view +
# op, moe_sum view + op); routed scale, shared add, all-reduce (2), output view
MOE_BLOCK = Kernels(15, 23, 4, 48) + FP8_LINEAR.times(2)
# a block-FP8 dense MLP (DeepSeek's first layers): norm, gate_up, silu_and_mul (+ empty), down, all-reduce
DENSE_MLP_FP8 = Kernels(3, 3, 0, 5) + FP8_LINEAR.times(2)
# once per step: embedding (TP vocab mask ops, F.embedding, all-reduce), final norm, lm_head GEMM, logits
# all-gather, sampler (temperature, softmax, top-k/p masks, argmax: 5), input and position copies (3); host ops
# of the model's forward outside the layers (embedding 9, final norm 2, lm_head and gather 4)
PER_STEP = Kernels(12, 12, 0, 15)


def layer_kernels(model: LLM, kind: str, block_fp8: bool) -> Kernels:
    """Kernels and host ops of one decoder layer of ``kind`` ("dense" or "moe")."""
    mla = model.attention.kind == "mla"
    attention = MLA_ATTENTION if mla else GQA_ATTENTION
    if kind == "moe":
        return attention + MOE_BLOCK
    return attention + (DENSE_MLP_FP8 if block_fp8 else DENSE_MLP)


def step_kernels(model: LLM, layers: dict[str, int], block_fp8: bool) -> Kernels:
    """Kernels and host ops of one decode step of ``layers`` ({kind: count}) on one device, per-step ones
    included."""
    total = PER_STEP
    for kind, count in layers.items():
        if kind in ("dense", "moe"):
            total = total + layer_kernels(model, kind, block_fp8).times(count)
    return total
