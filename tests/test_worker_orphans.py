"""No worker outlives its parent (issue 20, "Interruptions"): a real `deepstack sweep` with two local workers is
SIGKILLed (no handler can run), and its workers must leave the process table on their own (search/executor.py:
prctl(PR_SET_PDEATHSIG) in each worker, a getppid() watchdog where prctl is missing). Waiting is done by polling
the process table against a deadline, never by a fixed sleep."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import write_space

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
