"""Issue 29, "a first hour without surprises": what a new user's first commands run into. Bad output folders and
seeds are one line naming the flag, exit 2, refused before any work starts (nothing is created or stored)."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest
from conftest import assert_user_error

ROOT = Path(__file__).resolve().parent.parent
QUICK_OPTIMIZE = ("optimize", "--space", "small", "--trials", "1", "--refine", "0", "--study", "x")


@pytest.fixture
def a_file(tmp_path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("not a folder\n")
    return path


def _nothing_created(folder: Path, *kept: str) -> None:
    assert sorted(p.name for p in folder.iterdir()) == sorted(kept)


@pytest.mark.parametrize("out", ["/proc/nope", "FILE", "FILE/sub"])
def test_optimize_refuses_an_unusable_out_folder_before_any_trial(cli, tmp_path, monkeypatch, a_file, out):
    monkeypatch.chdir(tmp_path)
    out = out.replace("FILE", str(a_file))
    result = cli(*QUICK_OPTIMIZE, "--out", out)
    assert_user_error(result, "--out", out)
    _nothing_created(tmp_path, a_file.name)  # no studies/ folder, no database: no trial ran


def test_optimize_out_as_an_existing_file_says_it_is_a_file(cli, tmp_path, monkeypatch, a_file):
    monkeypatch.chdir(tmp_path)
    assert_user_error(cli(*QUICK_OPTIMIZE, "--out", str(a_file)), "--out", "is a file, not a folder")


@pytest.mark.parametrize(("out", "says"), [
    ("FILE", "--out: FILE is a file, not a folder"),
    ("FILE/sub", "--out: FILE/sub cannot be created: FILE is a file, not a folder"),
    ("/proc/nope", "--out: cannot write to the folder /proc/nope (nothing can be created in /proc): "),
], ids=["a-file", "under-a-file", "unwritable"])
def test_an_unusable_out_folder_is_refused_with_its_reason(cli, tmp_path, monkeypatch, a_file, out, says):
    # which path is at fault: the folder itself, or the nearest existing parent it would be created in
    monkeypatch.chdir(tmp_path)
    out = out.replace("FILE", str(a_file))
    assert_user_error(cli(*QUICK_OPTIMIZE, "--out", out), says.replace("FILE", str(a_file)))
    _nothing_created(tmp_path, a_file.name)


@pytest.mark.parametrize("out", ["/proc/nope", "FILE"])
def test_sweep_refuses_an_unusable_out_folder(cli, tmp_path, monkeypatch, a_file, out):
    monkeypatch.chdir(tmp_path)
    out = out.replace("FILE", str(a_file))
    assert_user_error(cli("sweep", "--space", "small", "--out", out), "--out", out)
    _nothing_created(tmp_path, a_file.name)


@pytest.mark.parametrize("out", ["/proc/nope", "FILE"])
def test_study_run_refuses_an_unusable_out_folder(cli, tmp_path, monkeypatch, a_file, out):
    monkeypatch.chdir(tmp_path)
    out = out.replace("FILE", str(a_file))
    result = cli("study", "run", str(ROOT / "studies" / "dram-layers.toml"), "--quick", "--out", out)
    assert_user_error(result, "--out", out)
    _nothing_created(tmp_path, a_file.name)


@pytest.mark.parametrize("seed", ["-1", "99999999999", str(2**32)])
def test_optimize_seed_outside_the_samplers_range(cli, tmp_path, monkeypatch, seed):
    monkeypatch.chdir(tmp_path)
    assert_user_error(cli(*QUICK_OPTIMIZE, "--seed", seed), "--seed", "0..4294967295", seed)
    _nothing_created(tmp_path)


def test_the_largest_seed_is_accepted(cli, tmp_path):
    result = cli(*QUICK_OPTIMIZE, "--seed", str(2**32 - 1), "--storage", f"sqlite:///{tmp_path / 'x.db'}",
                 "--out", str(tmp_path), "--json")
    assert result.code == 0, result.err
    assert result.json()["run"]["seed"] == 2**32 - 1


def test_the_console_script_prints_one_line_for_a_bad_out(cli_process, tmp_path):
    assert_user_error(cli_process(*QUICK_OPTIMIZE, "--out", "/proc/nope", cwd=tmp_path), "--out", "/proc/nope")
    _nothing_created(tmp_path)


# --- --storage never writes over the default study's files; a bad storage path creates nothing -------------------


@pytest.mark.parametrize("kind", ["sqlite:///", "journal:"])
def test_a_storage_in_a_missing_folder_is_refused_and_creates_nothing(cli, tmp_path, monkeypatch, kind):
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "missing"
    url = f"{kind}{missing}/x.{'db' if kind.startswith('sqlite') else 'log'}"
    assert_user_error(cli(*QUICK_OPTIMIZE, "--storage", url), "--storage", str(missing), "not an existing folder")
    _nothing_created(tmp_path)


def test_the_issues_storage_path_is_refused(cli_process, tmp_path):
    assert not Path("/nonexistent_dir").exists()
    result = cli_process(*QUICK_OPTIMIZE, "--storage", "sqlite:////nonexistent_dir/x.db", cwd=tmp_path)
    assert_user_error(result, "--storage", "/nonexistent_dir")
    assert not Path("/nonexistent_dir").exists()
    _nothing_created(tmp_path)


def test_front_files_go_beside_the_storage_not_over_the_default_studys(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    default = tmp_path / "studies"
    default.mkdir()
    mine = {ext: default / f"deepstack.pareto.{ext}" for ext in ("csv", "json", "html", "png")}
    for path in mine.values():
        path.write_text("the default study's front\n")
    (tmp_path / "runs").mkdir()
    result = cli("optimize", "--space", "small", "--trials", "1", "--refine", "0", "--storage",
                 "sqlite:///runs/other.db", "--json")  # the default study name, another storage
    assert result.code == 0, result.err
    assert all(path.read_text() == "the default study's front\n" for path in mine.values())
    files = result.json()["files"]
    assert {k: files[k] for k in ("csv", "json", "html", "png", "hypervolume_png")} == {
        **{ext: f"runs/deepstack.pareto.{ext}" for ext in ("csv", "json", "html", "png")},
        "hypervolume_png": "runs/deepstack.hypervolume.png"}
    assert all((tmp_path / path).is_file() for path in files.values())
    assert sorted(p.name for p in default.iterdir()) == sorted(p.name for p in mine.values())


def test_front_files_follow_out(cli, tmp_path):
    result = cli("optimize", "--space", "small", "--trials", "1", "--refine", "0", "--study", "s", "--storage",
                 f"sqlite:///{tmp_path / 's.db'}", "--out", str(tmp_path / "front"), "--json")
    assert result.code == 0, result.err
    assert result.json()["files"]["csv"] == str(tmp_path / "front" / "s.pareto.csv")
    assert (tmp_path / "front" / "s.pareto.csv").is_file() and not (tmp_path / "s.pareto.csv").exists()


def test_out_never_replaces_another_storages_front_of_the_same_study_name(cli, tmp_path):
    # two storages each hold a study "s"; the second run's --out points at the first's front files
    first = ("optimize", "--space", "small", "--trials", "1", "--refine", "0", "--study", "s", "--storage",
             f"sqlite:///{tmp_path / 'a.db'}", "--out", str(tmp_path))
    assert cli(*first).code == 0
    assert json.loads((tmp_path / "s.pareto.json").read_text())["storage"] == str(tmp_path / "a.db")
    before = {p.name: p.read_bytes() for p in tmp_path.glob("s.*")}
    (tmp_path / "b").mkdir()
    other = cli("optimize", "--space", "small", "--trials", "1", "--refine", "0", "--study", "s", "--storage",
                f"sqlite:///{tmp_path / 'b' / 'b.db'}", "--out", str(tmp_path))
    assert_user_error(other, f"--out: {tmp_path / 's.pareto.json'} is the front of study 's' in {tmp_path / 'a.db'}",
                      f"not in {tmp_path / 'b' / 'b.db'}", "give another --out")
    assert {p.name: p.read_bytes() for p in tmp_path.glob("s.*")} == before
    assert not (tmp_path / "b" / "b.db").exists()  # refused before the storage was opened
    assert cli(*first).code == 0  # the same study again: its own front is replaced


@pytest.mark.parametrize("front", ["[1, 2]", '"s"', "{"])
def test_a_front_file_that_cannot_be_read_vouches_for_no_storage(cli, tmp_path, front):
    # a s.pareto.json that is no front's record (a list, a string, cut short) names no storage: the study's own
    # front replaces it
    (tmp_path / "s.pareto.json").write_text(front)
    result = cli("optimize", "--space", "small", "--trials", "1", "--refine", "0", "--study", "s", "--storage",
                 f"sqlite:///{tmp_path / 's.db'}", "--out", str(tmp_path), "--json")
    assert result.code == 0, result.err
    assert json.loads((tmp_path / "s.pareto.json").read_text())["storage"] == str(tmp_path / "s.db")


# --- smaller loose ends (issue item 8) ------------------------------------------------------------------------------


def test_version(cli):
    import deepstack

    result = cli("--version")
    assert result.code == 0 and result.out.strip() == f"deepstack {deepstack.__version__}"


def test_zero_trials_per_batch_is_refused(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_user_error(cli(*QUICK_OPTIMIZE, "--trials-per-batch", "0"), "--trials-per-batch", "1..1024", "got 0")
    _nothing_created(tmp_path)


def test_zero_sweep_workers_is_refused(cli, tmp_path):
    out = tmp_path / "sweep"
    assert_user_error(cli("sweep", "--space", "small", "--workers", "0", "--out", str(out)), "--workers", "got 0")
    assert not out.exists()


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_a_missing_front_file_is_named_as_given(cli, tmp_path, suffix):
    front = str(tmp_path / f"nonexistent{suffix}")
    assert_user_error(cli("evaluate", "--design", "X", "--front", front), f"--front: {front}: no such file")


def test_a_front_csv_without_its_json_names_both(cli, tmp_path):
    (tmp_path / "s.pareto.csv").write_text("id\n")
    result = cli("evaluate", "--design", "X", "--front", str(tmp_path / "s.pareto.csv"))
    assert_user_error(result, str(tmp_path / "s.pareto.csv"), str(tmp_path / "s.pareto.json"), "does not exist")


def test_a_database_given_as_the_front_is_a_one_line_error(cli, tmp_path):
    # the study's .db (not UTF-8) used to raise UnicodeDecodeError with a traceback
    database = tmp_path / "deepstack.db"
    database.write_bytes(b"SQLite format 3\x00\xff\xfe" + bytes(range(256)))
    result = cli("evaluate", "--design", "X", "--front", str(database))
    assert_user_error(result, f"--front: cannot read {database}", "give the pareto.csv or pareto.json")


def test_an_unknown_topology_shows_the_value_once(cli):
    result = cli("collective", "--op", "all_reduce", "--bytes", "1000", "--topology", "foo", "--dims", "8",
                 "--link-bw-GBps", "100", "--hop-latency-ns", "100")
    assert_user_error(result, "--topology: level 1 must be one of", "ring", "torus")
    assert result.err.count("(got 'foo')") == 1


def test_validate_on_a_folder_says_it_is_a_folder(cli, tmp_path):
    assert_user_error(cli("validate", str(tmp_path)), str(tmp_path), "is a folder", ".toml")


def test_every_file_optimize_writes_is_git_ignored(cli, tmp_path, monkeypatch):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    monkeypatch.chdir(tmp_path)
    result = cli(*QUICK_OPTIMIZE, "--json")  # the default storage and folder: studies/
    assert result.code == 0, result.err
    written = sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "studies").iterdir())
    assert any(name.endswith(".png") for name in written), written
    for name in written:
        check = subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT)
        assert check.returncode == 0, f"{name} would be committed"


@pytest.mark.parametrize("tile", ["7x7x7", "96x16x16", "128x256x8"])
def test_a_kernel_tile_off_the_matrix_units_grid_is_refused(cli, tile):
    result = cli("kernel", "--kind", "ag-gemm", "--m", "8192", "--n", "1376", "--k", "4096", "--tile", tile)
    assert_user_error(result, f"--tile {tile}", "multiples of the matrix unit's smallest tile, 64x16x16")


def test_a_kernel_tile_on_the_grid_still_runs(cli):
    result = cli("kernel", "--kind", "ag-gemm", "--m", "8192", "--n", "1376", "--k", "4096", "--tile", "64x16x16",
                 "--json")
    assert result.code == 0, result.err
    assert result.json()["gemm"].startswith("tile 64x16x16")


def test_accuracy_all_has_readable_headers(cli):
    result = cli("accuracy", "all")
    assert result.code == 0, result.err
    for header in ("weighted error %", "median error %", "MAPE %", "model failures"):
        assert header in result.out, header
    for key in ("weighted_pct", "median_pct", "mape_pct"):
        assert key not in result.out, key
    assert "MAPE = the mean of |model − ref| / ref" in " ".join(result.out.split())


@pytest.mark.parametrize(("what", "kind"), [("chip", "chip"), ("noc", "noc"), ("model", "llm"), ("llm", "llm"),
                                            ("system", "system"), ("space", "space"), ("deepseek-v3", "llm")])
@pytest.mark.parametrize("form", ["toml", "json"])
def test_a_catalog_template_is_a_file_validate_accepts(cli, tmp_path, what, kind, form):
    result = cli("catalog", "template", what, *(("--json",) if form == "json" else ()))
    assert result.code == 0, result.err
    path = tmp_path / f"mine.{form}"
    path.write_text(result.out)
    checked = cli("validate", str(path), "--json")
    assert checked.code == 0, checked.err
    assert checked.json()["kind"] == kind


def test_the_chip_template_keeps_its_sources(cli):
    text = cli("catalog", "template", "chip").out
    assert 'kind = "chip"' in text and 'name = "standard"' in text
    assert "docs/calibration.md" in text and "# paper §5.1" in text  # its sources and comments, as shipped


def test_an_unknown_template_is_one_line(cli):
    assert_user_error(cli("catalog", "template", "gpu"), "catalog template", "chip, noc", "(got 'gpu')")
    assert_user_error(cli("catalog", "template"), "catalog template", "required")


# --- a clock below nominal says why -----------------------------------------------------------------------------

M8 = ("evaluate", "--model", "llama-3.2-1b", "--chip", "standard", "--phase", "decode", "--batch", "1",
      "--stacked-layers", "8", "--connected-layers", "8")


def test_the_report_says_what_set_the_clock(cli):
    from deepstack.models import dvfs

    deep = cli(*M8, "--json").json()
    assert deep["breakdown"]["clock_limit"] == dvfs.THERMAL_CLOCK  # m = 8: f_th = 0.976 of nominal
    assert deep["metrics"]["frequency_ghz"] < deep["hardware"]["nominal_clock_ghz"]
    shallow = cli(*M8[:-4], "--json").json()  # m = n = 4: nominal
    assert shallow["breakdown"]["clock_limit"] == dvfs.NOMINAL
    assert shallow["metrics"]["frequency_ghz"] == shallow["hardware"]["nominal_clock_ghz"]


def test_a_clock_below_nominal_is_explained_in_the_text_report(cli):
    line = next(line for line in cli(*M8).out.splitlines() if line.startswith("thermal:"))
    assert "clock 1.367 of 1.400 GHz (set by the static DVFS rule: the sustainable clock f_th of m = 8 layers at " \
           "85 °C)" in line
    nominal = next(line for line in cli(*M8[:-4]).out.splitlines() if line.startswith("thermal:"))
    assert nominal.endswith("clock 1.400 of 1.400 GHz")


@pytest.mark.parametrize(("limit", "words"), [("power wall", "power wall: the 100 W TDP"),
                                              ("thermal wall", "thermal wall: below the 100 W TDP"),
                                              ("above limit", "still above 85 °C"), ("nominal", None)])
def test_every_clock_limit_has_its_words(limit, words):
    from deepstack.cli.evaluation import _clock_reason

    result = {"hardware": {"stacked_layers": 4, "max_temp_c": 85.0, "tdp_w_per_device": 100.0},
              "breakdown": {"clock_limit": limit}}
    assert (_clock_reason(result) == "") if words is None else (words in _clock_reason(result))


# --- the front does not repeat itself ---------------------------------------------------------------------------

MINI8 = ROOT / "search" / "spaces" / "nocs" / "mini8.toml"


def _row(trial: int, stps: float, tpj: float, bws=(1.0, 1.0)) -> dict:
    return {"stps": stps, "tokens_per_joule": tpj, "trial": trial, "chip": "standard", "noc": str(MINI8),
            "stacked_layers": 4, "connected_layers": 4, "sram": "base", "hop_latency_scale": 1.0,
            "level_bw_scales": list(bws), "schedule": "tp=8", "fsdp": False, "temperature_c": 55.8}


class _Study:
    """What write_front reads of a study: its name, its problem and its trials (none: no scatter of trials)."""

    study_name = "s"

    def __init__(self):
        from deepstack.search.space import load_space, scenarios

        self.user_attrs = {"problem": {"scenario": scenarios(load_space("small"))[0].model_dump(mode="json"),
                                       "space": "small"}}

    def get_trials(self, deepcopy=False):
        return []


@pytest.fixture
def repeated_front(tmp_path):
    """A front of three designs, two of them with the very same objectives (they differ in a level's bandwidth)."""
    from deepstack.search.study_front import write_front

    front = [_row(0, 79197.4, 192.8), _row(1, 79197.4, 192.8, (1.0, 2.0)), _row(2, 78517.0, 197.9, (0.5, 1.0))]
    files = write_front(front, _Study(), ["stps", "tokens_per_joule"], tmp_path, "s")
    return front, files


def test_one_front_row_per_objective_vector(repeated_front):
    front, files = repeated_front
    assert [r["trial"] for r in front] == [0, 2]
    (same,) = front[0]["equivalent"]
    assert same["trial"] == 1 and same["level_bw_scales"] == [1.0, 2.0] and same["id"] != front[0]["id"]
    assert "chip" not in same  # only what differs from the row it is listed in
    saved = json.loads(Path(files["json"]).read_text())["pareto"]
    assert saved == front
    with open(files["csv"], newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 and json.loads(rows[0]["equivalent"])[0]["id"] == same["id"]


def test_an_equivalent_designs_id_still_evaluates(repeated_front):
    from deepstack.search.front_design import front_design

    front, files = repeated_front
    same = front[0]["equivalent"][0]
    point, row = front_design(files["csv"], same["id"])
    assert row["level_bw_scales"] == [1.0, 2.0] and row["trial"] == 1 and "equivalent" not in row
    first, _ = front_design(files["csv"], front[0]["id"])
    assert point.network != first.network and point.chip == first.chip


def test_the_front_table_names_the_equivalent_designs(repeated_front, capsys):
    from deepstack import report

    front, _ = repeated_front
    report.pareto({"objectives": ["stps", "tokens_per_joule"], "pareto": front, "files": {}})
    out = capsys.readouterr().out
    assert "same objectives" in out and front[0]["equivalent"][0]["id"] in out


def test_two_different_rows_never_print_the_same(capsys):
    from deepstack import report

    front = [{"stps": 200.04, "tokens_per_joule": 3.0}, {"stps": 200.01, "tokens_per_joule": 3.5},
             {"stps": 35123.4, "tokens_per_joule": 2.0}]
    report.pareto({"objectives": ["stps", "tokens_per_joule"], "pareto": front})
    out = capsys.readouterr().out
    assert "200.04" in out and "200.01" in out and "35,123" in out
    assert report.distinct([35123.4, 35123.41]) == ["35,123.4", "35,123.41"]
    assert report.distinct([0.5133, 0.5134, 0.5133]) == ["0.5133", "0.5134", "0.5133"]


def test_a_plot_under_a_file_says_it_is_a_file(cli, a_file):
    assert_user_error(cli("accuracy", "network", "--plot", str(a_file / "x.png")), "--plot",
                      f"{a_file} is a file, not a folder")


def test_front_labels_never_overlap():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from deepstack.search.study_front import label_apart

    fig, ax = plt.subplots(figsize=(7, 5))
    points = [(100.0 + i * 0.01, 3.0 - i * 0.001) for i in range(40)] + [(200.0, 1.0)]
    ax.plot([p[0] for p in points], [p[1] for p in points], "o")
    placed = label_apart(ax, points, [f"d{i:010x}" for i in range(len(points))])
    boxes = [t.get_window_extent(fig.canvas.get_renderer()) for t in ax.texts]
    plt.close(fig)
    assert 2 <= placed == len(boxes) < len(points)
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_a_sweep_front_row_has_an_id_that_reproduces_it(cli, tmp_path):
    from conftest import write_space

    space = write_space(tmp_path / "tiny.toml", chips=("standard",), hops=(1.0,))
    out = tmp_path / "sweep"
    result = cli("sweep", "--mode", "exhaustive", "--space", str(space), "--out", str(out), "--workers", "1",
                 "--json")
    assert result.code == 0, result.err
    with open(out / "pareto.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and all(row["id"].startswith("d") and row["command"].endswith(f"--front {out}/pareto.csv")
                        for row in rows)
    assert [row["id"] for row in rows] == [row["id"] for row in result.json()["pareto"]]
    row = rows[-1]
    again = cli("evaluate", "--design", row["id"], "--front", str(out / "pareto.csv"), "--json")
    assert again.code == 0, again.err
    metrics = again.json()["metrics"]
    assert (metrics["stps"], metrics["tokens_per_joule"]) == (float(row["stps"]), float(row["tokens_per_joule"]))


@pytest.mark.parametrize("output", [[], ["--json"]])
def test_a_reader_that_stops_early_ends_the_command_quietly(output):
    """`deepstack evaluate … | head -1`: the reader goes away before the report is written. The command ends
    without a traceback or a message, with the status a shell gives a program SIGPIPE ended (128 + 13), not 1,
    which would read as a failure."""
    import os
    import shutil
    import sys

    beside = Path(sys.executable).parent / "deepstack"
    exe = str(beside) if beside.exists() else shutil.which("deepstack")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line
    try:
        done = subprocess.run([exe, "evaluate", "--model", "llama-3.2-1b", "--batch", "1", *output], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")
