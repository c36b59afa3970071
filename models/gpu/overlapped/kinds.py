"""The five distributed kernels of the paper's Fig. 8 (Triton-distributed on 8×H100), each from its mechanics.

Shapes follow ``validation/h100_kernels.csv`` (``shape_notes``): dimensions are per GPU unless said otherwise.
``p`` is the number of GPUs the kernel spans. What each kernel runs is read from Triton-distributed's
``python/triton_dist/kernels/nvidia`` (ByteDance, MIT licence; docs/model.md, "Distributed kernels").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from deepstack.models import memo
from deepstack.models.compute.operators import Gemm
from deepstack.models.compute.overlap import overlap_time_s
from deepstack.models.gpu.overlapped.core import (
    KernelConstants,
    Tile,
    compute_device,
    dtype_info,
    gemm_time,
    stream_time_s,
    transfer,
)
from deepstack.models.hardware.device import DeviceSpec
from deepstack.schema.hardware import GpuExecution

# kernel launches and device-wide barriers on each kernel's critical path (counted in Triton-distributed's code)
LAUNCHES = {
    "ag-gemm": 3,  # barrier_all, local copy of the own shard into the gather buffer, barrier_all; then the GEMM
    "gemm-rs": 3,  # the GEMM; after the scatter a barrier_all, then the ring-reduce kernel
    "moe-gemm-ar": 4,  # barrier_all, grouped GEMM, top-k reduce + all-reduce kernel beside it, barrier_all
    "ep-dispatch": 5,  # bincount + splits exchange, host poll of the receive counts, dispatch, two barrier_all
    "ulysses": 2,  # all-to-all kernel beside the GEMM, then a barrier
}


@dataclass(frozen=True)
class KernelTime:
    """The time of one distributed kernel and what it is made of.

    Attributes:
        kind: the kernel kind.
        time_s: the kernel's time, s.
        ranks: GPUs the kernel spans.
        comm_B: bytes one GPU sends to the others (payload), B.
        parts: (name, seconds) of the terms, in the order they add up (overlapped terms named as such).
        gemm: the GEMM's tiling and waves ("" without one).
    """

    kind: str
    time_s: float
    ranks: int
    comm_B: float
    parts: tuple[tuple[str, float], ...]
    gemm: str = ""

    def as_dict(self) -> dict:
        return {"kind": self.kind, "time_s": self.time_s, "ranks": self.ranks, "comm_B": self.comm_B,
                "parts": {name: seconds for name, seconds in self.parts}, "gemm": self.gemm}


@dataclass(frozen=True)
class Context:
    """What every kind's model gets: the device, the network, the launch settings and the constants."""

    dev: DeviceSpec
    network: object
    devices: int
    tile: Tile | None
    dtype: str
    comm_sms: int
    constants: KernelConstants  # with the system's figures filled in (KernelConstants.on)
    gpu: GpuExecution  # the system's GPU figures (fabric efficiency, launch-and-flag latency)
    hbm_Bps: float  # HBM bandwidth a streaming kernel achieves (the system's gpu.hbm_efficiency × peak)

    @property
    def elem_B(self) -> float:
        return dtype_info(self.dtype)[0]

    def launches_s(self, kind: str) -> float:
        return LAUNCHES[kind] * self.constants.launch_overhead_s


def _pipelined(gemm_s: float, chunks: int, comm) -> float:
    """Eq. 5 over ``chunks`` chunks: the GEMM consumes (or produces) one rank's chunk at a time while the copies
    move the others; the copies' fixed step costs count with their bandwidth time."""
    return float(overlap_time_s(chunks, gemm_s, comm.time_s - comm.latency_s, comm.latency_s))


