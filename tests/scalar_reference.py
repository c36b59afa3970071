"""Scalar reference models: one GEMM tiling or attention layout at a time, in plain Python arithmetic.

The library times every candidate at once with numpy (deepstack.models.compute.gemm, .attention) and takes its
DRAM laws from deepstack.models.hardware.dram; these are the same laws written out one element at a time, so
tests can check the vectorised code to the last digit (tests/test_vectorised.py). Not used by the library.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from deepstack.models.compute.gemm import Tilings
from deepstack.models.compute.operators import KV_PAGE_TOKENS, Attention, Gemm
from deepstack.models.compute.timing import L2_RESIDENT_SHARE, OpTiming, WaveTiming
from deepstack.models.hardware import dram as dram_model
from deepstack.models.hardware.device import DeviceSpec, DramSpec


def slowest(parts: dict[str, float]) -> str:
    return max(parts, key=parts.get)


def resident(dev: DeviceSpec, bytes_B: float) -> bool:
    return bytes_B <= dev.l2_B * L2_RESIDENT_SHARE


def stream_time_s(dram: DramSpec, total_B: float, segment_B: float) -> float:
    """Time to stream ``total_B`` contiguous bytes as ``segment_B``-byte transactions spread round-robin over the
    banks."""
    if total_B <= 0:
        return 0.0
    piece = max(1.0, min(segment_B, dram.row_B, total_B))  # a longer transaction: its rows, in successive banks
    per_bank = math.ceil(math.ceil(total_B / piece) / dram.banks)
    bank_bw = dram.bank_bw_Bps
    bytes_per_bank = min(per_bank * piece, total_B)
    busy = bytes_per_bank / bank_bw + per_bank * dram.row_overhead_s
    if dram.interleave_ways > 1:
        busy = max(bytes_per_bank / bank_bw, busy / dram.interleave_ways)
    return max(busy, total_B / dram.peak_bw_Bps) / dram.refresh_availability


def dram_time_s(dev: DeviceSpec, bytes_B: float, in_flight_B: float, active_pes: int, bank_s: float) -> float:
    """DRAM time of a wave: the bank-level service time, bounded by peak, Little's law and L1 fill."""
    if bytes_B <= 0:
        return 0.0
    little = max(in_flight_B, 1.0) / dev.dram.access_latency_s if in_flight_B > 0 else math.inf  # writes: posted
    l1_fill = active_pes * dev.l1_bw_B_per_cycle * dev.clock_Hz
    return max(bank_s, bytes_B / min(dev.dram.peak_bw_Bps, little, l1_fill))


@functools.lru_cache(maxsize=262144)
def weight_window_time_s(dram: DramSpec, blocks: int, block_stride_B: int, window_B: int,
                         swizzle: bool) -> tuple[float, int]:
    """Bank service time of ``blocks`` concurrent streams, each reading ``window_B`` contiguous bytes, their
    starts ``block_stride_B`` apart (the tiled layout of a weight's column blocks)."""
    starts = np.arange(blocks, dtype=np.int64) * block_stride_B
    lengths = np.full(blocks, window_B, dtype=np.int64)
    # swizzle: stagger block j by j windows' worth of rows so concurrent streams start on different banks
    offsets = np.arange(blocks, dtype=np.int64) * math.ceil(window_B / dram.row_B) if swizzle else None
    return dram_model.bank_service_time_s(dram, starts, lengths, offsets)


def retime(g: Gemm, dev: DeviceSpec, c: Tilings, i: int, swizzle: bool) -> OpTiming:
    """The timing record of tiling ``i`` of ``c`` from the scalar model (:func:`time_gemm`)."""
    a_res = resident(dev, g.groups * g.m * g.k * g.a_bytes)
    c_res = resident(dev, g.groups * g.m * g.n * g.c_bytes)
    b_res = (not g.weight) and resident(dev, g.groups * g.k * g.n * g.b_bytes)
    return time_gemm(g, dev, int(c.tm[i]), int(c.tn[i]), int(c.tk[i]), int(c.stages[i]), int(c.split[i]),
                      "grouped" if c.grouped[i] else "row", swizzle, a_res, b_res, c_res)


