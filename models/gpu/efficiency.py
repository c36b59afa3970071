"""Achievable fractions on a GPU (docs/calibration.md §GPU execution).

A streaming kernel reaches only part of the HBM's peak bandwidth (``hbm_efficiency``: ~87 % on B200/H200 and
~66 % on MI325X in public microbenchmarks). The operator model's DRAM law is the paper's, calibrated on 3D
stacks; on a GPU an operator therefore takes at least its DRAM bytes at the achievable bandwidth.
"""

from __future__ import annotations

import dataclasses

from deepstack.models import memo
from deepstack.models.compute.timing import OpTiming, WaveTiming


def achievable_Bps(dev, gpu) -> float:
    """The HBM bandwidth a streaming kernel reaches, B/s."""
    return dev.dram.peak_bw_Bps * gpu.hbm_efficiency


@memo.cached(maxsize=65536)
def at_least_achievable(timing: OpTiming, dev, gpu) -> OpTiming:
    """``timing`` stretched (every wave, clock-scaled and fixed parts alike) to at least its DRAM bytes at the
    achievable bandwidth; unchanged when it is already that slow."""
    floor_s = timing.dram_B / achievable_Bps(dev, gpu)
    if timing.time_s <= 0 or timing.time_s >= floor_s:
        return timing
    f = floor_s / timing.time_s
    waves = tuple(WaveTiming(w.count, w.clocked_s * f, w.fixed_s * f, w.bound) for w in timing.wave_timings)
    return dataclasses.replace(timing, time_s=floor_s, bound="dram", wave_timings=waves,
                               prologue_s=timing.prologue_s * f)
