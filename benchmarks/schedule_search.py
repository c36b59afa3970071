"""The best-schedule search of one hardware point, cold, at a few batches and stackings: its wall time, how many
schedules it evaluated, and what it found (STPS, schedule, prefill budget). What a change to the search or to a
phase's timing costs the studies, which run this search thousands of times (e.g. a prefill budget searched on
pipelines, docs/model.md §11). Run it on the old and the new commit in turn (the machine's speed drifts).

    python benchmarks/schedule_search.py --phase prefill --batches 4,16 --m 2,4
    python benchmarks/schedule_search.py --phase decode --batches 1,1024 --assumptions paper --runs 3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import _median

from deepstack import catalog
from deepstack.models import clear_caches
from deepstack.models.design import DesignPoint
from deepstack.schema import Scenario
from deepstack.search.schedules import best_schedule


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def _timed_search(hardware: DesignPoint, runs: int):
    """The median wall time (s) of ``runs`` cold best-schedule searches of ``hardware``, and what they found."""
    found = []
    seconds = _median(lambda: found.append(best_schedule(hardware)), runs, warmup=0, before=clear_caches)
    return seconds, found[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="deepseek-v3")
    parser.add_argument("--chip", default="standard")
    parser.add_argument("--noc", default="tms1")
    parser.add_argument("--phase", default="prefill", choices=("prefill", "decode"))
    parser.add_argument("--batches", type=_ints, default=[4, 16])
    parser.add_argument("--m", type=_ints, default=[2, 4], help="stacked = connected layers")
    parser.add_argument("--assumptions", default="default")
    parser.add_argument("--runs", type=int, default=1, help="cold searches per case (the median is shown)")
    args = parser.parse_args()
    chip, noc = catalog.load("chips", args.chip), catalog.load("nocs", args.noc)
    for batch in args.batches:
        for m in args.m:
            scenario = Scenario(model=args.model, phase=args.phase, batch=batch, assumptions=args.assumptions)
            hardware = DesignPoint(chip=chip, network=noc, scenario=scenario, stacked_layers=m, connected_layers=m)
            seconds, found = _timed_search(hardware, args.runs)
            best = found.best
            print(f"{args.phase} b{batch} m=n={m}: {seconds:.2f} s, {found.evaluated} schedules, "
                  f"best {best.metrics.stps:,.0f} STPS {best.schedule.text} "
                  f"(prefill budget {best.scenario.prefill_chunk_tokens})", flush=True)


if __name__ == "__main__":
    main()
