"""The search layer below Optuna: design spaces, CP-SAT enumeration and repair, sweeps, compare, dashboard
(search/space.py, feasibility.py, sweep/, compare.py, dashboard.py; docs/architecture.md §5).

Optuna studies themselves (resume, kill, workers, bad input) are in test_optimize.py. Commands that write study
or sweep files run in temporary folders, never in the repository.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import optuna
import pytest
from conftest import assert_user_error, run_in_process, write_space
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.models.hardware.device import resolve_device
from deepstack.models.parallel.memory import feasible_strategies, fits
from deepstack.models.parallel.strategies import Strategy, enumerate_strategies, prune_reason
from deepstack.schema import Scenario
from deepstack.search import bilevel, dashboard, pareto
from deepstack.search.feasibility import Feasibility, Proposal, enumerate_schedules, feasibility_of
from deepstack.search.optimize import optimize
from deepstack.search.space import (
    SPACES_DIR,
    HardwarePoint,
    base_points,
    load_space,
    raw_size,
    scaled_network,
    scenarios,
    space_names,
)

OBJECTIVES = ["stps", "tokens_per_joule"]
MINI8 = SPACES_DIR / "nocs" / "mini8.toml"


def _console_script() -> str:
    beside = Path(sys.executable).parent / "deepstack"
    exe = str(beside) if beside.exists() else shutil.which("deepstack")
    assert exe, "the deepstack console script is not installed"
    return exe




def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _dominates_max(a, b) -> bool:
    """a dominates b when every objective is maximised."""
    return all(x >= y for x, y in zip(a, b, strict=True)) and any(x > y for x, y in zip(a, b, strict=True))


def _hypervolume_2d_max(points, reference) -> float:
    """Area dominated by ``points`` above ``reference`` (both objectives maximised), by hand: sweep x downwards.
    Points not strictly better than the reference in both objectives add nothing."""
    inside = [(x, y) for x, y in points if x > reference[0] and y > reference[1]]
    area, best_y = 0.0, reference[1]
    for x, y in sorted(inside, key=lambda p: (-p[0], -p[1])):
        if y > best_y:
            area += (x - reference[0]) * (y - best_y)
            best_y = y
    return area


# --- design spaces ----------------------------------------------------------------------------------------


def test_shipped_spaces_load():
    assert {"default", "small", "paper"} <= set(space_names())
    for name in space_names():
        space = load_space(name)
        assert space.hardware.chips and space.hardware.nocs and scenarios(space)
        assert base_points(space), name


def test_unknown_space_name_is_a_user_error():
    with pytest.raises(UserInputError, match=r"unknown space 'nope'.*default"):
        load_space("nope")


def test_relative_preset_paths_resolve_against_the_space_file(tmp_path, monkeypatch):
    folder = tmp_path / "spaces"
    (folder / "nets").mkdir(parents=True)
    shutil.copy(MINI8, folder / "nets" / "mine.toml")
    text = (SPACES_DIR / "small.toml").read_text().replace('"nocs/mini8.toml"', '"nets/mine.toml"')
    assert '"nets/mine.toml"' in text
    (folder / "rel.toml").write_text(text)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the NoC is not reachable from the working directory
    space = load_space(str(folder / "rel.toml"))
    noc = space.hardware.nocs[0]
    assert Path(noc) == folder / "nets" / "mine.toml"
    assert catalog.load("nocs", noc).devices == 8
    assert len(base_points(space)) == 2 * 9  # 2 chips × 9 (m, n) pairs, as small.toml says


def test_an_edited_space_file_is_read_again(tmp_path):
    """A long-lived process (the API, a notebook) that loads a space file, sees it edited and loads it again gets
    the new content, not the memoised old one; ``deepstack validate`` in-process likewise."""
    from deepstack.api import validate_file

    path = write_space(tmp_path / "mine.toml", chips=("standard",))
    assert load_space(str(path)).hardware.chips == ("standard",)
    before = path.stat()
    write_space(path, chips=("standard", "strong-l2"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))  # a coarse clock may not tick
    assert load_space(str(path)).hardware.chips == ("standard", "strong-l2")
    path.write_text(path.read_text().replace('"strong-l2"', '"no-such-chip"'))
    with pytest.raises(UserInputError, match=r"hardware\.chips: .*no-such-chip"):
        validate_file(str(path))


def test_an_edited_noc_file_is_read_again(tmp_path):
    """A NoC file edited between two searches in one process: the scaled network and the feasibility tables see
    the new file (hop latency 10 → 40 ns; L1 of 4 → 2 devices, so 8 → 4 devices)."""
    noc = tmp_path / "mine.toml"
    shutil.copy(MINI8, noc)
    space = load_space(str(write_space(tmp_path / "space.toml")))
    space = space.model_copy(update={"hardware": space.hardware.model_copy(update={"nocs": (str(noc),)})})
    scenario = scenarios(space)[0]
    assert scaled_network(str(noc), 2.0, (1.0, 1.0)).levels[0].hop_latency_ns == 20.0
    assert feasibility_of(space, scenario).n == 8
    before = noc.stat()
    noc.write_text(noc.read_text().replace("hop_latency_ns = 10.0", "hop_latency_ns = 40.0")
                   .replace('dims = "4"', 'dims = "2"'))
    os.utime(noc, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))  # a coarse clock may not tick
    assert scaled_network(str(noc), 2.0, (1.0, 1.0)).levels[0].hop_latency_ns == 80.0
    assert feasibility_of(space, scenario).n == 4


def test_raw_size_of_small_space_by_hand():
    # 2 chips × 1 NoC; stacking pairs m ∈ {2, 4, 8}, n ∈ {1, 2, 4, 8}, n ≤ m: 2 + 3 + 4 = 9; 3 hop latencies;
    # 3² level bandwidths; 8 = 2³ devices: C(3 + 5, 5) = 56 factorizations × FSDP {off, on} = 112 strategies;
    # 1 collective algorithm; 64 single-chip schedules (schema default, paper §4.2.2); one scenario.
    assert raw_size(load_space("small")) == 2 * 9 * 3 * 9 * 112 * 1 * 64


def test_paper_space_size_is_the_papers(cli):
    result = cli("optimize", "--space", "paper", "--size")
    assert result.code == 0, result.err
    size = float(result.out.strip())
    assert 2.5e14 / 2 <= size <= 2.5e14 * 2  # paper §4.2.2: ~2.5·10¹⁴ points


def test_hardware_point_label_and_dict():
    point = HardwarePoint("standard", "tms1", 4, 2, "base", 0.5, (1.0, 0.75, 1.5))
    assert point.label == "standard/tms1/m4n2/base/lat0.5/bw1x0.75x1.5"
    assert point.as_dict()["level_bw_scales"] == [1.0, 0.75, 1.5]
    assert HardwarePoint(**{**point.as_dict(), "level_bw_scales": (1.0, 0.75, 1.5)}) == point


# --- CP-SAT enumeration against brute force -----------------------------------------------------------------


def _brute_force(n: int) -> set[tuple]:
    """Every (tp, ep, sp, cp, dp, pp, fsdp) with product n, by trying all divisor tuples (independent of both)."""
    divs = _divisors(n)
    out = set()
    for tp, ep, sp, cp, pp in itertools.product(divs, repeat=5):
        rest, remainder = divmod(n, tp * ep * sp * cp * pp)
        if remainder == 0:
            out |= {(tp, ep, sp, cp, rest, pp, fsdp) for fsdp in (False, True)}
    return out


def _as_tuples(strategies) -> list[tuple]:
    return [(*s.degrees, s.fsdp) for s in strategies]


@pytest.mark.parametrize("n", [8, 12, 64, 256])
def test_cp_sat_enumeration_equals_brute_force(n):
    found = _as_tuples(enumerate_schedules(n))
    assert len(found) == len(set(found))  # single-worker enumeration: no duplicates
    assert set(found) == set(_as_tuples(enumerate_strategies(n))) == _brute_force(n)
    assert all(math.prod(t[:6]) == n for t in found)


SCENARIOS = {
    "deepseek-v3 decode 1024": ("deepseek-v3", "decode", 1024),
    "llama-3.3-70b prefill 4": ("llama-3.3-70b", "prefill", 4),
    "qwen3-30b-a3b decode 16": ("qwen3-30b-a3b", "decode", 16),
}


@pytest.mark.parametrize("n", [8, 12, 64, 256])
@pytest.mark.parametrize("case", list(SCENARIOS))
def test_cp_sat_rules_equal_the_pruning_rules(case, n):
    model, phase, batch = SCENARIOS[case]
    scenario = Scenario(model=catalog.load("llms", model), phase=phase, batch=batch)
    found = _as_tuples(enumerate_schedules(n, scenario))
    kept, _ = feasible_strategies(scenario, n, None)
    assert len(found) == len(set(found))
    assert set(found) == set(_as_tuples(kept))
    assert found, "every case keeps some strategy (else the comparison is empty)"


# --- repair -----------------------------------------------------------------------------------------------


def _proposals(feasibility: Feasibility):
    """Any proposal Optuna could make, and worse: m and n anywhere in 1..12 (n > m, unlisted, m > 10), degrees
    that need not divide N."""
    f = feasibility
    levels = {noc: len(catalog.load("nocs", noc).levels) for noc in f.nocs}

    @st.composite
    def build(draw):
        noc = draw(st.sampled_from(f.nocs))
        hardware = HardwarePoint(
            draw(st.sampled_from(f.chips)), noc, draw(st.integers(1, 12)), draw(st.integers(1, 12)),
            draw(st.sampled_from(f.srams)), draw(st.sampled_from(f.hops)),
            tuple(draw(st.lists(st.sampled_from(f.bws), min_size=levels[noc], max_size=levels[noc]))))
        degrees = draw(st.lists(st.integers(1, 2 * f.n), min_size=6, max_size=6))
        return Proposal(hardware, Strategy(*degrees, fsdp=draw(st.booleans())))

    return build()


def _check_repaired(space, scenario, feasibility: Feasibility, proposal: Proposal) -> None:
    repaired = feasibility.repair(proposal)
    hw, strategy = repaired.hardware, repaired.strategy
    chip = catalog.load("chips", hw.chip)
    assert hw.chip in space.hardware.chips and hw.noc in space.hardware.nocs
    assert hw.stacked_layers in space.hardware.stacked_layers and hw.stacked_layers <= 10  # §4.2.3
    assert 1 <= hw.connected_layers <= hw.stacked_layers
    if space.hardware.connected_layers != "all":
        assert hw.connected_layers in space.hardware.connected_layers
    sram = next(o for o in space.hardware.sram if o.name == hw.sram)
    device = resolve_device(chip, hw.stacked_layers, hw.connected_layers,  # raises if no PE fits the area
                            scaled_network(hw.noc, hw.hop_latency_scale, hw.level_bw_scales), sram)
    assert device.pes >= 1
    assert strategy.devices == feasibility.n
    assert strategy.fsdp in space.schedule.fsdp
    assert prune_reason(scenario, strategy) is None
    assert fits(scenario, strategy, device.dram.capacity_B)
    assert feasibility.repair(repaired) == repaired  # a feasible point is its own nearest


@pytest.mark.parametrize("name", ["small", "default"])
def test_repair_always_returns_a_buildable_point_that_fits_memory(name):
    space = load_space(name)
    scenario = scenarios(space)[0]
    feasibility = Feasibility(space, scenario)

    @settings(max_examples=15 if name == "default" else 50, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(_proposals(feasibility))
    def check(proposal):
        _check_repaired(space, scenario, feasibility, proposal)

    check()


def test_repair_moves_off_stackings_too_small_for_the_model():
    space = load_space("default")
    scenario = scenarios(space)[0]  # DeepSeek-V3 decode, batch 1024, on 256 devices
    layer_B = catalog.load("chips", "standard").device.dram.layer_capacity_GiB * 2**30
    for m in (1, 2):  # premise: no schedule fits 1 or 2 layers (671 B parameters alone need ≥ 2.6 GB per device)
        assert not feasible_strategies(scenario, 256, m * layer_B)[0]
    feasibility = Feasibility(space, scenario)
    proposal = Proposal(HardwarePoint("standard", "tms1", 1, 1, "base", 1.0, (1.0, 1.0, 1.0)), Strategy(tp=8, ep=32))
    repaired = feasibility.repair(proposal)
    smallest = min(m for m in space.hardware.stacked_layers if feasible_strategies(scenario, 256, m * layer_B)[0])
    assert smallest >= 3
    assert (repaired.hardware.chip, repaired.hardware.stacked_layers) == ("standard", smallest)  # nearest that fits
    _check_repaired(space, scenario, feasibility, proposal)


# --- sweeps and compare on a tiny space ----------------------------------------------------------------------

TINY_HARDWARE_POINTS = 5 * 1 * 2**2  # (m, n) ∈ {(2,1), (2,2), (4,1), (4,2), (4,4)} × 1 hop × 2 scales per level
STUDY_SHARE = 0.03  # "a few %" of the sweep's evaluations as trials


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Exhaustive and hierarchical sweeps of the tiny space, an optimize study on it and the compare (the CLI run
    in this process; the console script itself is exercised by the dashboard tests and test_optimize.py)."""
    cwd = tmp_path_factory.mktemp("tiny")
    space = cwd / "tiny.toml"
    write_space(space, chips=("standard",), hops=(1.0,))
    runs = {}
    for mode in ("exhaustive", "hierarchical"):
        runs[mode] = run_in_process("sweep", "--mode", mode, "--space", str(space), "--out", mode, "--workers", "2",
                                "--json", cwd=cwd)
    summary = json.loads((cwd / "exhaustive" / "summary.json").read_text())
    trials = math.ceil(STUDY_SHARE * summary["evaluations"])
    # a fresh process's inner solver: rows other tests left in this one's table would count as already evaluated
    bilevel.ROWS.clear()
    runs["optimize"] = run_in_process("optimize", "--space", str(space), "--trials", str(trials), "--refine", "0",
                                      "--study", "tiny", "--storage", "sqlite:///tiny.db", "--seed", "1", "--json",
                                      cwd=cwd)
    runs["compare"] = run_in_process("compare", "--study", "tiny", "--storage", "sqlite:///tiny.db", "--sweep",
                                 "exhaustive", "--json", cwd=cwd)
    return {"cwd": cwd, "space": space, "trials": trials, "summary": summary, "runs": runs}


