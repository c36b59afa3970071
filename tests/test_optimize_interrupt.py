"""Issue 20, "Interruptions" and optimize's loose ends: a real SIGINT (and SIGTERM) to a real ``deepstack optimize``
process ends it cleanly (exit 130, no traceback, the output says what was kept); the interrupted batch's proposals
are queued (WAITING, with their parameters), so the next run retries them first; ``--until-stall``; error messages.

The interrupted runs use the default space (a trial evaluates for a good part of a second, so the signal lands
during an evaluation); the readiness signal is the SQLite file gaining a COMPLETE trial, polled, never slept out.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from conftest import assert_user_error, run_in_process

from deepstack.search import resume


def _console_script() -> str:
    beside = Path(sys.executable).parent / "deepstack"
    exe = str(beside) if beside.exists() else shutil.which("deepstack")
    assert exe, "the deepstack console script is not installed"
    return exe


def _complete(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as connection:
            return connection.execute("SELECT COUNT(*) FROM trials WHERE state = 'COMPLETE'").fetchone()[0]
    except sqlite3.OperationalError:  # tables not created yet
        return 0


RUN = ("optimize", "--space", "small", "--trials", "60", "--seed", "5")  # 36 of the 60 refine the front


def _interrupt(cwd: Path, sig: int, study: str, run: tuple = RUN, after: int = 8,
               group: bool = False) -> subprocess.CompletedProcess:
    """Start a small-space study; once ``after`` trials are in the file, send ``sig`` (to its whole process group,
    workers included, with ``group``)."""
    args = [_console_script(), *run, "--study", study, "--storage", f"sqlite:///{study}.db"]
    process = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=group)
    deadline = time.monotonic() + 300  # readiness guard only: a healthy run gets there in seconds
    while _complete(cwd / f"{study}.db") < after:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    if group:
        os.killpg(process.pid, sig)
    else:
        process.send_signal(sig)
    out, err = process.communicate(timeout=300)
    return subprocess.CompletedProcess(args, process.returncode, out, err)


def _trials(cwd: Path, study: str) -> list[tuple]:
    """What a study holds, in order: each trial's state, parameters and objective values."""
    trials = optuna.load_study(study_name=study, storage=f"sqlite:///{cwd / f'{study}.db'}").get_trials()
    return [(t.number, t.state.name, t.params, t.values) for t in trials]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    cwd = tmp_path_factory.mktemp("uninterrupted")
    run = run_in_process(*RUN, "--study", "u", "--storage", "sqlite:///u.db", "--json", cwd=cwd)
    assert run.returncode == 0, run.stderr[-3000:]
    return {"out": json.loads(run.stdout), "trials": _trials(cwd, "u")}


@pytest.mark.parametrize(("sig", "group"), [(signal.SIGINT, False), (signal.SIGTERM, False),
                                            (signal.SIGTERM, True)])
