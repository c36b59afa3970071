"""Pareto fronts and hypervolume (moocore behind one small helper; docs/architecture.md §5)."""

from __future__ import annotations

import numpy as np

from deepstack.search.objectives import OBJECTIVES


def metric_key(objective: str) -> str:
    return OBJECTIVES[objective][0]


def maximise(objectives: list[str]) -> list[bool]:
    return [OBJECTIVES[o][1] for o in objectives]


def nondominated_mask(values: np.ndarray, objectives: list[str]) -> np.ndarray:
    """Boolean mask of the rows no other row dominates (duplicates are all kept)."""
    if len(values) == 0:
        return np.zeros(0, dtype=bool)
    import moocore

    return np.asarray(moocore.is_nondominated(values, maximise=maximise(objectives), keep_weakly=True))


def hypervolume(values: np.ndarray, objectives: list[str], reference: np.ndarray) -> float:
    """Hypervolume of ``values`` against ``reference`` (a point every front must dominate)."""
    if len(values) == 0:
        return 0.0
    import moocore

    return float(moocore.hypervolume(values, ref=reference, maximise=maximise(objectives)))


def reference_point(*fronts: np.ndarray, objectives: list[str]) -> np.ndarray:
    """A common reference: for each objective the worst value over all fronts, pushed 10 % further out
    (the usual nadir-based choice; the same point is used for every front compared)."""
    every = np.vstack([f for f in fronts if len(f)])
    worst = np.where(maximise(objectives), every.min(axis=0), every.max(axis=0))
    span = np.abs(every.max(axis=0) - every.min(axis=0))
    span = np.where(span > 0, span, np.abs(worst) + 1.0)
    return np.where(maximise(objectives), worst - 0.1 * span, worst + 0.1 * span)
