"""GEMM timing (paper §4.1.3): the time, traffic and bound of given tilings of GEMMs, all at once.

A tiling is a tile shape tm×tn×tk, a software-pipeline depth, a split-K factor and a rasterisation (grouped:
square-ish waves; row order). Tiles run in waves of one tile per PE; per wave the time is the largest of compute
(padded matrix work in minimum tiles, then the fused epilogue and split-K partial sums), L1, L2 and DRAM time.
DRAM time is :func:`~deepstack.models.hardware.dram.wave_dram_time_s` of the bytes the wave reads: the weight
(B) streams through a window of the pipeline's stages per column block, timed by the bank model; A and C
stream contiguously. Operands resident in L2 are not read from DRAM. Which tilings to time is the tuner's job
(:mod:`deepstack.models.compute.gemm_tuner`); ``tests/scalar_reference.py`` times one tiling at a time with
plain arithmetic, and the tests check both agree to the last digit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from deepstack.models.compute.operators import Gemm
from deepstack.models.compute.timing import OpTiming, WaveKinds, ceil_div, l2_resident, wave_kinds, waves_total_s
from deepstack.models.compute.waves import WaveTraffic, padded_mma_cycles, run_waves
from deepstack.models.hardware import dram as dram_model
from deepstack.models.hardware.device import DeviceSpec


@dataclass(frozen=True)
class Tilings:
    """Tilings of one GEMM and their timings, as parallel arrays (searched with numpy)."""

    tm: np.ndarray
    tn: np.ndarray
    tk: np.ndarray
    stages: np.ndarray
    split: np.ndarray
    grouped: np.ndarray  # rasterisation: True = grouped (square-ish waves), False = row order
    time_s: np.ndarray
    waves: np.ndarray
    kinds: WaveKinds  # what the timing record of a candidate is made of
    dram_B: np.ndarray
    tiles: np.ndarray
    l2_tile_B: np.ndarray
    l1_fill_B: np.ndarray
    l1_read_B: np.ndarray
    weight_B: np.ndarray  # the streamed weights among dram_B (their transactions set the row activations)
    records: dict = field(default_factory=dict, compare=False, repr=False)  # candidate → its timing record


GEMM_BOUNDS = ("matrix", "vector", "l1", "l2", "dram")  # a wave's resources; the first of equals is named


def time_tilings(gemms: list[Gemm], dev: DeviceSpec, swizzle: bool, grid: dict[str, np.ndarray]) -> list[Tilings]:
    """Time the tilings ``grid`` lists (columns ``gemm`` — an index into ``gemms`` —, ``tm``, ``tn``, ``tk``,
    ``stages``, ``split``, ``grouped``; rows grouped GEMM by GEMM, each GEMM at least one row) in one
    vectorised pass. Batching matters: a design point has tens of GEMMs with tens of tilings each, so the
    fixed cost of the numpy calls would dominate if they were timed one by one.

    Returns the :class:`Tilings` of each GEMM, in the order of ``gemms``.
    """
    gi = grid["gemm"]
    tm, tn, tk, stages, split, grouped = (grid[name] for name in ("tm", "tn", "tk", "stages", "split", "grouped"))

    def column(attribute: str, dtype=float) -> np.ndarray:
        return np.array([getattr(g, attribute) for g in gemms], dtype=dtype)[gi]

    m, n, k, groups = column("m", np.int64), column("n", np.int64), column("k", np.int64), column("groups", np.int64)
    a_bytes, b_bytes, c_bytes = column("a_bytes"), column("b_bytes"), column("c_bytes")
    epi_flops, epi_sfu, epi_read = column("epilogue_vector_flops"), column("epilogue_sfu_ops"), column(
        "epilogue_read_bytes")
    a_res = np.array([l2_resident(dev, g.groups * g.m * g.k * g.a_bytes) for g in gemms])[gi]
    c_res = np.array([l2_resident(dev, g.groups * g.m * g.n * g.c_bytes) for g in gemms])[gi]
    b_res = np.array([(not g.weight) and l2_resident(dev, g.groups * g.k * g.n * g.b_bytes) for g in gemms])[gi]
    mt, nt, _ = dev.min_tile
    clock = dev.clock_Hz
    rows_n = len(gi)
    k_len = ceil_div(k, split)
    row_blocks = ceil_div(m, tm)
    col_blocks = ceil_div(n, tn) * split
    tiles = groups * row_blocks * col_blocks
    mma = padded_mma_cycles(dev, tm, tn, k_len)
    epi_vector = tm * tn * (epi_flops + (split > 1))
    epi = epi_vector / dev.vector_flops_per_cycle + tm * tn * epi_sfu / dev.sfu_ops_per_cycle
    fill = k_len * (tm * a_bytes + tn * b_bytes)
    reads_a, reads_b = _operand_reads(tm, tn, mt, nt, dev.wgmma)
    read = k_len * (tm * a_bytes * reads_a + tn * b_bytes * reads_b)
    l2_tile = fill + tm * tn * (c_bytes + epi_read)
    compute_s = (mma + epi) / clock
    l1_s = np.maximum(fill, read) / dev.l1_bw_B_per_cycle / clock
    waves = ceil_div(tiles, dev.pes)
    window_steps = stages - 1
    k_steps = ceil_div(k_len, tk)
    # masked loads and stores move a tile's real rows only: a decode GEMM of 4 tokens in 16-row tiles reads
    # and writes 4 rows of activations, not 16 (the padding exists in the PE's buffers, not in DRAM)
    real_rows = m / row_blocks
    a_segment = k * a_bytes  # an activation row of K elements (the stream law serves a longer run row by row)
    # an output tile is real_rows runs of tn elements, or one run when it spans whole output rows
    c_segment = np.where(tn >= n, real_rows * n, tn) * c_bytes
    row_major = dev.dram.weight_layout == "row_major"
    weight_run_B = row_major_transaction_B(tn, tk, k, split, b_bytes) if row_major else None
    streamed = ~b_res
    kinds = wave_kinds(waves, tiles, dev.pes)
    blocks = {id(active): _wave_blocks(active, row_blocks, col_blocks, grouped) for _, active in kinds}
    windows_s = {} if row_major or not streamed.any() else _windows_s(
        dev, swizzle, [blocks[id(active)][1][streamed] for _, active in kinds], kinds,
        (np.minimum(window_steps, k_steps) * tk * tn * b_bytes).astype(np.int64)[streamed],
        (k_len * tn * b_bytes).astype(np.int64)[streamed])

    def traffic(active) -> WaveTraffic:
        rows, cols = blocks[id(active)]
        b_B = np.where(b_res, 0.0, cols * k_len * tn * b_bytes)
        a_B = np.where(a_res, 0.0, rows * real_rows * k_len * a_bytes)
        c_B = np.where(c_res, 0.0, active * real_rows * tn * c_bytes)
        bank_s = np.zeros(rows_n)
        if row_major:  # a tile access is one run per weight row, or one for all its rows
            bank_s = np.where(streamed, dram_model.stream_time_s(dev.dram, b_B, weight_run_B), 0.0)
        elif streamed.any():
            bank_s[streamed] = windows_s[id(active)] * ceil_div(k_steps[streamed], window_steps[streamed])
        bank_s = (bank_s + dram_model.stream_time_s(dev.dram, a_B, a_segment)
                  + dram_model.stream_time_s(dev.dram, c_B, c_segment))
        in_flight = active * window_steps * (np.where(b_res, 0.0, tk * tn * b_bytes)
                                             + np.where(a_res, 0.0, tm * tk * a_bytes))
        return WaveTraffic(a_B + b_B + c_B, in_flight, bank_s, active * l2_tile, np.where(streamed, b_B, 0.0))

    epi_s = epi_vector / dev.vector_flops_per_cycle / clock
    run = run_waves(dev, waves, tiles, compute_s, (compute_s, epi_s), l1_s, traffic, kinds)  # GEMM_BOUNDS order
    total, dram_total, weight_total, every = run
    total += np.where(dram_total > 0, dev.dram.access_latency_s, 0.0)
    bounds = np.flatnonzero(np.diff(gi, prepend=-1, append=len(gemms)))
    return [Tilings(tm[part], tn[part], tk[part], stages[part], split[part], grouped[part], total[part], waves[part],
                    every.part(part), dram_total[part], tiles[part], l2_tile[part], fill[part], read[part],
                    weight_total[part])
            for part in (slice(bounds[index], bounds[index + 1]) for index in range(len(gemms)))]


def _windows_s(dev: DeviceSpec, swizzle: bool, cols: list[np.ndarray], kinds, window: np.ndarray,
               stride: np.ndarray) -> dict[int, np.ndarray]:
    """The banks' service time of one weight window of every streamed candidate in each wave kind (keyed by the
    kind's ``active`` array): ``cols[k]`` concurrent column blocks of ``window`` bytes, ``stride`` apart. The
    candidates of both kinds share most window shapes, so each distinct (blocks, stride, window) is timed once
    (a window's time does not depend on the others timed beside it)."""
    every_cols = np.concatenate(cols)
    every_stride, every_window = np.tile(stride, len(cols)), np.tile(window, len(cols))
    # a rank per (stride, window) pair (fewer than the candidates), the same in every kind; then a code per
    # (cols, stride, window), below candidates × (most columns + 1): its distinct values are found with a table over
    # that range, cheaper than sorting every candidate's code
    shape = np.zeros(len(stride), dtype=np.int64)
    for column in (stride, window):
        values = np.unique(column)
        shape = shape * len(values) + np.searchsorted(values, column)
    shape = np.searchsorted(np.unique(shape), shape)
    code = np.tile(shape, len(cols)) * (int(every_cols.max()) + 1) + every_cols
    present = np.zeros(int(code.max()) + 1, dtype=bool)
    present[code] = True
    distinct = np.flatnonzero(present)
    one = np.empty(len(present), dtype=np.int64)
    one[code] = np.arange(len(code))  # a candidate of each code (equal codes, equal windows: any one will do)
    first = one[distinct]
    which = (np.cumsum(present) - 1)[code]
    times = dram_model.window_service_times_s(dev.dram, every_cols[first], every_stride[first], every_window[first],
                                              swizzle)[which]
    return {id(active): part for (_, active), part in zip(kinds, np.split(times, len(cols)), strict=True)}


def _operand_reads(tm, tn, mt: int, nt: int, wgmma: bool) -> tuple[np.ndarray, np.ndarray]:
    """How many times each A and B byte is read from L1 by the PE's four matrix units: with WGMMA the four
    share both operands; otherwise they split the tile 2×2 (each operand read twice) or, when the tile is one
    minimum tile tall/wide, 4 ways along the other edge (that edge's operand read four times)."""
    if wgmma:
        return np.ones(len(tm)), np.ones(len(tm))
    reads_a = np.where(tm < 2 * mt, 4, np.where(tn < 2 * nt, 1, 2))
    reads_b = np.where(tm < 2 * mt, 1, np.where(tn < 2 * nt, 4, 2))
    return reads_a, reads_b


def _wave_blocks(tiles, row_blocks, col_blocks, grouped):
    """Distinct A row-blocks and B column-blocks touched by a wave of ``tiles`` consecutive tiles, in grouped
    (square-ish waves) or row-order rasterisation. A wave longer than a group's tiles covers whole groups (all
    their blocks) and part of one more (the blocks its remaining tiles touch), the wave taken to start at a
    group's first tile."""
    whole, rest = np.divmod(tiles, row_blocks * col_blocks)
    rows, cols = _blocks_within_group(rest, row_blocks, col_blocks, grouped)
    return whole * row_blocks + rows, whole * col_blocks + cols


def _blocks_within_group(tiles, row_blocks, col_blocks, grouped):
    """Distinct row- and column-blocks touched by ``tiles`` consecutive tiles of one group (0 for none): a grouped
    wave is square-ish, taller when the group has too few columns for a square."""
    side = np.maximum(1, np.round(np.sqrt(tiles)).astype(np.int64))
    use_grouped = grouped & (row_blocks > 1)
    rows_g = np.minimum(row_blocks, np.maximum(side, ceil_div(tiles, col_blocks)))
    cols_g = np.minimum(col_blocks, ceil_div(tiles, rows_g))
    cols_r = np.minimum(col_blocks, tiles)
    rows_r = np.minimum(row_blocks, ceil_div(tiles, col_blocks))
    none = tiles == 0  # a wave of whole groups touches no block of a further one (rows_g's floor of 1 would)
    return (np.where(none, 0, np.where(use_grouped, rows_g, rows_r)),
            np.where(none, 0, np.where(use_grouped, cols_g, cols_r)))


def record(g: Gemm, dev: DeviceSpec, c: Tilings, i: int, swizzle: bool) -> OpTiming:
    """The timing record of tiling ``i`` of ``c`` (the tilings of ``g`` on ``dev``), made from the arrays
    :func:`time_tilings` computed: the tiling is not timed again. Kept per tiling: the overlapped tunings of
    one GEMM against many collective times mostly pick the same few tilings."""
    found = c.records.get(i)
    if found is None:
        found = c.records[i] = _make_record(g, dev, c, i, swizzle)
    return found


def row_major_transaction_B(tn, tk, k, split, b_bytes):
    """Contiguous bytes of one weight-tile access when a device stores its [N, K] weight shard row-major: tk
    weights of each of the tile's tn rows; but a tile spanning whole rows (tk ≥ K, no split-K) reads tn adjacent
    rows, one run of tn·K weights (a narrow shard, e.g. an expert's 8-column slice at TP 256, is not read
    8 bytes at a time). Elementwise over numpy arrays."""
    whole_rows = (tk >= k) & (split == 1)
    return np.where(whole_rows, tn * k, np.minimum(tk, k)) * b_bytes


def _extra_rows(dev: DeviceSpec, weight_B: float, transaction_B: float) -> float:
    """Row activations beyond a full-row stream's one per row: row-major weights read ``transaction_B`` contiguous
    bytes per access, each opening its row (the energy side of the transaction curve; tiled weights open none extra)."""
    if dev.dram.weight_layout != "row_major":
        return 0.0
    return dram_model.extra_rows_opened(dev.dram, weight_B, transaction_B)


def _make_record(g: Gemm, dev: DeviceSpec, c: Tilings, i: int, swizzle: bool) -> OpTiming:
    waves = c.kinds.timings(i, GEMM_BOUNDS)
    dram_B = float(c.dram_B[i])
    prologue = dev.dram.access_latency_s if dram_B > 0 else 0.0
    time_s, bound = waves_total_s(waves, prologue)
    tiles = int(c.tiles[i])
    return OpTiming(
        name=g.name, kind="gemm", time_s=time_s, bound=bound,
        matrix_flops=g.flops, vector_flops=g.groups * g.m * g.n * g.epilogue_vector_flops,
        sfu_ops=g.groups * g.m * g.n * g.epilogue_sfu_ops, dram_B=dram_B, l2_B=tiles * float(c.l2_tile_B[i]),
        l1_B=tiles * float(c.l1_fill_B[i] + c.l1_read_B[i]), l0_B=tiles * float(c.l1_read_B[i]),
        dram_extra_rows=_extra_rows(dev, float(c.weight_B[i]), float(row_major_transaction_B(
            c.tn[i], c.tk[i], g.k, c.split[i], g.b_bytes))),
        waves=int(c.waves[i]),
        config=f"tile {c.tm[i]}x{c.tn[i]}x{c.tk[i]}, {c.stages[i]} stages, split-K {c.split[i]}, "
               f"{'grouped' if c.grouped[i] else 'row'} raster" + ("" if swizzle else ", unswizzled"),
        wave_timings=waves, prologue_s=prologue,
    )
