"""The GEMM tuner (paper §3.3.2): which tilings of a GEMM to time, and the fastest of them.

The candidates are every tile shape of minimum tiles times powers of two up to :data:`MAX_TILE` (no larger
than the GEMM needs), every split-K, and both rasterisations, whose accumulators fit the registers, with the
software-pipeline depths that fit L1; :mod:`deepstack.models.compute.gemm` times them (the tuner is to the
timing model what Timeloop's mapper is to its model). The timed candidates of a GEMM on a device are kept, so
the plain tuning and every tuning overlapped with a collective (eq. 5) pick from the same arrays.
"""

from __future__ import annotations

import numpy as np

from deepstack.models import memo
from deepstack.models.compute.gemm import Tilings, record, time_tilings
from deepstack.models.compute.operators import Gemm
from deepstack.models.compute.overlap import overlap_time_s
from deepstack.models.compute.timing import SPLIT_K, STAGES, NoTilingError, OpTiming, ceil_div
from deepstack.models.hardware.device import DeviceSpec

MAX_TILE = 256  # largest tile edge searched (elements)
ACCUMULATOR_BYTES = 4.0  # FP32 accumulation
ACCUMULATOR_SHARE_OF_L0 = 0.5  # registers left for accumulators after operands and addresses (inferred)


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
    base_tiles = groups[gi] * ceil_div(gm[gi], tm) * ceil_div(gn[gi], tn)
    ok = ~((split > 1) & ((base_tiles * split > 4 * dev.pes) | (gk[gi] / split < kt * 2)))
    k_len = ceil_div(gk[gi], split)
    tk = kt * (1 << ki)
    ok &= tk <= _edge_top(np.full(len(k_len), kt), np.minimum(k_len, 128))
    ok &= (grouped == 0) | (ceil_div(gm[gi], tm) > 1)
    gi, tm, tn, tk, split, grouped = (a[ok] for a in (gi, tm, tn, tk, split, grouped))
    stage_B = tm * tk * a_bytes[gi] + tk * tn * b_bytes[gi]
    # the pipeline depths that fit L1 (paper §3.3.2 searches the depth): more stages hold more bytes in flight
    # (Little), never slower by itself, but widen the bank window of a tiled weight layout, whose accesses may
    # meet on fewer banks; row-major weights stream whatever the depth, so there the deepest is the fastest
    row, depth = _fitting_depths(stage_B, dev.l1_B, gi, every=dev.dram.weight_layout != "row_major")
    return {"gemm": gi[row], "tm": tm[row], "tn": tn[row], "tk": tk[row], "stages": depth, "split": split[row],
            "grouped": grouped[row].astype(bool)}


def _fitting_depths(stage_B: np.ndarray, l1_B: float, gemm: np.ndarray, every: bool) -> tuple[np.ndarray, np.ndarray]:
    """The (candidate, pipeline depth) pairs whose stages of ``stage_B`` bytes fit L1: the candidates' indices
    and the depths; with ``every`` each depth that fits, else the deepest alone. Within each GEMM (its candidates
    kept together and in order), every candidate at its deepest fitting depth comes first, then every one at its
    next deepest, and so on: the tuner keeps the first of equals, so a shallower pipeline is chosen only where it
    is faster."""
    depths = np.array(sorted(STAGES, reverse=True), dtype=np.int64)
    fits = depths[None, :] * stage_B[:, None] <= l1_B
    rank = np.cumsum(fits, axis=1)  # 1 at a candidate's deepest fitting depth, 2 at the next, ...
    if not every:
        fits &= rank == 1
    row, which = np.nonzero(fits)
    order = np.lexsort((row, rank[row, which], gemm[row]))
    return row[order], depths[which[order]]


# (GEMM, device, swizzle) → its timed Tilings, or the message saying no tiling fits; filled a batch of GEMMs at a
# time, emptied when a batch would not fit (a batch is never split: its callers read it back right away)
_TILINGS = memo.Table("gemm_tilings", maxsize=65536)


def tilings(g: Gemm, dev: DeviceSpec, swizzle: bool = True) -> Tilings:
    """The timed candidate tilings of ``g`` on ``dev`` (timed now unless :func:`prepare_gemms` did already).

    Raises:
        NoTilingError: no tiling of ``g`` fits the device's L1.
    """
    key = (g, dev, swizzle)
    found = _TILINGS.get(key)
    if found is None:
        prepare_gemms([g], dev, swizzle)
        found = _TILINGS[key]
    if isinstance(found, str):  # no tiling fits: the memo keeps the message, each caller gets a fresh error
        raise NoTilingError(found)
    return found


def prepare_gemms(gemms, dev: DeviceSpec, swizzle: bool = True) -> None:
    """Time every candidate tiling of every GEMM in ``gemms`` on ``dev`` in one vectorised pass (memoised)."""
    todo = list(dict.fromkeys(g for g in gemms if (g, dev, swizzle) not in _TILINGS))
    if not todo:
        return
    if len(_TILINGS) + len(todo) > _TILINGS.maxsize:
        _TILINGS.cache_clear()
    grid = _grid(todo, dev)
    found = np.bincount(grid["gemm"], minlength=len(todo))
    for index in np.flatnonzero(found == 0):  # remembered as such: the caller may have another option
        g = todo[index]
        _TILINGS.put((g, dev, swizzle), f"{g.name}: no tiling fits this device's L1 ({dev.l1_B / 1024:g} KiB per PE)")
    todo = [g for g, count in zip(todo, found, strict=True) if count]
    if not todo:
        return
    grid["gemm"] = np.cumsum(found > 0)[grid["gemm"]] - 1  # renumber over the GEMMs that have candidates
    for g, timed in zip(todo, time_tilings(todo, dev, swizzle, grid), strict=True):
        _TILINGS.put((g, dev, swizzle), timed)


@memo.cached(maxsize=65536)
def tune_gemm(g: Gemm, dev: DeviceSpec, swizzle: bool = True) -> OpTiming:
    """The fastest tiling of a GEMM on ``dev`` (``swizzle=False`` forces the unswizzled layout, for studies
    and tests); the first of equals in the candidates' order."""
    c = tilings(g, dev, swizzle)
    return record(g, dev, c, int(np.argmin(c.time_s)), swizzle)


@memo.cached(maxsize=65536)
def tune_gemm_overlapped(g: Gemm, dev: DeviceSpec, comm_bw_s: float, latency_s: float) -> OpTiming:
    """The tiling that minimises eq. 5 with the collective this GEMM feeds (bandwidth time ``comm_bw_s`` and
    latency ``latency_s``, s): small tiles give more waves to hide communication behind, large tiles more reuse
    (paper §4.1.5, Fig. 7)."""
    c = tilings(g, dev)
    return record(g, dev, c, int(np.argmin(overlap_time_s(c.waves, c.time_s, comm_bw_s, latency_s))), True)
