"""Progress on long work (issue 29, "a first hour without surprises"): `sweep`, `study run` and the accuracy
commands report progress through a callback their API takes, and the CLI shows it as optimize does, a rich bar on
stderr that is gone when the command ends, only when stderr is a terminal and never with --json."""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import write_space

from deepstack import api
from deepstack.search.studies import run_study

STUDIES = Path(__file__).resolve().parent.parent / "studies"
BAR = ("━", "╸", "╺", "\x1b[2K")  # what rich draws a bar with (and the line it clears); tables on stdout use ━ too
LABEL = "sweep: hardware points"  # the sweep bar's label


@pytest.fixture(scope="module")
def space(tmp_path_factory) -> Path:
    return write_space(tmp_path_factory.mktemp("progress") / "progress.toml", chips=("standard",), hops=(1.0, 2.0))


def assert_monotone_to_the_end(calls: list[tuple[int, int]]) -> None:
    assert calls, "no progress reported"
    assert all(0 <= done <= total for done, total in calls), calls
    assert [d for d, _ in calls] == sorted(d for d, _ in calls), calls  # done never goes back
    assert [t for _, t in calls] == sorted(t for _, t in calls), calls  # the total only grows (a tier planned)
    assert calls[-1][0] == calls[-1][1] > 0, calls


@pytest.mark.parametrize("workers", [1, 2])
def test_sweep_reports_hardware_points_up_to_the_total(space, tmp_path, workers):
    calls: list[tuple[int, int]] = []
    args = {"mode": "hierarchical", "objective": "stps,tokens_per_joule", "model": None, "phase": None,
            "batch": None, "input_len": None, "output_len": None, "precision": None, "space": str(space),
            "workers": workers, "out": str(tmp_path / "out")}
    result = api.run_sweep(**args, progress=lambda done, total: calls.append((done, total)))
    assert_monotone_to_the_end(calls)
    assert calls[-1][1] == result["hardware_points"]
    assert len({t for _, t in calls}) == 3  # three tiers, each planned once the one before has ranked its points
    again: list[tuple[int, int]] = []
    api.run_sweep(**args, progress=lambda done, total: again.append((done, total)))  # all read back
    assert_monotone_to_the_end(again)
    assert again[-1] == calls[-1]


def test_study_run_reports_its_tasks_up_to_the_total(tmp_path):
    calls: list[tuple[int, int]] = []
    run_study(str(STUDIES / "dram-layers.toml"), str(tmp_path), quick=True,
              progress=lambda done, total: calls.append((done, total)))
    assert_monotone_to_the_end(calls)
    assert calls[-1][1] == 4 * 2 * 2  # quick: 4 stackings × 2 L1 capacities × 2 L1 bandwidths, a row each


def test_accuracy_checks_report_rows_and_parts():
    rows: list[tuple[int, int]] = []
    result = api.kernels_accuracy(progress=lambda done, total: rows.append((done, total)))
    assert_monotone_to_the_end(rows)
    assert rows[-1][1] == len(result["rows"])
    parts: list[tuple[int, int]] = []
    api.cross_validation(progress=lambda done, total: parts.append((done, total)))
    assert parts == [(1, 2), (2, 2)]


def test_no_bar_off_a_terminal_or_with_json(cli, space, tmp_path):
    """In-process, stderr is a pipe (pytest captures it): no bar, with or without --json."""
    for extra in ((), ("--json",)):
        result = cli("sweep", "--mode", "exhaustive", "--space", str(space), "--out", str(tmp_path / "out"),
                     "--workers", "1", *extra)
        assert result.code == 0, result.err
        assert not any(mark in result.err for mark in BAR) and LABEL not in result.out + result.err, extra
    result = cli("accuracy", "cross-validate")
    assert result.code == 0 and not any(mark in result.err for mark in BAR) and "checks" not in result.err


def _on_a_terminal(args: list[str], cwd: Path) -> tuple[int, str, str]:
    """Run the console script with stderr on a pseudo-terminal (stdout a pipe); its exit status, stdout and what
    the terminal received."""
    exe = Path(sys.executable).parent / "deepstack"
    exe = str(exe) if exe.exists() else shutil.which("deepstack")
    master, slave = pty.openpty()
    proc = subprocess.Popen([exe, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    received: list[bytes] = []

    def drain() -> None:  # read as it comes: a full terminal buffer would block the process
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # the last writer closed its end
                return
            if not data:
                return
            received.append(data)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=30)
        os.close(master)
    return proc.returncode, out.decode(), b"".join(received).decode(errors="replace")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a pseudo-terminal as Linux gives it")
def test_the_bar_shows_on_a_terminal_but_not_with_json(space, tmp_path):
    args = ["sweep", "--mode", "exhaustive", "--space", str(space), "--workers", "1"]
    code, out, terminal = _on_a_terminal([*args, "--out", "shown"], tmp_path)
    assert code == 0, terminal[-2000:]
    assert "━" in terminal and f"exhaustive {LABEL}" in terminal
    assert LABEL not in out  # the bar never reaches stdout
    code, out, terminal = _on_a_terminal([*args, "--out", "quiet", "--json"], tmp_path)
    assert code == 0, terminal[-2000:]
    assert not terminal and not any(mark in out for mark in BAR), terminal
