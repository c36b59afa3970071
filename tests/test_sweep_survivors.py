"""A sweep keeps only chunk summaries in memory (search/sweep/survivors.py): merged in chunk order they must give
what one pass over every row gives — the same front, in the same order, and the same best row per hardware
point, ties included — however the rows fall into chunks and however often the front's candidates are pruned."""

from __future__ import annotations

import csv
import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepstack.search.objectives import score
from deepstack.search.sweep.chunks import ChunkLog, ChunkResult, PointsFile, run_tier
from deepstack.search.sweep.output import HARDWARE_COLUMNS, csv_text, front
from deepstack.search.sweep.points import SweepTask, points_columns
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
    # an executor whose chunks finish last first (a worker may finish any chunk first): the summaries run_tier
    # returns, the timeline and points.csv are still in chunk order; the chunks finished early wait in files of
    # their own, gone once written
    log = ChunkLog(tmp_path, {"sweep": "s", "presets": "p", "code": "c"})
    tasks = [SweepTask("small", "{}", f"point {i}", False) for i in range(5)]  # one point per chunk below 64

    def last_first(evaluate, chunks, done):
        for index, points in reversed(chunks):
            rows = [_row("standard", 1, float(index), 1.0, True, index) for _ in points]
            done(index, _chunk_result(rows))

    points = PointsFile(log.folder, with_ttft=False)
    summaries = run_tier("tier1", tasks, log, last_first, OBJECTIVES, points)
    assert [s.candidates[0]["schedule"] for s in summaries] == [f"tp={i}" for i in range(5)]
    assert [rows for _, rows, _ in log.timeline] == [1] * 5
    with open(points.path, newline="") as fh:
        assert [row["schedule"] for row in csv.DictReader(fh)] == [f"tp={i}" for i in range(5)]
    assert sorted(p.name for p in log.folder.iterdir()) == [
        "evaluated.log", "points.csv.partial", *(f"tier1-{i:05d}.jsonl" for i in range(5))]

    # a re-run reads the chunks back and writes the same points.csv; a waiting chunk's file an interrupted run
    # left is removed
    before = points.path.read_bytes()
    (log.folder / "tier1-00003.csv.partial").write_text("left by an interrupted run\n")
    again = PointsFile(log.folder, with_ttft=False)
    assert not list(log.folder.glob("tier1-*.csv.partial"))
    assert run_tier("tier1", tasks, log, last_first, OBJECTIVES, again) == summaries
    assert again.path.read_bytes() == before and log.read_back == 5

    # a tier that ends with a chunk still waiting for one before it is never published
    gap = PointsFile(log.folder, with_ttft=False)
    gap.start_tier("tier1")
    gap.put(1, "a later chunk's lines\r\n")
    with pytest.raises(RuntimeError, match=r"chunks \[1\] still waiting for chunk 0"):
        gap.finish()


def _chunk_result(rows: list[dict]) -> ChunkResult:
    return ChunkResult(len(rows), summarise(rows, OBJECTIVES), "".join(json.dumps(r) + "\n" for r in rows),
                       csv_text(rows, points_columns(False)))


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
