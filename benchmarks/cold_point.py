"""Where a cold design point's wall time goes (issue 32: the cold point ≤ 20 ms), without a profiler.

    python benchmarks/cold_point.py [--runs 30]

run.py's design point (DeepSeek-V3 decode b1024, tp=4,ep=32,pp=2 on Standard / TMS1) evaluated with every memo
emptied before each run. A few functions are wrapped with a wall clock; each part's time is its own, less the
wrapped parts it calls, so the parts add up to the whole. cProfile charges every Python call, which inflates the
Python-heavy parts (memo look-ups, the stage sums) against the numpy-heavy ones (the GEMM tuner, the DRAM bank
model, route planning); this script does not, so its shares are the ones a speed-up would see.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import design_point

from deepstack.models import clear_caches
from deepstack.models.evaluate import evaluate

# (part, module, function): wrapped wherever a loaded module holds a reference to the function
PARTS = (
    ("GEMM tuning: DRAM bank model of the weight windows", "deepstack.models.hardware.dram", "window_service_times_s"),
    ("GEMM tuning: the rest (candidates, waves, records)", "deepstack.models.compute.gemm_tuner", "prepare_gemms"),
    ("attention tuning", "deepstack.models.compute.attention", "tune_attention"),
    ("collective plans (routes of every algorithm)", "deepstack.models.collectives.plan", "plan_of"),
    ("collective timing and ranking", "deepstack.models.collectives.engine", "_ranked_on"),
    ("layer plans and rows of each stage", "deepstack.models.pipeline.stages", "_stage_plan"),
    ("stage sums, overlap (eq. 5), phase choice", "deepstack.models.pipeline.phase", "_run_phase"),
    ("DVFS clock", "deepstack.models.dvfs", "clock_scale"),
)

_own: dict[str, float] = {}
_stack: list[float] = []  # per active wrapped call: time spent in wrapped calls below it


def _wrap(name: str, function):
    def wrapped(*args, **kwargs):
        _stack.append(0.0)
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            elapsed = time.perf_counter() - start
            inner = _stack.pop()
            _own[name] = _own.get(name, 0.0) + elapsed - inner
            if _stack:
                _stack[-1] += elapsed
    return wrapped


def _install() -> None:
    for name, module_name, attribute in PARTS:
        original = getattr(importlib.import_module(module_name), attribute)
        wrapped = _wrap(name, original)
        for module in list(sys.modules.values()):
            for key, value in list(getattr(module, "__dict__", {}).items()):
                if value is original:
                    setattr(module, key, wrapped)


def _cold_times(point, runs: int) -> list[float]:
    """Wall times (s) of ``runs`` evaluations of ``point``, every memo emptied before each."""
    times = []
    for _ in range(runs):
        clear_caches()
        start = time.perf_counter()
        evaluate(point, with_ttft=False)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    point = design_point()
    evaluate(point, with_ttft=False)
    bare = _cold_times(point, args.runs)
    _install()
    wrapped = _cold_times(point, args.runs)
    total = sum(wrapped)
    print(f"cold design point: median {1e3 * statistics.median(bare):.2f} ms unwrapped, "
          f"{1e3 * statistics.median(wrapped):.2f} ms wrapped ({args.runs} runs each); by part, the mean of the "
          f"wrapped runs ({1e3 * total / args.runs:.2f} ms):")
    rest = total - sum(_own.values())
    for name, seconds in sorted([*_own.items(), ("everything else", rest)], key=lambda item: -item[1]):
        print(f"  {name:<55} {1e3 * seconds / args.runs:7.2f} ms  {100 * seconds / total:5.1f} %")


if __name__ == "__main__":
    main()
