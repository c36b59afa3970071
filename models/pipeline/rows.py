"""The rows of one forward pass on a device and the phase they add up to (eq. 5 of the paper).

A row is an operator alone (:class:`OpRow`), a collective alone (:class:`CommRow`), or a GEMM overlapped with
the collective it feeds or is fed by (:class:`OverlapRow`, eq. 5). A :class:`PhaseResult` is one microbatch on
the bottleneck pipeline stage, repeated ``time_multiplier`` times (pipeline fill and steady state).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

from deepstack.models import power as power_model
from deepstack.models.collectives import CollectiveResult
from deepstack.models.compute.overlap import overlap_time_s
from deepstack.models.compute.timing import CLOCKS_KEPT, OpTiming


class _Timed:
    """A row's time at the nominal clock, and count × it, are kept at construction: a search sums them over
    every row of every stage several times per design point (DVFS re-times rows at other clocks). Rows are
    plain slotted records (built by the thousand per design point) and are never changed once made."""

    __slots__ = ()

    def __post_init__(self) -> None:
        self.nominal_s = nominal = self._time(1.0)
        self.weighted_s = self.count * nominal

    def time_at(self, scale: float) -> float:
        return self.nominal_s if scale == 1.0 else self._time(scale)


@dataclass(slots=True)
class OpRow(_Timed):
    layer: str
    count: int
    timing: OpTiming
    choice: str = ""
    nominal_s: float = field(init=False, repr=False, compare=False)
    weighted_s: float = field(init=False, repr=False, compare=False)

    def _time(self, scale: float) -> float:
        return self.timing.time_at(scale)


@dataclass(slots=True)
class CommRow(_Timed):
    layer: str
    count: int
    name: str
    result: CollectiveResult
    hidden_behind_s: float = 0.0  # compute it is prefetched behind (FSDP)
    nominal_s: float = field(init=False, repr=False, compare=False)
    weighted_s: float = field(init=False, repr=False, compare=False)

    def _time(self, scale: float) -> float:
        return comm_row_s(self.result, self.hidden_behind_s)


@dataclass(slots=True)
class OverlapRow(_Timed):
    layer: str
    count: int
    timing: OpTiming
    name: str
    result: CollectiveResult
    nominal_s: float = field(init=False, repr=False, compare=False)
    weighted_s: float = field(init=False, repr=False, compare=False)

    def _time(self, scale: float) -> float:
        return overlap_row_s(self.timing, self.result, scale)


class OpenOverlap(NamedTuple):
    """An :class:`OverlapRow` not made yet, with what DVFS and energy need of it (a search makes the rows of the
    phases it reports only)."""

    layer: str
    count: int
    timing: OpTiming
    name: str
    result: CollectiveResult

    def make(self) -> OverlapRow:
        return OverlapRow(*self)

    def time_at(self, scale: float) -> float:  # the made row's, at a clock other than nominal
        return overlap_row_s(self.timing, self.result, scale)


class OpenComm(NamedTuple):
    """A :class:`CommRow` not made yet (see :class:`OpenOverlap`)."""

    layer: str
    count: int
    name: str
    result: CollectiveResult
    hidden_behind_s: float = 0.0

    def make(self) -> CommRow:
        return CommRow(*self)

    def time_at(self, scale: float) -> float:
        return comm_row_s(self.result, self.hidden_behind_s)


Row = OpRow | CommRow | OverlapRow
OPEN_ROWS = (OpenOverlap, OpenComm)
# rows that run an operator, and rows that move bytes on the network (tuples: a union would be built per check)
COMPUTE_ROWS = (OpRow, OverlapRow, OpenOverlap)
NETWORK_ROWS = (CommRow, OverlapRow, OpenOverlap, OpenComm)


def comm_row_s(result: CollectiveResult, hidden_behind_s: float) -> float:
    """A collective's exposed time (the clock does not change it)."""
    if not hidden_behind_s:
        return result.time_s
    # prefetched behind the layer's compute: only the bandwidth time beyond it and the latency show
    return max(0.0, result.time_s - result.latency_s - hidden_behind_s) + result.latency_s


def overlap_row_s(timing: OpTiming, result: CollectiveResult, scale: float) -> float:
    """A GEMM and the collective it overlaps (eq. 5) at ``scale`` × the nominal clock."""
    return overlap_time_s(timing.waves, timing.time_at(scale), result.time_s - result.latency_s, result.latency_s)


