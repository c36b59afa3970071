"""3D-DRAM bandwidth model (models/hardware/dram.py; paper §2.3.1, §4.1.3 (i)–(iv), eq. 1 and 3).

Standard chip at m = n = 4 (standard.toml): 128 banks (4 layers × 32), 2 KiB rows, peak 1.6375 TB/s, so a bank
streams at 1.6375e12 / 128 = 12.793 GB/s and a full row transfers in 2048 / 12.793e9 = 160.09 ns; every row
activation adds tRCD + tRP = 28 ns. Refresh takes a bank away for tRFC = 260 ns every tREFI = 3900 ns (DRAMsim3
HBM2 timing), so sustained figures are scaled by 1 − 260/3900 = 0.9333 (service times divided by it).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepstack import catalog
from deepstack.models.compute.gemm_tuner import tune_gemm
from deepstack.models.compute.operators import Gemm
from deepstack.models.hardware import dram
from deepstack.models.hardware.device import resolve_device

ROW_B = 2048
BANKS = 128
PEAK_Bps = 1.6375e12
BANK_Bps = PEAK_Bps / BANKS
ROW_TRANSFER_s = ROW_B / BANK_Bps  # 160.09 ns
OVERHEAD_s = 28e-9  # tRCD + tRP
REFRESH = 1 - 260 / 3900  # share of time a bank is not refreshing
ROW_ACCESS_s = (ROW_TRANSFER_s + OVERHEAD_s) / REFRESH  # one full-row access of one bank: 188.09 / 0.9333 ns


def _standard():
    return catalog.load("chips", "standard")


def _device(interleaved: bool = False):
    chip = _standard()
    if interleaved:
        memory = chip.device.dram.model_copy(update={"connectivity": "interleaved"})
        chip = chip.model_copy(update={"device": chip.device.model_copy(update={"dram": memory})})
    return resolve_device(chip)


DIRECT = _device().dram
INTERLEAVED = _device(interleaved=True).dram
BOTH = pytest.mark.parametrize("spec", [DIRECT, INTERLEAVED], ids=["direct", "interleaved"])


def test_resolved_dram_matches_the_preset():
    assert (DIRECT.banks, DIRECT.row_B, DIRECT.interleave_ways) == (BANKS, ROW_B, 1)
    assert DIRECT.peak_bw_Bps == pytest.approx(PEAK_Bps)
    assert DIRECT.row_overhead_s == pytest.approx(OVERHEAD_s)
    assert INTERLEAVED.interleave_ways == 4  # standard.toml interleave_ways, used in interleaved mode


def test_curve_golden_points():
    # direct: a full row reaches 160.09 / 188.09 = 85.11 % of peak, × 0.9333 for refresh = 79.44 %; a 256 B
    # transaction pays the same 28 ns for 20.01 ns of data: 20.01 / 48.01 = 41.68 %, × 0.9333 = 38.90 %
    assert dram.transaction_efficiency(DIRECT, ROW_B) == pytest.approx(ROW_TRANSFER_s / ROW_ACCESS_s)
    small = 256 / BANK_Bps
    assert dram.transaction_efficiency(DIRECT, 256) == pytest.approx(small / (small + OVERHEAD_s) * REFRESH)
    assert dram.transaction_efficiency(DIRECT, 256) == pytest.approx(0.3890, abs=1e-4)
    # 4-way interleaving hides the activation behind the other banks' transfers: a row is at peak
    # (4 · 40.02 ns of transfer per 40.02 + 28 ns ≥ 1), 256 B reaches 4 · 5.00 / 33.00 = 60.6 %; both × refresh
    assert dram.transaction_efficiency(INTERLEAVED, ROW_B) == pytest.approx(REFRESH)
    assert dram.transaction_efficiency(INTERLEAVED, 256) == pytest.approx(4 * 5.0027 / 33.0027 * REFRESH, rel=1e-4)
    assert dram.curve_bw_Bps(DIRECT, 0) == 0.0


@BOTH
@settings(max_examples=100, deadline=None)
@given(a=st.integers(1, ROW_B), b=st.integers(1, ROW_B))
def test_curve_is_non_decreasing_up_to_a_row(spec, a, b):
    small, large = sorted((a, b))
    assert dram.curve_bw_Bps(spec, small) <= dram.curve_bw_Bps(spec, large)


@BOTH
@settings(max_examples=100, deadline=None)
@given(size=st.integers(1, 64 * ROW_B))
def test_curve_never_exceeds_peak(spec, size):
    assert 0.0 < dram.curve_bw_Bps(spec, size) <= spec.peak_bw_Bps


@BOTH
@settings(max_examples=100, deadline=None)
@given(size=st.integers(1, 8 * ROW_B), in_flight=st.floats(1.0, 1e8), l1_fill=st.floats(1e9, 1e14))
def test_effective_bandwidth_respects_all_three_bounds(spec, size, in_flight, l1_fill):
    bw = dram.effective_bw_Bps(spec, size, in_flight, l1_fill)
    assert bw <= dram.curve_bw_Bps(spec, size)
    assert bw <= dram.little_bw_Bps(in_flight, spec.access_latency_s)
    assert bw <= l1_fill
    assert bw == min(dram.curve_bw_Bps(spec, size), in_flight / spec.access_latency_s, l1_fill)


def test_a_wave_that_only_writes_is_not_bound_by_littles_law():
    """A wave whose inputs stay in L2 has nothing in flight from DRAM and only writes its outputs, which are
    posted: 1 MB at the standard stack's 1.6375 TB/s peak takes 1e6 / 1.6375e12 = 0.611 µs (Little's law on
    the 1-byte floor the in-flight count used to get made it 1e6 × 130 ns = 0.13 s). With bytes in flight the
    law binds as before: 1 MB with 4 KiB in flight at 130 ns is 1e6 / (4096 / 130e-9) = 31.7 µs."""
    assert dram.wave_dram_time_s(DIRECT, 1e6, 0.0, 1e15, 0.0) == pytest.approx(1e6 / PEAK_Bps)
    assert dram.wave_dram_time_s(DIRECT, 1e6, 4096.0, 1e15, 0.0) == pytest.approx(1e6 * 130e-9 / 4096)
    scores = tune_gemm(Gemm("scores", 128, 384, 128, groups=32, b_bytes=1.0, weight=False), _device())
    assert scores.time_s < 1e-4  # 3 MiB of outputs: microseconds, not the 0.4 s the floor gave



def test_a_wave_is_never_faster_than_the_pes_l1_can_take_its_bytes():
    """Eq. 3's third bound (docs/model.md §4): data enters the PEs no faster than their L1 write ports take it.
    1 MB with 1 GB in flight (Little's law: 1e9 / 130 ns, no bound) into PEs that take 100 GB/s: 1e6 / 100e9 =
    10 µs, not the 0.611 µs of the peak; with a fill rate above the peak the peak binds again."""
    assert dram.wave_dram_time_s(DIRECT, 1e6, 1e9, 100e9, 0.0) == pytest.approx(1e6 / 100e9)
    assert dram.wave_dram_time_s(DIRECT, 1e6, 1e9, 1e15, 0.0) == pytest.approx(1e6 / PEAK_Bps)


def test_a_tensor_stays_in_l2_only_while_it_fits_half_of_it():
    """Activations that fit in half of the L2 stay there between operators; the other half holds the next
    operator's weight and output streams (docs/model.md §6). Standard's L2 is 4 MiB: a norm reading and writing
    1 MiB each (2 MiB) touches no DRAM; one of 1.5 MiB each (3 MiB, inside the L2 but over its half) streams all
    3 MiB from and to DRAM and pays the access latency."""
    from deepstack.models.compute.operators import Vector
    from deepstack.models.compute.vector import time_vector

    dev = _device()
    assert dev.l2_B == 4 * 2**20
    fits = time_vector(Vector("norm", 2**19, 2**20, 2**20, 4.0), dev)
    spills = time_vector(Vector("norm", 3 * 2**18, 3 * 2**19, 3 * 2**19, 4.0), dev)
    assert (fits.dram_B, fits.prologue_s) == (0.0, 0.0)
    assert (spills.dram_B, spills.prologue_s) == (3 * 2**20, dev.dram.access_latency_s)


def test_little_law():
    # eq. 1: 1 MiB in flight over 130 ns sustains at most 8.066 TB/s
    assert dram.little_bw_Bps(2**20, 130e-9) == pytest.approx(2**20 / 130e-9)
    assert dram.little_bw_Bps(2**20, 130e-9) / 1e12 == pytest.approx(8.066, rel=1e-3)


def test_bank_conflict_versus_swizzle():
    """Eight full-row accesses whose starts are banks × row = 256 KiB apart all land in bank 0 (bank = row mod
    128) and serialise: 8 × 188.09 ns = 1504.7 ns. Staggering them by one bank each (the swizzle) spreads them
    over banks 0..7, which work in parallel: 188.09 ns."""
    n = 8
    starts = [i * BANKS * ROW_B for i in range(n)]
    lengths = [ROW_B] * n
    conflicted_s, conflicted_banks = dram.bank_service_time_s(DIRECT, starts, lengths)
    swizzled_s, swizzled_banks = dram.bank_service_time_s(DIRECT, starts, lengths, bank_offsets=list(range(n)))
    assert (conflicted_banks, swizzled_banks) == (1, n)
    assert conflicted_s == pytest.approx(n * ROW_ACCESS_s)
    assert swizzled_s == pytest.approx(ROW_ACCESS_s)
    assert conflicted_s > swizzled_s


def test_few_small_accesses_use_few_banks():
    """§4.1.3 (iii): 16 consecutive rows touch 16 of the 128 banks. They finish in one row access (188.09 ns),
    i.e. 16 × 2048 B / 188.09 ns = 174.2 GB/s — 16/128 of the full-row curve (1.394 TB/s), 10.6 % of peak."""
    n = 16
    time_s, banks = dram.bank_service_time_s(DIRECT, [i * ROW_B for i in range(n)], [ROW_B] * n)
    assert banks == n < DIRECT.banks
    assert time_s == pytest.approx(ROW_ACCESS_s)
    achieved = n * ROW_B / time_s
    assert achieved == pytest.approx(dram.curve_bw_Bps(DIRECT, ROW_B) * n / BANKS)
    assert achieved < 0.2 * PEAK_Bps
    # a single 256 B access in one bank: 20.01 ns of data + 28 ns overhead
    one_s, one_bank = dram.bank_service_time_s(DIRECT, [0], [256])
    assert (one_bank, one_s) == (1, pytest.approx((256 / BANK_Bps + OVERHEAD_s) / REFRESH))


def test_access_split_at_row_boundaries():
    # 3 KiB starting mid-row: bytes 1024..4095 cover rows 0 (1 KiB), 1 (2 KiB) — two banks, two activations;
    # the busier bank (row 1: 2 KiB) sets the time
    time_s, banks = dram.bank_service_time_s(DIRECT, [1024], [3072])
    assert banks == 2
    assert time_s == pytest.approx(ROW_ACCESS_s)


def test_all_banks_full_rows_reach_the_curve():
    # one full row in each of the 128 banks: 128 × 2 KiB in 188.09 ns = the curve's 1.394 TB/s
    time_s, banks = dram.bank_service_time_s(DIRECT, [i * ROW_B for i in range(BANKS)], [ROW_B] * BANKS)
    assert banks == BANKS
    assert BANKS * ROW_B / time_s == pytest.approx(dram.curve_bw_Bps(DIRECT, ROW_B))


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 64), length=st.integers(1, 4 * ROW_B), gap=st.integers(0, 8 * ROW_B))
def test_bank_time_is_at_least_the_peak_rate(count, length, gap):
    """No layout moves data faster than the peak: bytes / time ≤ peak, and never more banks than exist."""
    starts = [i * (length + gap) for i in range(count)]
    time_s, banks = dram.bank_service_time_s(DIRECT, starts, [length] * count)
    assert count * length / time_s <= PEAK_Bps * (1 + 1e-9)
    assert 1 <= banks <= DIRECT.banks


def test_unswizzled_gemv_weight_layout_conflicts():
    """§4.1.3 (iv) through the operator tuner. Decode GEMV 1 × 8192 → 2048 (Llama-3.2-1B's down_proj shape,
    32 MiB of FP16 weights). Its weight column blocks are k · tn · 2 B = 8192 · tn · 2 = tn × 16 KiB apart —
    for every tile width tn ≥ 16 a multiple of 128 banks × 2 KiB = 256 KiB, so without a swizzle the 8
    concurrent column blocks of a wave all start in the same bank.

    Swizzled, by hand: the tuner's best tile (tn = 128, tk = 64, 3 stages) streams 2-step windows of
    2 · 64 · 128 · 2 B = 32 KiB = 16 rows per block; 8 blocks × 16 rows = 128 chunks fill the 128 banks once,
    so every window costs one row access and the GEMV runs at the full-row curve: 32 MiB / 1.39373 TB/s
    = 24.075 µs, plus the 130 ns access latency = 24.205 µs. Unswizzled, the best any tiling does is 2×
    slower (48.28 µs)."""
    dev = _device()
    gemv = Gemm("down_proj", 1, 2048, 8192)
    swizzled = tune_gemm(gemv, dev, swizzle=True)
    unswizzled = tune_gemm(gemv, dev, swizzle=False)
    weights_B = 8192 * 2048 * 2
    assert swizzled.time_s == pytest.approx(weights_B / dram.curve_bw_Bps(DIRECT, ROW_B) + 130e-9, rel=1e-6)
    assert unswizzled.time_s > 1.5 * swizzled.time_s
    assert unswizzled.bound == swizzled.bound == "dram"
    assert "unswizzled" in unswizzled.config
    # the conflict is in the layout, not the traffic: both read every weight exactly once
    assert unswizzled.dram_B == pytest.approx(swizzled.dram_B)


def test_stream_time_matches_the_curve_for_large_tensors():
    # 64 MiB in full rows over all banks: 256 rows per bank, each 188.09 ns → 48.15 µs = 64 MiB / 1.394 TB/s
    total = 64 * 2**20
    assert dram.stream_time_s(DIRECT, total, ROW_B) == pytest.approx(total / dram.curve_bw_Bps(DIRECT, ROW_B))
    # and never faster than the peak, also interleaved
    assert dram.stream_time_s(INTERLEAVED, total, ROW_B) >= total / PEAK_Bps


def test_a_transaction_longer_than_a_row_is_served_by_successive_banks():
    # 8 transactions of 32 KiB = 128 rows: rows interleave across banks, so each of the 128 banks serves one
    # full row (188.09 ns), not one bank 16 rows of one transaction (16 × 188.09 ns = 3.0 µs)
    total = 8 * 32 * 2**10
    assert dram.stream_time_s(DIRECT, total, 32 * 2**10) == pytest.approx(ROW_ACCESS_s)
    assert dram.stream_time_s(DIRECT, total, 32 * 2**10) == dram.stream_time_s(DIRECT, total, ROW_B)
    # a transaction up to a row long is still one bank's: 8 of 1 KiB → 8 banks, each 1 KiB + one activation
    assert dram.stream_time_s(DIRECT, 8 * 1024, 1024) == pytest.approx((1024 / BANK_Bps + OVERHEAD_s) / REFRESH)


def _one_tiling(g: Gemm, dev, tm: int, tn: int, tk: int, grouped: bool = False):
    from deepstack.models.compute.gemm import time_tilings

    one = {"gemm": [0], "tm": [tm], "tn": [tn], "tk": [tk], "stages": [3], "split": [1], "grouped": [int(grouped)]}
    return time_tilings([g], dev, True, {k: np.array(v, dtype=np.int64) for k, v in one.items()})[0]


def test_a_decode_gemm_moves_only_its_real_rows():
    """Masked loads and stores: 4 tokens in 16-row tiles read 4 rows of activations and write 4 output rows.
    With no L2 to hold them (l2_B = 0), a one-wave GEMM of 4 × 1024 × 4096 in 16 × 128 tiles on the standard
    chip's 8 PEs (8 column blocks, one wave) moves exactly its 4096 · 1024 · 2 B of weights, 4 · 4096 · 2 B of A
    and 4 · 1024 · 2 B of C: 8,429,568 B, not the 16-row padding's 8,552,448 B."""
    dev = dataclasses.replace(_device(), l2_B=0.0)
    assert dev.pes == 8
    timed = _one_tiling(Gemm("decode", 4, 1024, 4096), dev, 16, 128, 64)
    assert float(timed.dram_B[0]) == 4096 * 1024 * 2 + 4 * 4096 * 2 + 4 * 1024 * 2 == 8_429_568


def test_a_wave_across_expert_groups_reads_each_weight_block_once():
    """4 experts of 16 × 384 × 128 in 16 × 128 tiles: 3 tiles per expert, 12 tiles, waves of 8 and 4 on the
    standard chip's 8 PEs (no L2 to hold anything). The first wave covers experts 0–1 whole and 2 tiles of
    expert 2, the second expert 2's last tile and expert 3: 8 + 4 weight blocks of 128 · 128 · 2 B, i.e. every
    weight once (393,216 B), activations 16 · 128 · 2 B per expert a wave touches, 3 + 2 (expert 2's read in
    both), and 12 output tiles of 16 · 128 · 2 B: 393,216 + 5 · 4,096 + 12 · 4,096 = 462,848 B. (A wave counted
    as the whole of every group it reaches read expert 2's and 3's blocks twice: 15 blocks.)"""
    dev = dataclasses.replace(_device(), l2_B=0.0)
    assert dev.pes == 8
    timed = _one_tiling(Gemm("experts", 16, 384, 128, groups=4), dev, 16, 128, 64)
    assert float(timed.dram_B[0]) == 393_216 + 5 * 4_096 + 12 * 4_096 == 462_848


def test_a_grouped_wave_on_a_one_column_gemm_is_a_column_of_tiles():
    """256 × 16 × 64 in 16 × 16 tiles, grouped rasterisation: 16 row blocks and one column, two waves of 8. A
    wave cannot be square here, so it is 8 tiles tall: each reads 8 activation blocks of 16 · 64 · 2 B (all
    32,768 B of A over the two waves) and the one 64 · 16 · 2 B weight block (4,096 B for both), and writes 8
    output tiles of 16 · 16 · 2 B (8,192 B): 45,056 B. (A square-ish count gave 3 row blocks a wave.)"""
    dev = dataclasses.replace(_device(), l2_B=0.0)
    timed = _one_tiling(Gemm("narrow", 256, 16, 64, weight=False), dev, 16, 16, 64, grouped=True)
    assert int(timed.waves[0]) == 2
    assert float(timed.dram_B[0]) == 32_768 + 4_096 + 8_192 == 45_056


def test_a_grouped_wave_of_whole_groups_reads_only_their_blocks():
    """4 experts of 32 × 256 × 128 in 16 × 128 tiles, grouped rasterisation: 2 × 2 = 4 tiles per expert, 16 tiles,
    two waves of 8 on the standard chip's 8 PEs, each covering exactly two experts. Every weight block once
    (4 · 256 · 128 · 2 B = 262,144 B), each expert's 2 activation blocks of 16 · 128 · 2 B once (8 · 4,096 B) and
    16 output tiles of 16 · 128 · 2 B (16 · 4,096 B): 360,448 B. (Counting one row block of a third expert in each
    wave, as a wave of whole groups once did, gave 368,640 B.)"""
    dev = dataclasses.replace(_device(), l2_B=0.0)
    timed = _one_tiling(Gemm("experts", 32, 256, 128, groups=4), dev, 16, 128, 64, grouped=True)
    assert int(timed.waves[0]) == 2
    assert float(timed.dram_B[0]) == 262_144 + 8 * 4_096 + 16 * 4_096 == 360_448


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 200), st.integers(1, 9), st.integers(1, 9))
def test_row_order_wave_blocks_match_an_enumeration(tiles, row_blocks, col_blocks):
    """Row-order rasterisation, a wave starting at a group's first tile: the distinct (group, row-block) and
    (group, column-block) pairs its tiles touch, counted one tile at a time, are what the closed form gives."""
    from deepstack.models.compute.gemm import _wave_blocks

    per_group = row_blocks * col_blocks
    touched = [(t // per_group, (t % per_group) // col_blocks, t % col_blocks) for t in range(tiles)]
    rows = len({(g, r) for g, r, _ in touched})
    cols = len({(g, c) for g, _, c in touched})
    got = _wave_blocks(np.array([tiles]), np.array([row_blocks]), np.array([col_blocks]), np.array([False]))
    assert (int(got[0][0]), int(got[1][0])) == (rows, cols)


def test_row_major_transactions_of_narrow_shards():
    """Row-major [N, K] weights: a tile access reads tk weights of each of its tn rows (128 B at tk = 128 of
    FP8), but a tile spanning whole rows reads its tn adjacent rows in one run: an expert's 8-column slice at
    TP 256 in 256-row tiles is 256 · 8 = 2,048 B per access, not 8 B; split-K cuts the rows again."""
    from deepstack.models.compute.gemm import row_major_transaction_B

    assert row_major_transaction_B(np.array(32), np.array(128), np.array(7168), np.array(1), 1.0) == 128
    assert row_major_transaction_B(np.array(256), np.array(16), np.array(8), np.array(1), 1.0) == 2048
    assert row_major_transaction_B(np.array(256), np.array(16), np.array(8), np.array(2), 1.0) == 8
    assert row_major_transaction_B(np.array(64), np.array(128), np.array(128), np.array(1), 2.0) == 64 * 128 * 2
