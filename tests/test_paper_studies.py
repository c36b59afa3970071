"""The paper's findings that need a search: computed by the study runners, read back by `deepstack accuracy paper`
only from runs the running code made (anything else is shown as stale, never as a verdict)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from deepstack.accuracy.paper_studies import study_findings
from deepstack.search.studies.baseline import paper_findings
from deepstack.search.studies.provenance import code_digest, digest_of, json_digest

STUDIES = Path(__file__).resolve().parents[1] / "studies"


def _row(model, phase, batch, speedup, stps_3d=100.0, searched=None, h200=None):
    searched = speedup if searched is None else searched
    h200 = stps_3d / speedup if h200 is None else h200
    return {"model": model, "phase": phase, "batch": batch, "speedup": speedup, "stps_3d": stps_3d,
            "stps_3d_searched": stps_3d * searched / speedup, "stps_h200-star": h200,
            "design_3d_searched": "wgmma/tms1/m7n7 tp=4,ep=32,dp=2"}


def test_r8_to_r11_from_comparison_rows_by_hand():
    rows = [_row("a", "decode", 1024, 1.20), _row("b", "decode", 1024, 1.60),  # 1.20/1.30 = 0.92, 1.60/1.48 = 1.08
            _row("a", "decode", 1, 2.50), _row("b", "decode", 1, 1.10),  # the largest, 2.50 / 2.79 = 0.896
            _row("deepseek-v3", "decode", 1024, 1.40, searched=1.40 * 1.5),  # searched 150 STPS over H200* 71.4
            _row("a", "prefill", 4, 0.80), _row("a", "prefill", 1024, 1.00), _row("b", "prefill", 4, 3.00)]
    found = {f["finding"]: f for f in paper_findings(rows)}
    assert found["R8"]["ours"] == "1.20–1.60× (3 models)" and found["R8"]["verdict"] == "holds"
    assert found["R9"]["ours"] == "1.10–2.50× (2 models)" and found["R9"]["verdict"] == "holds"
    assert found["R10"]["ours"].startswith("2.10×") and found["R10"]["verdict"] == "fails"  # 2.10 / 1.73 = 1.21
    assert found["R11"]["ours"].startswith("median 1.00×") and found["R11"]["verdict"] == "holds"
    # one end outside 15 %: R8 fails (1.10 / 1.30 = 0.85 is 15.4 % short)
    rows[0]["speedup"] = 1.10
    assert {f["finding"]: f for f in paper_findings(rows)}["R8"]["verdict"] == "fails"
    # no decode b1024 / b1 / prefill rows: nothing to say
    assert paper_findings([_row("a", "decode", 16, 1.0)]) == []


def _record(folder: Path, study: str, rows: list[list], digest: str, quick: bool = False) -> None:
    folder.mkdir(parents=True)
    table = {"title": "The paper's findings this run answers, under the paper assumption set",
             "columns": ["finding", "what", "paper", "ours", "verdict"], "digits": 4, "rows": rows}
    (folder / "run.json").write_text(json.dumps({
        "version": 1, "study": study, "runner": "baseline_comparison", "quick": quick, "code_digest": digest,
        "finished_at": "2026-12-03T21:00:00+00:00", "wall_s": 1.0, "rows": 1, "files": [], "tables": [table]}))


PLACEHOLDER = {"finding": "R8", "what": "3D over the best 2.5D, decode b1024", "paper": "1.30–1.48×",
               "paper_set": None, "default_set": None, "verdict": "not checked here", "studies": ("3d-vs-2.5d",)}


def test_a_current_run_gives_the_verdict_and_a_stale_one_only_its_figures(tmp_path):
    row = ["R8", "3D (m = n = 4) over the best 2.5D, decode b1024, over the models", "1.30–1.48×",
           "1.20–1.60× (3 models)", "holds"]
    assert study_findings([PLACEHOLDER], tmp_path)[0]["verdict"] == (
        "not run yet: deepstack study run studies/3d-vs-2.5d.toml --assumptions paper")

    _record(tmp_path / "3d-vs-2.5d-paper", "3d-vs-2.5d", [row], code_digest())
    _record(tmp_path / "3d-vs-2.5d", "3d-vs-2.5d", [[*row[:3], "0.72–1.15× (4 models)", "fails"]], "0" * 16)
    (found,) = study_findings([PLACEHOLDER], tmp_path)
    assert (found["paper_set"], found["default_set"], found["verdict"]) == (
        "1.20–1.60× (3 models)", "0.72–1.15× (4 models)", "holds")
    assert "3d-vs-2.5d-paper (finished 2026-12-03T21:00:00+00:00" in found["source"]
    assert found["source"].endswith("3d-vs-2.5d (finished 2026-12-03T21:00:00+00:00, code 0000000000000000) — "
                                    "stale, run on other code: deepstack study run studies/3d-vs-2.5d.toml")

    (tmp_path / "3d-vs-2.5d-paper" / "run.json").unlink()
    (tmp_path / "3d-vs-2.5d-paper").rmdir()
    _record(tmp_path / "3d-vs-2.5d-paper", "3d-vs-2.5d", [row], "f" * 16)  # made by other code
    (found,) = study_findings([PLACEHOLDER], tmp_path)
    assert found["paper_set"] == "1.20–1.60× (3 models)"
    assert found["verdict"] == ("holds (stale, run on other code: deepstack study run studies/3d-vs-2.5d.toml "
                                "--assumptions paper)")


def test_a_quick_run_is_never_a_verdict(cli, tmp_path):
    """A real quick run of the 3D-vs-2.5D study records its findings (R11 from its prefill rows) and the code's
    digest, and the reader shows it as stale: a quick run is not the recipe's answer."""
    out = tmp_path / "3d-vs-2.5d-paper"
    result = cli("study", "run", str(STUDIES / "3d-vs-2.5d.toml"), "--quick", "--assumptions", "paper",
                 "--out", str(out))
    assert result.code == 0, result.err
    assert "never read" not in result.err  # flip_batches, read under the paper set only, is read up front
    record = json.loads((out / "run.json").read_text())
    assert record["code_digest"] == code_digest()
    placeholder = {**PLACEHOLDER, "finding": "R11"}
    (found,) = study_findings([placeholder], tmp_path)
    assert found["what"].startswith("prefill, 3D (m = n = 4) over H200*")
    assert found["paper_set"].startswith("median ")
    assert found["verdict"].endswith("(stale, a --quick run: deepstack study run studies/3d-vs-2.5d.toml "
                                     "--assumptions paper)")