def _points(folder: Path) -> list[dict]:
    with open(folder / "points.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _feasible_values(rows: list[dict]) -> list[tuple[float, float]]:
    return [(float(r["stps"]), float(r["tokens_per_joule"])) for r in rows if r["feasible"] == "True"]


def test_sweep_json_output(tiny):
    for mode in ("exhaustive", "hierarchical"):
        run = tiny["runs"][mode]
        assert run.returncode == 0, run.stderr[-2000:]
        data = json.loads(run.stdout, parse_constant=pytest.fail)  # strict JSON: no NaN
        assert data["mode"] == mode and data["pareto"] and data["evaluations"] > 0
        assert data["out"] == mode


def test_sweep_pareto_file_is_strict_json(tiny):
    for mode in ("exhaustive", "hierarchical"):
        front = json.loads((tiny["cwd"] / mode / "pareto.json").read_text(), parse_constant=pytest.fail)
        assert front["pareto"] and all(math.isfinite(row["stps"]) for row in front["pareto"]), mode


def test_exhaustive_sweep_covers_the_whole_grid(tiny):
    summary, rows = tiny["summary"], _points(tiny["cwd"] / "exhaustive")
    assert summary["mode"] == "exhaustive" and summary["space"] == "tiny"
    assert summary["hardware_points"] == TINY_HARDWARE_POINTS
    assert summary["evaluations"] == len(rows) > 0
    hardware = {(r["stacked_layers"], r["connected_layers"], r["level_bw_scales"]) for r in rows}
    assert len(hardware) == TINY_HARDWARE_POINTS  # every point of the grid has at least one schedule that fits
    for row in rows:
        degrees = dict(part.split("=") for part in row["schedule"].split(",") if "=" in part)
        assert math.prod(int(v) for v in degrees.values()) == 8
    assert (tiny["cwd"] / "exhaustive" / "pareto.csv").exists()


def test_one_process_sweep_matches_two_and_leaves_nothing_frozen(tiny, tmp_path, monkeypatch):
    """One process evaluates exactly what two workers did; it moves each chunk's survivors out of the garbage
    collector's way (gc.freeze) while it runs, and gives them back when the sweep returns, so the caller's process
    (a notebook, this test run) goes on collecting its own garbage."""
    import gc

    from deepstack.search.space import load_space, scenarios
    from deepstack.search.sweep import sweep

    gc.unfreeze()
    space = str(tiny["space"])
    frozen_while_running = []
    real_freeze = gc.freeze

    def freeze() -> None:
        real_freeze()
        frozen_while_running.append(gc.get_freeze_count())

    monkeypatch.setattr(gc, "freeze", freeze)
    sweep(mode="exhaustive", space=space, scenario=scenarios(load_space(space))[0],
          objectives=["stps", "tokens_per_joule"], out=str(tmp_path / "one"), workers=1)
    monkeypatch.undo()
    assert len(frozen_while_running) > 1 and all(count > 0 for count in frozen_while_running)
    assert gc.get_freeze_count() == 0
    assert sorted(map(str, _points(tmp_path / "one"))) == sorted(map(str, _points(tiny["cwd"] / "exhaustive")))


def test_compare_against_the_exhaustive_sweep(tiny):
    run = tiny["runs"]["compare"]
    assert run.returncode == 0, run.stderr[-2000:]
    figures = json.loads(run.stdout)
    evaluations = tiny["summary"]["evaluations"]
    # a bi-level trial evaluates its hardware point's schedules: the study's evaluations are the ones its trials
    # recorded (user attribute "solve"), counted trial by trial
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{tiny['cwd'] / 'tiny.db'}")
    done = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    spent = sum(t.user_attrs["solve"]["evaluations"] for t in done)
    assert figures["study"]["trials"] == len(done) == tiny["trials"]
    assert figures["study"]["evaluations"] == spent >= tiny["trials"]
    assert figures["sweep"]["evaluations"] == evaluations
    assert figures["evaluation_share"] == pytest.approx(spent / evaluations)
    assert figures["study"]["hypervolume"] > 0 and figures["sweep"]["hypervolume"] > 0
    assert 0 < figures["hypervolume_ratio"] <= 1 + 1e-9
    assert figures["hypervolume_ratio"] == pytest.approx(figures["study"]["hypervolume"]
                                                         / figures["sweep"]["hypervolume"])


@pytest.mark.parametrize(("code", "needle"), [("0" * 16, "code 0000000000000000"),
                                              (None, "a version that did not record its code")])
def test_compare_refuses_a_sweep_of_other_code(tiny, cli, code, needle, tmp_path, monkeypatch):
    """A study and a sweep evaluated by different laws would compare fronts neither code gives: refused."""
    folder = tmp_path / "old"
    shutil.copytree(tiny["cwd"] / "exhaustive", folder)
    summary = json.loads((folder / "summary.json").read_text())
    summary.pop("code")
    (folder / "summary.json").write_text(json.dumps(summary if code is None else {**summary, "code": code}))
    monkeypatch.chdir(tiny["cwd"])
    result = cli("compare", "--study", "tiny", "--storage", "sqlite:///tiny.db", "--sweep", str(folder))
    assert_user_error(result, "--sweep", needle, "compare a study and a sweep of the same code")


def test_compare_hypervolumes_recomputed_by_hand(tiny):
    figures = json.loads(tiny["runs"]["compare"].stdout)
    reference = figures["reference_point"]
    sweep_values = _feasible_values(_points(tiny["cwd"] / "exhaustive"))
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{tiny['cwd'] / 'tiny.db'}")
    study_values = [tuple(t.values) for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
                    if all(c <= 0 for c in t.constraints.values())]
    assert study_values and sweep_values
    assert figures["sweep"]["hypervolume"] == pytest.approx(_hypervolume_2d_max(sweep_values, reference))
    assert figures["study"]["hypervolume"] == pytest.approx(_hypervolume_2d_max(study_values, reference))


def test_tiny_study_trials_are_feasible_by_construction(tiny):
    run = tiny["runs"]["optimize"]
    assert run.returncode == 0, run.stderr[-2000:]
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{tiny['cwd'] / 'tiny.db'}")
    trials = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(trials) == tiny["trials"]
    for trial in trials:
        report = trial.user_attrs["report"]
        assert not [v for v in report["violations"] if v.startswith("memory")], report["violations"]
        assert report["schedule"]["devices"] == report["hardware"]["devices"] == 8


def _row_key(row: dict) -> tuple:
    return tuple(row[k] for k in ("chip", "noc", "stacked_layers", "connected_layers", "sram",
                                  "hop_latency_scale", "level_bw_scales", "schedule", "fsdp"))


def test_hierarchical_sweep_is_no_better_than_exhaustive(tiny):
    exhaustive, hierarchical = _points(tiny["cwd"] / "exhaustive"), _points(tiny["cwd"] / "hierarchical")
    assert 0 < len(hierarchical) <= len(exhaustive)
    by_key = {_row_key(r): r for r in exhaustive}
    for row in hierarchical:  # every hierarchical evaluation is one of the exhaustive ones, with the same result
        twin = by_key[_row_key(row)]
        assert float(row["stps"]) == pytest.approx(float(twin["stps"]))
        assert float(row["tokens_per_joule"]) == pytest.approx(float(twin["tokens_per_joule"]))
    ex_values, hi_values = _feasible_values(exhaustive), _feasible_values(hierarchical)
    assert hi_values
    ex_array, hi_array = np.array(ex_values), np.array(hi_values)
    ex_front = ex_array[pareto.nondominated_mask(ex_array, OBJECTIVES)]
    hi_front = hi_array[pareto.nondominated_mask(hi_array, OBJECTIVES)]
    for point in hi_values:  # nothing the hierarchy finds beats a point of the exhaustive front
        assert not any(_dominates_max(point, other) for other in ex_front)
    reference = pareto.reference_point(ex_front, hi_front, objectives=OBJECTIVES)
    hv_ex = pareto.hypervolume(ex_front, OBJECTIVES, reference)
    hv_hi = pareto.hypervolume(hi_front, OBJECTIVES, reference)
    assert 0 < hv_hi <= hv_ex * (1 + 1e-12)


# --- dashboard ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dashboard_storage(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dash")
    url = f"sqlite:///{folder / 'dash.db'}"
    result = optimize(objectives=OBJECTIVES, space="small", scenario=None, trials=3, refine=0, study="dash-study",
                      storage=url, seed=0, out=str(folder / "fronts"))
    assert result.trials == 3
    return url


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get_json(url: str, deadline_s: float, process: subprocess.Popen | None = None, log: Path | None = None):
    """GET ``url`` until it answers (a readiness poll, not a timing assertion)."""
    deadline = time.monotonic() + deadline_s
    while True:
        if process is not None and process.poll() is not None:
            pytest.fail(f"dashboard exited with {process.returncode}: {log.read_text() if log else ''}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.loads(response.read())
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def test_dashboard_command_lists_the_study(dashboard_storage, tmp_path):
    port = _free_port()
    log = tmp_path / "dashboard.err"
    with open(log, "w") as err:
        process = subprocess.Popen([_console_script(), "dashboard", "--storage", dashboard_storage, "--port",
                                    str(port), "--host", "127.0.0.1"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                                   stderr=err)
    try:
        data = _get_json(f"http://127.0.0.1:{port}/api/studies", 60, process, log)
    finally:
        _stop(process)
    assert "dash-study" in [s["study_name"] for s in data["study_summaries"]]
    assert "warning" not in log.read_text()  # loopback: no warning


def test_dashboard_warns_on_a_non_loopback_host(dashboard_storage, tmp_path):
    log = tmp_path / "dashboard.err"
    with open(log, "w") as err:
        process = subprocess.Popen([_console_script(), "dashboard", "--storage", dashboard_storage, "--port", "0",
                                    "--host", "0.0.0.0"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 60
        while "optuna-dashboard on" not in log.read_text() and process.poll() is None:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    finally:
        _stop(process)
    lines = log.read_text().splitlines()
    warnings = [line for line in lines if "warning" in line]
    assert len(warnings) == 1 and "0.0.0.0" in warnings[0], lines


def test_dashboard_server_binds_where_asked(dashboard_storage):
    server = dashboard.make(dashboard_storage, "127.0.0.1", 0)
    host, port = server.server_address[:2]
    assert host == "127.0.0.1" and port > 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        data = _get_json(f"http://127.0.0.1:{port}/api/studies", 30)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert [s["study_name"] for s in data["study_summaries"]] == ["dash-study"]


def test_dashboard_rejects_a_missing_database_and_a_bad_port(tmp_path, dashboard_storage):
    with pytest.raises(UserInputError, match="no study database"):
        dashboard.make(f"sqlite:///{tmp_path / 'missing.db'}", "127.0.0.1", 0)
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(UserInputError, match="--port"):
        dashboard.make(dashboard_storage, "127.0.0.1", 70000)


def test_dashboard_user_error_is_one_line(cli, tmp_path):
    assert_user_error(cli("dashboard", "--storage", f"sqlite:///{tmp_path / 'missing.db'}", "--port", "0"),
                      "no study database")


def test_a_bare_storage_path_and_a_missing_journal_are_named(cli, tmp_path, monkeypatch):
    # a bare path used to meet a front-owner check that read it as another storage (optimize) or SQLAlchemy's
    # "Could not parse URL" (dashboard); a missing journal, "Failed to guess storage class"
    monkeypatch.chdir(tmp_path)
    for command in (("optimize", "--space", "small", "--trials", "4"), ("dashboard", "--port", "0")):
        assert_user_error(cli(*command, "--storage", "runs.db"), "--storage: 'runs.db' is not a storage URL",
                          "sqlite:///runs.db")
    assert_user_error(cli("dashboard", "--storage", "gone.log", "--port", "0"), "no study journal at gone.log")
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_sweep_chunks_depend_on_the_tier_size_only():
    """A resumed sweep must cut its tiers as the interrupted one did, whatever the worker count."""
    from deepstack.search.sweep.chunks import CHUNK_POINTS, MIN_CHUNKS, chunk_points

    assert chunk_points(1) == 1 and chunk_points(MIN_CHUNKS) == 1
    assert chunk_points(MIN_CHUNKS + 1) == 2
    assert chunk_points(10_000) == CHUNK_POINTS
