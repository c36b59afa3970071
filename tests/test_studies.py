"""Every study recipe has a README and a registered runner; the parallelism-spread recipe runs quick."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from conftest import assert_run_record, assert_user_error

from deepstack.schema import load_file
from deepstack.search.studies import runners

STUDIES = Path(__file__).resolve().parent.parent / "studies"
PAPER_STUDIES = {"dram-layers", "layers-e2e", "stacked-vs-connected", "3d-vs-2.5d", "ablation", "noc-sensitivity",
                 "thermal", "parallelism-spread", "pareto"}


def test_every_paper_study_has_a_recipe_a_readme_and_a_runner():
    recipes = {p.stem: p for p in STUDIES.glob("*.toml")}
    assert set(recipes) >= PAPER_STUDIES
    available = runners()
    for name in PAPER_STUDIES:
        recipe = load_file(recipes[name], expected_kind="study")
        assert recipe.runner in available, name
        readme = STUDIES / f"{name}.md"
        text = readme.read_text()
        assert "Question" in text and "Setup" in text and "Assumptions" in text, name
        assert recipe.quick, f"{name} has no [quick] table"


def test_parallelism_spread_quick(cli, tmp_path):
    result = cli("study", "run", str(STUDIES / "parallelism-spread.toml"), "--quick", "--out", str(tmp_path),
                 "--json")
    assert result.code == 0, result.err
    files = [Path(f) for f in result.json()["files"]]
    with open(tmp_path / "points.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and {"schedule", "stps", "utps", "tokens_per_joule", "feasible"} <= set(rows[0])
    # the histogram counts every strategy once; the best one leads the summary table
    best = max(rows, key=lambda r: float(r["stps"]))
    summary = (tmp_path / "summary.md").read_text()
    assert best["schedule"] in summary and "Question" in summary
    pngs = [f for f in files if f.suffix == ".png"]
    assert pngs and all(f.read_bytes().startswith(b"\x89PNG") and f.stat().st_size > 1000 for f in pngs)
    assert_run_record(tmp_path, "parallelism-spread")


def test_a_folder_holding_another_studys_run_is_refused(cli, tmp_path):
    # a second study (or the same one under another set) into a finished run's folder would replace its record and
    # summary and leave its figures beside them; the same study again replaces its own run
    recipe = str(STUDIES / "parallelism-spread.toml")
    assert cli("study", "run", recipe, "--quick", "--out", str(tmp_path)).code == 0
    before = {f.name: f.read_bytes() for f in tmp_path.iterdir()}
    other = cli("study", "run", str(STUDIES / "dram-layers.toml"), "--quick", "--out", str(tmp_path))
    assert_user_error(other, f"--out: {tmp_path} holds a finished run of parallelism-spread (default set, quick",
                      "not of dram-layers", "give another folder")
    assert_user_error(cli("study", "run", recipe, "--quick", "--assumptions", "paper", "--out", str(tmp_path)),
                      "not of parallelism-spread (paper set, quick)")
    assert {f.name: f.read_bytes() for f in tmp_path.iterdir()} == before
    assert cli("study", "run", recipe, "--quick", "--out", str(tmp_path)).code == 0


def test_a_recipe_value_out_of_range_is_one_line_and_leaves_no_folder(cli, tmp_path):
    # l1_KiB = [-1] in [quick] used to end in a pydantic ValidationError traceback, leaving an empty --out folder
    text = (STUDIES / "dram-layers.toml").read_text()
    quick = text[text.index("[quick]"):]
    recipe = tmp_path / "dram-layers.toml"
    recipe.write_text(text.replace(quick, re.sub(r"l1_KiB = \[[^]]*\]", "l1_KiB = [-1]", quick)))
    result = cli("study", "run", str(recipe), "--quick", "--out", str(tmp_path / "out"))
    assert_user_error(result, f"{recipe}: the parameters with [quick] give an invalid SramOption", "l1_KiB",
                      "greater than 0")
    assert not (tmp_path / "out").exists()


def test_a_misspelt_recipe_parameter_is_named(cli, tmp_path):
    # "chp" for "chip" ran with the default chip, silently
    recipe = tmp_path / "dram-layers.toml"
    recipe.write_text((STUDIES / "dram-layers.toml").read_text().replace("\nchip = ", "\nchp = ", 1))
    result = cli("study", "run", str(recipe), "--quick", "--out", str(tmp_path / "out"))
    assert result.code == 0
    assert "runner dram_layers never read parameters.chp" in result.err
    # every shipped recipe's runner reads every parameter it is given
    shipped = cli("study", "run", str(STUDIES / "dram-layers.toml"), "--quick", "--out", str(tmp_path / "o2"))
    assert shipped.code == 0 and "never read" not in shipped.err


def test_a_study_named_without_its_recipe_file_points_to_it(cli, monkeypatch):
    monkeypatch.chdir(STUDIES.parent)
    assert_user_error(cli("study", "run", "thermal"), "thermal: no such file; the study's recipe is "
                      "studies/thermal.toml (deepstack study run studies/thermal.toml)")