def test_the_digest_follows_every_source_and_preset_file(tmp_path):
    """The same files give the same digest; a changed law, a new preset or a moved file changes it; what is not
    code (a figure, a cache) does not."""
    root = tmp_path / "pkg"
    (root / "laws").mkdir(parents=True)
    (root / "laws" / "dram.py").write_text("BW = 1\n")
    (root / "chip.toml").write_text("pes = 8\n")
    before = digest_of({"pkg": root})
    assert before == digest_of({"pkg": root}) and len(before) == 16
    (root / "figure.png").write_bytes(b"not code")
    (root / "laws" / "__pycache__").mkdir()
    (root / "laws" / "__pycache__" / "dram.py").write_text("cached\n")
    assert digest_of({"pkg": root}) == before
    (root / "laws" / "dram.py").write_text("BW = 2\n")
    assert digest_of({"pkg": root}) != before
    (root / "laws" / "dram.py").write_text("BW = 1\n")
    (root / "new.toml").write_text("")
    assert digest_of({"pkg": root}) != before
    (root / "new.toml").unlink()
    (root / "laws" / "dram.py").rename(root / "dram.py")
    assert digest_of({"pkg": root}) != before
    assert code_digest() == code_digest() != before


def test_the_json_digest_is_of_the_content_not_its_key_order():
    """A sweep's fingerprint and a study's inputs digest hash JSON: equal content gives the same digest whatever
    order its tables' keys come in (a list's order is content)."""
    one = {"space": {"chips": ["standard"], "nocs": ["mini8"]}, "presets": "x"}
    other = {"presets": "x", "space": {"nocs": ["mini8"], "chips": ["standard"]}}
    text = b'{"presets": "x", "space": {"chips": ["standard"], "nocs": ["mini8"]}}'  # the keys sorted, by hand
    assert json_digest(one) == json_digest(other) == hashlib.sha256(text).hexdigest()
    assert json_digest({**one, "space": {"chips": ["standard"], "nocs": ["tms1"]}}) != json_digest(one)
    assert json_digest({"chips": ["a", "b"]}) != json_digest({"chips": ["b", "a"]})


