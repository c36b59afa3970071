"""A front a person can read (issue 20): units in the headers, PEs per device, power density and temperature
columns, a static PNG beside the HTML, and every row reproducible with one command, `deepstack evaluate --design
ID --front FILE`, which prints the row's numbers (search/study_front.py, search/front_design.py); a sweep's front
likewise, one row per objective vector with its NoC by name (search/sweep/output.py)."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
from conftest import MINI8, assert_user_error, run_in_process, write_space

from deepstack.search.front_design import design_id


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("front")
    write_space(cwd / "tiny.toml", chips=("standard",), hops=(1.0, 2.0))
    run = run_in_process("optimize", "--space", "tiny.toml", "--trials", "8", "--study", "f", "--storage",
                         "sqlite:///f.db", "--seed", "3", "--json", cwd=cwd)
    assert run.returncode == 0, run.stderr[-2000:]
    text = run_in_process("optimize", "--space", "tiny.toml", "--trials", "0", "--study", "f", "--storage",
                          "sqlite:///f.db", "--seed", "3", cwd=cwd)
    with open(cwd / "f.pareto.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    return {"cwd": cwd, "out": json.loads(run.stdout), "text": text,
            "json": json.loads((cwd / "f.pareto.json").read_text()), "csv": rows}


def test_headers_carry_units_and_the_readable_columns(study):
    header = study["csv"][0]
    for column in ("stps [tokens/s]", "tokens_per_joule [tokens/J]", "power_density_W_per_mm2 [W/mm²]",
                   "temperature_c [°C]", "pes_per_device [PEs]", "id", "command"):
        assert column in header, (column, header)
    assert "ttft_s [s]" not in header  # not timed by a decode study: left out, never a NaN column
    saved = study["json"]
    assert saved["units"]["stps"] == "tokens/s" and saved["units"]["temperature_c"] == "°C"
    assert saved["scenario"]["batch"] == 64
    for row in saved["pareto"]:
        assert row["pes_per_device"] > 0 and row["temperature_c"] > 25 and row["power_density_W_per_mm2"] > 0
        assert row["id"] == design_id(row)
        assert row["noc"] == "mini8"  # the NoC file by its name, as a sweep's front and the catalog name them
    assert list(saved["nocs"]) == ["mini8"]  # and its definition whole, so the rows rebuild without the file
    assert [r["id"] for r in study["out"]["pareto"]] == [r["id"] for r in saved["pareto"]]
    text = study["text"].stdout
    assert "stps (tokens/s)" in text and "PEs/device" in text and "W/mm²" in text and "°C" in text


def test_a_static_png_sits_beside_the_html(study):
    folder = study["cwd"]  # beside the study's storage, sqlite:///f.db
    assert (folder / "f.pareto.html").is_file()
    png = folder / "f.pareto.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert study["out"]["files"]["png"] == "f.pareto.png"


def test_every_row_reproduces_with_its_id(study):
    """`deepstack evaluate --design ID --front f.pareto.csv` prints the row's numbers, for every row."""
    for row in study["json"]["pareto"]:
        again = run_in_process("evaluate", "--design", row["id"], "--front", "f.pareto.csv", "--json",
                               cwd=study["cwd"])
        assert again.returncode == 0, again.stderr[-2000:]
        report = json.loads(again.stdout)
        metrics = report["metrics"]
        for key in ("stps", "tokens_per_joule", "power_w", "temperature_c", "power_density_W_per_mm2"):
            assert metrics[key] == pytest.approx(row[key], rel=1e-9), (row["id"], key)
        assert report["hardware"]["pes_per_device"] == row["pes_per_device"]
        assert report["schedule"]["text"].replace(" ", "") .startswith(row["schedule"].split(",")[0])
        assert row["command"] == f"deepstack evaluate --design {row['id']} --front f.pareto.csv"


def test_design_errors_are_one_line(study, cli):
    front = str(study["cwd"] / "f.pareto.csv")
    assert_user_error(cli("evaluate", "--design", "dnope", "--front", front), "--design", "no row 'dnope'")
    assert_user_error(cli("evaluate", "--design", "dnope"), "--design and --front go together")
    assert_user_error(cli("evaluate", "--design", "d1", "--front", str(study["cwd"] / "missing.csv")), "--front")


