"""``deepstack compare`` cannot mislead (issue 20): the hypervolume reference comes from the sweep's feasible points
alone, a study and a sweep of different scenarios or spaces are refused, a missing study is never created, and the
text names the reference, both fronts' extremes and their unique designs (search/compare.py, search/pareto.py)."""

from __future__ import annotations

import csv
import json
import sqlite3

import numpy as np
import optuna
import pytest
from conftest import assert_user_error, run_in_process, write_space
from optuna.trial import TrialState

from deepstack.search import pareto

OBJECTIVES = ["stps", "tokens_per_joule"]


def test_normalised_hypervolume_by_hand():
    """Points (1,3), (2,2), (3,1) with ideal (3,3) and nadir (1,1) normalise to (0,1), (0.5,0.5), (1,0): only the
    middle one is strictly better than the reference (0,0) in both, so the volume is 0.5 × 0.5 = 0.25."""
    values = np.array([[1.0, 3.0], [2.0, 2.0], [3.0, 1.0]])
    ideal, nadir = pareto.bounds(values, OBJECTIVES)
    assert ideal.tolist() == [3.0, 3.0] and nadir.tolist() == [1.0, 1.0]
    assert pareto.normalised_hypervolume(values, ideal, nadir) == pytest.approx(0.25)
    # a minimised objective turns round: ttft (smaller is better) 1 s ideal, 3 s nadir
    ideal, nadir = pareto.bounds(np.array([[1.0, 3.0], [3.0, 1.0]]), ["stps", "ttft"])
    assert ideal.tolist() == [3.0, 1.0] and nadir.tolist() == [1.0, 3.0]
    assert pareto.normalised_hypervolume(np.array([[2.0, 2.0]]), ideal, nadir) == pytest.approx(0.25)
    # scoring a better set never moves the scale: (ideal, nadir) are arguments, not taken from the set
    assert pareto.normalised_hypervolume(np.array([[4.0, 4.0]]), np.array([3.0, 3.0]), np.array([1.0, 1.0]),
                                         ) == pytest.approx(2.25)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny exhaustive sweep, a 6-trial study of the same space and scenario, and one of another batch."""
    cwd = tmp_path_factory.mktemp("compare")
    write_space(cwd / "tiny.toml", chips=("standard",), hops=(1.0,))
    out = {"cwd": cwd}
    out["sweep"] = run_in_process("sweep", "--mode", "exhaustive", "--space", "tiny.toml", "--out", "ex",
                                  "--workers", "1", "--json", cwd=cwd)
    out["study"] = run_in_process("optimize", "--space", "tiny.toml", "--trials", "6", "--study", "t",
                                  "--storage", "sqlite:///t.db", "--seed", "1", "--json", cwd=cwd)
    out["other"] = run_in_process("optimize", "--space", "tiny.toml", "--batch", "32", "--trials", "2", "--study",
                                  "b32", "--storage", "sqlite:///t.db", "--seed", "1", "--json", cwd=cwd)
    for name in ("sweep", "study", "other"):
        assert out[name].returncode == 0, out[name].stderr[-2000:]
    out["json"] = run_in_process("compare", "--study", "t", "--storage", "sqlite:///t.db", "--sweep", "ex", "--json",
                                 cwd=cwd)
    out["text"] = run_in_process("compare", "--study", "t", "--storage", "sqlite:///t.db", "--sweep", "ex", cwd=cwd)
    return out


def _sweep_values(folder) -> np.ndarray:
    with open(folder / "points.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["feasible"] == "True"]
    return np.array([[float(r[o]) for o in OBJECTIVES] for r in rows])


def test_reference_is_the_nadir_of_the_sweeps_feasible_points(runs):
    assert runs["json"].returncode == 0, runs["json"].stderr
    figures = json.loads(runs["json"].stdout)
    values = _sweep_values(runs["cwd"] / "ex")
    assert figures["reference_point"] == pytest.approx(values.min(axis=0).tolist())  # both objectives maximised
    assert figures["nadir_point"] == figures["reference_point"]
    assert figures["ideal_point"] == pytest.approx(values.max(axis=0).tolist())
    # the sweep front's share of the normalised box, recomputed by hand on the 2-D staircase
    z = (values - values.min(axis=0)) / (values.max(axis=0) - values.min(axis=0))
    area, best_y = 0.0, 0.0
    for x, y in sorted(map(tuple, z), key=lambda p: (-p[0], -p[1])):
        if x > 0 and y > best_y:
            area, best_y = area + x * (y - best_y), y
    assert figures["sweep"]["hypervolume_normalised"] == pytest.approx(area)
    assert figures["hypervolume_ratio"] == pytest.approx(figures["study"]["hypervolume_normalised"] / area)
    # equal evaluations: every design-point evaluation the study's trials spent (a trial records how many: the
    # schedules of its hardware point) against the sweep's first as many evaluations
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{runs['cwd'] / 't.db'}")
    spent = sum(t.user_attrs["solve"]["evaluations"] for t in study.get_trials(states=(TrialState.COMPLETE,)))
    assert figures["at_equal_evaluations"]["evaluations"] == figures["study"]["evaluations"] == spent
    assert figures["evaluation_share"] == pytest.approx(spent / figures["sweep"]["evaluations"])
    assert figures["at_equal_wall_time"]["sweep_times"] == "measured"
    summary = json.loads((runs["cwd"] / "ex" / "summary.json").read_text())
    assert sum(chunk[1] for chunk in summary["chunks"]) == summary["evaluations"]


def test_a_study_cannot_move_the_reference(runs, tmp_path):
    """The same sweep against a second, different study of the same problem: same reference, same sweep score."""
    cwd = runs["cwd"]
    more = run_in_process("optimize", "--space", "tiny.toml", "--trials", "3", "--study", "t3", "--storage",
                          "sqlite:///t.db", "--seed", "7", "--json", cwd=cwd)
    assert more.returncode == 0, more.stderr[-2000:]
    other = json.loads(run_in_process("compare", "--study", "t3", "--storage", "sqlite:///t.db", "--sweep", "ex",
                                      "--json", cwd=cwd).stdout)
    first = json.loads(runs["json"].stdout)
    assert other["reference_point"] == first["reference_point"]
    assert other["sweep"]["hypervolume_normalised"] == first["sweep"]["hypervolume_normalised"]


def test_text_names_reference_extremes_and_unique_designs(runs):
    text = runs["text"].stdout
    assert runs["text"].returncode == 0, runs["text"].stderr
    figures = json.loads(runs["json"].stdout)
    assert "reference point stps" in text and "tokens/s" in text and "tokens/J" in text
    assert f"at equal evaluations ({figures['study']['evaluations']:,})" in text and "at equal wall time" in text
    assert "unique designs" in text and "extremes of each front" in text
    for side in ("study", "sweep"):
        assert [row["best_in"] for row in figures[side]["extremes"]] == OBJECTIVES
        assert 1 <= figures[side]["unique_designs"] <= figures[side]["front_size"]


def test_mismatched_scenarios_are_refused_in_one_line(runs, cli_process):
    """A real `deepstack compare` process: a batch-32 study against the batch-64 sweep → one line, exit 2."""
    result = cli_process("compare", "--study", "b32", "--storage", "sqlite:///t.db", "--sweep", "ex",
                         cwd=runs["cwd"])
    assert_user_error(result, "--sweep", "different scenarios", "batch")


def test_another_space_is_refused(runs, tmp_path, cli):
    folder = tmp_path / "renamed"
    folder.mkdir()
    for name in ("points.csv", "summary.json"):
        (folder / name).write_bytes((runs["cwd"] / "ex" / name).read_bytes())
    summary = json.loads((folder / "summary.json").read_text())
    (folder / "summary.json").write_text(json.dumps({**summary, "space": "another"}))
    storage = f"sqlite:///{runs['cwd'] / 't.db'}"
    assert_user_error(cli("compare", "--study", "t", "--storage", storage, "--sweep", str(folder)),
                      "space 'another'", "one space")
    (folder / "summary.json").write_text(json.dumps(summary | {"space_definition": {**summary["space_definition"],
        "hardware": {**summary["space_definition"]["hardware"], "stacked_layers": [8]}}}))
    assert_user_error(cli("compare", "--study", "t", "--storage", storage, "--sweep", str(folder)),
                      "stacked_layers", "outside the space")


def test_a_missing_study_is_never_created(runs, tmp_path, cli):
    missing = tmp_path / "nowhere" / "none.db"
    assert_user_error(cli("compare", "--study", "t", "--storage", f"sqlite:///{missing}", "--sweep",
                          str(runs["cwd"] / "ex")), "--storage", "no study database")
    assert not missing.exists() and not missing.parent.exists()
    journal = tmp_path / "none.log"
    assert_user_error(cli("compare", "--study", "t", "--storage", f"journal:{journal}", "--sweep",
                          str(runs["cwd"] / "ex")), "--storage")
    assert not journal.exists()
    db = runs["cwd"] / "t.db"
    assert_user_error(cli("compare", "--study", "nope", "--storage", f"sqlite:///{db}", "--sweep",
                          str(runs["cwd"] / "ex")), "--study", "no study named 'nope'")
    with sqlite3.connect(db) as connection:
        names = {row[0] for row in connection.execute("SELECT study_name FROM studies")}
    assert "nope" not in names


def test_re_running_a_finished_sweep_keeps_its_times_and_the_comparison(runs):
    # every chunk is read back: the sweep's wall time and its chunks' finishing times stay the first run's, so
    # compare's figures at equal evaluations and equal wall time do not move
    cwd = runs["cwd"]
    before = json.loads((cwd / "ex" / "summary.json").read_text())
    assert all(chunk[2] is not None for chunk in before["chunks"])
    again = run_in_process("sweep", "--mode", "exhaustive", "--space", "tiny.toml", "--out", "ex", "--workers", "1",
                           "--json", cwd=cwd)
    assert again.returncode == 0, again.stderr[-2000:]
    result = json.loads(again.stdout)
    assert result["read_back"] == result["evaluations"] and result["wall_s"] == before["wall_s"]
    after = json.loads((cwd / "ex" / "summary.json").read_text())
    assert after["chunks"] == before["chunks"] and after["wall_s"] == before["wall_s"]
    compared = run_in_process("compare", "--study", "t", "--storage", "sqlite:///t.db", "--sweep", "ex", "--json",
                              cwd=cwd)
    assert json.loads(compared.stdout) == json.loads(runs["json"].stdout)


def test_a_resumed_sweeps_clock_goes_on_from_its_last_chunk(tmp_path):
    # an interrupted run's chunks keep the seconds they finished at, and the next run's chunks come after them
    from deepstack.search.sweep.chunks import ChunkLog

    first = ChunkLog(tmp_path, "f")
    first.offset_s = 0.0
    assert first.save("tier1", 0, "{}\n") >= 0.0
    (tmp_path / "chunks" / "evaluated.log").write_text("tier1-00000 12.500000\ntier1-00001\n")  # an older line too
    second = ChunkLog(tmp_path, "f")
    assert second.finished_s == {"tier1-00000": 12.5, "tier1-00001": None} and second.offset_s == 12.5
    assert second.save("tier1", 2, "{}\n") >= 12.5
    assert ChunkLog(tmp_path, "f").finished_s["tier1-00002"] >= 12.5


def test_a_resumed_sweeps_clock_goes_on_from_its_latest_chunk(tmp_path):
    # workers finish chunks out of order, so the log's lines are not in time order: the clock goes on from the
    # latest second in it, whatever line holds it
    from deepstack.search.sweep.chunks import ChunkLog

    ChunkLog(tmp_path, "f")
    (tmp_path / "chunks" / "evaluated.log").write_text("tier1-00001 12.5\ntier1-00000 3.25\ntier2-00000\n")
    log = ChunkLog(tmp_path, "f")
    assert log.offset_s == 12.5
    assert log.save("tier2", 1, "{}\n") >= 12.5
