"""What timing an operator produces, and what every operator model shares (paper §3.3.2, §4.1.3).

An operator runs in waves of tiles, one tile per PE. Per wave the time is the largest of matrix/vector/SFU
compute, L1, L2 and DRAM time (software pipelining overlaps them); the DRAM time is
:func:`deepstack.models.hardware.dram.wave_dram_time_s`. The first wave also pays the DRAM access latency
(pipeline fill). Every timing is split into a part that scales with the core clock (compute, L1, L2) and one
that does not (DRAM), so DVFS can re-time an operator without re-tuning it. Results name the resource that
bound them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from deepstack.errors import UserInputError

STAGES = (2, 3, 4)  # software-pipeline depths searched
SPLIT_K = (1, 2, 4, 8, 16)  # K (GEMM) or KV (decode attention) splits searched
L2_RESIDENT_SHARE = 0.5  # a tensor stays in L2 between operators if it fits in half of it (inferred)
WAVE_BOUNDS = ("matrix", "vector", "sfu", "l1", "l2", "dram")  # a wave's resources; the first of equals is named
CLOCKS_KEPT = 4  # clocks whose re-timed results a timing (or a run of rows) keeps: DVFS settles on one per device


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
    dram_extra_rows: float = 0.0  # row activations beyond a full-row stream's (partial-row transactions)

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


@dataclass(frozen=True)
class WaveKinds:
    """The two kinds of wave of many candidates (kind 0: the full waves, kind 1: the last wave), as (2, N)
    arrays: what the timing record of candidate i is made of."""

    count: np.ndarray  # how many waves of each kind
    active: np.ndarray  # tiles in one wave of each kind
    clocked_s: np.ndarray  # compute, L1, L2 time of one wave
    dram_s: np.ndarray  # DRAM time of one wave
    bound: np.ndarray  # index into the operator's resource names of the slowest resource

    def part(self, rows: slice) -> WaveKinds:
        """The candidates ``rows`` only."""
        return WaveKinds(*(array[:, rows] for array in (self.count, self.active, self.clocked_s, self.dram_s,
                                                        self.bound)))

    def timings(self, i: int, bounds: tuple[str, ...]) -> tuple[WaveTiming, ...]:
        """The waves of candidate ``i`` (kinds that occur), their bound named from ``bounds``."""
        return tuple(WaveTiming(int(self.count[k, i]), float(self.clocked_s[k, i]), float(self.dram_s[k, i]),
                                bounds[self.bound[k, i]])
                     for k in (0, 1) if self.count[k, i] > 0 and self.active[k, i] > 0)


def waves_total_s(waves: tuple[WaveTiming, ...], prologue_s: float) -> tuple[float, str]:
    """(time, bound) of an operator made of ``waves``: the prologue plus every wave's slower part; the bound is
    that of the wave kind taking the most time."""
    time_s = prologue_s + sum(w.count * max(w.clocked_s, w.fixed_s) for w in waves)
    return time_s, max(waves, key=lambda w: w.count * max(w.clocked_s, w.fixed_s)).bound


def wave_kinds(waves: np.ndarray, tiles: np.ndarray, pes: int) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """The two kinds of wave of each candidate, as (how many, tiles in one): the full waves (none when one wave
    holds every tile) and the last wave."""
    rows = len(waves)
    return ((np.where(waves > 1, waves - 1, 0), np.full(rows, pes)),
            (np.ones(rows, dtype=np.int64), tiles - np.maximum(waves - 1, 0) * pes))


def l2_resident(dev, bytes_B):
    """Whether a tensor of ``bytes_B`` stays in the L2 of ``dev`` between operators (element-wise on arrays)."""
    return bytes_B <= dev.l2_B * L2_RESIDENT_SHARE


def ceil_div(a, b):
    """⌈a / b⌉ of integers (element-wise on integer arrays)."""
    return -(-a // b)


def pow2_range(low: int, high: int) -> list[int]:
    """low, 2·low, 4·low, … ≤ high (at least [low])."""
    out, value = [], low
    while value <= high:
        out.append(value)
        value *= 2
    return out or [low]
