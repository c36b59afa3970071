"""A sweep keeps only chunk summaries in memory (search/sweep/survivors.py): merged in chunk order they must give
what one pass over every row gives — the same front, in the same order, and the same best row per hardware
point, ties included — however the rows fall into chunks and however often the front's candidates are pruned."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from deepstack.search.objectives import score
from deepstack.search.sweep.chunks import ChunkLog, rows_of, run_tier
from deepstack.search.sweep.output import HARDWARE_COLUMNS, front
from deepstack.search.sweep.survivors import Survivors, summarise

OBJECTIVES = ["stps", "tokens_per_joule"]


def _row(chip: str, m: int, stps: float, tpj: float, feasible: bool, n: int) -> dict:
    return {"chip": chip, "noc": "tms1", "stacked_layers": m, "connected_layers": m, "sram": "base",
            "hop_latency_scale": 1.0, "level_bw_scales": [1.0, 1.0, 1.0], "schedule": f"tp={n}",
            "feasible": feasible, "stps": stps, "tokens_per_joule": tpj}


# few distinct values, so ties in either objective and in the ranking score are common
rows_strategy = st.lists(
    st.builds(_row, st.sampled_from(["standard", "wgmma"]), st.integers(1, 3), st.sampled_from([1.0, 2.0, 3.0, 4.0]),
              st.sampled_from([0.5, 1.0, 1.5]), st.booleans(), st.integers(1, 99)),
    max_size=60)


def _best_in_one_pass(rows: list[dict]) -> list[dict]:
    """The reference: the first best feasible row of each hardware point over all rows, best first."""
    best: dict[str, dict] = {}
    for row in rows:
        if not row["feasible"]:
            continue
        label = json.dumps([row[k] for k in HARDWARE_COLUMNS])
        value = score(row, OBJECTIVES[0])
        if label not in best or value > best[label]["_score"]:
            best[label] = {**row, "_score": value}
    return sorted(best.values(), key=lambda r: -r["_score"])


@settings(max_examples=200, deadline=None)
@given(rows=rows_strategy, cuts=st.lists(st.integers(0, 60), max_size=8), prune_at=st.integers(1, 8))
def test_chunk_summaries_merged_in_order_give_what_every_row_gives(rows, cuts, prune_at):
    bounds = sorted({0, len(rows), *(c for c in cuts if c < len(rows))})
    summaries = [summarise(rows[a:b], OBJECTIVES) for a, b in itertools.pairwise(bounds)]
    survivors = Survivors(OBJECTIVES, prune_at=prune_at)
    for summary in summaries:
        survivors.merge(summary)

    assert front(survivors.candidates, OBJECTIVES) == front(rows, OBJECTIVES)
    assert survivors.ranked_best() == _best_in_one_pass(rows)
    assert sum(s.rows for s in summaries) == len(rows)


def test_a_tier_keeps_its_chunks_in_chunk_order_whatever_order_they_finish_in(tmp_path):
    # an executor whose chunks finish last first (a worker may finish any chunk first): what run_tier returns,
    # the timeline and the chunk files points.csv is written from are still in chunk order
    log = ChunkLog(tmp_path, {"sweep": "s", "presets": "p", "code": "c"})
    tasks = [f"point {i}" for i in range(5)]  # one hardware point per chunk below 64 of them

    def last_first(evaluate, chunks, done):
        for index, points in reversed(chunks):
            rows = [{"point": p} for p in points]
            done(index, (rows, "".join(json.dumps(r) + "\n" for r in rows)))

    kept = run_tier("tier1", tasks, log, last_first, keep=lambda rows: [r["point"] for r in rows])
    assert kept == [[p] for p in tasks]
    assert [rows for _, rows, _ in log.timeline] == [1] * 5
    assert [next(rows_of(path))["point"] for path in log.paths] == tasks


def test_a_dominated_row_leaves_the_candidates_when_they_are_pruned():
    # by hand: (2, 1) dominates (1, 1); (1, 2) is dominated by nothing; the duplicate (2, 1) stays
    rows = [_row("standard", 1, 1.0, 1.0, True, 1), _row("standard", 1, 2.0, 1.0, True, 2),
            _row("standard", 2, 1.0, 2.0, True, 3), _row("wgmma", 1, 2.0, 1.0, True, 4)]
    survivors = Survivors(OBJECTIVES, prune_at=1)
    for row in rows:
        survivors.merge(summarise([row], OBJECTIVES))
    assert [r["schedule"] for r in survivors.candidates] == ["tp=2", "tp=3", "tp=4"]
    # the best per hardware point: standard m=1 is tp=2 (2 > 1), ranked first with wgmma's equal score by first seen
    assert [r["schedule"] for r in survivors.ranked_best()] == ["tp=2", "tp=4", "tp=3"]
