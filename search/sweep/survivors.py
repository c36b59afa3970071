"""What a sweep keeps in memory of its rows. The rows themselves stay in the chunk files (a sweep of millions of
evaluations would otherwise hold every one of them, gigabytes, until its files are written): kept are only the
feasible rows that may still be on the front and the best feasible row of each hardware point, which the next tier
promotes. Each chunk is summarised when it finishes, in whatever order the workers finish them, and the summaries
are merged in chunk order, so every result is the one the whole list of rows in points.csv order gives, ties
included."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from deepstack.search import pareto
from deepstack.search.objectives import OBJECTIVES, score
from deepstack.search.sweep.points import HARDWARE_COLUMNS

PRUNE_AT = 4096  # front candidates kept before the dominated ones are dropped (again at twice what survived)


@dataclass(frozen=True)
class ChunkSummary:
    rows: int  # the chunk's rows (evaluations)
    best: dict[str, dict]  # hardware point → its first best feasible row of the chunk, with its "_score"
    candidates: list[dict]  # the chunk's feasible rows no other row of the chunk dominates, in row order


def nondominated(rows: list[dict], objectives: list[str]) -> list[dict]:
    """``rows`` less those another of them dominates (duplicates all kept), in their order."""
    if not rows:
        return []
    values = np.array([[r[OBJECTIVES[o][0]] for o in objectives] for r in rows], dtype=float)
    return [r for r, keep in zip(rows, pareto.nondominated_mask(values, objectives), strict=True) if keep]


def summarise(rows: list[dict], objectives: list[str]) -> ChunkSummary:
    """What a sweep keeps of one chunk's rows (the first objective ranks the hardware points)."""
    feasible = [r for r in rows if r["feasible"]]
    best: dict[str, dict] = {}
    for row in feasible:
        label = json.dumps([row[k] for k in HARDWARE_COLUMNS])
        value = score(row, objectives[0])
        if label not in best or value > best[label]["_score"]:
            best[label] = {**row, "_score": value}
    return ChunkSummary(len(rows), best, nondominated(feasible, objectives))


class Survivors:
    """Chunk summaries merged in points.csv order: the best row of every hardware point seen (first best wins a
    tie, points in the order first seen, as one pass over all rows gives) and a superset of the front that
    keeps the rows' order (every row on the front of all rows is on its chunk's front and no row dominates it)."""

    def __init__(self, objectives: list[str], prune_at: int = PRUNE_AT):
        self.objectives = objectives
        self.best: dict[str, dict] = {}
        self.candidates: list[dict] = []
        self._least_prune_at = self._prune_at = prune_at

    def merge(self, summary: ChunkSummary) -> None:
        for label, row in summary.best.items():
            if label not in self.best or row["_score"] > self.best[label]["_score"]:
                self.best[label] = row
        self.candidates += summary.candidates
        if len(self.candidates) > self._prune_at:
            self.candidates = nondominated(self.candidates, self.objectives)
            self._prune_at = max(self._least_prune_at, 2 * len(self.candidates))

    def ranked_best(self) -> list[dict]:
        """The best row of every hardware point, best first (ties in the order the points were first seen)."""
        return sorted(self.best.values(), key=lambda r: -r["_score"])