def _gemm(name: str, m: int, n: int, k: int, ctx: Context):
    """The kernel's GEMM (A, B and C in the kernel's dtype, B a weight) on the SMs communication leaves."""
    e = ctx.elem_B
    dev = compute_device(ctx.dev, ctx.comm_sms, ctx.constants, ctx.dtype)
    return gemm_time(Gemm(name, m, n, k, a_bytes=e, b_bytes=e, c_bytes=e, weight=True), dev, ctx.tile)


def ag_gemm(shape: dict, ctx: Context) -> KernelTime:
    """All-gather + GEMM: A (M × K, M gathered over p GPUs) times the local B (K × N, N per GPU). The copy engine
    pulls the p − 1 remote shards one peer after another (``cp_engine_producer_all_gather_full_mesh_pull``: no SM
    taken), the persistent GEMM starts on the own shard and waits on each shard's ready flag."""
    m, n, k, p = shape["m"], shape["n"], shape["k"], ctx.devices
    g = _gemm("ag_gemm", m, n, k, ctx)
    shard_B = m / p * k * ctx.elem_B
    # p−1 pulls of a shard
    comm = transfer("all_to_all", shard_B * p, p, ctx.network, "pairwise", ctx.constants, ctx.gpu)
    local_s = stream_time_s("ag_local_copy", shard_B, shard_B, ctx.dev, ctx.hbm_Bps)
    pipe_s = _pipelined(g.time_s, p, comm)
    parts = (("launches", ctx.launches_s("ag-gemm")), ("local_copy", local_s), ("gemm+gather (eq. 5)", pipe_s),
             ("ref: gemm alone", g.time_s), ("ref: gather alone", comm.time_s))
    return KernelTime("ag-gemm", parts[0][1] + local_s + pipe_s, p, shard_B * (p - 1), parts,
                      f"{g.config}, {g.waves} waves")


def gemm_rs(shape: dict, ctx: Context) -> KernelTime:
    """GEMM + reduce-scatter: C (M × N) = A (M × K, K per GPU) · B; rank r's rows of every GPU's partial C are
    summed on rank r. The GEMM computes the chunk of rank r+1 first; as each chunk finishes, the copy engine
    pushes it to its owner (``intra_node_scatter``: p copies, one local; no SM taken intra-node); after a
    barrier a ring-reduce kernel sums the p partial chunks in HBM."""
    m, n, k, p = shape["m"], shape["n"], shape["k"], ctx.devices
    g = _gemm("gemm_rs", m, n, k, ctx)
    chunk_B = m / p * n * ctx.elem_B
    comm = transfer("all_to_all", chunk_B * p, p, ctx.network, "pairwise", ctx.constants, ctx.gpu)
    local_s = stream_time_s("rs_local_copy", chunk_B, chunk_B, ctx.dev, ctx.hbm_Bps)  # own chunk, in HBM
    pipe_s = _pipelined(g.time_s, p, comm) + local_s
    reduce_s = stream_time_s("rs_ring_reduce", p * chunk_B, chunk_B, ctx.dev, ctx.hbm_Bps)
    parts = (("launches", ctx.launches_s("gemm-rs")), ("gemm+scatter (eq. 5)", pipe_s), ("reduce", reduce_s),
             ("ref: gemm alone", g.time_s), ("ref: scatter alone", comm.time_s))
    return KernelTime("gemm-rs", parts[0][1] + pipe_s + reduce_s, p, chunk_B * (p - 1), parts,
                      f"{g.config}, {g.waves} waves")


@memo.cached(maxsize=1024)
def expected_blocks(tokens: int, experts: int, topk: int, block: int) -> float:
    """Expected row blocks of ``block`` rows one expert's tokens fill: each token picks ``topk`` distinct experts
    of ``experts`` uniformly, so an expert's count is Binomial(tokens, topk/experts), and the grouped GEMM pads
    each expert's rows to a whole block (the sorted, block-padded token ids of Triton's fused MoE)."""
    q = topk / experts
    total, log_q, log_1q = 0.0, math.log(q), math.log1p(-q) if q < 1 else -math.inf
    for x in range(tokens + 1):
        if q >= 1:
            return math.ceil(tokens / block)
        log_pmf = math.lgamma(tokens + 1) - math.lgamma(x + 1) - math.lgamma(tokens - x + 1) + x * log_q + (
            tokens - x) * log_1q
        total += math.exp(log_pmf) * math.ceil(x / block)
    return total


