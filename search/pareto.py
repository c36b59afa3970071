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


# --- a reference that only the exhaustive side sets (``deepstack compare``; reused by benchmarks/compare_search.py)

REFERENCE_MARGIN = 0.0  # the reference is the sweep's nadir itself (issue 20): nothing a study finds moves it


def bounds(values: np.ndarray, objectives: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(ideal, nadir) of a set of points: per objective the best and the worst value over every row of
    ``values`` (for ``compare``: all feasible points of the sweep), in the objectives' own units and directions."""
    values = np.asarray(values, dtype=float).reshape(-1, len(objectives))
    if not len(values):
        raise ValueError("bounds: no point")
    up = np.array(maximise(objectives))
    return np.where(up, values.max(axis=0), values.min(axis=0)), np.where(up, values.min(axis=0), values.max(axis=0))


def _spans(ideal: np.ndarray, nadir: np.ndarray) -> np.ndarray:
    """ideal − nadir, signed (positive for a maximised objective); a set flat in an objective (a single point)
    gets the magnitude of its value (or 1) instead of zero, so normalising never divides by zero."""
    span = ideal - nadir
    fallback = np.where(np.abs(ideal) > 0, np.abs(ideal), 1.0) * np.where(ideal >= nadir, 1.0, -1.0)
    return np.where(span != 0, span, fallback)


def normalise(values: np.ndarray, ideal: np.ndarray, nadir: np.ndarray) -> np.ndarray:
    """Every objective mapped so that larger is better, the nadir at 0 and the ideal at 1: (v − nadir) / (ideal −
    nadir) (the sign of the span turns a minimised objective round)."""
    return (np.asarray(values, dtype=float) - nadir) / _spans(ideal, nadir)


def raw_reference(ideal: np.ndarray, nadir: np.ndarray, margin: float = REFERENCE_MARGIN) -> np.ndarray:
    """The reference point in the objectives' units: the nadir, moved ``margin`` of the range further out."""
    return nadir - margin * _spans(ideal, nadir)


def normalised_hypervolume(values: np.ndarray, ideal: np.ndarray, nadir: np.ndarray,
                           margin: float = REFERENCE_MARGIN) -> float:
    """Hypervolume of ``values`` (raw, any directions) after :func:`normalise` by a fixed (ideal, nadir), against
    the reference ``-margin`` in every normalised objective, divided by the box from that reference to the ideal
    ((1 + margin)^k): a set inside the box that fixed (ideal, nadir) scores at most 1, and only (ideal, nadir)
    decide the scale, so the set being scored cannot move it. Points not better than the reference in every
    objective add nothing; a point beyond the ideal may push the score above 1."""
    values = np.asarray(values, dtype=float).reshape(-1, len(ideal))
    if not len(values):
        return 0.0
    import moocore

    z = normalise(values, ideal, nadir)
    reference = np.full(len(ideal), -margin)
    inside = z[(z > reference).all(axis=1)]
    if not len(inside):
        return 0.0
    volume = float(moocore.hypervolume(inside, ref=reference, maximise=[True] * len(ideal)))
    return volume / (1.0 + margin) ** len(ideal)
