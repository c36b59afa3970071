"""`deepstack optimize`: the Pareto front, resuming studies (also after SIGKILL), several workers, feasibility of
every trial, and bad input that never touches an existing study (search/optimize.py; docs/architecture.md §5).

Every command runs in a temporary folder (so ``studies/``, or the front files beside a ``--storage`` file, land
there). The default space's trials cost about a second each (DeepSeek-V3 on 256 devices), so one 40-trial study is
shared by the tests that need that space; the rest use the ``small`` space (8 devices).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from conftest import MINI8, assert_user_error, run_in_process, write_space

from deepstack.search.optimize import study_points
from deepstack.search.space import SPACES_DIR
from deepstack.search.study_front import pareto_front

COMPLETE = optuna.trial.TrialState.COMPLETE
RUNNING = optuna.trial.TrialState.RUNNING
FAIL = optuna.trial.TrialState.FAIL
OBJECTIVES = ["stps", "tokens_per_joule"]  # both maximised


def _console_script() -> str:
    beside = Path(sys.executable).parent / "deepstack"
    exe = str(beside) if beside.exists() else shutil.which("deepstack")
    assert exe, "the deepstack console script is not installed"
    return exe


def _deepstack(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """The real console script (for module-scoped fixtures, where the function-scoped cli_process can't go)."""
    return subprocess.run([_console_script(), *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)




def _load(url: str, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=url)


def _complete(url: str, name: str) -> dict[int, list[float]]:
    """Trial number → values of the COMPLETE trials."""
    return {t.number: t.values for t in _load(url, name).get_trials(states=(COMPLETE,))}


def _dominates(a, b) -> bool:
    return all(x >= y for x, y in zip(a, b, strict=True)) and any(x > y for x, y in zip(a, b, strict=True))


def _schedule_devices(label: str) -> int:
    """Devices of a schedule label (by hand, not via the library): a flat ``"tp=2,ep=32,pp=4,fsdp"``, or a MoE
    strategy in vLLM's form ``"attn:tp=4,ep=32;ffn:ep=128;pp=2,moe_mode=replace_only"``, whose two modules
    cover the same devices of a stage."""
    def degrees(segment: str) -> dict[str, int]:
        items = (part.split("=") for part in segment.split(":")[-1].split(",") if "=" in part)
        return {key: int(value) for key, value in items if key != "moe_mode"}

    segments = label.split(";")
    if len(segments) == 1:
        return math.prod(degrees(label).values())
    attention, ffn = math.prod(degrees(segments[0]).values()), math.prod(degrees(segments[1]).values())
    assert attention == ffn, label
    return attention * (degrees(segments[2]).get("pp", 1) if len(segments) > 2 else 1)


def _assert_every_trial_feasible(url: str, name: str, devices: int) -> int:
    """No trial of the study was spent on an infeasible point: CP-SAT repaired each before evaluating."""
    trials = _load(url, name).get_trials(states=(COMPLETE,))
    for trial in trials:
        report, design = trial.user_attrs["report"], trial.user_attrs["design"]
        assert not [v for v in report["violations"] if v.startswith("memory")], (trial.number, report["violations"])
        assert report["metrics"]["memory_gib"] <= report["hardware"]["dram_capacity_GiB"]
        assert _schedule_devices(design["schedule"]) == devices, design
        assert report["schedule"]["devices"] == report["hardware"]["devices"] == devices
        assert 1 <= design["connected_layers"] <= design["stacked_layers"] <= 10
        assert report["hardware"]["pes_per_device"] >= 1
    return len(trials)


# --- the default space: front, files, resume (acceptance 1 and 2) ------------------------------------------


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """The README's first command (defaults: 1,000 trials, seed 0) on the default space, once, with what it left
    behind before anything else ran (test_optimize_bilevel.py checks the front against the named designs)."""
    cwd = tmp_path_factory.mktemp("default-space")
    run = run_in_process("optimize", "--objective", "stps,tokens_per_joule", "--study", "t",
                         "--storage", "sqlite:///t.db", "--json", cwd=cwd)
    assert run.returncode == 0, run.stderr[-3000:]
    url = f"sqlite:///{cwd / 't.db'}"
    files = {ext: cwd / f"t.pareto.{ext}" for ext in ("csv", "json", "html")}
    saved = json.loads(files["json"].read_text()) if files["json"].exists() else None
    return {"cwd": cwd, "url": url, "out": json.loads(run.stdout), "err": run.stderr, "files": files,
            "saved_front": saved, "trials": _complete(url, "t")}


@pytest.fixture(scope="module")
def default_rerun(default_run):
    """The same command again with ``--trials 20``: it adds 20 trials to the study."""
    run = _deepstack("optimize", "--objective", "stps,tokens_per_joule", "--trials", "20", "--study", "t",
                     "--storage", "sqlite:///t.db", "--json", cwd=default_run["cwd"])
    assert run.returncode == 0, run.stderr[-3000:]
    return {**default_run, "out": json.loads(run.stdout), "out_first": default_run["out"]}


def test_default_space_front_is_nonempty_and_nondominated(default_run):
    out = default_run["out"]
    # the README's defaults: 1,000 trials, up to 600 of them local search around the front (--refine)
    refined = out["run"]["refined"]
    assert out["study"] == "t" and out["storage"] == "sqlite:///t.db" and out["trials"] == out["added"] == 1000
    assert 0 < refined <= 600
    front = out["pareto"]
    assert front
    for row in front:
        assert set(OBJECTIVES) <= set(row) and {"chip", "noc", "stacked_layers", "schedule"} <= set(row)
    for a, b in ((a, b) for a in front for b in front if a is not b):  # pairwise, maximising both
        assert not _dominates([a[o] for o in OBJECTIVES], [b[o] for o in OBJECTIVES]), (a, b)


def test_default_space_writes_the_front_files(default_run):
    files = default_run["files"]
    for path in files.values():
        assert path.is_file() and path.stat().st_size > 0, path
    assert default_run["out"]["files"].items() >= {ext: f"t.pareto.{ext}" for ext in ("csv", "json", "html")
                                                    }.items()
    assert default_run["out"]["files"]["hypervolume_png"] == "t.hypervolume.png"
    assert (default_run["cwd"] / "t.hypervolume.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = default_run["saved_front"]
    assert saved["objectives"] == OBJECTIVES
    assert [r["trial"] for r in saved["pareto"]] == [r["trial"] for r in default_run["out"]["pareto"]]
    assert "<html" in files["html"].read_text()[:2000].lower()


def test_front_rows_are_thermally_feasible_schedules_kept_by_trials(default_run):
    trials = {t.number: t for t in _load(default_run["url"], "t").get_trials(states=(COMPLETE,))}
    for row in default_run["out"]["pareto"]:
        trial = trials[row["trial"]]
        kept = {r["schedule"]: r for r in trial.user_attrs["pareto_schedules"]}  # the point's Pareto schedules
        assert [row[o] for o in OBJECTIVES] == pytest.approx([kept[row["schedule"]][o] for o in OBJECTIVES])
        assert trial.constraints and all(c <= 0 for c in trial.constraints.values())
        assert row["temperature_c"] <= trial.user_attrs["report"]["hardware"]["max_temp_c"]
        assert row["chip"] == trial.user_attrs["design"]["chip"]


# --- acceptance 1 of issue 20: the README's first command beats every named design, and repeats itself -------

NAMED_3D_CHIPS = ("standard", "wgmma", "weak-noc", "strong-noc", "strong-l2", "strong-l1", "less-sm",
                  "large-matrix", "large-vector")  # the 3D chips of the paper's Table 2 in the catalog


def test_front_weakly_dominates_every_named_design(default_run):
    """Every schedule of every named design (Table 2 chip, m = n = 4, TMS1) that holds the thermal limit is
    weakly dominated by a row of the front of the README's first command."""
    from deepstack.search.bilevel import InnerTask, solve
    from deepstack.search.optimize import Problem
    from deepstack.search.space import HardwarePoint, load_space, scenarios

    space = load_space("default")
    problem = Problem(space, scenarios(space)[0], tuple(OBJECTIVES))
    front = [[row[o] for o in OBJECTIVES] for row in default_run["out"]["pareto"]]
    checked = 0
    for chip in NAMED_3D_CHIPS:
        named = solve(InnerTask(problem, HardwarePoint(chip, "tms1", 4, 4, "base", 1.0, (1.0, 1.0, 1.0)), None))
        assert named.schedules == 95 + 59  # the worked example's 95 strategies that fit 4 layers' DRAM, 59 also folded
        for row in named.front:  # its Pareto set of feasible schedules: every other schedule is dominated by one
            point = [row[o] for o in OBJECTIVES]
            assert any(all(f >= p * (1 - 1e-12) for f, p in zip(best, point, strict=True)) for best in front), (
                chip, row["schedule"], point)
            checked += 1
    assert checked >= len(NAMED_3D_CHIPS)


def test_same_seed_gives_the_same_front(default_run, tmp_path):
    again = run_in_process("optimize", "--objective", "stps,tokens_per_joule", "--study", "t2",
                           "--storage", "sqlite:///t2.db", "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    first, second = default_run["out"]["pareto"], json.loads(again.stdout)["pareto"]
    def same(rows):  # the study's name is part of the row's command line, nothing else
        return [{k: v for k, v in r.items() if k != "command"} for r in rows]

    assert first and same(second) == same(first)
    assert [r["trial"] for r in second] == [r["trial"] for r in first]


def test_rerun_adds_trials_and_keeps_the_earlier_ones(default_rerun):
    out = default_rerun["out"]
    before = default_rerun["out_first"]["trials"]
    assert out["trials"] == before + 20 and out["added"] == 20 and out["run"]["refined"] == 12
    after = _complete(default_rerun["url"], "t")
    assert len(after) == before + 20
    for number, values in default_rerun["trials"].items():
        assert after[number] == values


def test_rerun_front_is_not_dominated_by_any_trial(default_rerun):
    study = _load(default_rerun["url"], "t")
    feasible = [t.values for t in study.get_trials(states=(COMPLETE,))
                if all(c <= 0 for c in t.constraints.values())]
    front = [[row[o] for o in OBJECTIVES] for row in default_rerun["out"]["pareto"]]
    assert front
    for point in front:
        assert not any(_dominates(values, point) for values in feasible), point
    # and every non-dominated trial is on it or beaten by a front row (a trial tells Optuna one representative
    # schedule; the front is over every kept schedule of every design)
    for values in feasible:
        if not any(_dominates(other, values) for other in feasible):
            assert any(point == pytest.approx(values) or _dominates(point, values) for point in front), values


def test_no_trial_of_the_default_space_is_infeasible(default_rerun):
    assert _assert_every_trial_feasible(default_rerun["url"], "t", devices=256) == default_rerun["out"]["trials"]


# --- resume after SIGKILL (acceptance 2) -------------------------------------------------------------------


def _states(db: Path) -> dict[str, int]:
    """Trial counts per state, read straight from the SQLite file (no Optuna storage in the polling loop)."""
    if not db.exists():
        return {}
    try:
        with sqlite3.connect(db, timeout=5) as connection:
            return dict(connection.execute("SELECT state, COUNT(*) FROM trials GROUP BY state").fetchall())
    except sqlite3.OperationalError:  # tables not created yet, or a writer holds the lock for a moment
        return {}


def _kill_mid_study(cwd: Path) -> None:
    """Start a long small-space study and SIGKILL it once ≥ 5 trials completed (it is then evaluating a batch or
    writing one: the kill lands wherever it lands)."""
    process = subprocess.Popen([_console_script(), "optimize", "--space", "small", "--trials", "200", "--refine", "0",
                                "--study", "k", "--storage", "sqlite:///k.db", "--seed", "3", "--json"], cwd=cwd,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300  # readiness guard only; a healthy run gets there in seconds
        while _states(cwd / "k.db").get("COMPLETE", 0) < 5:
            assert process.poll() is None, f"the study ended (exit {process.returncode}) before it could be killed"
            assert time.monotonic() < deadline, _states(cwd / "k.db")
            time.sleep(0.02)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL


def test_killed_study_keeps_its_trials_and_resumes(tmp_path, cli, monkeypatch):
    """The sampler runs on an in-memory mirror and each batch of trials is stored in one write: a SIGKILL loses only
    the batch being evaluated, leaves no RUNNING trial behind, and the next run adds exactly what it is asked."""
    _kill_mid_study(tmp_path)
    url = f"sqlite:///{tmp_path / 'k.db'}"
    assert set(_states(tmp_path / "k.db")) <= {"COMPLETE", "FAIL"}  # FAIL: a proposal no schedule fits
    before = _complete(url, "k")
    assert len(before) >= 5
    monkeypatch.chdir(tmp_path)  # the resuming run goes in-process (the killed one was the real console script)

    result = cli("optimize", "--space", "small", "--trials", "10", "--refine", "0", "--study", "k", "--storage",
                 "sqlite:///k.db", "--seed", "4", "--json")
    assert result.code == 0, result.err
    assert result.json()["trials"] == len(before) + 10 and result.json()["added"] == 10
    after = {t.number: t for t in _load(url, "k").get_trials()}
    for number, values in before.items():  # same numbers, same values
        assert after[number].state == COMPLETE and after[number].values == values
    assert sum(t.state == COMPLETE for t in after.values()) == len(before) + 10
    assert not [t for t in after.values() if t.state in (RUNNING, optuna.trial.TrialState.WAITING)]
    _assert_every_trial_feasible(url, "k", devices=8)


def test_trial_killed_before_its_first_heartbeat_is_failed_on_resume(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'z.db'}"
    args = ("optimize", "--space", "small", "--study", "z", "--storage", "sqlite:///z.db", "--json")
    assert cli(*args, "--trials", "2").code == 0
    zombie = _load(url, "z").ask()  # exactly what a kill right after ask() leaves: RUNNING, no heartbeat
    with sqlite3.connect(tmp_path / "z.db") as connection:  # ... long ago, well past the grace period
        connection.execute("UPDATE trials SET datetime_start = '2000-01-01 00:00:00.000000' WHERE trial_id = ?",
                           (zombie._trial_id,))
    result = cli(*args, "--trials", "1")
    assert result.code == 0, result.err
    states = {t.number: t.state for t in _load(url, "z").get_trials()}
    assert states[zombie.number] == FAIL


# --- several workers on one study (acceptance 3) ------------------------------------------------------------


def test_two_workers_complete_exactly_the_requested_trials(tmp_path, cli_process):
    result = cli_process("optimize", "--space", "small", "--trials", "30", "--refine", "0", "--workers", "2",
                         "--study", "w", "--storage", "sqlite:///w.db", "--seed", "1", "--json", cwd=tmp_path)
    assert result.code == 0, result.err
    assert "database is locked" not in result.err and "Traceback" not in result.err, result.err
    assert result.json()["trials"] == 30 and result.json()["added"] == 30
    trials = _load(f"sqlite:///{tmp_path / 'w.db'}", "w").get_trials()
    assert len(trials) == 30 and all(t.state == COMPLETE for t in trials)
    assert sorted(t.number for t in trials) == list(range(30))
    _assert_every_trial_feasible(f"sqlite:///{tmp_path / 'w.db'}", "w", devices=8)


# --- bad input (acceptance 7) ------------------------------------------------------------------------------

SMALL = ("--space", "small", "--trials", "2", "--study", "bad", "--json")


def _space_with(tmp_path: Path, old: str, new: str) -> str:
    """small.toml with one line changed, its NoC made absolute so the file may live anywhere."""
    text = (SPACES_DIR / "small.toml").read_text().replace('"nocs/mini8.toml"', f'"{SPACES_DIR / "nocs/mini8.toml"}"')
    assert old in text
    path = tmp_path / "bad-space.toml"
    path.write_text(text.replace(old, new))
    return str(path)


BAD_INPUT = {
    "unknown objective": (lambda p: ("--objective", "stps,foo", *SMALL), ("--objective", "foo")),
    "empty bandwidth axis": (lambda p: ("--space", _space_with(p, "level_bw_scale = [0.5, 1.0, 2.0]",
                                                               "level_bw_scale = []"), "--trials", "2", "--json"),
                             ("level_bw_scale",)),
    "empty chip axis": (lambda p: ("--space", _space_with(p, 'chips = ["standard", "strong-l2"]', "chips = []"),
                                   "--trials", "2", "--json"), ("chips",)),
    "unreachable postgres": (lambda p: (*SMALL, "--storage", "postgresql://user@127.0.0.1:1/none"), ("--storage",)),
    "unwritable sqlite": (lambda p: (*SMALL, "--storage", "sqlite:////proc/x.db"), ("--storage",)),
    "unknown sampler": (lambda p: (*SMALL, "--sampler", "cmaes"), ("--sampler", "nsga2")),
    "unknown space": (lambda p: ("--space", "nope", "--trials", "2", "--json"), ("--space", "nope", "small")),
    "negative trials": (lambda p: (*SMALL, "--trials", "-1"), ("--trials",)),
    "no workers": (lambda p: (*SMALL, "--workers", "0"), ("--workers",)),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_one_line_and_exit_2(case, cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args, needles = BAD_INPUT[case]
    assert_user_error(cli("optimize", *args(tmp_path)), *needles)
    assert not (tmp_path / "studies").exists()  # nothing was created for a refused command


@pytest.mark.parametrize("case", ["unknown objective", "unwritable sqlite"])
def test_bad_input_through_the_console_script(cli_process, tmp_path, case):
    args, needles = BAD_INPUT[case]
    assert_user_error(cli_process("optimize", *args(tmp_path), cwd=tmp_path), *needles)
    assert not (tmp_path / "studies").exists()


def test_bad_input_without_json_is_one_line(cli_process, tmp_path):
    # without --json the progress bar is on: it must not leave its own line beside the error
    assert_user_error(cli_process("optimize", "--objective", "stps,foo", "--space", "small", "--trials", "2",
                                  cwd=tmp_path), "--objective")


@pytest.fixture(scope="module")
def kept_study(tmp_path_factory):
    """A small-space study with 4 trials, and how it looks (shared: the bad commands must leave it as it is)."""
    cwd = tmp_path_factory.mktemp("keep")
    url = f"sqlite:///{cwd / 'keep.db'}"
    run = run_in_process("optimize", "--space", "small", "--trials", "4", "--study", "keep", "--storage", url,
                     "--seed", "2", "--json", cwd=cwd)
    assert run.returncode == 0, run.stderr[-3000:]
    return url, _snapshot(url)


def _snapshot(url: str):
    return _snapshot_of(url, "keep")


def _snapshot_of(url: str, name: str):
    study = _load(url, name)
    return (optuna.get_all_study_names(url), study.user_attrs,
            [(t.number, t.state, t.values, t.params) for t in study.get_trials()])


@pytest.mark.parametrize(("change", "needle"), [
    (("--objective", "stps,foo"), "--objective"),  # unknown objective
    (("--objective", "stps,utps"), "--study"),     # another objective set on the same study: refused
    (("--objective", "stps"), "--study"),          # another number of objectives
    (("--batch", "32"), "another scenario: batch 64 (asked: 32)"),  # the field that differs, named
    (("--assumptions", "paper"), "assumptions 'default' (asked: 'paper')"),
    (("--sampler", "cmaes"), "--sampler"),
    (("--trials", "-1"), "--trials"),
])
def test_bad_command_never_touches_an_existing_study(kept_study, cli, change, needle, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url, before = kept_study
    args = {"--objective": "stps,tokens_per_joule", "--trials": "2", "--sampler": "nsga2"}
    args[change[0]] = change[1]
    flat = [item for pair in args.items() for item in pair]
    result = cli("optimize", "--space", "small", "--study", "keep", "--storage", url, *flat, "--json")
    assert_user_error(result, needle)
    assert _snapshot(url) == before


@pytest.mark.parametrize(("code", "needle"), [("0" * 16, "code 0000000000000000, now"),
                                              (None, "a version that did not record its code")])
def test_a_study_evaluated_by_other_code_is_not_resumed(kept_study, cli, code, needle, tmp_path, monkeypatch):
    """Resuming a study after DeepStack's laws changed would rank new trials against results the code no longer
    gives: refused, naming both versions, and the study is left as it was."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'old.db'}"
    kept, copy = sqlite3.connect(kept_study[0].removeprefix("sqlite:///")), sqlite3.connect(tmp_path / "old.db")
    kept.backup(copy)  # the study's own database, write-ahead log included
    kept.close(), copy.close()
    study = _load(url, "keep")
    problem = {key: value for key, value in study.user_attrs["problem"].items() if key != "code"}
    study.set_user_attr("problem", problem if code is None else {**problem, "code": code})
    before = _snapshot(url)
    result = cli("optimize", "--space", "small", "--study", "keep", "--storage", url, "--trials", "2", "--json")
    assert_user_error(result, "--study keep", "evaluated by other code", needle, "use a new --study name")
    assert _snapshot(url) == before


def _copy_of(url: str, path: Path) -> str:
    """A copy of a study's SQLite file (write-ahead log included), for a test that edits what the study stored."""
    kept, copy = sqlite3.connect(url.removeprefix("sqlite:///")), sqlite3.connect(path)
    kept.backup(copy)
    kept.close(), copy.close()
    return f"sqlite:///{path}"


@pytest.mark.parametrize(("dropped", "change", "needle"), [
    # two settings differ: both are named, the model by its name
    (None, ("--objective", "stps,utps", "--model", "qwen3-30b-a3b"),
     "--study keep: this study was created for objectives ['stps', 'tokens_per_joule'] (asked: ['stps', 'utps']); "
     "another scenario: model 'llama-3.2-1b' (asked: 'qwen3-30b-a3b'); use a new --study name"),
    # a study of a version whose scenario had no such field: the field is named, as the study left it
    ("cuda_graphs", (), "--study keep: this study was created for another scenario: cuda_graphs None (asked: True);"),
], ids=["two-settings", "field-the-study-lacks"])
def test_a_refused_study_names_every_setting_that_differs(kept_study, cli, dropped, change, needle, tmp_path,
                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = _copy_of(kept_study[0], tmp_path / "copy.db")
    if dropped:
        study = _load(url, "keep")
        problem = study.user_attrs["problem"]
        study.set_user_attr("problem", {**problem, "scenario": {k: v for k, v in problem["scenario"].items()
                                                                  if k != dropped}})
    before = _snapshot(url)
    result = cli("optimize", "--space", "small", "--study", "keep", "--storage", url, "--trials", "2", *change,
                 "--json")
    assert_user_error(result, needle)
    assert _snapshot(url) == before


@pytest.mark.parametrize("edited", ["noc", "space"])
def test_a_study_whose_space_or_noc_file_changed_is_not_resumed(cli, edited, tmp_path, monkeypatch):
    """A space names its NoC (and chips) only by path: after that file, or the space itself, was edited, the
    study's trials hold results the files no longer give. Resuming is refused and the study left as it was."""
    monkeypatch.chdir(tmp_path)
    noc = tmp_path / "net.toml"
    noc.write_text(MINI8.read_text())
    space = write_space(tmp_path / "one.toml", chips=("standard",), stacked=(2,), connected=(1,), hops=(1.0,),
                        level_bw=(1.0,), fsdp=(False,), noc=noc)
    url = f"sqlite:///{tmp_path / 'edit.db'}"
    args = ["optimize", "--space", str(space), "--study", "edit", "--storage", url, "--refine", "0", "--json"]
    assert cli(*args, "--trials", "2").code == 0
    assert cli(*args, "--trials", "3").code == 0  # the files as they were: resumed
    before = _snapshot_of(url, "edit")
    path, old, new = ((noc, "hop_latency_ns = 10.0", "hop_latency_ns = 40.0") if edited == "noc"
                      else (space, "stacked_layers = [2]", "stacked_layers = [2, 4]"))
    stat = path.stat()
    path.write_text(path.read_text().replace(old, new))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a coarse clock may not tick
    result = cli(*args, "--trials", "4")
    assert_user_error(result, "--study edit", "has changed since this study's trials were evaluated",
                      "use a new --study name")
    assert _snapshot_of(url, "edit") == before


def test_a_study_whose_noc_file_changed_while_it_ran_writes_no_front(tmp_path):
    """Each trial reads the NoC file as it finds it: edited after the first batch, the later trials time another
    network. The run ends with one line naming the change and writes no front; the study keeps its trials, and
    resuming it is refused as a changed study — also once the file is put back as it was, since its trials still
    mix two networks' results."""
    from deepstack.errors import UserInputError
    from deepstack.search.optimize import optimize
    from deepstack.search.space import load_space, scenarios

    noc = tmp_path / "net.toml"
    original = MINI8.read_text()
    noc.write_text(original)
    space = write_space(tmp_path / "one.toml", chips=("standard",), stacked=(2,), connected=(1, 2), hops=(1.0,),
                        level_bw=(1.0,), fsdp=(False,), noc=noc)
    stat = noc.stat()

    def edit_after_the_first_batch(done: int, total: int) -> None:
        if done and "40.0" not in noc.read_text():
            noc.write_text(original.replace("hop_latency_ns = 10.0", "hop_latency_ns = 40.0"))
            os.utime(noc, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a coarse clock may not tick

    url = f"sqlite:///{tmp_path / 'mid.db'}"
    kwargs = {"objectives": ["stps", "tokens_per_joule"], "space": str(space), "study": "mid", "storage": url,
              "scenario": scenarios(load_space(str(space)))[0], "refine": 0, "batch": 2, "out": str(tmp_path)}
    with pytest.raises(UserInputError, match="changed while the run evaluated trials") as raised:
        optimize(**kwargs, trials=4, progress=edit_after_the_first_batch)
    assert "new --study name" in str(raised.value) and "\n" not in str(raised.value)
    assert not list(tmp_path.glob("mid.pareto*"))
    kept = _snapshot_of(url, "mid")
    assert len(kept[2]) == 4
    with pytest.raises(UserInputError, match="has changed since this study's trials were evaluated"):
        optimize(**kwargs, trials=5)
    assert _snapshot_of(url, "mid") == kept
    noc.write_text(original)  # the file as the study's first trials read it
    os.utime(noc, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000))
    with pytest.raises(UserInputError, match="has changed since this study's trials were evaluated"):
        optimize(**kwargs, trials=1)
    assert _snapshot_of(url, "mid") == kept
    assert not list(tmp_path.glob("mid.pareto*"))


# --- the thermal constraint in the front and in compare -----------------------------------------------------


def _study_with_a_hot_winner(storage=None) -> optuna.Study:
    """Two trials: the better one breaks the thermal limit (constraint > 0), the worse one is cool."""
    study = optuna.create_study(study_name="hot", storage=storage, directions=["maximize", "maximize"])
    study.set_user_attr("problem", {"objectives": OBJECTIVES})
    for values, over_limit_c in (([2.0, 2.0], 5.0), ([1.0, 1.0], -5.0)):
        trial = study.ask()
        trial.set_user_attr("design", {"chip": f"chip-{values[0]:g}"})
        trial.set_constraint("thermal_c_over_limit", over_limit_c)
        study.tell(trial, values)
    return study


def test_front_drops_thermally_infeasible_trials():
    front = pareto_front(_study_with_a_hot_winner(), OBJECTIVES)
    assert [row["trial"] for row in front] == [1]


def test_study_points_drop_thermally_infeasible_trials(tmp_path):
    url = f"sqlite:///{tmp_path / 'hot.db'}"
    _study_with_a_hot_winner(url)
    objectives, values, completed, _ = study_points(url, "hot")
    assert objectives == OBJECTIVES and completed == 2
    assert values.tolist() == [[1.0, 1.0]]


def test_counts_and_evaluations_read_trials_of_either_attribute_form(tmp_path):
    """A trial records how it was solved in one ``solve`` attribute; an earlier version's trial kept the same keys
    as separate attributes. Both count: the design-point evaluations (every COMPLETE or FAIL trial) and the
    repaired, infeasible and over-the-limit trials (a trial exactly at its limit is within it)."""
    from deepstack.search.study_record import study_counts

    url = f"sqlite:///{tmp_path / 'forms.db'}"
    study = optuna.create_study(study_name="forms", storage=url, directions=["maximize", "maximize"])
    study.set_user_attr("problem", {"objectives": OBJECTIVES})
    # (values, attributes, thermal constraint): an earlier version's trial first, then this version's
    for values, attrs, over_limit_c in (
            ([1.0, 4.0], {"inner": "screen", "evaluations": 7, "repaired": True}, -3.0),
            ([2.0, 3.0], {"solve": {"inner": "screen", "evaluations": 3, "repaired": False}}, 0.0),
            ([3.0, 1.0], {"solve": {"inner": "screen", "evaluations": 4, "repaired": False}}, 5.0),
            (None, {"solve": {"inner": "screen", "evaluations": 2, "repaired": True, "infeasible": True}}, None)):
        trial = study.ask()
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        if over_limit_c is not None:
            trial.set_constraint("thermal_c_over_limit", over_limit_c)
        study.tell(trial, values, state=COMPLETE if values else FAIL)
    assert study_counts(study) == {"repaired": 2, "infeasible": 1, "over_thermal_limit": 1}
    _, points, evaluations, _ = study_points(url, "forms")
    assert evaluations == 7 + 3 + 4 + 2
    assert points.tolist() == [[1.0, 4.0], [2.0, 3.0]]  # the trial 5 °C over its limit is not kept