def operand_reads(tm: int, tn: int, mt: int, nt: int, wgmma: bool) -> tuple[int, int]:
    """How many times each A and B byte is read from L1 by the PE's four matrix units."""
    if wgmma:
        return 1, 1
    if tm < 2 * mt:
        return 4, 1
    if tn < 2 * nt:
        return 1, 4
    return 2, 2


def gemm_wave_blocks(tiles: int, row_blocks: int, col_blocks: int, raster: str) -> tuple[int, int]:
    """Distinct A row-blocks and B column-blocks touched by a wave of ``tiles`` consecutive tiles: the blocks of
    the whole groups it covers, and those its remaining tiles touch in one more group."""
    whole, rest = divmod(tiles, row_blocks * col_blocks)
    if rest == 0:
        rows = cols = 0
    elif raster == "grouped" and row_blocks > 1:
        rows = min(row_blocks, max(1, round(math.sqrt(rest)), math.ceil(rest / col_blocks)))
        cols = min(col_blocks, math.ceil(rest / rows))
    else:
        cols = min(col_blocks, rest)
        rows = min(row_blocks, math.ceil(rest / col_blocks))
    return whole * row_blocks + rows, whole * col_blocks + cols


def time_gemm(g: Gemm, dev: DeviceSpec, tm: int, tn: int, tk: int, stages: int, split: int, raster: str,
               swizzle: bool, a_resident: bool, b_resident: bool, c_resident: bool) -> OpTiming:
    mt, nt, kt = dev.min_tile
    k_len = math.ceil(g.k / split)
    row_blocks, col_blocks = math.ceil(g.m / tm), math.ceil(g.n / tn) * split
    tiles = g.groups * row_blocks * col_blocks
    clock = dev.clock_Hz
    # per tile: padded matrix work in minimum tiles, then the fused epilogue (and split-K partial sums)
    mma_cycles = (math.ceil(tm / mt) * math.ceil(tn / nt) * math.ceil(k_len / kt) * 2 * mt * nt * kt
                  / dev.matrix_flops_per_cycle)
    epi_vector = tm * tn * (g.epilogue_vector_flops + (1 if split > 1 else 0))
    epi_cycles = epi_vector / dev.vector_flops_per_cycle + tm * tn * g.epilogue_sfu_ops / dev.sfu_ops_per_cycle
    tile_operand_B = k_len * (tm * g.a_bytes + tn * g.b_bytes)
    # L1 is filled once per operand byte; reads into the matrix units depend on operand sharing: with WGMMA the
    # four units share both operands; otherwise they split the tile 2×2 (each operand read twice) or, when the
    # tile is one minimum tile tall/wide, 4 ways along the other edge (that edge's operand read four times)
    reads_a, reads_b = operand_reads(tm, tn, mt, nt, dev.wgmma)
    l1_fill_B = tile_operand_B
    l1_read_B = k_len * (tm * g.a_bytes * reads_a + tn * g.b_bytes * reads_b)
    l1_tile_B = l1_fill_B + l1_read_B
    l2_tile_B = tile_operand_B + tm * tn * (g.c_bytes + g.epilogue_read_bytes)
    waves = math.ceil(tiles / dev.pes)
    kinds = [(waves - 1, dev.pes), (1, tiles - (waves - 1) * dev.pes)] if waves > 1 else [(1, tiles)]
    wave_timings = []
    dram_total = 0.0
    window_steps = stages - 1
    k_steps = math.ceil(k_len / tk)
    for count, active in kinds:
        if count <= 0 or active <= 0:
            continue
        rows, cols = gemm_wave_blocks(active, row_blocks, col_blocks, raster)
        b_B = 0.0 if b_resident else cols * k_len * tn * g.b_bytes
        # masked loads and stores: a tile moves its real rows of A and C, not its padded ones
        real_rows = g.m / row_blocks
        a_B = 0.0 if a_resident else rows * real_rows * k_len * g.a_bytes
        c_B = 0.0 if c_resident else active * real_rows * tn * g.c_bytes
        wave_B = a_B + b_B + c_B
        bank_s = 0.0
        if b_B > 0:
            window = int(min(window_steps, k_steps) * tk * tn * g.b_bytes)
            window_s, _ = weight_window_time_s(dev.dram, cols, int(k_len * tn * g.b_bytes), window, swizzle)
            bank_s = window_s * math.ceil(k_steps / window_steps)
        bank_s += stream_time_s(dev.dram, a_B, g.k * g.a_bytes)
        # an output tile: real_rows runs of tn elements, or one run when it spans whole output rows
        c_run = real_rows * g.n if tn >= g.n else tn
        bank_s += stream_time_s(dev.dram, c_B, c_run * g.c_bytes)
        in_flight = active * window_steps * ((0 if b_resident else tk * tn * g.b_bytes)
                                             + (0 if a_resident else tm * tk * g.a_bytes))
        dram_s = dram_time_s(dev, wave_B, in_flight, active, bank_s)
        parts = {
            "matrix": mma_cycles / clock,
            "vector": epi_vector / dev.vector_flops_per_cycle / clock,
            "l1": max(l1_fill_B, l1_read_B) / dev.l1_bw_B_per_cycle / clock,
            "l2": active * l2_tile_B / dev.l2_bw_Bps,
        }
        compute_s = (mma_cycles + epi_cycles) / clock
        clocked = max(compute_s, parts["l1"], parts["l2"])
        parts["matrix"] = compute_s
        parts["dram"] = dram_s
        wave_timings.append(WaveTiming(count, clocked, dram_s, slowest(parts)))
        dram_total += count * wave_B
    prologue = dev.dram.access_latency_s if dram_total > 0 else 0.0
    time_s = prologue + sum(w.count * max(w.clocked_s, w.fixed_s) for w in wave_timings)
    bound = max(wave_timings, key=lambda w: w.count * max(w.clocked_s, w.fixed_s)).bound
    return OpTiming(
        name=g.name, kind="gemm", time_s=time_s, bound=bound, matrix_flops=g.flops,
        vector_flops=g.groups * g.m * g.n * g.epilogue_vector_flops, sfu_ops=g.groups * g.m * g.n * g.epilogue_sfu_ops,
        dram_B=dram_total, l2_B=tiles * l2_tile_B, l1_B=tiles * l1_tile_B, l0_B=tiles * l1_read_B, waves=waves,
        config=f"tile {tm}x{tn}x{tk}, {stages} stages, split-K {split}, {raster} raster"
               + ("" if swizzle else ", unswizzled"),
        wave_timings=tuple(wave_timings), prologue_s=prologue,
    )


