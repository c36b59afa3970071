"""Attention timing and tuning (paper §4.1.3): flash attention (prefill) and flash decoding with split-KV
(decode).

Tiles cover requests × KV groups × blocks of the group's query heads × query blocks (× KV splits). Tiles sharing
a KV stream are scheduled together, so the stream is read from DRAM once when the wave's streams fit in L2;
otherwise every tile reads its own. KV pages (:data:`~deepstack.models.compute.operators.KV_PAGE_TOKENS` tokens)
set the DRAM transaction size. Every candidate layout is timed at once; the winner's timing record is made from
the same arrays. ``tests/scalar_reference.py`` times one layout at a time with plain arithmetic, and the tests
check both agree to the last digit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from deepstack.models import memo
from deepstack.models.compute.operators import KV_PAGE_TOKENS, Attention
from deepstack.models.compute.timing import (
    SPLIT_K,
    STAGES,
    WAVE_BOUNDS,
    NoTilingError,
    OpTiming,
    WaveKinds,
    ceil_div,
    l2_resident,
    pow2_range,
    waves_total_s,
)
from deepstack.models.compute.waves import WaveTraffic, padded_mma_cycles, run_waves
from deepstack.models.hardware import dram as dram_model
from deepstack.models.hardware.device import DeviceSpec

ATTENTION_KV_BLOCKS = (16, 32, 64, 128)  # keys per pipeline stage searched (FlashAttention-2 uses 64–128)
ATTENTION_Q_BLOCKS = (16, 32, 64, 128)  # query rows per tile searched in prefill
# Decode KV splits on a real GPU (flash decoding: each split a thread block over a slice of one request's keys,
# then a merge of the partial outputs by their log-sum-exp). The backends vLLM runs choose them to fill the SMs
# when requests × KV heads are too few: FlashAttention's num_splits_heuristic (flash_api.cpp, hopper/heuristics.h)
# takes 1 split when batch · heads · query blocks ≥ 0.8 · SMs, else the fewest splits, up to 128, whose wave
# efficiency is ≥ 0.85 of the best; FlashMLA's get_mla_metadata spreads the batch's KV blocks evenly over all SMs
# (a request may be split anywhere) and merges with a combine kernel; FlashInfer's decode plan splits the KV into
# chunks so that (request, chunk) work items fill its grid. All fill the SMs, so the tuner times every
# power-of-two split up to FlashAttention's 128 and keeps the fastest (a split below 16 keys is never taken).
GPU_KV_SPLITS = (1, 2, 4, 8, 16, 32, 64, 128)
# DSA lightning indexer, per query-key score of a head: ReLU, × the head's weight, + into the sum over heads
# (DeepSeek-V3.2-Exp tech report eq. 1: I = Σ_j w_j · ReLU(q_j · k))
INDEXER_FLOPS_PER_SCORE = 3


def _kv_seen(op: Attention) -> int:
    """Keys one decode query reads: every cached key, or (sparse) at most ``topk`` of them."""
    return op.kv_len if op.topk is None else min(op.kv_len, op.topk)


@dataclass(frozen=True)
class AttentionLayouts:
    """Tile layouts of one attention operator and their timings, as parallel arrays (one element a layout)."""

    head_block: np.ndarray  # query heads of a group per tile
    bq: np.ndarray  # query rows per tile (1 in decode)
    split: np.ndarray  # KV splits (decode)
    stages: np.ndarray
    kv_block: np.ndarray  # keys per pipeline stage
    time_s: np.ndarray
    waves: np.ndarray
    tiles: np.ndarray
    kv_tile_B: np.ndarray
    qo_tile_B: np.ndarray
    dram_B: np.ndarray
    kinds: WaveKinds  # what the timing record of a layout is made of


@memo.cached(maxsize=65536)
def tune_attention(op: Attention, dev: DeviceSpec) -> OpTiming:
    """The fastest tile layout of an attention operator on ``dev`` (the first of equals in the search order).

    Raises:
        NoTilingError: no layout fits the device's L1.
    """
    # a sparse query gathers its own keys, so a tile holds one query's heads (FlashMLA's sparse kernels)
    dense_q = op.q_len > 1 and op.topk is None
    q_blocks = tuple(b for b in ATTENTION_Q_BLOCKS if b <= max(16, op.q_len)) if dense_q else (1,)
    max_split = max(1, _kv_seen(op) // min(ATTENTION_KV_BLOCKS))
    splits = [s for s in (GPU_KV_SPLITS if dev.gpu_kv_splits else SPLIT_K) if s <= max_split] if op.q_len == 1 else [1]
    grid = np.array([(hb, bq, split, kv) for hb in pow2_range(1, op.q_per_group) for bq in q_blocks
                     for split in splits for kv in ATTENTION_KV_BLOCKS], dtype=np.int64)
    head_block, bq, split, kv_block = grid.T
    head_block = np.minimum(head_block, op.q_per_group)
    rows = head_block * np.minimum(bq, op.q_len)
    # the deepest pipeline that fits L1 (shallower ones only hold fewer bytes in flight)
    resident_B = rows * (op.qk_dim + op.v_dim) * op.act_bytes
    stages = np.zeros(len(grid), dtype=np.int64)
    for st in sorted(STAGES):
        stages = np.where(st * kv_block * op.kv_token_bytes + resident_B <= dev.l1_B, st, stages)
    fits = stages > 0
    if not fits.any():
        raise NoTilingError(f"{op.name}: no attention tiling fits this device's L1 ({dev.l1_B / 1024:g} KiB per PE)")
    layouts = time_layouts(op, dev, head_block[fits], bq[fits], split[fits], stages[fits], kv_block[fits])
    return layout_record(op, dev, layouts, int(np.argmin(layouts.time_s)))


def time_layouts(op: Attention, dev: DeviceSpec, head_block, bq, split, stages, kv_block) -> AttentionLayouts:
    """Time every layout given as integer arrays (``head_block`` at most ``op.q_per_group``; each layout's
    pipeline fits L1), element by element."""
    clock = dev.clock_Hz
    rows = head_block * np.minimum(bq, op.q_len)  # query rows of one tile, all sharing its KV stream
    head_blocks = ceil_div(op.q_per_group, head_block)
    q_tiles = ceil_div(op.q_len, bq)
    tiles = op.requests * op.kv_groups * split * head_blocks * q_tiles
    # tiles reading the same KV stream (a sparse query's gathered keys are its own)
    sharing = head_blocks * (q_tiles if op.topk is None else 1)
    if op.q_len > 1:  # mean keys per query
        keys = np.full(len(rows), op.scores / max(op.requests * op.kv_groups * op.q_per_group * op.q_len, 1))
    else:
        keys = ceil_div(_kv_seen(op), split)
    qk_cycles = padded_mma_cycles(dev, rows, keys, op.qk_dim)
    pv_cycles = padded_mma_cycles(dev, rows, op.v_dim, keys)
    scores = rows * keys
    if op.softmax:
        vector = scores * 4 + np.where(split > 1, rows * op.v_dim * 3, 0)  # online softmax; split-KV merge
        exps = scores
    else:  # DSA indexer: ReLU, the head's weight, the sum over heads; each split writes its own keys' logits
        vector, exps = scores * INDEXER_FLOPS_PER_SCORE, scores * 0
    tile_cycles = qk_cycles + pv_cycles + vector / dev.vector_flops_per_cycle + exps / dev.sfu_ops_per_cycle
    kv_tile_B = keys * op.kv_token_bytes
    qo_tile_B = rows * (op.qk_dim + op.v_dim) * op.act_bytes
    waves = ceil_div(tiles, dev.pes)
    page_B = op.kv_token_bytes * (KV_PAGE_TOKENS if op.topk is None else 1)  # gathered: a token
    l1_s = (kv_tile_B + qo_tile_B) / dev.l1_bw_B_per_cycle / clock  # fill and read ports work in parallel
    compute_s = tile_cycles / clock
    units_s = ((qk_cycles + pv_cycles) / clock, vector / dev.vector_flops_per_cycle / clock,
               exps / dev.sfu_ops_per_cycle / clock)  # matrix, vector, SFU: the bound's first three parts

    def traffic(active) -> WaveTraffic:
        streams = ceil_div(active, sharing)
        if op.topk is not None:  # each stream its query's gathered keys
            unique_kv_B = streams * keys * op.kv_token_bytes
        else:
            unique_kv_B = (streams * op.kv_len / split * op.kv_token_bytes if op.q_len == 1
                           else streams * op.kv_len * op.kv_token_bytes)
        resident = l2_resident(dev, unique_kv_B)
        kv_B = np.where(resident, unique_kv_B, active * kv_tile_B)
        wave_B = kv_B + (active * qo_tile_B if op.q_len > 1 else 0.0)
        in_flight = np.minimum(active, streams * np.where(resident, 1, sharing)) * (stages - 1) * (
            kv_block * op.kv_token_bytes)
        return WaveTraffic(wave_B, in_flight, dram_model.stream_time_s(dev.dram, wave_B, page_B),
                           active * (kv_tile_B + qo_tile_B))

    total, dram_total, _, every = run_waves(dev, waves, tiles, compute_s, units_s, l1_s, traffic)  # WAVE_BOUNDS
    return AttentionLayouts(head_block, bq, split, stages, kv_block, dev.dram.access_latency_s + total, waves,
                            tiles, kv_tile_B, qo_tile_B, dram_total, every)


def layout_record(op: Attention, dev: DeviceSpec, a: AttentionLayouts, i: int) -> OpTiming:
    """The timing record of layout ``i`` of ``a``, made from the arrays :func:`time_layouts` computed."""
    waves = a.kinds.timings(i, WAVE_BOUNDS)
    prologue = dev.dram.access_latency_s
    time_s, bound = waves_total_s(waves, prologue)
    tiles, kv_tile_B, qo_tile_B = int(a.tiles[i]), float(a.kv_tile_B[i]), float(a.qo_tile_B[i])
    layout = f"{int(a.head_block[i])} heads/tile, " + (
        f"q-block {int(a.bq[i])}, " if op.q_len > 1 else f"split-KV {int(a.split[i])}, ")
    return OpTiming(
        name=op.name, kind="attention", time_s=time_s, bound=bound, matrix_flops=op.flops,
        vector_flops=op.scores * (4 if op.softmax else INDEXER_FLOPS_PER_SCORE), sfu_ops=op.scores * op.softmax,
        dram_B=float(a.dram_B[i]),
        l2_B=tiles * (kv_tile_B + qo_tile_B), l1_B=tiles * (2 * kv_tile_B + qo_tile_B),
        l0_B=tiles * (kv_tile_B + qo_tile_B), waves=int(a.waves[i]),
        config=layout + f"{int(a.kv_block[i])}-key blocks, {int(a.stages[i])} stages", wave_timings=waves,
        prologue_s=prologue,
    )
