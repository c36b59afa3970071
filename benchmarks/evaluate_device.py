"""Speed of one single-device evaluation (the chip model): ``python benchmarks/evaluate_device.py``.

Workload: DeepSeek-V3 decode, batch 1024, 1024 + 1024 tokens (its default a16w8), on one standard 3D device
(m = n = 4), through ``deepstack.models.evaluate.evaluate`` — the decode step and the prefill behind TTFT. One
device cannot hold DeepSeek-V3 (the report says so: memory-infeasible), but every operator is still tuned and
timed, so the run measures the full single-device pipeline: area → DRAM → workload → operator tuner →
DVFS → report.

- cold: every memo table (``deepstack.models.clear_caches()``: every layer's lru memos and dict tables) is
  cleared before each run, so each run re-resolves the device and re-tunes every operator;
- memoised: the same call repeated with the caches warm (what a search sees when it revisits a point).

Reports medians after one warm-up run (imports, catalog parsing and pydantic are outside the measurement).
"""

from __future__ import annotations

import statistics
import time

from deepstack import catalog
from deepstack.models import clear_caches, memo
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate
from deepstack.schema import Scenario

COLD_RUNS = 7  # odd, so the median is one measured run
MEMOISED_RUNS = 21


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def main() -> None:
    point = DesignPoint(
        chip=catalog.load("chips", "standard"),
        scenario=Scenario(model=catalog.load("llms", "deepseek-v3"), phase="decode", batch=1024,
                          input_len=1024, output_len=1024),
    )

    def run():
        return evaluate(point)

    report = run()  # warm-up
    entries = memo.entries()  # what one evaluation leaves in the memo tables
    cold = []
    for _ in range(COLD_RUNS):
        tables = clear_caches()
        cold.append(timed(run))
    run()  # fill the caches once more after the last cold run
    memoised = [timed(run) for _ in range(MEMOISED_RUNS)]

    cold_s, memo_s = statistics.median(cold), statistics.median(memoised)
    print(f"cold runs: clear_caches() emptied {tables} memo tables ({entries:,} entries after one evaluation)")
    print(f"DeepSeek-V3 decode batch 1024 on 1x standard (m = n = 4): feasible={report.feasible} "
          f"({report.violations[0] if report.violations else 'no violations'}); "
          f"step {report.breakdown['phase_time_s'] * 1e3:.1f} ms, "
          f"{len(report.breakdown['operators'])} operator rows")
    print()
    print(f"{'evaluation':<12} {'runs':>5} {'median':>12} {'min':>12} {'max':>12}")
    for label, times in (("cold", cold), ("memoised", memoised)):
        print(f"{label:<12} {len(times):>5} {statistics.median(times) * 1e3:>9.2f} ms "
              f"{min(times) * 1e3:>9.2f} ms {max(times) * 1e3:>9.2f} ms")
    print(f"{'ratio':<12} {'':>5} {cold_s / memo_s:>9.0f} x  (cold median / memoised median)")


if __name__ == "__main__":
    main()
