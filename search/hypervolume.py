"""Hypervolume of a search's front, as it grows (``deepstack optimize``) and against a sweep's.

* :class:`Progress` — the study's hypervolume after every batch, against a reference fixed when the study began
  (half the first batch's worst value of each larger-is-better objective, twice it for smaller-is-better ones;
  objectives divided by the reference, so the figure is unit-free), the trials and evaluations at each batch, and
  the stop rule ``--until-stall N`` (no growth in the last N trials).
* :func:`ratio_to_sweep` — a front's hypervolume over a sweep's against the reference taken from the sweep's
  thermally feasible points alone: objectives normalised by the sweep's ranges, the reference at their nadir, so
  nothing the search finds can move it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from deepstack.search import pareto
from deepstack.search.files import save_figure
from deepstack.search.objectives import OBJECTIVES

GROWTH = 1e-12  # relative growth below this is no growth (floating-point noise)


def _larger(objectives: list[str]) -> np.ndarray:
    return np.array([OBJECTIVES[o][1] for o in objectives])


def first_reference(values: np.ndarray, objectives: list[str]) -> list[float]:
    """The fixed reference of a study: half the worst value seen (twice it when smaller is better)."""
    larger = _larger(objectives)
    worst = np.where(larger, values.min(axis=0), values.max(axis=0))
    return np.where(larger, 0.5 * worst, 2.0 * worst).tolist()


def normalised(values: np.ndarray, objectives: list[str], reference: list[float]) -> float:
    """Hypervolume of ``values`` divided by the reference (the reference becomes 1 in every objective)."""
    if not len(values):
        return 0.0
    ref = np.asarray(reference, dtype=float)
    return pareto.hypervolume(np.asarray(values, dtype=float) / ref, objectives, np.ones(len(objectives)))


def ratio_to_sweep(front: np.ndarray, sweep: np.ndarray, objectives: list[str]) -> dict:
    """Hypervolume of ``front`` over that of ``sweep`` (the sweep's thermally feasible points): both normalised
    by the sweep's range of each objective, the reference at the sweep's nadir."""
    sweep = np.asarray(sweep, dtype=float).reshape(-1, len(objectives))
    front = np.asarray(front, dtype=float).reshape(-1, len(objectives))
    lo, hi = sweep.min(axis=0), sweep.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    larger = _larger(objectives)
    nadir = np.where(larger, 0.0, 1.0)

    def hv(values: np.ndarray) -> float:
        return pareto.hypervolume((values - lo) / span, objectives, nadir) if len(values) else 0.0

    hv_sweep, hv_front = hv(sweep), hv(front)
    return {"hypervolume_ratio": hv_front / hv_sweep if hv_sweep > 0 else float("nan"),
            "reference": np.where(larger, lo, hi).tolist(), "front_hypervolume": hv_front,
            "sweep_hypervolume": hv_sweep}


@dataclass
class Progress:
    """The hypervolume history of a study (stored in its user attributes, so the dashboard can plot it)."""

    objectives: list[str]
    reference: list[float] | None = None
    history: list[list[float]] = field(default_factory=list)  # [completed trials, evaluations, hypervolume]
    points: list[list[float]] = field(default_factory=list)  # every kept feasible point (designs × schedules)

    def add(self, values: list[list[float]]) -> None:
        self.points.extend(values)

    def record(self, trials: int, evaluations: int) -> float:
        """The hypervolume now (fixing the reference at the first call that has points)."""
        values = np.array(self.points, dtype=float).reshape(-1, len(self.objectives))
        if self.reference is None and len(values):
            self.reference = first_reference(values, self.objectives)
        hv = normalised(values, self.objectives, self.reference) if self.reference else 0.0
        self.history.append([trials, evaluations, hv])
        return hv

    def stalled(self, trials: int) -> bool:
        """True when the hypervolume has not grown over the last ``trials`` completed trials."""
        if not self.history or trials <= 0:
            return False
        now_trials, _, now = self.history[-1]
        grew_at = self.history[0][0]
        for (_, _, hv0), (t1, _, hv1) in zip(self.history, self.history[1:], strict=False):
            if hv1 > hv0 * (1 + GROWTH) + GROWTH:
                grew_at = t1
        return now_trials - grew_at >= trials and now > 0

    def plot(self, path: str, title: str) -> str | None:
        """A PNG of hypervolume against completed trials (None when matplotlib is missing or nothing to plot)."""
        if not self.history:
            return None
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        trials = [h[0] for h in self.history]
        hv = [h[2] for h in self.history]
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.step(trials, hv, where="post", marker="o", markersize=3)
        ax.set_xlabel("completed trials")
        ax.set_ylabel("hypervolume (objectives / reference)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        return save_figure(fig, path, dpi=100)