def test_options_a_front_row_fixes_are_refused_with_design(study, cli):
    # the row sets model, scenario, hardware and schedule: anything else given would be silently ignored
    row = study["json"]["pareto"][0]["id"]
    front = str(study["cwd"] / "f.pareto.csv")
    result = cli("evaluate", "--design", row, "--front", front, "--model", "llama-3.2-1b", "--batch", "8")
    assert_user_error(result, "--design", "--model, --batch would be ignored", "drop them")
    assert_user_error(cli("evaluate", "--design", row, "--front", front, "--eager"), "--cuda-graphs would be ignored")
    assert cli("evaluate", "--design", row, "--front", front, "--json").code == 0


# --- a sweep's front: one row per objective vector, NoCs by name (issue 29) --------------------------------------


@pytest.fixture(scope="module")
def sweep_front(tmp_path_factory):
    """A prefill sweep at batch 1 of a tiny space whose NoC is a file beside it, nets/mine.toml: there designs of
    m = 2 and m = 4 reach the very same objectives. The NoC file is deleted once the sweep is done, so the front
    must carry what ``evaluate --front`` needs."""
    cwd = tmp_path_factory.mktemp("sweep-front")
    (cwd / "nets").mkdir()
    shutil.copy(MINI8, cwd / "nets" / "mine.toml")
    # its own file name: load_space memoises by the name given, and the study above has a tiny.toml of its own
    space = write_space(cwd / "named.toml", chips=("standard",), hops=(1.0,))
    space.write_text(space.read_text().replace(json.dumps(str(MINI8)), '"nets/mine.toml"'))
    run = run_in_process("sweep", "--mode", "exhaustive", "--space", "named.toml", "--out", "s", "--phase", "prefill",
                         "--batch", "1", "--workers", "1", "--json", cwd=cwd)
    assert run.returncode == 0, run.stderr[-2000:]
    (cwd / "nets" / "mine.toml").unlink()
    with open(cwd / "s" / "pareto.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return {"cwd": cwd, "out": json.loads(run.stdout), "json": json.loads((cwd / "s" / "pareto.json").read_text()),
            "csv": rows}


def test_a_sweep_front_has_one_row_per_objective_vector_and_names_its_noc(sweep_front):
    front = sweep_front["json"]["pareto"]
    vectors = [(r["stps"], r["tokens_per_joule"]) for r in front]
    assert len(set(vectors)) == len(vectors)
    same = [e for r in front for e in r.get("equivalent", ())]
    assert same and all(e["id"] not in {r["id"] for r in front} for e in same)
    assert all("trial" not in e for e in same)  # a sweep's designs come from no trial
    assert {r["noc"] for r in sweep_front["csv"]} == {r["noc"] for r in front} == {"mine"}  # not a path
    assert set(sweep_front["json"]["nocs"]) == {"mine"}
    assert [r["id"] for r in sweep_front["out"]["pareto"]] == [r["id"] for r in front]
    listed = [json.loads(r["equivalent"]) if r["equivalent"] else [] for r in sweep_front["csv"]]
    assert listed == [r.get("equivalent", []) for r in front]


def test_a_sweep_rows_and_its_equivalent_designs_evaluate_by_id(sweep_front):
    """`evaluate --design ID --front s/pareto.csv` reproduces a row, and a design listed as equivalent to it, with
    the NoC file gone (pareto.json carries the NoC's definition)."""
    for row in sweep_front["json"]["pareto"]:
        for design in (row, *row.get("equivalent", ())):
            again = run_in_process("evaluate", "--design", design["id"], "--front", "s/pareto.csv", "--json",
                                   cwd=sweep_front["cwd"])
            assert again.returncode == 0, again.stderr[-2000:]
            report = json.loads(again.stdout)
            for key in ("stps", "tokens_per_joule"):
                assert report["metrics"][key] == pytest.approx(row[key], rel=1e-9), (design["id"], key)
            assert report["hardware"]["stacked_layers"] == design.get("stacked_layers", row["stacked_layers"])
