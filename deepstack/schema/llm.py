"""LLM architecture: dense and MoE transformers with MHA/GQA/MQA/MLA attention (docs/calibration.md §2)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_serializer, model_validator

from deepstack.schema.base import Frozen, Sourced

INDEXER_QUANT_BLOCK = 128  # elements per FP32 scale of the indexer's FP8 keys (vLLM Indexer.quant_block_size)


class Attention(Frozen):
    """Attention block shape. MLA fields follow DeepSeek-V3's ``config_671B.json``."""

    kind: Literal["mha", "gqa", "mqa", "mla"]
    heads: int = Field(ge=1, le=4096)
    kv_heads: int = Field(ge=1, le=4096)
    head_dim: int = Field(ge=1, le=4096, description="q/k/v head dim (MLA: ignored, see the MLA fields)")
    qk_norm: bool = Field(False, description="per-head RMSNorm on q and k (Qwen3)")
    q_lora_rank: int | None = Field(None, ge=1, description="MLA: query down-projection rank (None = direct)")
    kv_lora_rank: int | None = Field(None, ge=1, description="MLA: compressed KV latent dimension")
    qk_nope_head_dim: int | None = Field(None, ge=1)
    qk_rope_head_dim: int | None = Field(None, ge=1)
    v_head_dim: int | None = Field(None, ge=1)
    # DeepSeek Sparse Attention (DeepSeek-V3.2-Exp config.json; docs/model.md §5): a lightning indexer of
    # index_n_heads FP8 heads of index_head_dim scores every cached token, and MLA attends to the index_topk best
    index_n_heads: int | None = Field(None, ge=1, description="DSA: lightning-indexer heads (None: dense attention)")
    index_head_dim: int | None = Field(None, ge=1, description="DSA: lightning-indexer head dimension")
    index_topk: int | None = Field(None, ge=1, description="DSA: tokens each query attends to (top-k of the indexer)")

    @model_validator(mode="after")
    def _consistent(self) -> Attention:
        if self.kind == "mha" and self.kv_heads != self.heads:
            raise ValueError(f"kv_heads must equal heads ({self.heads}) for MHA")
        if self.kind == "mqa" and self.kv_heads != 1:
            raise ValueError("kv_heads must be 1 for MQA")
        if self.kind == "gqa" and self.heads % self.kv_heads:
            raise ValueError(f"kv_heads must divide heads ({self.heads}) for GQA")
        mla = (self.kv_lora_rank, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim)
        if self.kind == "mla" and any(v is None for v in mla):
            raise ValueError("MLA needs kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim")
        dsa = (self.index_n_heads, self.index_head_dim, self.index_topk)
        if any(v is not None for v in dsa):
            if any(v is None for v in dsa):
                raise ValueError("sparse attention needs index_n_heads, index_head_dim and index_topk together")
            if self.kind != "mla" or not self.q_lora_rank:
                raise ValueError("sparse attention (index_*) is DeepSeek's DSA: it needs kind = \"mla\" and "
                                 "q_lora_rank (the indexer's queries come from the query latent)")
        return self

    @model_serializer(mode="wrap")
    def _without_dense_indexer(self, handler):
        # dense attention writes what it wrote before the indexer fields existed
        data = handler(self)
        if data.get("index_topk") is None:
            for key in ("index_n_heads", "index_head_dim", "index_topk"):
                data.pop(key, None)
        return data

    @property
    def sparse(self) -> bool:
        """DeepSeek Sparse Attention: a lightning indexer selects the ``index_topk`` tokens each query sees."""
        return self.index_topk is not None

    def indexer_parameters(self, hidden: int) -> int:
        """Weights of one layer's lightning indexer, replicated on every TP rank (vLLM ``Indexer``: "no tensor
        parallel, just replicated"): wq_b (q_lora_rank → heads · head_dim), wk (hidden → head_dim),
        weights_proj (hidden → heads) and the key LayerNorm (weight and bias). 0 without DSA."""
        if not self.sparse:
            return 0
        h, d = self.index_n_heads, self.index_head_dim
        return self.q_lora_rank * h * d + hidden * d + hidden * h + 2 * d

    def indexer_cache_bytes_per_token(self) -> float:
        """Bytes of the indexer's key cache per token and layer: the key in FP8 (1 B per element) and one FP32
        scale per 128-element block (DeepSeek-V3.2-Exp tech report: the indexer runs in FP8; vLLM
        ``DeepseekV32IndexerCache``: head_dim + head_dim // 128 · 4 = 132 B). 0 without DSA."""
        if not self.sparse:
            return 0.0
        return self.index_head_dim * 1.0 + math.ceil(self.index_head_dim / INDEXER_QUANT_BLOCK) * 4.0

    @property
    def qk_head_dim(self) -> int:
        if self.kind == "mla":
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim

    @property
    def v_dim(self) -> int:
        return self.v_head_dim if self.kind == "mla" else self.head_dim

    def parameter_count(self, hidden: int, tp: int = 1) -> int:
        """Weights of one attention block (projections and norms inside it) on one device under TP = ``tp``.

        Heads are split by TP; a GQA/MQA device holds ⌈kv_heads / tp⌉ KV heads (replicated when tp > kv_heads).
        MLA: the query and KV down-projections (``q_a``, ``kv_a`` and their norms) are replicated across TP, and
        the up-projections (``q_b``, ``kv_b``) and the output projection are split by heads, as in vLLM's
        ``deepseek_v2.py`` (``ReplicatedLinear`` for the ``*_a_proj`` layers). ``tp=1``: the whole block.
        """
        h = self.heads_per_device(tp)
        if self.kind == "mla":
            if self.q_lora_rank:
                q = hidden * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * h * self.qk_head_dim
            else:
                q = hidden * h * self.qk_head_dim
            kv_a = hidden * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            kv_b = self.kv_lora_rank * h * (self.qk_nope_head_dim + self.v_head_dim)
            o = h * self.v_head_dim * hidden
            return q + kv_a + kv_b + o + self.indexer_parameters(hidden)
        q = hidden * h * self.head_dim
        kv = 2 * hidden * self.kv_heads_per_device(tp) * self.head_dim
        o = h * self.head_dim * hidden
        norms = 2 * self.head_dim if self.qk_norm else 0
        return q + kv + o + norms

    def heads_per_device(self, tp: int) -> int:
        """Query heads one of ``tp`` TP ranks computes: ⌈heads / tp⌉ (a rank beyond the heads still has one)."""
        return -(-self.heads // tp)

    def kv_heads_per_device(self, tp: int) -> int:
        """KV heads one of ``tp`` TP ranks holds: ⌈kv_heads / tp⌉ (replicated when tp > kv_heads)."""
        return -(-self.kv_heads // tp)

    def kv_cache_elements_per_token(self, tp: int = 1) -> int:
        """KV-cache elements one of ``tp`` TP ranks stores per token and layer: GQA/MQA/MHA keep their share of
        the KV heads; MLA caches the latent and the RoPE key, shared by all heads, so every rank keeps them all.
        The one law for the KV width: the memory check, the cache's traffic and the collectives that move KV."""
        if self.kind == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_heads_per_device(tp) * self.head_dim


class MoE(Frozen):
    """Mixture-of-experts FFN (SwiGLU experts)."""

    routed_experts: int = Field(ge=2, le=65536)
    shared_experts: int = Field(0, ge=0, le=64)
    top_k: int = Field(ge=1, le=64)
    expert_intermediate: int = Field(ge=1)
    first_dense_layers: int = Field(0, ge=0, description="leading layers with a dense FFN instead of MoE")
    router_bias: bool = Field(False, description="per-expert correction bias (DeepSeek-V3 aux-loss-free routing)")
    hot_expert_load: float = Field(
        1.0, ge=1.0, description="measured load of the most popular routed expert over the mean (max / mean tokens "
        "per expert in a step, without expert load balancing); 1 is uniform routing")

    @model_validator(mode="after")
    def _top_k(self) -> MoE:
        if self.top_k > self.routed_experts:
            raise ValueError(f"top_k must be ≤ routed_experts ({self.routed_experts})")
        if self.hot_expert_load > self.routed_experts / self.top_k:
            raise ValueError(f"hot_expert_load must be ≤ routed_experts / top_k ({self.routed_experts / self.top_k:g}):"
                             " an expert cannot be picked by more than every token")
        return self


class LLM(Sourced):
    """A decoder-only transformer. ``published_params_B`` is the vendor's total, for cross-checking."""

    kind: Literal["llm"] = "llm"
    hidden: int = Field(ge=1, le=1_000_000)
    layers: int = Field(ge=1, le=10_000)
    vocab: int = Field(ge=1, le=10_000_000)
    tied_embeddings: bool = False
    attention: Attention
    dense_intermediate: int | None = Field(None, ge=1, description="SwiGLU intermediate of dense FFN layers")
    moe: MoE | None = None
    default_precision: str = "a16w16"
    published_params_B: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _ffn(self) -> LLM:
        if self.moe is None and self.dense_intermediate is None:
            raise ValueError("a dense model needs dense_intermediate")
        if self.moe and self.moe.first_dense_layers and self.dense_intermediate is None:
            raise ValueError("moe.first_dense_layers > 0 needs dense_intermediate")
        if self.moe and self.moe.first_dense_layers > self.layers:
            raise ValueError(f"moe.first_dense_layers must be ≤ layers ({self.layers})")
        return self

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def dense_layers(self) -> int:
        return self.layers if self.moe is None else self.moe.first_dense_layers

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers

    def dense_ffn_parameters(self) -> int:
        return 3 * self.hidden * (self.dense_intermediate or 0)

    def moe_parameters(self) -> int:
        """One MoE block: routed + shared SwiGLU experts and the router."""
        m = self.moe
        experts = (m.routed_experts + m.shared_experts) * 3 * self.hidden * m.expert_intermediate
        router = self.hidden * m.routed_experts + (m.routed_experts if m.router_bias else 0)
        return experts + router

    def embedding_parameters(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    def parameter_count(self) -> int:
        """Total weights: embeddings, attention, FFN/MoE and the RMSNorms (2 per layer + final)."""
        per_layer_common = self.attention.parameter_count(self.hidden) + 2 * self.hidden
        total = self.layers * per_layer_common + self.hidden + self.embedding_parameters()
        total += self.dense_layers * self.dense_ffn_parameters()
        if self.moe is not None:
            total += self.moe_layers * self.moe_parameters()
        return total

    def active_parameter_count(self) -> int:
        """Weights one token touches (top-k + shared experts instead of all experts)."""
        if self.moe is None:
            return self.parameter_count()
        m = self.moe
        inactive = (m.routed_experts - m.top_k) * 3 * self.hidden * m.expert_intermediate
        return self.parameter_count() - self.moe_layers * inactive