def test_signal_ends_optimize_cleanly_and_the_same_command_finishes_the_run(tmp_path, sig, group, uninterrupted):
    # group: the signal reaches the workers too, as `timeout` and job schedulers send it (a worker it ended used
    # to break the pool first: a BrokenProcessPool traceback, exit 1); two workers give the same study as one
    run = (*RUN, "--workers", "2") if group else RUN
    done = _interrupt(tmp_path, sig, "i", run, group=group)
    assert done.returncode == 130, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "no feasible" not in done.stderr + done.stdout, done.stderr
    name = signal.Signals(sig).name
    kept = len(_trials(tmp_path, "i"))
    assert 8 <= kept < 60
    # the notice on stderr, one line, as a sweep's; the front on stdout
    assert f"deepstack: interrupted by {name}: {kept} trials kept" in done.stderr, done.stderr[-3000:]
    assert f"{kept} of its 60 trials are done" in done.stderr and "Re-run the same command" in done.stderr
    assert "interrupted by" not in done.stdout
    assert "Pareto front" in done.stdout  # the front of what was kept is still printed and written
    assert (tmp_path / "i.pareto.csv").is_file()
    # the sampler ran on an in-memory mirror: the stored study never holds a RUNNING or queued trial
    assert {state for _, state, _, _ in _trials(tmp_path, "i")} <= {"COMPLETE", "FAIL"}

    # the same command finishes the run: the study then holds exactly what the uninterrupted run left, trial by
    # trial, and the same front
    again = run_in_process(*run, "--study", "i", "--storage", "sqlite:///i.db", "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    out = json.loads(again.stdout)
    assert out["trials"] == 60 and out["added"] == 60 - kept and out["run"]["resumed_from"] == kept
    assert _trials(tmp_path, "i") == uninterrupted["trials"]
    assert out["run"]["hypervolume"] == uninterrupted["out"]["run"]["hypervolume"]
    # the run's counts are the whole run's, its cut-short part included, as "told" is (repaired used to count
    # only the finishing part's proposals)
    counts = ("told", "repaired", "infeasible", "over_thermal_limit")
    assert {k: out["run"][k] for k in counts} == {k: uninterrupted["out"]["run"][k] for k in counts}
    def objectives(rows):
        return [(r["stps"], r["tokens_per_joule"], r["chip"], r["schedule"]) for r in rows]

    assert objectives(out["pareto"]) == objectives(uninterrupted["out"]["pareto"])

    # and a run after a finished one adds its trials again
    more = run_in_process(*run, "--study", "i", "--storage", "sqlite:///i.db", "--json", cwd=tmp_path)
    assert more.returncode == 0 and json.loads(more.stdout)["trials"] == 120


def _batches(mirror, count: int) -> list[dict]:
    """``count`` batches of 4 on a mirror, as optimize's loop runs them (reseed, ask, tell, one write), on two
    objectives of two parameters; the proposals' parameters."""
    asked_params = []
    for _ in range(count):
        mirror.refresh()
        mirror.reseed()
        asked = mirror.ask(4)
        for trial in asked:
            x, y = trial.suggest_float("x", 0.0, 1.0), trial.suggest_float("y", 0.0, 1.0)
            mirror.tell(trial, [x * (1 - y), y * (1 - x * x)], {})
            asked_params.append(trial.params)
        mirror.write(asked)
    return asked_params


def test_a_run_resumed_mid_generation_proposes_as_the_uninterrupted_one(tmp_path):
    # NSGA-II (population 50) computes a generation's parents at its first trial and caches them in the study's
    # system attributes, which the mirror does not store. A fresh process resumed within generation 1 (at 56
    # trials) recomputed them at its first trial and got them in selection order, where the uninterrupted run's
    # cache gives them in trial order: that trial's parents, and from it the rest of the study, differed.
    from deepstack.search.optimize import Mirror

    url = f"sqlite:///{tmp_path / 'u.db'}"
    study = optuna.create_study(study_name="g", storage=url, directions=["maximize", "maximize"])
    uninterrupted = Mirror(study, "nsga2", 7)
    _batches(uninterrupted, 14)  # 56 trials: generation 0 (50) and the start of generation 1
    shutil.copy(tmp_path / "u.db", tmp_path / "r.db")
    ahead = _batches(uninterrupted, 3)
    resumed = Mirror(optuna.load_study(study_name="g", storage=f"sqlite:///{tmp_path / 'r.db'}"), "nsga2", 7)
    resumed.resume_generation()  # what optimize's loop does once it has mirrored the study
    assert _batches(resumed, 3) == ahead


def test_queued_trial_completed_by_a_killed_run_is_not_run_again(tmp_path, cli, monkeypatch):
    """A run killed between writing a queued trial's completed copy and marking the queued trial consumed leaves
    both; the next run marks the queued one FAIL without evaluating it again."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'q.db'}"
    args = ("optimize", "--space", "small", "--refine", "0", "--study", "q", "--storage", url, "--json")
    assert cli(*args, "--trials", "1").code == 0
    study = optuna.load_study(study_name="q", storage=url)
    (done,) = study.get_trials()
    study.enqueue_trial(done.params)  # the queued trial ...
    study.add_trial(optuna.trial.create_trial(  # ... and its completed copy, as the killed run left them
        params=done.params, distributions=done.distributions, values=done.values, user_attrs=done.user_attrs,
        system_attrs={**done.system_attrs, "consumed_waiting": 1}))
    result = cli(*args, "--trials", "1")
    assert result.code == 0, result.err
    trials = optuna.load_study(study_name="q", storage=url).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]
    assert "consumed_waiting" not in trials[3].system_attrs  # a new proposal, not the queued one again


def test_until_stall_stops_when_the_hypervolume_stops_growing(tmp_path):
    run = run_in_process("optimize", "--space", "small", "--trials", "400", "--until-stall", "12", "--refine", "0",
                         "--study", "u", "--storage", "sqlite:///u.db", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    assert out["run"]["stalled"] and out["trials"] < 400
    study = optuna.load_study(study_name="u", storage=f"sqlite:///{tmp_path / 'u.db'}")
    history = study.user_attrs["hypervolume"]["history"]  # [trials, evaluations, hypervolume] after each batch
    assert [h[0] for h in history] == list(range(4, out["trials"] + 1, 4))
    assert all(b[2] >= a[2] for a, b in itertools.pairwise(history))  # never shrinks
    last_growth = max(b[0] for a, b in itertools.pairwise(history) if b[2] > a[2])
    assert history[-1][0] - last_growth >= 12
    assert study.user_attrs["evaluations"] == sum(t.user_attrs["solve"]["evaluations"] for t in study.get_trials())


def test_counts_are_reported(tmp_path):
    run = run_in_process("optimize", "--space", "small", "--trials", "8", "--refine", "0", "--study", "c",
                         "--storage", "sqlite:///c.db", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    counts = json.loads(run.stdout)["run"]
    trials = optuna.load_study(study_name="c", storage=f"sqlite:///{tmp_path / 'c.db'}").get_trials()
    assert counts["repaired"] == sum(t.user_attrs["solve"]["repaired"] for t in trials)
    assert counts["infeasible"] == sum(bool(t.user_attrs["solve"].get("infeasible")) for t in trials)
    assert counts["over_thermal_limit"] == sum(t.constraints["thermal_c_over_limit"] > 0 for t in trials)
    assert counts["told"] == 8 and counts["seed"] == 0
    # the warm start: the space's two 3D chips at m = n = 4 (its NoC: no TMS1 in it), then its centre
    first = [(t.params["chip"], t.params["stacked_layers"], t.params["connected_layers"]) for t in trials[:3]]
    assert first == [("standard", "4", 4), ("strong-l2", "4", 4), ("strong-l2", "4", 2)]
    assert [t.user_attrs["solve"]["inner"] for t in trials[:3]] == ["exact"] * 3


def test_changing_only_the_objective_names_the_objectives(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    common = ("optimize", "--space", "small", "--trials", "1", "--study", "o", "--storage", "sqlite:///o.db")
    assert cli(*common, "--json").code == 0
    result = cli(*common, "--objective", "stps")
    assert_user_error(result, "--study", "objectives")
    assert "scenario" not in result.err


def test_optimize_error_has_no_leading_blank_line(tmp_path):
    done = subprocess.run([_console_script(), "optimize", "--space", "small", "--objective", "speed"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("deepstack: error: --objective"), repr(done.stderr)


def test_optimize_help_lists_the_small_space(cli):
    assert "small" in " ".join(cli("optimize", "--help").out.split())


def test_a_killed_run_is_adopted_by_the_same_command_and_a_live_one_never(tmp_path):
    """The run record (search/resume.py) on a real SQLite study: a record left by a process that is gone is adopted
    by a run with the same options (and only then), with the trials it told counted from the study; one whose
    process still runs (another worker) never is."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    study = optuna.create_study(study_name="r", storage=url)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid is free now: the record below is what a SIGKILLed run leaves
    plan = {"trials": 40, "refine": 24, "batch": 4, "seed": 0, "sampler": "nsga2", "inner": "screen",
            "until_stall": None}
    record = {"plan": plan, "host": socket.gethostname(), "updated": time.time()}
    study.set_user_attr(resume.KEY, {"dead": {**record, "pid": gone.pid}, "live": {**record, "pid": os.getpid()}})
    for run, count in (("dead", 12), ("live", 20)):
        for _ in range(count):
            study.add_trial(optuna.trial.create_trial(value=1.0, system_attrs={resume.RUN_ATTR: run}))
    trials = study.get_trials()

    other = resume.RunRecord(study, {**plan, "seed": 1}, trials)  # other options: a new run
    assert not other.resumed and other.told == 0
    adopted = resume.RunRecord(study, plan, trials)
    assert adopted.resumed and adopted.key == "dead" and adopted.told == 12
    adopted.finish()
    assert set(study.user_attrs[resume.KEY]) == {"live", other.key}
    again = resume.RunRecord(study, plan, trials)  # the live worker's run is not taken over
    assert not again.resumed and again.told == 0


def test_a_signal_while_the_front_is_written_waits_for_the_last_file(tmp_path, monkeypatch, uninterrupted):
    """Ctrl-C after the last trial, while the front files are being written: the files are completed (the same
    front as an uninterrupted run's), then the command ends with status 130 and one line saying what is saved."""
    from deepstack.search import optimize as optimize_module

    real_report = optimize_module.write_run_report

    def report_with_a_signal(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # lands here, after the run's last trial, before any front file
        return real_report(*args, **kwargs)

    monkeypatch.setattr(optimize_module, "write_run_report", report_with_a_signal)
    done = run_in_process(*RUN, "--study", "u", "--storage", "sqlite:///u.db", cwd=tmp_path)
    assert done.returncode == 130, done.stderr[-3000:]
    assert done.stderr.startswith("deepstack: interrupted by SIGINT after the run's last trial: the study holds "
                                  "its 60 trials") and len(done.stderr.splitlines()) == 1, done.stderr
    assert "the run had finished: the same command again would add a new run's trials" in done.stderr
    assert _trials(tmp_path, "u") == uninterrupted["trials"]
    front = json.loads((tmp_path / "u.pareto.json").read_text())["pareto"]
    expected = uninterrupted["out"]["pareto"]
    assert [(r["stps"], r["chip"], r["schedule"]) for r in front] == [(r["stps"], r["chip"], r["schedule"])
                                                                    for r in expected]
    with open(tmp_path / "u.pareto.csv", newline="") as fh:
        assert len(list(csv.DictReader(fh))) == len(expected)
