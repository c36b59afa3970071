"""The two laws every tiled operator shares (paper §3.3.2, §4.1.3), in one place: a matrix product's cycles on
units with a minimum tile, and the wave loop (tiles run in waves of one per PE; each wave takes the slower of its
clocked part, compute, L1 and L2, and its DRAM time, eq. 3 with Little's law and the banks).

Both work element-wise over many candidate tilings at once (the tuners' arrays).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from deepstack.models.compute.timing import WaveKinds, ceil_div, wave_kinds
from deepstack.models.hardware import dram as dram_model


def _blocks(size, tile: int):
    """⌈size / tile⌉: exact on integers, and on a mean (float) size too."""
    if isinstance(size, int) or (isinstance(size, np.ndarray) and size.dtype.kind in "iu"):
        return ceil_div(size, tile)
    return np.ceil(size / tile)


def padded_mma_cycles(dev, rows, cols, depth):
    """Matrix-unit cycles of a rows × cols × depth product on ``dev``: every partial minimum tile (m, n, k) of
    the units costs a whole one (2·m·n·k FLOPs at ``matrix_flops_per_cycle``)."""
    mt, nt, kt = dev.min_tile
    return (_blocks(rows, mt) * _blocks(cols, nt) * _blocks(depth, kt) * 2 * mt * nt * kt
            / dev.matrix_flops_per_cycle)


class WaveTraffic(NamedTuple):
    """What one wave of ``active`` tiles moves (arrays over the candidates)."""

    dram_B: np.ndarray  # bytes read from (or written to) DRAM
    in_flight_B: np.ndarray  # bytes the wave's pipelines keep requested (Little's law)
    bank_s: np.ndarray  # the banks' service time of those bytes
    l2_B: np.ndarray  # bytes through L2
    weight_B: np.ndarray | float = 0.0  # of dram_B, the weights streamed


class WaveRun(NamedTuple):
    """The waves of many candidates: time (without the DRAM access latency), DRAM and weight bytes, and each
    wave kind's parts for the timing records."""

    time_s: np.ndarray
    dram_B: np.ndarray
    weight_B: np.ndarray
    kinds: WaveKinds


def run_waves(dev, waves, tiles, compute_s, units_s: tuple, l1_s, traffic: Callable[[np.ndarray], WaveTraffic],
              kinds=None) -> WaveRun:
    """Time ``waves`` of ``tiles`` (arrays over candidates) on ``dev``: per wave kind (the full waves and the
    last one; ``kinds``, :func:`~deepstack.models.compute.timing.wave_kinds`, when the caller made them),
    ``traffic(active tiles)`` gives its bytes; the wave takes max(compute, L1, L2, DRAM) with compute, L1 the
    same for every wave. A wave's bound is the slowest of ``units_s`` (the compute units, in the operator's
    order), L1, L2 and DRAM, the first of equals."""
    clock = dev.clock_Hz
    rows_n = len(waves)
    total, dram_total, weight_total = np.zeros(rows_n), np.zeros(rows_n), np.zeros(rows_n)
    kinds = wave_kinds(waves, tiles, dev.pes) if kinds is None else kinds
    clocked_of, dram_of, bound_of = [], [], []
    for count, active in kinds:
        wave = traffic(active)
        dram_s = dram_model.wave_dram_time_s(dev.dram, wave.dram_B, wave.in_flight_B,
                                             active * dev.l1_bw_B_per_cycle * clock, wave.bank_s)
        l2_s = wave.l2_B / dev.l2_bw_Bps
        clocked = np.maximum(np.maximum(compute_s, l1_s), l2_s)
        total += count * np.maximum(clocked, dram_s)
        dram_total += count * wave.dram_B
        weight_total += count * wave.weight_B
        clocked_of.append(clocked)
        dram_of.append(dram_s)
        bound_of.append(np.argmax(np.stack([*units_s, l1_s, l2_s, dram_s]), axis=0))
    every = WaveKinds(np.stack([k[0] for k in kinds]), np.stack([k[1] for k in kinds]), np.stack(clocked_of),
                      np.stack(dram_of), np.stack(bound_of))
    return WaveRun(total, dram_total, weight_total, every)
