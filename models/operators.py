"""Operator tuner (paper §3.3.2, §4.1.3): tile shapes, pipeline stages, split-K, rasterisation and epilogue
fusion are searched per operator; each candidate is timed wave by wave.

Per wave the time is the largest of matrix/vector/SFU compute, L1, L2 and DRAM time (software pipelining
overlaps them); DRAM time comes from the bank model (transaction sizes, bank parallelism, conflicts), bounded by
Little's law on the bytes the pipeline stages keep in flight and by the PEs' L1 fill bandwidth. The first wave
also pays the DRAM access latency (pipeline fill). Results record the resource that bound them.

Every timing is split into a part that scales with the core clock (compute, L1, L2) and one that does not
(DRAM), so DVFS can re-time an operator without re-tuning it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from deepstack.errors import UserInputError
from deepstack.models import dram as dram_model
from deepstack.models import memo
from deepstack.models.device import DeviceSpec
from deepstack.models.workload import KV_PAGE_TOKENS, Attention, Gemm, Vector

MAX_TILE = 256  # largest tile edge searched (elements)
STAGES = (2, 3, 4)  # software-pipeline depths searched
SPLIT_K = (1, 2, 4, 8, 16)
ACCUMULATOR_BYTES = 4.0  # FP32 accumulation
ACCUMULATOR_SHARE_OF_L0 = 0.5  # registers left for accumulators after operands and addresses (inferred)
L2_RESIDENT_SHARE = 0.5  # a tensor stays in L2 between operators if it fits in half of it (inferred)
ATTENTION_KV_BLOCKS = (16, 32, 64, 128)  # keys per pipeline stage searched (FlashAttention-2 uses 64–128)
WAVE_BOUNDS = ("matrix", "vector", "sfu", "l1", "l2", "dram")
CLOCKS_KEPT = 4  # clocks whose re-timed results a timing (or a run of rows) keeps: DVFS settles on one per device
VECTOR_OPERAND_BYTES = 12  # an element-wise FP32 op reads two 4-byte operands and writes one from registers


class NoTilingError(UserInputError, ValueError):
    """The device cannot run an operator at all (its L1 holds no tile of it)."""


@dataclass(frozen=True)
class WaveTiming:
    """One kind of wave: how many there are and their clock-scaled / fixed times."""

    count: int
    clocked_s: float  # compute, L1, L2 at nominal clock
    fixed_s: float  # DRAM
    bound: str


@dataclass(frozen=True)
class OpTiming:
    """Timing and traffic of one operator on one device (nominal clock)."""

    name: str
    kind: str
    time_s: float
    bound: str
    matrix_flops: float
    vector_flops: float
    sfu_ops: float
    dram_B: float
    l2_B: float
    l1_B: float
    waves: int
    config: str
    wave_timings: tuple[WaveTiming, ...]
    prologue_s: float
    l0_B: float = 0.0  # register-file traffic: operands staged into registers for the units


    def time_at(self, clock_scale: float) -> float:
        """Time at ``clock_scale`` × the nominal clock (DRAM time does not scale). The last few clocks asked for
        are kept: DVFS settles on one clock per device, and timing records are shared by many design points."""
        if clock_scale == 1.0:
            return self.time_s  # the same sum, computed when the timing was made
        kept = self.__dict__.setdefault("_times_at", {})  # not a field: equality and hashing ignore it
        found = kept.get(clock_scale)
        if found is None:
            if len(kept) >= CLOCKS_KEPT:
                kept.clear()
            found = kept[clock_scale] = self.prologue_s + sum(w.count * max(w.clocked_s / clock_scale, w.fixed_s)
                                                              for w in self.wave_timings)
        return found

    @property
    def wave_compute_s(self) -> float:
        """τ_comp of eq. 5: the compute part of a full wave."""
        return max((w.clocked_s for w in self.wave_timings), default=0.0)


def _pow2_range(low: int, high: int) -> list[int]:
    out, value = [], low
    while value <= high:
        out.append(value)
        value *= 2
    return out or [low]


def _bound(parts: dict[str, float]) -> str:
    return max(parts, key=parts.get)


@memo.cached(maxsize=262144)
def _weight_window_time_s(dram: dram_model.DramSpec, blocks: int, block_stride_B: int, window_B: int,
                          swizzle: bool) -> tuple[float, int]:
    """Bank service time of ``blocks`` concurrent streams, each reading ``window_B`` contiguous bytes, their
    starts ``block_stride_B`` apart (the tiled layout of a weight's column blocks)."""
    starts = np.arange(blocks, dtype=np.int64) * block_stride_B
    lengths = np.full(blocks, window_B, dtype=np.int64)
    # swizzle: stagger block j by j windows' worth of rows so concurrent streams start on different banks
    offsets = np.arange(blocks, dtype=np.int64) * math.ceil(window_B / dram.row_B) if swizzle else None
    return dram_model.bank_service_time_s(dram, starts, lengths, offsets)


def _dram_time_s(dev: DeviceSpec, bytes_B: float, in_flight_B: float, active_pes: int, bank_s: float) -> float:
    """DRAM time of a wave: the bank-level service time, bounded by peak, Little's law and L1 fill."""
    if bytes_B <= 0:
        return 0.0
    little = dram_model.little_bw_Bps(max(in_flight_B, 1.0), dev.dram.access_latency_s)
    l1_fill = active_pes * dev.l1_bw_B_per_cycle * dev.clock_Hz
    return max(bank_s, bytes_B / min(dev.dram.peak_bw_Bps, little, l1_fill))


def _resident(dev: DeviceSpec, bytes_B: float) -> bool:
    return bytes_B <= dev.l2_B * L2_RESIDENT_SHARE


@dataclass(frozen=True)
class _Candidates:
    """Every tiling the tuner considers for one GEMM, as parallel arrays (searched with numpy)."""

    tm: np.ndarray
    tn: np.ndarray
    tk: np.ndarray
    stages: np.ndarray
    split: np.ndarray
    grouped: np.ndarray  # rasterisation: True = grouped (square-ish waves), False = row order
    time_s: np.ndarray
    waves: np.ndarray
    # what the timing record of a candidate is made of (kind 0: the full waves, kind 1: the last wave)
    kind_count: np.ndarray  # (2, N) how many waves of each kind
    kind_active: np.ndarray  # (2, N) tiles in a wave of each kind
    kind_clocked_s: np.ndarray  # (2, N) compute, L1, L2 time of one wave
    kind_dram_s: np.ndarray  # (2, N) DRAM time of one wave
    kind_bound: np.ndarray  # (2, N) index into GEMM_BOUNDS of the slowest resource
    dram_B: np.ndarray
    tiles: np.ndarray
    l2_tile_B: np.ndarray
    l1_fill_B: np.ndarray
    l1_read_B: np.ndarray
    records: dict = field(default_factory=dict, compare=False, repr=False)  # candidate → its timing record

    @functools.cached_property
    def overlap_terms(self) -> tuple[np.ndarray, ...]:
        """What eq. 5 needs of every candidate whatever the collective: waves (≥ 1), waves − 1, the steady
        state's compute, a wave's compute, and whether it runs in one wave."""
        w = np.maximum(self.waves, 1)
        return w, w - 1, (w - 1) * self.time_s / w, self.time_s / w, self.waves <= 1


GEMM_BOUNDS = ("matrix", "vector", "l1", "l2", "dram")  # in _time_gemm's order: the first of equals is named


def _pow2_steps(minimum: np.ndarray, top: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the edges minimum·2^i for i < count, and whether each is ≤ that row's top (rows × count)."""
    edges = minimum[:, None] * (1 << np.arange(count))[None, :]
    return edges, edges <= top[:, None]


def _edge_top(minimum: np.ndarray, extent: np.ndarray) -> np.ndarray:
    """The largest tile edge per row: the extent rounded up to a power of two, at least the minimum tile and at
    most MAX_TILE (the candidate edges are the minimum tile times powers of two up to it)."""
    rounded = 1 << np.ceil(np.log2(np.maximum(extent, 1))).astype(np.int64)
    return np.maximum(minimum, np.minimum(MAX_TILE, rounded))


def _grid(gemms: list[Gemm], dev: DeviceSpec) -> dict[str, np.ndarray]:
    """Every tiling that fits registers and L1, of every GEMM at once, as columns; rows are ordered GEMM by GEMM
    and, within one, by tm, tn, split-K, tk and rasterisation (the order the tuner breaks ties in)."""
    mt, nt, kt = dev.min_tile
    acc_limit = dev.l0_B * ACCUMULATOR_SHARE_OF_L0
    gm = np.array([g.m for g in gemms], dtype=np.int64)
    gn = np.array([g.n for g in gemms], dtype=np.int64)
    gk = np.array([g.k for g in gemms], dtype=np.int64)
    groups = np.array([g.groups for g in gemms], dtype=np.int64)
    a_bytes = np.array([g.a_bytes for g in gemms])
    b_bytes = np.array([g.b_bytes for g in gemms])
    n_g = len(gemms)
    # GEMM × tm × tn first, filtered; then each survivor × split × tk × grouped, filtered (order preserved)
    steps_m, steps_n, steps_k = ((MAX_TILE // edge).bit_length() for edge in (mt, nt, kt))
    tm_all, tm_ok = _pow2_steps(np.full(n_g, mt), _edge_top(np.full(n_g, mt), gm), steps_m)
    tn_all, tn_ok = _pow2_steps(np.full(n_g, nt), _edge_top(np.full(n_g, nt), gn), steps_n)
    gi, ti, ni = (a.ravel() for a in np.indices((n_g, steps_m, steps_n)))
    tm, tn = tm_all[gi, ti], tn_all[gi, ni]
    ok = tm_ok[gi, ti] & tn_ok[gi, ni]
    ok &= ~((tm * tn * ACCUMULATOR_BYTES > acc_limit) & ~((tm == mt) & (tn == nt)))
    gi, tm, tn = gi[ok], tm[ok], tn[ok]
    inner = len(SPLIT_K) * steps_k * 2
    si, ki, grouped = (np.tile(a.ravel(), len(gi)) for a in np.indices((len(SPLIT_K), steps_k, 2)))
    gi, tm, tn = (np.repeat(a, inner) for a in (gi, tm, tn))
    split = np.array(SPLIT_K, dtype=np.int64)[si]
    base_tiles = groups[gi] * _ceil_div(gm[gi], tm) * _ceil_div(gn[gi], tn)
    ok = ~((split > 1) & ((base_tiles * split > 4 * dev.pes) | (gk[gi] / split < kt * 2)))
    k_len = _ceil_div(gk[gi], split)
    tk = kt * (1 << ki)
    ok &= tk <= _edge_top(np.full(len(k_len), kt), np.minimum(k_len, 128))
    ok &= (grouped == 0) | (_ceil_div(gm[gi], tm) > 1)
    gi, tm, tn, tk, split, grouped = (a[ok] for a in (gi, tm, tn, tk, split, grouped))
    stage_B = tm * tk * a_bytes[gi] + tk * tn * b_bytes[gi]
    # the deepest pipeline that fits L1: more stages only add bytes in flight (Little) and widen the bank
    # window, so shallower ones are never faster
    stages = np.zeros(len(gi), dtype=np.int64)
    for st in STAGES:
        stages = np.where(st * stage_B <= dev.l1_B, st, stages)
    ok = stages > 0
    return {"gemm": gi[ok], "tm": tm[ok], "tn": tn[ok], "tk": tk[ok], "stages": stages[ok], "split": split[ok],
            "grouped": grouped[ok].astype(bool)}


def _ceil_div(a, b):
    return -(-a // b)


def _stream_time_array(dram: dram_model.DramSpec, total_B: np.ndarray, segment_B) -> np.ndarray:
    """Vectorised :func:`deepstack.models.dram.stream_time_s` (same formula, element-wise)."""
    total = np.asarray(total_B, dtype=float)
    segment = np.maximum(1.0, np.minimum(segment_B, total))
    transactions = np.ceil(total / segment)
    per_bank = np.ceil(transactions / dram.banks)
    rows_per = np.ceil(segment / dram.row_B)
    bytes_per_bank = np.minimum(per_bank * segment, total)
    busy = bytes_per_bank / dram.bank_bw_Bps + per_bank * rows_per * dram.row_overhead_s
    if dram.interleave_ways > 1:
        busy = np.maximum(bytes_per_bank / dram.bank_bw_Bps, busy / dram.interleave_ways)
    return np.where(total > 0, np.maximum(busy, total / dram.peak_bw_Bps), 0.0) / dram.refresh_availability


class _CandidateMemo(dict):
    """(GEMM, device, swizzle) → :class:`_Candidates` (or the message saying no tiling fits); filled a batch of
    GEMMs at a time."""

    MAX_ENTRIES = 65536

    def cache_clear(self) -> None:
        self.clear()


_CANDIDATES = _CandidateMemo()


def _candidates(g: Gemm, dev: DeviceSpec, swizzle: bool = True) -> _Candidates:
    key = (g, dev, swizzle)
    found = _CANDIDATES.get(key)
    if found is None:
        prepare_gemms([g], dev, swizzle)
        found = _CANDIDATES[key]
    if isinstance(found, str):  # no tiling fits: the memo keeps the message, each caller gets a fresh error
        raise NoTilingError(found)
    return found


def prepare_gemms(gemms, dev: DeviceSpec, swizzle: bool = True) -> None:
    """Time every candidate tiling of every GEMM in ``gemms`` on ``dev`` in one vectorised pass (memoised).

    Mirrors :func:`_time_gemm` element-wise. Batching matters: a design point has tens of GEMMs with tens of
    candidates each, so the fixed cost of the numpy calls would dominate if they were timed one by one.
    """
    todo = list(dict.fromkeys(g for g in gemms if (g, dev, swizzle) not in _CANDIDATES))
    if not todo:
        return
    if len(_CANDIDATES) + len(todo) > _CANDIDATES.MAX_ENTRIES:
        _CANDIDATES.clear()
    c = _grid(todo, dev)
    found = np.bincount(c["gemm"], minlength=len(todo))
    for index in np.flatnonzero(found == 0):  # remembered as such: the caller may have another option
        g = todo[index]
        _CANDIDATES[(g, dev, swizzle)] = f"{g.name}: no tiling fits this device's L1 ({dev.l1_B / 1024:g} KiB per PE)"
    todo = [g for g, count in zip(todo, found, strict=True) if count]
    if not todo:
        return
    c["gemm"] = np.cumsum(found > 0)[c["gemm"]] - 1  # renumber over the GEMMs that have candidates
    gi = c["gemm"]
    tm, tn, tk, stages, split, grouped = c["tm"], c["tn"], c["tk"], c["stages"], c["split"], c["grouped"]

    def column(attribute: str, dtype=float) -> np.ndarray:
        return np.array([getattr(g, attribute) for g in todo], dtype=dtype)[gi]

    m, n, k, groups = column("m", np.int64), column("n", np.int64), column("k", np.int64), column("groups", np.int64)
    a_bytes, b_bytes, c_bytes = column("a_bytes"), column("b_bytes"), column("c_bytes")
    epi_flops, epi_sfu, epi_read = column("epilogue_vector_flops"), column("epilogue_sfu_ops"), column(
        "epilogue_read_bytes")
    a_res = np.array([_resident(dev, g.groups * g.m * g.k * g.a_bytes) for g in todo])[gi]
    c_res = np.array([_resident(dev, g.groups * g.m * g.n * g.c_bytes) for g in todo])[gi]
    b_res = np.array([(not g.weight) and _resident(dev, g.groups * g.k * g.n * g.b_bytes) for g in todo])[gi]
    mt, nt, kt = dev.min_tile
    clock = dev.clock_Hz
    rows_n = len(gi)
    k_len = _ceil_div(k, split)
    row_blocks = _ceil_div(m, tm)
    col_blocks = _ceil_div(n, tn) * split
    tiles = groups * row_blocks * col_blocks
    mma = (_ceil_div(tm, mt) * _ceil_div(tn, nt) * _ceil_div(k_len, kt) * 2 * mt * nt * kt
           / dev.matrix_flops_per_cycle)
    epi_vector = tm * tn * (epi_flops + (split > 1))
    epi = epi_vector / dev.vector_flops_per_cycle + tm * tn * epi_sfu / dev.sfu_ops_per_cycle
    fill = k_len * (tm * a_bytes + tn * b_bytes)
    reads_a, reads_b = _operand_reads_array(tm, tn, mt, nt, dev.wgmma)
    read = k_len * (tm * a_bytes * reads_a + tn * b_bytes * reads_b)
    l2_tile = fill + tm * tn * (c_bytes + epi_read)
    compute_s = (mma + epi) / clock
    l1_s = np.maximum(fill, read) / dev.l1_bw_B_per_cycle / clock
    waves = _ceil_div(tiles, dev.pes)
    window_steps = stages - 1
    k_steps = _ceil_div(k_len, tk)
    segment = np.minimum(k * a_bytes, dev.dram.row_B)
    total = np.zeros(rows_n)
    dram_total = np.zeros(rows_n)
    kinds = ((np.where(waves > 1, waves - 1, 0), np.full(rows_n, dev.pes)),
             (np.ones(rows_n, dtype=int), tiles - np.maximum(waves - 1, 0) * dev.pes))
    kind_clocked, kind_dram, kind_bound = [], [], []
    for count, active in kinds:
        rows, cols = _wave_blocks_array(active, row_blocks, col_blocks, groups, grouped)
        b_B = np.where(b_res, 0.0, cols * k_len * tn * b_bytes)
        a_B = np.where(a_res, 0.0, rows * tm * k_len * a_bytes)
        c_B = np.where(c_res, 0.0, active * tm * tn * c_bytes)
        wave_B = a_B + b_B + c_B
        bank_s = np.zeros(rows_n)
        streamed = ~b_res
        if streamed.any():
            window = (np.minimum(window_steps, k_steps) * tk * tn * b_bytes).astype(np.int64)[streamed]
            stride = (k_len * tn * b_bytes).astype(np.int64)[streamed]
            # many candidates share a window shape: time each distinct one once
            code = np.zeros(len(window), dtype=np.int64)
            for column_ in (cols[streamed], stride, window):  # one integer per (cols, stride, window) triple
                values, rank = np.unique(column_, return_inverse=True)
                code = code * len(values) + rank.ravel()
            _, first, which = np.unique(code, return_index=True, return_inverse=True)
            window_s = dram_model.window_service_times_s(dev.dram, cols[streamed][first], stride[first],
                                                         window[first], swizzle)[which.ravel()]
            bank_s[streamed] = window_s * _ceil_div(k_steps[streamed], window_steps[streamed])
        bank_s = bank_s + _stream_time_array(dev.dram, a_B + c_B, segment)
        in_flight = active * window_steps * (np.where(b_res, 0.0, tk * tn * b_bytes)
                                             + np.where(a_res, 0.0, tm * tk * a_bytes))
        little = np.maximum(in_flight, 1.0) / dev.dram.access_latency_s
        l1_fill = active * dev.l1_bw_B_per_cycle * clock
        dram_s = np.where(wave_B > 0, np.maximum(bank_s, wave_B / np.minimum(np.minimum(
            dev.dram.peak_bw_Bps, little), l1_fill)), 0.0)
        l2_s = active * l2_tile / dev.l2_bw_Bps
        clocked = np.maximum(np.maximum(compute_s, l1_s), l2_s)
        total += count * np.maximum(clocked, dram_s)
        dram_total += count * wave_B
        kind_clocked.append(clocked)
        kind_dram.append(dram_s)
        kind_bound.append(np.argmax(np.stack([compute_s, epi_vector / dev.vector_flops_per_cycle / clock, l1_s, l2_s,
                                              dram_s]), axis=0))
    total += np.where(dram_total > 0, dev.dram.access_latency_s, 0.0)
    per_kind = [np.stack([k[0] for k in kinds]), np.stack([k[1] for k in kinds]), np.stack(kind_clocked),
                np.stack(kind_dram), np.stack(kind_bound)]
    bounds = np.flatnonzero(np.diff(gi, prepend=-1, append=len(todo)))
    for index, g in enumerate(todo):
        part = slice(bounds[index], bounds[index + 1])
        _CANDIDATES[(g, dev, swizzle)] = _Candidates(
            tm[part], tn[part], tk[part], stages[part], split[part], grouped[part], total[part], waves[part],
            *(array[:, part] for array in per_kind), dram_total[part], tiles[part], l2_tile[part], fill[part],
            read[part])


def _operand_reads_array(tm, tn, mt: int, nt: int, wgmma: bool) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised :func:`_operand_reads`."""
    if wgmma:
        return np.ones(len(tm)), np.ones(len(tm))
    reads_a = np.where(tm < 2 * mt, 4, np.where(tn < 2 * nt, 1, 2))
    reads_b = np.where(tm < 2 * mt, 1, np.where(tn < 2 * nt, 4, 2))
    return reads_a, reads_b


def _wave_blocks_array(tiles, row_blocks, col_blocks, groups: int, grouped):
    """Vectorised :func:`_gemm_wave_blocks`."""
    per_group = row_blocks * col_blocks
    side = np.maximum(1, np.round(np.sqrt(tiles)).astype(np.int64))
    use_grouped = grouped & (row_blocks > 1)
    rows_g = np.minimum(row_blocks, side)
    cols_g = np.minimum(col_blocks, _ceil_div(tiles, rows_g))
    cols_r = np.minimum(col_blocks, tiles)
    rows_r = np.minimum(row_blocks, _ceil_div(tiles, col_blocks))
    rows = np.where(use_grouped, rows_g, rows_r)
    cols = np.where(use_grouped, cols_g, cols_r)
    spans = np.maximum(1, _ceil_div(tiles, per_group))
    return np.where(spans > 1, rows * spans, rows), cols * np.minimum(groups, spans)


def _retime(g: Gemm, dev: DeviceSpec, c: _Candidates, i: int, swizzle: bool) -> OpTiming:
    """The timing record of candidate ``i`` from the scalar model (:func:`_time_gemm`): the reference the
    vectorised tuner and :func:`_record` are tested against."""
    a_res = _resident(dev, g.groups * g.m * g.k * g.a_bytes)
    c_res = _resident(dev, g.groups * g.m * g.n * g.c_bytes)
    b_res = (not g.weight) and _resident(dev, g.groups * g.k * g.n * g.b_bytes)
    return _time_gemm(g, dev, int(c.tm[i]), int(c.tn[i]), int(c.tk[i]), int(c.stages[i]), int(c.split[i]),
                      "grouped" if c.grouped[i] else "row", swizzle, a_res, b_res, c_res)


def _record(g: Gemm, dev: DeviceSpec, c: _Candidates, i: int, swizzle: bool) -> OpTiming:
    """The timing record of candidate ``i`` from the tuner's arrays: the very figures :func:`_retime` computes
    with the scalar model (tests check it), without timing the candidate again. Kept per candidate: the
    overlapped tunings of one GEMM against many collective times mostly pick the same few tilings."""
    found = c.records.get(i)
    if found is None:
        found = c.records[i] = _make_record(g, dev, c, i, swizzle)
    return found


def _make_record(g: Gemm, dev: DeviceSpec, c: _Candidates, i: int, swizzle: bool) -> OpTiming:
    waves = tuple(WaveTiming(int(c.kind_count[k, i]), float(c.kind_clocked_s[k, i]), float(c.kind_dram_s[k, i]),
                             GEMM_BOUNDS[c.kind_bound[k, i]])
                  for k in (0, 1) if c.kind_count[k, i] > 0 and c.kind_active[k, i] > 0)
    dram_B = float(c.dram_B[i])
    prologue = dev.dram.access_latency_s if dram_B > 0 else 0.0
    time_s = prologue + sum(w.count * max(w.clocked_s, w.fixed_s) for w in waves)
    tiles = int(c.tiles[i])
    return OpTiming(
        name=g.name, kind="gemm", time_s=time_s, bound=max(waves, key=lambda w: w.count * max(w.clocked_s,
                                                                                           w.fixed_s)).bound,
        matrix_flops=g.flops, vector_flops=g.groups * g.m * g.n * g.epilogue_vector_flops,
        sfu_ops=g.groups * g.m * g.n * g.epilogue_sfu_ops, dram_B=dram_B, l2_B=tiles * float(c.l2_tile_B[i]),
        l1_B=tiles * float(c.l1_fill_B[i] + c.l1_read_B[i]), l0_B=tiles * float(c.l1_read_B[i]),
        waves=int(c.waves[i]),
        config=f"tile {c.tm[i]}x{c.tn[i]}x{c.tk[i]}, {c.stages[i]} stages, split-K {c.split[i]}, "
               f"{'grouped' if c.grouped[i] else 'row'} raster" + ("" if swizzle else ", unswizzled"),
        wave_timings=waves, prologue_s=prologue,
    )


@memo.cached(maxsize=65536)
def tune_gemm(g: Gemm, dev: DeviceSpec, swizzle: bool = True) -> OpTiming:
    """The fastest tiling of a GEMM on ``dev`` (``swizzle=False`` forces the unswizzled layout, for studies
    and tests)."""
    c = _candidates(g, dev, swizzle)
    return _record(g, dev, c, int(np.argmin(c.time_s)), swizzle)


def overlap_time_s(waves: int, total_comp_s: float, comm_bw_s: float, latency_s: float) -> float:
    """Eq. 5: tile-wave pipeline of compute and the communication it feeds (or is fed by).

    τ_comp and τ_comm are the per-wave shares of the compute and of the collective's bandwidth time; the
    collective's zero-load latency L_net cannot be hidden. One wave (or none) serialises. Eq. 5 as printed adds
    L_net in the epilogue and again in the steady state, which exceeds running serially when the latency is
    larger than the compute it could hide behind; a scheduler would then not pipeline, so the result is capped
    at the serial time.
    """
    serial = total_comp_s + comm_bw_s + latency_s
    if waves <= 1:
        return serial
    tau_comp = total_comp_s / waves
    tau_comm = comm_bw_s / waves
    steady = max((waves - 1) * tau_comp, (waves - 1) * tau_comm + latency_s)
    return min(serial, tau_comp + (tau_comm + latency_s) + steady)


@memo.cached(maxsize=65536)
def tune_gemm_overlapped(g: Gemm, dev: DeviceSpec, comm_bw_s: float, latency_s: float) -> OpTiming:
    """The tiling that minimises eq. 5 with the collective this GEMM feeds: small tiles give more waves to hide
    communication behind, large tiles more reuse (paper §4.1.5, Fig. 7)."""
    c = _candidates(g, dev)
    w, w_less_1, steady_compute, wave_compute, single = c.overlap_terms
    serial = c.time_s + comm_bw_s + latency_s
    steady = np.maximum(steady_compute, w_less_1 * comm_bw_s / w + latency_s)
    pipelined = wave_compute + comm_bw_s / w + latency_s + steady
    overlapped = np.where(single, serial, np.minimum(serial, pipelined))
    return _record(g, dev, c, int(np.argmin(overlapped)), True)


def _operand_reads(tm: int, tn: int, mt: int, nt: int, wgmma: bool) -> tuple[int, int]:
    """How many times each A and B byte is read from L1 by the PE's four matrix units."""
    if wgmma:
        return 1, 1
    if tm < 2 * mt:
        return 4, 1
    if tn < 2 * nt:
        return 1, 4
    return 2, 2


def _gemm_wave_blocks(tiles: int, row_blocks: int, col_blocks: int, groups: int, raster: str) -> tuple[int, int]:
    """Distinct A row-blocks and B column-blocks touched by a wave of ``tiles`` consecutive tiles."""
    per_group = row_blocks * col_blocks
    if raster == "grouped" and row_blocks > 1:
        side = max(1, round(math.sqrt(tiles)))
        rows = min(row_blocks, side)
        cols = min(col_blocks, math.ceil(tiles / rows))
    else:
        cols = min(col_blocks, tiles)
        rows = min(row_blocks, math.ceil(tiles / col_blocks))
    spans = max(1, math.ceil(tiles / per_group))
    return rows * spans if spans > 1 else rows, cols * min(groups, spans)


def _time_gemm(g: Gemm, dev: DeviceSpec, tm: int, tn: int, tk: int, stages: int, split: int, raster: str,
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
    reads_a, reads_b = _operand_reads(tm, tn, mt, nt, dev.wgmma)
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
        rows, cols = _gemm_wave_blocks(active, row_blocks, col_blocks, g.groups, raster)
        b_B = 0.0 if b_resident else cols * k_len * tn * g.b_bytes
        a_B = 0.0 if a_resident else rows * tm * k_len * g.a_bytes
        c_B = 0.0 if c_resident else active * tm * tn * g.c_bytes
        wave_B = a_B + b_B + c_B
        bank_s = 0.0
        if b_B > 0:
            window = int(min(window_steps, k_steps) * tk * tn * g.b_bytes)
            window_s, _ = _weight_window_time_s(dev.dram, cols, int(k_len * tn * g.b_bytes), window, swizzle)
            bank_s = window_s * math.ceil(k_steps / window_steps)
        if a_B + c_B > 0:
            bank_s += dram_model.stream_time_s(dev.dram, a_B + c_B, min(g.k * g.a_bytes, dev.dram.row_B))
        in_flight = active * window_steps * ((0 if b_resident else tk * tn * g.b_bytes)
                                             + (0 if a_resident else tm * tk * g.a_bytes))
        dram_s = _dram_time_s(dev, wave_B, in_flight, active, bank_s)
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
        wave_timings.append(WaveTiming(count, clocked, dram_s, _bound(parts)))
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


@memo.cached(maxsize=65536)
def tune_attention(op: Attention, dev: DeviceSpec) -> OpTiming:
    """Flash attention (prefill) or flash decoding with split-KV (decode). Tiles cover requests × KV groups ×
    blocks of the group's query heads × query blocks (× KV splits); tiles sharing a KV stream are scheduled
    together so the stream is read from DRAM once when the wave's streams fit in L2. Every candidate is timed
    at once (:func:`_attention_times`); the winner is re-timed by :func:`_time_attention` for its full record."""
    q_blocks = tuple(b for b in (16, 32, 64, 128) if b <= max(16, op.q_len)) if op.q_len > 1 else (1,)
    max_split = max(1, op.kv_len // min(ATTENTION_KV_BLOCKS))
    splits = [s for s in SPLIT_K if s <= max_split] if op.q_len == 1 else [1]
    grid = np.array([(hb, bq, split, kv) for hb in _pow2_range(1, op.q_per_group) for bq in q_blocks
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
    times = _attention_times(op, dev, head_block[fits], bq[fits], split[fits], stages[fits], kv_block[fits])
    i = int(np.argmin(times))  # the first of equals, as a loop in the grid's order would keep
    best = [int(col[fits][i]) for col in (grid[:, 0], bq, split, stages, kv_block)]
    return _time_attention(op, dev, *best)


def _attention_times(op: Attention, dev: DeviceSpec, head_block, bq, split, stages, kv_block) -> np.ndarray:
    """Vectorised :func:`_time_attention` (time only, same arithmetic element by element)."""
    mt, nt, kt = dev.min_tile
    clock = dev.clock_Hz
    rows = head_block * np.minimum(bq, op.q_len)
    head_blocks = _ceil_div(op.q_per_group, head_block)
    q_tiles = _ceil_div(op.q_len, bq)
    tiles = op.requests * op.kv_groups * split * head_blocks * q_tiles
    sharing = head_blocks * q_tiles
    if op.q_len > 1:
        keys = np.full(len(rows), op.scores / max(op.requests * op.kv_groups * op.q_per_group * op.q_len, 1))
    else:
        keys = _ceil_div(op.kv_len, split)
    qk_cycles = (_ceil_div(rows, mt) * np.ceil(keys / nt) * math.ceil(op.qk_dim / kt) * 2 * mt * nt * kt
                 / dev.matrix_flops_per_cycle)
    pv_cycles = (_ceil_div(rows, mt) * math.ceil(op.v_dim / nt) * np.ceil(keys / kt) * 2 * mt * nt * kt
                 / dev.matrix_flops_per_cycle)
    scores = rows * keys
    vector = scores * 4 + np.where(split > 1, rows * op.v_dim * 3, 0)
    tile_cycles = qk_cycles + pv_cycles + vector / dev.vector_flops_per_cycle + scores / dev.sfu_ops_per_cycle
    kv_tile_B = keys * op.kv_token_bytes
    qo_tile_B = rows * (op.qk_dim + op.v_dim) * op.act_bytes
    waves = _ceil_div(tiles, dev.pes)
    page_B = min(dev.dram.row_B, KV_PAGE_TOKENS * op.kv_token_bytes)
    l1_s = (kv_tile_B + qo_tile_B) / dev.l1_bw_B_per_cycle / clock
    compute_s = tile_cycles / clock
    total = np.zeros(len(rows))
    for count, active in ((np.where(waves > 1, waves - 1, 0), np.full(len(rows), dev.pes)),
                          (np.ones(len(rows), dtype=np.int64), tiles - np.maximum(waves - 1, 0) * dev.pes)):
        streams = _ceil_div(active, sharing)
        unique_kv_B = (streams * op.kv_len / split * op.kv_token_bytes if op.q_len == 1
                       else streams * op.kv_len * op.kv_token_bytes)
        resident = unique_kv_B <= dev.l2_B * L2_RESIDENT_SHARE
        kv_B = np.where(resident, unique_kv_B, active * kv_tile_B)
        wave_B = kv_B + (active * qo_tile_B if op.q_len > 1 else 0.0)
        in_flight = np.minimum(active, streams * np.where(resident, 1, sharing)) * (stages - 1) * (
            kv_block * op.kv_token_bytes)
        bank_s = _stream_time_array(dev.dram, wave_B, page_B)
        little = np.maximum(in_flight, 1.0) / dev.dram.access_latency_s
        l1_fill = active * dev.l1_bw_B_per_cycle * clock
        dram_s = np.where(wave_B > 0, np.maximum(bank_s, wave_B / np.minimum(np.minimum(
            dev.dram.peak_bw_Bps, little), l1_fill)), 0.0)
        l2_s = active * (kv_tile_B + qo_tile_B) / dev.l2_bw_Bps
        clocked = np.maximum(np.maximum(compute_s, l1_s), l2_s)
        total += count * np.maximum(clocked, dram_s)
    return dev.dram.access_latency_s + total


def _time_attention(op: Attention, dev: DeviceSpec, head_block: int, bq: int, split: int,
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
    page_B = min(dev.dram.row_B, KV_PAGE_TOKENS * op.kv_token_bytes)
    wave_timings, dram_total = [], 0.0
    for count, active in kinds:
        if count <= 0 or active <= 0:
            continue
        streams = math.ceil(active / sharing)
        unique_kv_B = streams * op.kv_len / split * op.kv_token_bytes if op.q_len == 1 else (
            streams * op.kv_len * op.kv_token_bytes)
        kv_B = unique_kv_B if _resident(dev, unique_kv_B) else active * kv_tile_B
        wave_B = kv_B + (active * qo_tile_B if op.q_len > 1 else 0.0)
        in_flight = min(active, streams * (1 if _resident(dev, unique_kv_B) else sharing)) * (stages - 1) * (
            kv_block * op.kv_token_bytes)
        bank_s = dram_model.stream_time_s(dev.dram, wave_B, page_B)
        dram_s = _dram_time_s(dev, wave_B, in_flight, active, bank_s)
        l1_s = (kv_tile_B + qo_tile_B) / dev.l1_bw_B_per_cycle / clock  # fill and read ports work in parallel
        l2_s = active * (kv_tile_B + qo_tile_B) / dev.l2_bw_Bps
        compute_s = tile_cycles / clock
        parts = {"matrix": (qk_cycles + pv_cycles) / clock, "vector": vector / dev.vector_flops_per_cycle / clock,
                 "sfu": scores / dev.sfu_ops_per_cycle / clock, "l1": l1_s, "l2": l2_s, "dram": dram_s}
        wave_timings.append(WaveTiming(count, max(compute_s, l1_s, l2_s), dram_s, _bound(parts)))
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


@memo.cached(maxsize=65536)
def time_vector(op: Vector, dev: DeviceSpec) -> OpTiming:
    """Element-wise operator: vector/SFU throughput against L2 (resident tensors) or a DRAM stream."""
    clock = dev.clock_Hz
    total_B = op.read_bytes + op.write_bytes
    vector_s = op.elements * op.vector_flops / dev.peak_vector_flops
    sfu_s = op.elements * op.sfu_ops / dev.peak_sfu_ops
    l2_s = total_B / dev.l2_bw_Bps
    if _resident(dev, total_B):
        dram_B, dram_s = 0.0, 0.0
    else:
        dram_B = total_B
        segment = op.segment_bytes or dev.dram.row_B
        bank_s = dram_model.stream_time_s(dev.dram, total_B, segment)
        dram_s = _dram_time_s(dev, total_B, dev.pes * dev.l1_B / 2, dev.pes, bank_s)
    parts = {"vector": vector_s, "sfu": sfu_s, "l2": l2_s, "dram": dram_s}
    waves = max(1, math.ceil(op.elements / (dev.pes * dev.vector_flops_per_cycle)))
    prologue = dev.dram.access_latency_s if dram_B else 0.0
    timing = WaveTiming(1, max(vector_s, sfu_s, l2_s), dram_s, _bound(parts))
    del clock
    return OpTiming(
        name=op.name, kind="vector", time_s=prologue + max(timing.clocked_s, timing.fixed_s), bound=timing.bound,
        matrix_flops=0.0, vector_flops=op.elements * op.vector_flops, sfu_ops=op.elements * op.sfu_ops,
        dram_B=dram_B, l2_B=total_B, l1_B=total_B, waves=waves, config="stream", wave_timings=(timing,),
        l0_B=op.elements * VECTOR_OPERAND_BYTES,
        prologue_s=prologue,
    )


def time_op(op, dev: DeviceSpec) -> OpTiming:
    if isinstance(op, Gemm):
        return tune_gemm(op, dev)
    if isinstance(op, Attention):
        return tune_attention(op, dev)
    if isinstance(op, Vector):
        return time_vector(op, dev)
    raise TypeError(f"unknown operator {op!r}")
