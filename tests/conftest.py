"""Fixtures shared by the tests. (No repo-root conftest and no tests/__init__.py: docs/architecture.md §1.)"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deepstack.cli import run


def timing_device_of(point):
    """The device a design point is timed on (as the phase's GEMM batching resolves it)."""
    from deepstack.models.hardware.device import timing_device

    return timing_device(point.device)


class CliResult:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    def json(self):
        return json.loads(self.out)


@pytest.fixture
def cli(capsys):
    """Run the CLI in-process: ``cli("catalog", "llms", "--json")`` → CliResult(code, out, err)."""

    def invoke(*args: str) -> CliResult:
        code = run(list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return invoke


@pytest.fixture
def cli_process():
    """Run the installed ``deepstack`` console script in a subprocess (the real end-to-end path)."""
    beside = Path(sys.executable).parent / "deepstack"
    exe = str(beside) if beside.exists() else shutil.which("deepstack")
    assert exe, "the deepstack console script is not installed"

    def invoke(*args: str, cwd=None, timeout: float = 300) -> CliResult:
        proc = subprocess.run([exe, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    return invoke


def assert_user_error(result: CliResult, *needles: str) -> None:
    """Exit 2, exactly one line on stderr naming the problem, no traceback."""
    assert result.code == 2, (result.code, result.out, result.err)
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1, result.err
    assert "Traceback" not in result.err + result.out
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def run_in_process(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI in this process (``deepstack.cli.run``: the console script's code minus interpreter start-up, which
    costs seconds here), run in ``cwd``, for module-scoped fixtures where the ``cli`` fixture can't go."""
    out, err, before = io.StringIO(), io.StringIO(), os.getcwd()
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run(list(args))
    finally:
        os.chdir(before)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def assert_run_record(folder: Path, study: str) -> dict:
    """A finished ``study run`` left ``run.json`` naming its study, its files (relative, all present) and at
    least one key table with rows; returns the record."""
    record = json.loads((folder / "run.json").read_text())
    assert record["study"] == study, record["study"]
    assert record["files"] and all((folder / f).is_file() for f in record["files"]), record["files"]
    assert record["tables"], "no key table recorded"
    for table in record["tables"]:
        assert table["title"] and table["rows"], table
        assert all(len(row) == len(table["columns"]) for row in table["rows"]), table["title"]
    return record


MINI8 = Path(__file__).resolve().parent.parent / "search" / "spaces" / "nocs" / "mini8.toml"


def write_space(path: Path, *, chips=("standard", "strong-l2"), hops=(1.0, 2.0), model="llama-3.2-1b",
                stacked=(2, 4), connected=(1, 2, 4), level_bw=(0.5, 1.0), fsdp=(False, True),
                per_module: bool | None = None, noc: Path = MINI8) -> Path:
    """A small space on the 8-device mini8 NoC: Llama-3.2-1B decode at batch 64; stackings (m, n) ∈ {(2,1),
    (2,2), (4,1), (4,2), (4,4)}, the given hop-latency scales and 2 bandwidth scales per level (2² per point);
    every flat schedule, FSDP off and on. With the defaults: 2 chips × 5 stackings = 10 tier-1 points. The
    keywords change one axis each (``per_module``: the schedule axis written only when given; ``noc``: another
    NoC file, e.g. a copy a test edits)."""
    module_axis = "" if per_module is None else f"per_module = {str(per_module).lower()}\n"
    path.write_text(f"""kind = "space"
name = "{path.stem}"
[scenarios]
models = ["{model}"]
phases = ["decode"]
batches = [64]
sequence_lengths = [[1024, 1024]]
[hardware]
chips = {json.dumps(list(chips))}
nocs = [{json.dumps(str(noc))}]
stacked_layers = {json.dumps(list(stacked))}
connected_layers = {json.dumps(list(connected))}
hop_latency_scale = {json.dumps(list(hops))}
level_bw_scale = {json.dumps(list(level_bw))}
[[hardware.sram]]
name = "base"
[schedule]
fsdp = {json.dumps(list(fsdp))}
{module_axis}""")
    return path