def time_attention(op: Attention, dev: DeviceSpec, head_block: int, bq: int, split: int,
                    stages: int, kv_block: int) -> OpTiming | None:
    mt, nt, kt = dev.min_tile
    clock = dev.clock_Hz
    head_block = min(head_block, op.q_per_group)
    rows = head_block * min(bq, op.q_len)  # query rows of one tile, all sharing its KV stream
    if stages * kv_block * op.kv_token_bytes + rows * (op.qk_dim + op.v_dim) * op.act_bytes > dev.l1_B:
        return None
    head_blocks = math.ceil(op.q_per_group / head_block)
    q_tiles = math.ceil(op.q_len / bq)
    tiles = op.requests * op.kv_groups * split * head_blocks * q_tiles
    sharing = head_blocks * q_tiles  # tiles reading the same KV stream
    if op.q_len > 1:
        keys = op.scores / max(op.requests * op.kv_groups * op.q_per_group * op.q_len, 1)  # mean keys per query
    else:
        keys = math.ceil(op.kv_len / split)
    qk_cycles = (math.ceil(rows / mt) * math.ceil(keys / nt) * math.ceil(op.qk_dim / kt) * 2 * mt * nt * kt
                 / dev.matrix_flops_per_cycle)
    pv_cycles = (math.ceil(rows / mt) * math.ceil(op.v_dim / nt) * math.ceil(keys / kt) * 2 * mt * nt * kt
                 / dev.matrix_flops_per_cycle)
    scores = rows * keys
    vector = scores * 4 + (rows * op.v_dim * 3 if split > 1 else 0)  # online softmax; split-KV merge
    tile_cycles = qk_cycles + pv_cycles + vector / dev.vector_flops_per_cycle + scores / dev.sfu_ops_per_cycle
    kv_tile_B = keys * op.kv_token_bytes
    qo_tile_B = rows * (op.qk_dim + op.v_dim) * op.act_bytes
    waves = math.ceil(tiles / dev.pes)
    kinds = [(waves - 1, dev.pes), (1, tiles - (waves - 1) * dev.pes)] if waves > 1 else [(1, tiles)]
    page_B = KV_PAGE_TOKENS * op.kv_token_bytes
    wave_timings, dram_total = [], 0.0
    for count, active in kinds:
        if count <= 0 or active <= 0:
            continue
        streams = math.ceil(active / sharing)
        unique_kv_B = streams * op.kv_len / split * op.kv_token_bytes if op.q_len == 1 else (
            streams * op.kv_len * op.kv_token_bytes)
        kv_B = unique_kv_B if resident(dev, unique_kv_B) else active * kv_tile_B
        wave_B = kv_B + (active * qo_tile_B if op.q_len > 1 else 0.0)
        in_flight = min(active, streams * (1 if resident(dev, unique_kv_B) else sharing)) * (stages - 1) * (
            kv_block * op.kv_token_bytes)
        bank_s = stream_time_s(dev.dram, wave_B, page_B)
        dram_s = dram_time_s(dev, wave_B, in_flight, active, bank_s)
        l1_s = (kv_tile_B + qo_tile_B) / dev.l1_bw_B_per_cycle / clock  # fill and read ports work in parallel
        l2_s = active * (kv_tile_B + qo_tile_B) / dev.l2_bw_Bps
        compute_s = tile_cycles / clock
        parts = {"matrix": (qk_cycles + pv_cycles) / clock, "vector": vector / dev.vector_flops_per_cycle / clock,
                 "sfu": scores / dev.sfu_ops_per_cycle / clock, "l1": l1_s, "l2": l2_s, "dram": dram_s}
        wave_timings.append(WaveTiming(count, max(compute_s, l1_s, l2_s), dram_s, slowest(parts)))
        dram_total += count * wave_B
    prologue = dev.dram.access_latency_s
    time_s = prologue + sum(w.count * max(w.clocked_s, w.fixed_s) for w in wave_timings)
    bound = max(wave_timings, key=lambda w: w.count * max(w.clocked_s, w.fixed_s)).bound
    layout = f"{head_block} heads/tile, " + (f"q-block {bq}, " if op.q_len > 1 else f"split-KV {split}, ") + (
        f"{kv_block}-key blocks, ")
    return OpTiming(
        name=op.name, kind="attention", time_s=time_s, bound=bound, matrix_flops=op.flops,
        vector_flops=op.scores * 4, sfu_ops=op.scores, dram_B=dram_total,
        l2_B=tiles * (kv_tile_B + qo_tile_B), l1_B=tiles * (2 * kv_tile_B + qo_tile_B),
        l0_B=tiles * (kv_tile_B + qo_tile_B), waves=waves,
        config=layout + f"{stages} stages", wave_timings=tuple(wave_timings), prologue_s=prologue,
    )
