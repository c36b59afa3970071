"""Where the time goes (issue 32, "profile first"): cProfile of one workload in one process, its own time (tottime)
summed by the part of the code it belongs to, and the functions that take the most.

    python benchmarks/where_time_goes.py sweep        # run.py's large paper-space slice, hierarchical, 1 process
    python benchmarks/where_time_goes.py sweep-small  # run.py's small slice (seconds)
    python benchmarks/where_time_goes.py optimize     # the README's main job (1,000 trials, default space, seed 0)

One process on purpose: a pool's workers are not profiled, and the per-point work is the same in them. Absolute
times are inflated by the profiler (every Python call is counted); the shares are what to read.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# (part, path fragments of its files): the first part whose fragment is in a function's file takes its time
PARTS = (
    ("GEMM tuning and timing", ("compute/gemm", "compute/waves", "compute/timing")),
    ("attention and vector operators", ("compute/attention", "compute/vector", "compute/dispatch")),
    ("compute-communication overlap", ("compute/overlap",)),
    ("workload (operators per schedule)", ("compute/workload", "compute/operators")),
    ("DRAM law", ("hardware/dram",)),
    ("devices and area", ("hardware/device", "hardware/area")),
    ("collectives", ("models/collectives",)),
    ("network routing", ("models/network",)),
    ("pipeline, stages and phases", ("models/pipeline",)),
    ("parallel strategies and memory", ("models/parallel",)),
    ("evaluate, power, thermal, DVFS, report", ("models/evaluate", "models/power", "models/thermal", "models/dvfs",
                                                 "models/results", "models/reporting", "models/design")),
    ("memo tables and hashing", ("models/memo", "models/hashing", "schema/base")),
    ("search (sweep, trials, CP-SAT repair)", ("deepstack/search", "/search/")),
    ("schemas (pydantic)", ("pydantic", "deepstack/schema")),
    ("Optuna and storage", ("optuna", "sqlalchemy", "sqlite")),
    ("OR-Tools", ("ortools",)),
    ("numpy", ("numpy",)),
)


def part_of(filename: str) -> str:
    if filename.startswith("~") or filename.startswith("<"):
        return "builtins (C: numpy kernels, dict and hash look-ups, ...)"
    for name, fragments in PARTS:
        if any(fragment in filename for fragment in fragments):
            return name
    return "other Python"


def run_sweep(slice_name: str, folder: str) -> str:
    from run import LARGE_SLICE, SMALL_SLICE

    from deepstack.models import clear_caches, tune_gc
    from deepstack.schema import Scenario
    from deepstack.search.space import load_space
    from deepstack.search.sweep import sweep

    _, chips, nocs, stackings = LARGE_SLICE if slice_name == "sweep" else SMALL_SLICE
    paper = load_space("paper")
    hardware = paper.hardware.model_copy(update={"chips": chips, "nocs": nocs, "stacked_layers": stackings,
                                                 "sram": paper.hardware.sram[:1]})
    path = Path(folder) / "paper-slice.json"
    path.write_text(paper.model_copy(update={"hardware": hardware, "name": "paper-slice"}).model_dump_json())
    tune_gc()
    clear_caches()
    result = sweep(mode="hierarchical", space=str(path), scenario=Scenario(model="deepseek-v3", phase="decode",
                                                                            batch=1024),
                   objectives=["stps", "tokens_per_joule"], out=f"{folder}/sweep", workers=1)
    return f"{result.evaluations} evaluations"


def run_optimize(folder: str) -> str:
    from deepstack.models import tune_gc
    from deepstack.search.optimize import optimize

    tune_gc()
    result = optimize(objectives=["stps", "tokens_per_joule"], space=None, scenario=None,
                      storage=f"sqlite:///{folder}/profile.db", out=folder)
    return f"{result.added} trials"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload", choices=("sweep", "sweep-small", "optimize"))
    parser.add_argument("--top", type=int, default=15, help="functions listed by their own time")
    args = parser.parse_args()
    profiler = cProfile.Profile()
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        profiler.enable()
        what = run_optimize(folder) if args.workload == "optimize" else run_sweep(args.workload, folder)
        profiler.disable()
        wall = time.perf_counter() - started
    stats = pstats.Stats(profiler)
    by_part: dict[str, float] = {}
    for (filename, _, _), (_, _, tottime, _, _) in stats.stats.items():
        by_part[part_of(filename)] = by_part.get(part_of(filename), 0.0) + tottime
    total = sum(by_part.values())
    print(f"{args.workload}: {what}, {wall:.1f} s under the profiler; own time by part of the code:")
    for name, seconds in sorted(by_part.items(), key=lambda item: -item[1]):
        print(f"  {100 * seconds / total:5.1f} %  {seconds:7.2f} s  {name}")
    print(f"functions by own time (top {args.top}):")
    ranked = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:args.top]
    for (filename, line, function), (_, calls, tottime, _, _) in ranked:
        print(f"  {100 * tottime / total:5.1f} %  {calls:9d} calls  {function} ({Path(filename).name}:{line})")


if __name__ == "__main__":
    main()