class RowRun(tuple):
    """Rows that run alone, in order, with their weighted nominal times: a layer's stand-alone operators are
    one shared run, added to a stage's time without touching each row."""

    def __new__(cls, rows):
        run = super().__new__(cls, rows)
        run.weights = tuple(r.weighted_s for r in run)
        run._scaled, run._energies = {}, {}
        return run

    def scaled_weights(self, scale: float) -> tuple[float, ...]:
        """count × time of each row at ``scale`` × the nominal clock (kept per clock: DVFS settles on one
        clock per device, and the run is shared by every design point on it)."""
        found = self._scaled.get(scale)
        if found is None:
            if len(self._scaled) >= CLOCKS_KEPT:  # the power wall's bisection tries many clocks once each
                self._scaled.clear()
            found = self._scaled[scale] = tuple(r.count * r.time_at(scale) for r in self)
        return found

    def energies(self, coefficients: power_model.EnergyCoefficients) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(core, DRAM) energy of each row at the nominal clock (see :func:`power.operator_energy_J`), kept per
        device."""
        found = self._energies.get(coefficients)
        if found is None:
            terms = [power_model.operator_energy_J(r.count, r.timing, coefficients) for r in self]
            found = self._energies[coefficients] = (tuple(c for c, _ in terms), tuple(d for _, d in terms))
        return found


def weighted_sum(parts, total: float = 0.0) -> float:
    """Σ count × nominal time over rows and runs of rows, added one row at a time in row order (the very sum
    of the flat list of rows, to the last digit)."""
    for part in parts:
        total = sum(part.weights, total) if isinstance(part, RowRun) else total + part.weighted_s
    return total


@dataclass(eq=False)  # compared by identity: a phase is memoised, so equal phases are the same object
class PhaseResult:
    """One step of the phase on the busiest device: prefill of the batch, or one decode step of every request.

    ``parts`` are one microbatch on the bottleneck pipeline stage: rows, runs of rows, and rows still to be made
    (:data:`OPEN_ROWS`: a search makes the rows of the phases it reports only). The step
    takes ``time_multiplier`` such stage-times (pipeline fill and steady state) and the device computes
    ``microbatches`` of them. ``nominal_stage_s`` (the stage time at the nominal clock) is summed from the rows
    when not given.
    """

    MEMO_KEY: ClassVar[bool] = True  # keys memos by identity: rows made later never change what the phase is

    parts: list
    time_multiplier: int = 1
    microbatches: int = 1
    stage: int = 0
    nominal_stage_s: float | None = None

    def __post_init__(self) -> None:
        if self.nominal_stage_s is None:
            self.nominal_stage_s = weighted_sum(self.parts)

    @property
    def engine_steps(self) -> int | None:
        """The engine steps the phase covers when it is a serving framework's sequence of them (a GPU's prefill
        wave or steady-state cycle, :mod:`deepstack.models.gpu.prefill`); None for one pass."""
        return None

    @functools.cached_property
    def made(self) -> list:
        """The parts with every row made (runs of rows stay runs)."""
        return [part.make() if isinstance(part, OPEN_ROWS) else part for part in self.parts]

    @functools.cached_property
    def rows(self) -> list[Row]:
        """The rows in order."""
        out: list[Row] = []
        for part in self.made:
            if isinstance(part, RowRun):
                out.extend(part)
            else:
                out.append(part)
        return out

    def stage_time_at(self, scale: float) -> float:
        if scale == 1.0:
            return self.nominal_stage_s
        total = 0  # Σ count × time at this clock, added row by row in order
        for part in self.parts:
            if isinstance(part, RowRun):
                total = sum(part.scaled_weights(scale), total)
            else:
                total += part.count * part.time_at(scale)
        return total

    def time_at(self, scale: float) -> float:
        return self.time_multiplier * self.stage_time_at(scale)

    def energy_J(self, coefficients: power_model.EnergyCoefficients, scale: float,
                 noc_J_per_B: tuple[float, ...], devices: int) -> tuple[float, float, float]:
        """(core energy — ∝ V² ∝ f² —, DRAM energy, network energy) of one step on one device."""
        core = dram = noc = 0.0
        for part in self.parts:
            if isinstance(part, RowRun):
                core_J, dram_J = part.energies(coefficients)
                core, dram = sum(core_J, core), sum(dram_J, dram)
                continue
            if isinstance(part, COMPUTE_ROWS):
                core_J, dram_J = power_model.operator_energy_J(part.count, part.timing, coefficients)
                core, dram = core + core_J, dram + dram_J
            if isinstance(part, NETWORK_ROWS):
                for level, total_bytes in enumerate(part.result.level_bytes):
                    noc += part.count * total_bytes * noc_J_per_B[level] / devices
        m = self.microbatches
        return core * scale**2 * m, dram * m, noc * m
