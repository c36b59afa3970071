"""One digest of many full reports, to check that a speed change leaves every number as it was.

    python benchmarks/report_digest.py        # run on two commits (e.g. two worktrees): the digests must match
    python benchmarks/report_digest.py --assumptions paper   # the same points under the paper assumption set

96 design points: four chips (two 3D templates, H200*, Large Matrix) × decode b1024, decode b4 and prefill b16 of
DeepSeek-V3 × four schedules (flat, TP+EP, per-module, deep PP) × the chip's own stack and m = n = 7, all on TMS1,
each report (metrics, hardware, schedule, breakdown) serialised with sorted keys; an error is hashed as its
message. Memoisation is on, as in a search, so a memo that changed a number would show too.
"""

from __future__ import annotations

import argparse
import hashlib
import json

from deepstack import catalog
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate
from deepstack.schema import Scenario, Schedule

CHIPS = ("standard", "wgmma", "h200-star", "large-matrix")
REGIMES = (("decode", 1024), ("decode", 4), ("prefill", 16))
SCHEDULES = ("tp=4,ep=32,pp=2", "tp=16,ep=16", "attn:tp=8,ep=32;ffn:ep=256", "tp=8,pp=32")
STACKS = (None, 7)  # the chip's own; m = n = 7 (3D chips only)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--assumptions", default="default", help="the assumption set of every scenario")
    args = parser.parse_args()
    digest = hashlib.sha256()
    reports = errors = 0
    noc = catalog.load("nocs", "tms1")
    for name in CHIPS:
        chip = catalog.load("chips", name)
        for phase, batch in REGIMES:
            for parallel in SCHEDULES:
                for m in STACKS:
                    stack = {} if m is None or chip.device.dram.technology == "hbm" else {
                        "stacked_layers": m, "connected_layers": m}
                    point = DesignPoint(chip=chip, network=noc, schedule=Schedule.parse(parallel),
                                        scenario=Scenario(model="deepseek-v3", phase=phase, batch=batch,
                                                                      assumptions=args.assumptions), **stack)
                    try:
                        text = json.dumps(evaluate(point).as_dict(), sort_keys=True, default=str)
                    except Exception as error:  # an error's message is part of the behaviour
                        text = f"error {type(error).__name__}: {error}"
                        errors += 1
                    digest.update(text.encode())
                    reports += 1
    print(f"{reports} design points ({errors} errors): {digest.hexdigest()[:16]}")


if __name__ == "__main__":
    main()