MOE_N_CHUNKS = 4  # run_moe_reduce_ar's n_chunks in Triton-distributed's test_moe_reduce_ar.py


def moe_gemm_ar(shape: dict, ctx: Context) -> KernelTime:
    """MoE down-projection + top-k reduce + all-reduce under TP (Triton-distributed ``run_moe_reduce_ar``): every
    GPU holds all experts with 1/p of the intermediate dimension. The grouped GEMM runs tokens·topk gathered rows
    (each expert's rows padded to whole row blocks) × hidden × intermediate/p, one non-persistent program per
    tile, column chunk after column chunk; beside it a kernel on the communication SMs sums each token's topk rows
    of a finished chunk and pulls the p partial sums of it from every GPU (SM loads over NVLink: a one-shot
    all-reduce).

    Time: the GEMM's tile waves at the Triton rate, each wave refilling its pipeline (one DRAM access latency: a
    non-persistent program cannot prefetch its successor's operands), plus every HBM byte of the kernel at the
    achievable bandwidth — each expert's weight shard once, the gathered rows once per column chunk, the
    top-k-expanded output written and read back by the reduce, the partial sums written, read by the p GPUs and
    the result written. With one 128×128 program per SM (its accumulators fill the register file) and K of a few
    hundred, a tile's operand stream is not hidden behind its few MMAs, so compute and HBM add; the pull of the
    partial sums overlaps the next chunk (eq. 5 over the chunks)."""
    t, h, i, ex, kk = (shape[name] for name in ("tokens", "hidden", "intermediate", "experts", "topk"))
    p = ctx.devices
    if kk > ex:
        raise ValueError(f"topk ({kk}) must be ≤ experts ({ex})")
    e = ctx.elem_B
    dev = compute_device(ctx.dev, ctx.comm_sms, ctx.constants, ctx.dtype)
    block = ctx.tile.m if ctx.tile else 128
    rows = max(block, round(ex * expected_blocks(t, ex, kk, block)) * block)  # padded rows of all experts
    k_shard = math.ceil(i / p)
    g = gemm_time(Gemm("moe_down", rows, h, k_shard, a_bytes=e, b_bytes=e, c_bytes=e, weight=True), dev, ctx.tile)
    compute_s = g.compute_s + g.waves * ctx.dev.dram.access_latency_s
    expanded_B = t * kk * h * e
    hbm_B = (ex * k_shard * h * e + MOE_N_CHUNKS * t * kk * k_shard * e + 2 * expanded_B
             + (2 + p) * t * h * e)
    hbm_s = hbm_B / ctx.hbm_Bps
    comm = transfer("all_to_all", p * t * h * e, p, ctx.network, "direct", ctx.constants, ctx.gpu, sm_issued=True)
    pipe_s = _pipelined(compute_s + hbm_s, MOE_N_CHUNKS, comm)
    parts = (("launches", ctx.launches_s("moe-gemm-ar")), ("gemm+reduce+all-reduce (eq. 5)", pipe_s),
             ("ref: gemm compute", compute_s), ("ref: hbm", hbm_s), ("ref: all-reduce pull", comm.time_s))
    return KernelTime("moe-gemm-ar", parts[0][1] + pipe_s, p, t * h * e * (p - 1), parts,
                      f"{g.config}, {g.waves} waves, {rows} padded rows")


