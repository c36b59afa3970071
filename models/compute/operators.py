"""The operators of a workload graph: what each computes and moves, not how long it takes (the timing models in
:mod:`.gemm`, :mod:`.attention` and :mod:`.vector` time them; :mod:`.workload` lists them per device).
"""

from __future__ import annotations

from dataclasses import dataclass

from deepstack.models.hashing import cached_hash, state_without_hash

KV_PAGE_TOKENS = 16  # vLLM's default KV-cache block size: pages of 16 tokens set the DRAM transaction size
RMSNORM_FLOPS_PER_ELEMENT = 4  # square, accumulate, scale by rsqrt, scale by weight
ROPE_FLOPS_PER_ELEMENT = 3  # two multiplies and an add per rotated element (sin/cos precomputed)
SILU_MUL_FLOPS_PER_ELEMENT = 4  # x·sigmoid(x) needs add + div + mul, then · up
SOFTMAX_FLOPS_PER_ELEMENT = 4  # max, subtract, sum, scale (exp on the SFU)
TOPK_FLOPS_PER_ELEMENT = 2  # radix select of a row's top-k (vLLM top_k_per_row): a histogram pass and a filter pass


@dataclass(frozen=True)
class Gemm:
    """C[m×n] = A[m×k] · B[k×n], ``groups`` independent instances (experts, heads). B is a weight when
    ``weight`` is set (read from DRAM), otherwise an activation."""

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    name: str
    m: int
    n: int
    k: int
    groups: int = 1
    a_bytes: float = 2.0
    b_bytes: float = 2.0
    c_bytes: float = 2.0
    weight: bool = True
    epilogue_vector_flops: float = 0.0  # per output element (bias, activation, residual), fusable
    epilogue_sfu_ops: float = 0.0
    epilogue_read_bytes: float = 0.0  # per output element (e.g. the residual)
    count: int = 1

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.groups


@dataclass(frozen=True)
class Attention:
    """Attention core. ``kv_groups`` groups of ``q_per_group`` query heads each share one K/V stream.
    ``kv_token_bytes`` is what one token of one group occupies in the cache (MLA: the latent).

    Where the queries sit in the context decides the causal work: the device's ``q_len`` queries of a request
    are spread evenly over the last ``q_span`` of its ``kv_len`` positions. ``q_span`` None (the default) or
    ``q_len``: they are the last ``q_len`` positions, as a whole prompt, a prefill chunk after the keys of its
    earlier chunks, or a decode token. ``q_span`` > ``q_len``: a share of the span's queries spread over it, as
    context parallelism deals them out (load-balanced zig-zag: each rank a chunk from each end).
    """

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    name: str
    phase: str
    requests: int
    q_len: int  # query tokens per request (1 in decode)
    kv_len: int  # cached tokens per request visible on this device
    q_per_group: int
    kv_groups: int
    qk_dim: int
    v_dim: int
    kv_token_bytes: float
    act_bytes: float = 2.0
    causal: bool = True
    count: int = 1
    q_span: int | None = None  # positions the queries are spread over, ending at the last key (None: q_len)
    # sparse attention (DSA): each query attends to at most ``topk`` of the keys it may see, gathered one token at
    # a time from the cache (None: all of them, read in pages)
    topk: int | None = None
    # False: the scores are not softmax-normalised nor multiplied by V (DSA's lightning indexer: ReLU, a per-head
    # weight and a sum over the heads, ``v_dim`` 0), so no exponentials and no split-KV merge
    softmax: bool = True

    def __post_init__(self) -> None:
        if not self.q_len <= self.span <= self.kv_len:
            raise ValueError(f"{self.name}: needs q_len ≤ q_span ≤ kv_len (got {self.q_len}, {self.span}, "
                             f"{self.kv_len})")

    @property
    def span(self) -> int:
        return self.q_span or self.q_len

    @property
    def scores(self) -> float:
        """Query–key pairs evaluated. Causally, the query at position p (1-based) sees p keys; queries spread
        evenly over the last ``span`` of ``kv_len`` positions sit at kv_len − span + (span + 1)/2 on average:
        q·(kv − q) + q(q + 1)/2 for the last q positions, q·(kv + 1)/2 spread over the whole context."""
        pairs = self.q_len * self.kv_len
        if self.topk is not None:
            return self.requests * self.kv_groups * self.q_per_group * self.keys_per_query * self.q_len
        if self.causal and self.span > 1:
            pairs = self.q_len * (self.kv_len - self.span) + self.q_len * (self.span + 1) / 2
        return self.requests * self.kv_groups * self.q_per_group * pairs

    @property
    def keys_per_query(self) -> float:
        """Keys one query attends to, on average. Sparse (``topk``): the query at position p sees min(p, topk)
        keys, so the mean over the span's positions kv − span + 1 … kv of min(p, topk); decode: min(kv, topk).
        Dense: kv − (span − 1)/2 (the causal mean; kv when the queries are the last one)."""
        if self.topk is None:
            return self.kv_len - (self.span - 1) / 2 if self.causal else float(self.kv_len)
        first = self.kv_len - self.span + 1 if self.causal else self.kv_len
        return capped_position_sum(first, self.kv_len, self.topk) / (self.kv_len - first + 1)

    @property
    def flops(self) -> float:
        return 2.0 * self.scores * (self.qk_dim + self.v_dim)


@dataclass(frozen=True)
class Vector:
    """Element-wise / reduction operator on the vector and SFU units."""

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    name: str
    elements: float
    read_bytes: float
    write_bytes: float
    vector_flops: float = 0.0  # per element
    sfu_ops: float = 0.0  # per element
    segment_bytes: float = 0.0  # contiguous bytes per access (0: one contiguous stream)
    count: int = 1


@dataclass(frozen=True)
class Choice:
    """Alternative implementations of one step; the evaluator times each and keeps the fastest."""

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    name: str
    options: tuple[tuple[str, tuple], ...]  # (label, ops)
    count: int = 1


Op = Gemm | Attention | Vector | Choice


def capped_position_sum(first: int, last: int, cap: int) -> int:
    """Σ_{p = first}^{last} min(p, cap): the keys the queries at positions first … last (1-based) attend to
    when each sees its p causal keys but at most ``cap`` of them (DSA's top-k)."""
    below = max(0, min(last, cap) - first + 1)  # positions p ≤ cap see all their p keys
    low_sum = below * (first + first + below - 1) // 2
    return low_sum + (last - first + 1 - below) * cap
