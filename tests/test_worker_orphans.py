"""No worker outlives its parent (issue 20, "Interruptions"): a real `deepstack sweep` with two local workers is
SIGKILLed (no handler can run), and its workers must leave the process table on their own (search/executor.py:
prctl(PR_SET_PDEATHSIG) in each worker, a getppid() watchdog where prctl is missing). A sweep interrupted by
SIGINT or SIGTERM (issue 29) ends its workers itself, says in one line what it kept and where, and the same command
again finishes it. Waiting is done by polling the process table or the chunk folder against a deadline, never by a
fixed sleep."""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_in_process, write_space

from deepstack.search import executor

DEADLINE_S = 120.0  # generous: the machine is shared; the poll returns as soon as the condition holds


def _children(pid: int) -> set[int]:
    """Live (not zombie) processes whose parent is ``pid``, from /proc."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == pid and state != "Z":
            found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _poll(condition, what: str):
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)  # a poll interval, not a wait for an outcome: the deadline bounds the loop
    pytest.fail(f"timed out after {DEADLINE_S:g} s waiting for {what}")


def _sigkill_sweep_and_wait_for_its_workers(tmp_path: Path, *flags: str, ready=lambda: True) -> None:
    """Start a real 2-worker exhaustive ``deepstack sweep`` (with ``flags``), SIGKILL it once its two workers are
    up and ``ready()`` holds, and wait (against the deadline) for those workers to leave the process table."""
    exe = Path(sys.executable).parent / "deepstack"
    exe = str(exe) if exe.exists() else shutil.which("deepstack")
    write_space(tmp_path / "orphans.toml", hops=(0.5, 1.0, 2.0))  # enough chunks that the workers are still busy
    parent = subprocess.Popen([exe, "sweep", "--mode", "exhaustive", "--space", "orphans.toml", "--out", "out",
                               "--workers", "2", *flags, "--json"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        workers = _poll(lambda: (c := _children(parent.pid)) and len(c) >= 2 and c, "the sweep's two workers")
        _poll(ready, "the sweep to start")
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        _poll(lambda: not any(_alive(pid) for pid in workers), f"workers {sorted(workers)} to end")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert parent.returncode == -signal.SIGKILL


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_sigkilled_sweep_takes_its_workers_with_it(tmp_path):
    _sigkill_sweep_and_wait_for_its_workers(tmp_path)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_sigkilled_dask_sweep_takes_its_local_cluster_with_it(tmp_path):
    """``--backend dask`` starts a LocalCluster whose worker processes are children of the sweep: Dask's own
    guard (each worker process exits when the pipe from its parent closes, distributed/process.py) must end them
    when the sweep is SIGKILLed."""
    pytest.importorskip("dask.distributed")
    _sigkill_sweep_and_wait_for_its_workers(tmp_path, "--backend", "dask",
                                            ready=lambda: (tmp_path / "out" / "chunks").is_dir())


def _report_parent(path: str) -> None:
    Path(path).write_text(str(os.getppid()))


def test_spawned_workers_are_guarded_too(tmp_path):
    """run_spawned (the optimize workers) starts each process through the parent-death guard: the target runs, in
    a child of this process."""
    out = tmp_path / "ppid"
    assert executor.run_spawned(_report_parent, [(str(out),)]) == [0]
    assert int(out.read_text()) == os.getpid()


# --- Ctrl-C (SIGINT) or SIGTERM: a word on what was kept, no stray worker, and a re-run that finishes ------------

SMALL_SWEEP = ("sweep", "--mode", "hierarchical", "--space", "small")


def _front_rows(folder: Path) -> list[dict]:
    """pareto.csv's rows without the command column (it names the folder's own file)."""
    with open(folder / "pareto.csv", newline="") as fh:
        return [{k: v for k, v in row.items() if k != "command"} for row in csv.DictReader(fh)]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("uninterrupted") / "out"
    done = run_in_process(*SMALL_SWEEP, "--out", str(out), "--json", cwd=out.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
@pytest.mark.parametrize(("sig", "group"), [(signal.SIGINT, False), (signal.SIGTERM, False),
                                            (signal.SIGTERM, True)])
def test_interrupted_sweep_says_what_it_kept_and_a_rerun_finishes_it(tmp_path, sig, group, uninterrupted):
    """A real `deepstack sweep` (two local workers) gets the signal once a chunk is written and both workers are
    up: exit 130, one line on stderr naming the chunks folder and the re-run, its workers gone; the same command
    again reads those chunks back and ends with the uninterrupted run's front. ``group``: the signal goes to the
    whole process group, workers included, as ``timeout`` and job schedulers send it (a worker it ended used to
    break the pool first: a BrokenProcessPool traceback, exit 1)."""
    exe = Path(sys.executable).parent / "deepstack"
    args = [str(exe) if exe.exists() else shutil.which("deepstack"), *SMALL_SWEEP, "--out", "out"]
    chunks = tmp_path / "out" / "chunks"
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=group)
    try:
        workers = _poll(lambda: any(chunks.glob("*.jsonl")) and len(c := _children(proc.pid)) >= 2 and c,
                        "a finished chunk and the sweep's two workers")
        assert proc.poll() is None, "the sweep finished before it could be interrupted"
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err[-2000:]
    assert not out and len(err.splitlines()) == 1, err
    kept = len(list(chunks.glob("*.jsonl")))
    name = signal.Signals(sig).name
    assert err.startswith(f"deepstack: interrupted by {name}: {kept} finished chunk"), err
    assert "out/chunks/" in err and "re-run the same command" in err, err
    assert not (tmp_path / "out" / "summary.json").exists(), "interrupted after the sweep had finished"
    # no points.csv of part of the points, in the folder or on its way there
    assert not (tmp_path / "out" / "points.csv").exists() and not list(chunks.glob("*.csv.partial"))
    _poll(lambda: not any(_alive(pid) for pid in workers), f"workers {sorted(workers)} to end")

    again = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=DEADLINE_S)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "more read back" in again.stdout  # the kept chunks were not evaluated again
    assert _front_rows(tmp_path / "out") == _front_rows(uninterrupted)


def test_a_signal_while_a_sweeps_files_are_written_waits_for_the_last_one(tmp_path, monkeypatch, uninterrupted):
    """SIGINT once every chunk is evaluated, while points.csv and the front are being written: the files are
    completed (the uninterrupted run's front), then the sweep says what it kept and ends with status 130."""
    from deepstack.search.sweep import output

    real_write = output.write

    def write_with_a_signal(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # lands before the first file is written
        return real_write(*args, **kwargs)

    monkeypatch.setattr(output, "write", write_with_a_signal)
    done = run_in_process(*SMALL_SWEEP, "--out", "out", "--workers", "1", cwd=tmp_path)
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr.startswith("deepstack: interrupted by SIGINT:") and len(done.stderr.splitlines()) == 1
    assert _front_rows(tmp_path / "out") == _front_rows(uninterrupted)