def test_the_thermal_runner_answers_r17_r18_at_the_sets_coolant(cli, tmp_path):
    """A real quick thermal run under the default set (its ambients include the chips' own 25 °C) records R17 and
    R18; its small designs stay far below the limit, so neither holds: the limit bounds nothing there."""
    out = tmp_path / "thermal"
    result = cli("study", "run", str(STUDIES / "thermal.toml"), "--quick", "--out", str(out))
    assert result.code == 0, result.err
    tables = json.loads((out / "run.json").read_text())["tables"]
    (table,) = [t for t in tables if t["title"].startswith("The paper's findings")]
    found = {r[0]: dict(zip(table["columns"], r, strict=True)) for r in table["rows"]}
    assert set(found) == {"R17", "R18"}
    assert "at 25 °C, static DVFS" in found["R18"]["what"]
    assert found["R18"]["ours"].endswith("(0 designs above the limit)") and found["R18"]["verdict"] == "fails"
    assert found["R17"]["verdict"] == "fails"


def test_the_thermal_runner_judges_the_paper_sets_35_c_by_the_papers_rule():
    """Under the paper set the runner's 35 °C column keeps the clock of the chip's 25 °C anchor and judges the
    junction at 35 °C + R(4)·P = 35 + 0.60·P (a hotter schedule would be infeasible). With the 35 °C choice off,
    the coolant is named, and DVFS slows the same design to its thermal clock at 35 °C."""
    from deepstack.models import dvfs
    from deepstack.search.studies.cells import Cell
    from deepstack.search.studies.temperatures import ThermalCell, evaluate_thermal_cell

    noc = str(Path(__file__).resolve().parents[1] / "search" / "spaces" / "nocs" / "mini8.toml")

    def row(assumptions):
        cell = Cell("standard", noc, "llama-3.2-1b", "prefill", 64, 1024, 1024, None, 4, 4, ("stps",), assumptions)
        (only,) = evaluate_thermal_cell(ThermalCell(cell, (35.0,), None))
        return only

    paper, named = row("paper"), row("paper-without-junction_35c")
    assert paper["ambient_c"] == named["ambient_c"] == 35.0
    assert paper["clock_limit"] == dvfs.NOMINAL and paper["clock_share"] == 1.0
    assert paper["temperature_c"] == pytest.approx(35.0 + 0.60 * paper["power_w_per_device"], rel=1e-9)
    assert named["clock_limit"] == dvfs.THERMAL_CLOCK and named["clock_share"] < 1.0
    assert named["temperature_c"] == pytest.approx(35.0 + 0.60 * named["power_w_per_device"], rel=1e-9)


