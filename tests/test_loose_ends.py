"""Loose ends of issue 20, one test each: a decode sweep has no NaN ttft_s column; `evaluate` prints its schedule
search in text too; `collective --noc tms1` headlines the bottleneck level; a resumed sweep tells read-back points
from evaluated ones; a space file's errors are all shown; `study --help` has an example; sweep folders of the
examples are git-ignored."""

from __future__ import annotations

import csv
import json
import math
import subprocess
from pathlib import Path

import pytest
from conftest import MINI8, write_space

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny_space(tmp_path_factory) -> Path:
    return write_space(tmp_path_factory.mktemp("loose") / "tiny.toml", chips=("standard",), hops=(1.0,))


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_decode_sweep_has_no_nan_ttft_column(cli, tiny_space, tmp_path):
    out = tmp_path / "sweep"
    result = cli("sweep", "--mode", "exhaustive", "--space", str(tiny_space), "--out", str(out), "--workers", "1",
                 "--json")
    assert result.code == 0, result.err
    for name in ("points.csv", "pareto.csv"):
        rows = _rows(out / name)
        assert rows and "ttft_s" not in rows[0], name
        assert not any(cell.lower() == "nan" for row in rows for cell in row.values()), name
    assert "ttft_s" in json.loads((out / "summary.json").read_text())["not_computed"]
    assert all("ttft_s" not in row for row in result.json()["pareto"])


def test_resumed_sweep_reports_read_back_points_apart(cli, tiny_space, tmp_path):
    out = tmp_path / "resumed"
    args = ("sweep", "--mode", "exhaustive", "--space", str(tiny_space), "--out", str(out), "--workers", "1")
    first = cli(*args, "--json")
    assert first.code == 0, first.err
    chunks = sorted((out / "chunks").glob("all-*.jsonl"))
    kept = chunks[: len(chunks) // 2]
    for chunk in chunks[len(chunks) // 2:]:
        chunk.unlink()  # as if the first run had been killed half way
    kept_rows = sum(len([line for line in c.read_text().splitlines() if line]) for c in kept)
    again = cli(*args, "--json")
    data = again.json()
    assert data["evaluations"] == first.json()["evaluations"]
    assert data["read_back"] == kept_rows > 0
    assert data["evaluated_now"] == data["evaluations"] - kept_rows
    assert data["tiers"][0]["read_back"] == kept_rows
    text = cli(*args)  # everything read back now
    assert "0 evaluations" in text.out and f"{data['evaluations']:,} more read back" in text.out


def test_evaluate_prints_the_schedule_search_in_text(cli):
    args = ("evaluate", "--chip", "standard", "--noc", str(MINI8), "--batch", "64", "--stacked-layers", "4",
            "--connected-layers", "4")
    search = cli(*args, "--json").json()["search"]
    text = cli(*args).out
    line = next(line for line in text.splitlines() if line.startswith("schedule search:"))
    assert f"{search['evaluated']:,} of {search['strategies']:,} strategies evaluated" in line
    assert f"best {search['top'][0]['schedule']}" in text


def test_collective_headline_names_the_bottleneck_level(cli):
    result = cli("collective", "--op", "all_reduce", "--bytes", "1048576", "--noc", "tms1")
    assert result.code == 0, result.err
    data = cli("collective", "--op", "all_reduce", "--bytes", "1048576", "--noc", "tms1", "--json").json()
    neck = max(data["levels"], key=lambda level: level["max_busy_fraction"])
    assert neck["level"] == "L3"  # Ethernet between chips: the slowest links, though L1 links carry more bytes
    assert max(data["levels"], key=lambda level: level["max_link_bytes"])["level"] == "L1"
    headline = result.out.splitlines()[0]
    assert "bottleneck L3" in headline and f"{neck['max_link_bytes']:,.0f} B" in headline


def test_a_space_file_with_three_errors_shows_all_three(cli, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('kind = "space"\nname = "bad"\n[scenarios]\nmodels = ["llama-3.2-1b"]\nbatches = [0]\n'
                   '[hardware]\nchips = ["standard"]\nnocs = ["tms1"]\nstacked_layers = [0]\n'
                   'hop_latency_scale = [-1.0]\n')
    result = cli("validate", str(bad))
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1, result.err
    for problem in ("batches must be ≥ 1", "stacked_layers must be in 1..", "scales must be > 0"):
        assert problem in result.err, (problem, result.err)


def test_study_help_has_an_example(cli):
    result = cli("study", "--help")
    assert result.code == 0
    assert "Example" in result.out and "deepstack study run studies/" in result.out


def test_sweep_folders_of_the_examples_are_git_ignored():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for path in ("studies/small-sweep/points.csv", "studies/sweep-hierarchical/summary.json"):
        check = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT)
        assert check.returncode == 0, path


def test_nothing_is_nan_in_a_compare_free_sweep_front(cli, tiny_space, tmp_path):
    """pareto.json is strict JSON with finite numbers only (the untimed TTFT is absent, not null)."""
    out = tmp_path / "front"
    assert cli("sweep", "--mode", "exhaustive", "--space", str(tiny_space), "--out", str(out), "--workers", "1",
               "--json").code == 0
    front = json.loads((out / "pareto.json").read_text(), parse_constant=pytest.fail)["pareto"]
    assert front and all(math.isfinite(v) for row in front for v in row.values() if isinstance(v, float))
    assert all("ttft_s" not in row for row in front)