def ep_dispatch(shape: dict, ctx: Context) -> KernelTime:
    """Expert-parallel all-to-all dispatch (Triton-distributed ``EPAll2AllLayer.dispatch``): the tokens are copied
    into the symmetric send buffer; the expert counts are exchanged and polled by the host to size the receive
    buffer; every GPU sends each of its tokens to the GPU of each of the token's topk experts, once per (token,
    expert) pair (``kernel_dispatch_token``: one warp put per pair, no de-duplication per destination GPU), so a
    GPU sends tokens·topk·hidden·bytes, (p−1)/p of it to other GPUs under uniform routing, by SM-issued puts;
    after two barriers the received tokens (as many as sent, under uniform routing) are copied out of the
    symmetric buffer (the layer's copy "kept for stress testing")."""
    t, h, ex, kk, p = shape["tokens"], shape["hidden"], shape["experts"], shape["topk"], ctx.devices
    if kk > ex:
        raise ValueError(f"topk ({kk}) must be ≤ experts ({ex})")
    send_B = t * kk * h * ctx.elem_B
    comm = transfer("all_to_all", send_B, p, ctx.network, "direct", ctx.constants, ctx.gpu, sm_issued=True)
    copy_in_s = stream_time_s("ep_copy_in", t * h * ctx.elem_B, t * h * ctx.elem_B, ctx.dev, ctx.hbm_Bps)
    copy_out_s = stream_time_s("ep_copy_out", send_B, send_B, ctx.dev, ctx.hbm_Bps)
    parts = (("launches", ctx.launches_s("ep-dispatch")), ("copy in", copy_in_s),
             ("all-to-all (direct)", comm.time_s), ("copy out", copy_out_s))
    return KernelTime("ep-dispatch", sum(s for _, s in parts), p, send_B * (p - 1) / p, parts)


def ulysses(shape: dict, ctx: Context) -> KernelTime:
    """Ulysses sequence parallelism, attention output: an all-to-all turns head-sharded outputs (all positions,
    heads/sp) into sequence-sharded ones (seq/sp positions, all heads) on ``comm_sms`` SMs, overlapped with the
    output projection (batch·seq/sp × out_features × heads·head_dim) on the other SMs, one source rank's part
    at a time (eq. 5 over sp chunks)."""
    b, s, nh, hd, out, sp = (shape[name] for name in ("batch", "seq", "heads", "head_dim", "out_features", "sp"))
    if s % sp or nh % sp:
        raise ValueError(f"seq ({s}) and heads ({nh}) must be multiples of sp ({sp})")
    g = _gemm("ulysses_out_proj", b * s // sp, out, nh * hd, ctx)
    send_B = b * s * nh * hd * ctx.elem_B / sp
    comm = transfer("all_to_all", send_B, sp, ctx.network, "direct", ctx.constants, ctx.gpu, sm_issued=True)
    pipe_s = _pipelined(g.time_s, sp, comm)
    parts = (("launches", ctx.launches_s("ulysses")), ("gemm+all-to-all (eq. 5)", pipe_s),
             ("ref: gemm alone", g.time_s), ("ref: all-to-all alone", comm.time_s))
    return KernelTime("ulysses", parts[0][1] + pipe_s, sp, send_B * (sp - 1) / sp, parts,
                      f"{g.config}, {g.waves} waves")


# kind → (model, shape fields in flag order, default comm SMs: 0 where copy engines move the data)
KINDS: dict[str, tuple[Callable[[dict, Context], KernelTime], tuple[str, ...], int]] = {
    "ag-gemm": (ag_gemm, ("m", "n", "k"), 0),
    "gemm-rs": (gemm_rs, ("m", "n", "k"), 0),
    "moe-gemm-ar": (moe_gemm_ar, ("tokens", "hidden", "intermediate", "experts", "topk"), 0),
    "ep-dispatch": (ep_dispatch, ("tokens", "hidden", "experts", "topk"), 0),
    "ulysses": (ulysses, ("batch", "seq", "heads", "head_dim", "out_features", "sp"), 16),
}
