"""Interrupt many real sweeps at random moments and count those that did not end.

    python benchmarks/interrupt_sweeps.py [--runs 200] [--signal TERM|INT] [--space small]

Each run starts `deepstack sweep --mode hierarchical --space <space>` with two local workers, waits for its first
finished chunk, waits a random 0–0.8 s more (so the signal lands anywhere: a worker computing, a result on its
way, a worker being forked, the parent writing a chunk) and sends the signal. A run must then end within
--deadline seconds: with status 130 and one line, or, when the sweep was already done, 0 or the signal's own
status. One that does not is a hang: its Python stacks (PYTHONFAULTHANDLER, dumped by SIGABRT) are printed.
Rare races need many runs: tests/test_worker_orphans.py interrupts two sweeps per suite; this interrupts hundreds.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POLL_S = 0.01  # how often the first finished chunk is looked for


def interrupt_once(exe: str, space: str, signum: int, folder: Path, deadline_s: float) -> tuple[str, str]:
    """One interrupted sweep in ``folder``: (outcome, stderr)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    sweep = subprocess.Popen([exe, "sweep", "--mode", "hierarchical", "--space", space, "--out", "out",
                              "--workers", "2"], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    chunks = folder / "out" / "chunks"
    while sweep.poll() is None and not any(chunks.glob("*.jsonl")):
        time.sleep(POLL_S)
    time.sleep(random.uniform(0.0, 0.8))
    sweep.send_signal(signum)
    try:
        _, err = sweep.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        sweep.send_signal(signal.SIGABRT)  # the fault handler prints every thread's stack
        _, err = sweep.communicate()
        return "hang", err
    if sweep.returncode == 130 and len(err.splitlines()) == 1:
        return "interrupted", err
    if sweep.returncode in (0, -signum):
        return "finished first", err
    return f"status {sweep.returncode}", err


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--signal", choices=("TERM", "INT"), default="TERM")
    parser.add_argument("--space", default="small")
    parser.add_argument("--deadline", type=float, default=30.0, help="seconds a run may take to end")
    args = parser.parse_args()
    exe = str(Path(sys.executable).parent / "deepstack")
    signum = signal.Signals[f"SIG{args.signal}"]
    outcomes: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            outcome, err = interrupt_once(exe, args.space, signum, Path(tmp) / "run", args.deadline)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if outcome not in ("interrupted", "finished first"):
                print(f"run {run}: {outcome}\n{err}", flush=True)
    print(", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items())))
    return 1 if set(outcomes) - {"interrupted", "finished first"} else 0


if __name__ == "__main__":
    sys.exit(main())