def test_the_assumption_effects_on_3d_against_2p5d_are_read_from_the_paper_sets_run(tmp_path):
    from deepstack.accuracy.paper_studies import assumption_effects_3d
    from deepstack.search.studies.baseline import EFFECTS_TITLE

    assert assumption_effects_3d(tmp_path) == {
        "rows": [], "source": "not run yet: deepstack study run studies/3d-vs-2.5d.toml --assumptions paper"}
    folder = tmp_path / "3d-vs-2.5d-paper"
    _record(folder, "3d-vs-2.5d", [], code_digest())
    assert assumption_effects_3d(tmp_path)["source"].endswith("no such table (run before it was added)")
    record = json.loads((folder / "run.json").read_text())
    record["tables"].append({"title": EFFECTS_TITLE, "columns": ["assumption back at default", "flips"],
                             "digits": 4, "rows": [["one_dram_curve", "deepseek-v3 b1024: 2.5D wins"]]})
    (folder / "run.json").write_text(json.dumps(record))
    found = assumption_effects_3d(tmp_path)
    assert found["rows"] == [{"assumption back at default": "one_dram_curve",
                              "flips": "deepseek-v3 b1024: 2.5D wins"}]
    assert "stale" not in found["source"]
    record["code_digest"] = "0" * 16  # made by other code: shown, and marked
    (folder / "run.json").write_text(json.dumps(record))
    assert "stale, run on other code" in assumption_effects_3d(tmp_path)["source"]


def test_the_results_page_shows_every_finding_under_both_sets_from_the_runs(cli, tmp_path):
    """The page's "paper vs default" table: the findings the paper-findings run computes (its placeholders for
    other studies left out), then those another study's runs answer, each run named with its staleness."""
    _record(tmp_path / "paper-findings", "paper-findings", [], code_digest())
    record = json.loads((tmp_path / "paper-findings" / "run.json").read_text())
    record["tables"] = [{"title": "The paper's findings: its value, ours under the paper and the default set",
                         "columns": ["finding", "what", "paper", "paper_set", "default_set", "verdict"], "digits": 4,
                         "rows": [["R13", "best m = n, decode b4", "≈ 9", "9", "6", "holds"],
                                  ["R8", "3D over the best 2.5D, decode b1024", "1.30–1.48×", None, None,
                                   "not checked here: deepstack study run studies/3d-vs-2.5d.toml --assumptions "
                                   "paper"]]}]
    (tmp_path / "paper-findings" / "run.json").write_text(json.dumps(record))
    _record(tmp_path / "3d-vs-2.5d-paper", "3d-vs-2.5d",
            [["R8", "3D over the best 2.5D, decode b1024", "1.30–1.48×", "1.20–1.60× (3 models)", "holds"]],
            "0" * 16)  # made by other code: its figures shown, its verdict marked stale
    page = tmp_path / "RESULTS.md"
    done = cli("study", "report", "--recipes", str(STUDIES), "--out-root", str(tmp_path), "--to", str(page))
    assert done.code == 0, done.err
    text = page.read_text()
    section = text.split("## Paper vs default: every finding under each assumption set\n", 1)[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| R")]
    assert rows[0] == "| R13 | best m = n, decode b4 | ≈ 9 | 9 | 6 | holds |"
    assert rows[1].startswith("| R8 | 3D over the best 2.5D, decode b1024 | 1.30–1.48× | 1.20–1.60× (3 models) | – "
                              "| holds (stale, run on other code: deepstack study run studies/3d-vs-2.5d.toml "
                              "--assumptions paper) |")
    # the paper-findings run's placeholder for R8 is replaced; findings no run answers say which command would
    assert [r.split(" | ")[0] for r in rows] == ["| R13", "| R8", "| R9", "| R10", "| R11", "| R17", "| R18"]
    assert rows[-1].endswith("| not run yet: deepstack study run studies/thermal.toml --assumptions paper |")
    assert "`" + str(tmp_path / "3d-vs-2.5d-paper") + " (finished 2026-12-03T21:00:00+00:00" in section
    # each run is a section of its own: the paper-set run beside the (not yet run) default one
    assert "## 3d-vs-2.5d (paper set)\n" in text and "## 3d-vs-2.5d\n" in text
    assert "[3d-vs-2.5d (paper set)](#3d-vs-25d-paper-set)" in text
