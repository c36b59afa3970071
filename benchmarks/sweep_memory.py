"""The memory a sweep's parent process holds: its peak resident set against the evaluations it ran.

    python benchmarks/sweep_memory.py [--slice small|large] [--mode hierarchical|exhaustive] [--workers 2]

One whole sweep of run.py's paper-space slice (DeepSeek-V3 decode b1024), from a fresh interpreter, as
`deepstack sweep` runs it; the parent's peak RSS (``ru_maxrss`` of the process itself, not of its workers) is
what the machine must hold besides the workers. Run it on the old and the new commit of a change to the sweep's
bookkeeping: a parent that holds every row grows by the size of a row per evaluation; one that keeps only the
chunk summaries grows with the hardware points and the front.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import LARGE_SLICE, SMALL_SLICE

from deepstack.schema import Scenario


def _one_sweep(space_file: str, scenario_json: str, mode: str, out: str, workers: int) -> dict:
    import resource
    import time

    from deepstack.models import tune_gc
    from deepstack.search.sweep import sweep

    tune_gc()  # as the CLI does
    before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    result = sweep(mode=mode, space=space_file, scenario=Scenario.model_validate_json(scenario_json),
                   objectives=["stps", "tokens_per_joule"], out=out, workers=workers)
    return {"evaluations": result.evaluations, "hardware_points": result.hardware_points,
            "wall_s": time.perf_counter() - started,
            "rss_at_start_MiB": before_kib / 1024,
            "peak_rss_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slice", choices=("small", "large"), default="large")
    parser.add_argument("--mode", choices=("hierarchical", "exhaustive"), default="hierarchical")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    from deepstack.search.space import load_space

    _, chips, nocs, stackings = LARGE_SLICE if args.slice == "large" else SMALL_SLICE
    paper = load_space("paper")
    hardware = paper.hardware.model_copy(update={
        "chips": chips, "nocs": nocs, "stacked_layers": stackings, "sram": paper.hardware.sram[:1]})
    space = paper.model_copy(update={"hardware": hardware, "name": "paper-slice"})
    scenario = Scenario(model="deepseek-v3", phase="decode", batch=1024)
    with tempfile.TemporaryDirectory() as folder, ProcessPoolExecutor(
            1, mp_context=multiprocessing.get_context("spawn"), max_tasks_per_child=1) as fresh:
        path = Path(folder) / "paper-slice.json"
        path.write_text(space.model_dump_json())
        figures = fresh.submit(_one_sweep, str(path), scenario.model_dump_json(), args.mode, f"{folder}/out",
                               args.workers).result()
    grown = figures["peak_rss_MiB"] - figures["rss_at_start_MiB"]
    figures["grown_bytes_per_evaluation"] = grown * 2**20 / figures["evaluations"]
    print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in figures.items()}, indent=1))


if __name__ == "__main__":
    main()
