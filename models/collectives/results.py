"""Results of a collective: per step and for the whole collective (all its concurrent groups)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from deepstack.models.network import LevelLoad, summarise_levels


@dataclass(frozen=True)
class StepResult:
    """One step (one traffic matrix), possibly repeated.

    Attributes:
        phase: what the step does (e.g. "reduce_scatter", "outer ring all_gather").
        count: how many identical consecutive steps this entry stands for.
        time_s: one step: latency + congestion + per-step overhead, s.
        latency_s: one step's zero-load latency L_net (eq. 4), s.
        congestion_s: one step's T_cong (eq. 4), s.
        max_link_bytes: bytes on the busiest link during one step, B.
    """

    phase: str
    count: int
    time_s: float
    latency_s: float
    congestion_s: float
    max_link_bytes: float


@dataclass(frozen=True)
class CollectiveResult:
    """Time of one collective (all its concurrent groups) on a topology.

    Attributes:
        op: the collective.
        algorithm: the algorithm used (picked by "auto", or the one asked for); "none" if nothing moves.
        bytes_per_rank: per-rank input size, B.
        group_size: ranks per group (p).
        num_groups: concurrent groups.
        time_s: Σ over steps of count × step time, s.
        latency_s: the collective's zero-load latency L_net: Σ count × step latency (for eq. 5), s.
        congestion_s: Σ count × step congestion, s.
        overhead_s: Σ count × per-step overhead, s.
        level_bytes: bytes each level's links carry over the whole collective (a flow counts once per link it
            crosses), innermost level first, B.
        candidates: (algorithm, time_s) of every algorithm evaluated (all applicable ones under "auto").

    The per-link detail — ``detail`` (double-tree chunks, hierarchical sub-algorithms), ``steps`` (per-step
    breakdown in execution order, identical consecutive steps merged), ``max_link_bytes`` (bytes the busiest
    link carries over the whole collective) and ``level_utilization`` (per-level load, busy fractions relative
    to ``time_s``) — is worked out when first read: a search needs only the times and the bytes per level.
    """

    op: str
    algorithm: str
    bytes_per_rank: float
    group_size: int
    num_groups: int
    time_s: float
    latency_s: float
    congestion_s: float
    overhead_s: float
    level_bytes: tuple[float, ...]
    candidates: tuple[tuple[str, float], ...]
    source: tuple = field(default=(), repr=False, compare=False)  # (topology, the Run or execute()'s arguments)

    @functools.cached_property
    def full_run(self) -> Run:
        """The executed algorithm with the bytes of every link (built on first use)."""
        _, run = self.source
        if isinstance(run, Run):
            return run
        from deepstack.models.collectives.engine import execute  # the engine builds results: import it late

        return execute(*run)

    @property
    def detail(self) -> str:
        return self.full_run.detail

    @property
    def steps(self) -> tuple[StepResult, ...]:
        return self.full_run.steps

    @property
    def max_link_bytes(self) -> float:
        return max((float(links.max()) for links in self.full_run.link_totals if links.size), default=0.0)

    @functools.cached_property
    def level_utilization(self) -> tuple[LevelLoad, ...]:
        peaks = [float(links.max()) if links.size else 0.0 for links in self.full_run.link_totals]
        return summarise_levels(self.source[0], peaks, self.level_bytes, self.time_s)

    @property
    def num_steps(self) -> int:
        """Number of traffic matrices executed (repeats included)."""
        return sum(step.count for step in self.steps)


@dataclass(frozen=True, eq=False)
class Run:
    """An executed algorithm: its steps and the bytes every link carried over all of them."""

    algorithm: str
    detail: str
    steps: tuple[StepResult, ...]
    link_totals: tuple[np.ndarray, ...]

    @property
    def time_s(self) -> float:
        return sum(step.count * step.time_s for step in self.steps)
