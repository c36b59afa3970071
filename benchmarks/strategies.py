"""Speed of the parallel-strategy composer (models/parallel/): ``python benchmarks/strategies.py``.

Times, as medians over repeated cold runs (every memo cleared first) after one warm-up:

- ``enumerate_strategies(256)``: all 2,574 flat strategies (paper §4.2.2);
- ``feasible_strategies`` for DeepSeek-V3 decode, batch 1024, 1024 + 1024 tokens, on 256 devices: the rules
  alone, then with the memory check at 8 GiB per device (the 3D default: 64 GiB per 800 mm², i.e. 8 GiB per
  100 mm² device; docs/calibration.md §1, Table 2 notes).

It also prints the strategy counts and the per-rule drop counts.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from deepstack import catalog
from deepstack.models import clear_caches
from deepstack.models.parallel.memory import MEMORY_RESERVE, feasible_strategies
from deepstack.models.parallel.strategies import enumerate_strategies, ordered_factorizations
from deepstack.schema.scenario import Scenario
from deepstack.units import GiB

DEVICES = 256  # paper §5.1: 25,600 mm² of 100 mm² devices
CAPACITY_B = 8 * GiB  # docs/calibration.md §1: 64 GiB per 800 mm² at m = n = 4 → 8 GiB per 100 mm² device
REPEATS = 21  # odd, so the median is one measured run


def median_cold_s(function: Callable[[], object], repeats: int = REPEATS) -> float:
    """Median wall time in seconds of ``function`` with every memo cleared before each run."""
    clear_caches()
    function()  # warm-up: imports, catalog and pydantic caches outside the composer
    times = []
    for _ in range(repeats):
        clear_caches()
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    scenario = Scenario(model=catalog.load("llms", "deepseek-v3"), phase="decode", batch=1024,
                        input_len=1024, output_len=1024)

    t_enum = median_cold_s(lambda: enumerate_strategies(DEVICES))
    t_rules = median_cold_s(lambda: feasible_strategies(scenario, DEVICES, None))
    t_memory = median_cold_s(lambda: feasible_strategies(scenario, DEVICES, CAPACITY_B))

    strategies = enumerate_strategies(DEVICES)
    after_rules, _ = feasible_strategies(scenario, DEVICES, None)
    after_memory, dropped = feasible_strategies(scenario, DEVICES, CAPACITY_B)

    print(f"N = {DEVICES}: {len(ordered_factorizations(DEVICES))} factorizations, "
          f"{len(strategies)} strategies")
    print(f"DeepSeek-V3 decode batch 1024 ({scenario.precision}): {len(after_rules)} after the rules, "
          f"{len(after_memory)} fit {CAPACITY_B / GiB:g} GiB per device with a "
          f"{MEMORY_RESERVE:.0%} reserve")
    for rule, count in dropped.items():
        print(f"  dropped by {rule}: {count}")
    print(f"enumerate_strategies({DEVICES}):            median {t_enum * 1e3:8.2f} ms (cold)")
    print(f"feasible_strategies, rules only:          median {t_rules * 1e3:8.2f} ms (cold)")
    print(f"feasible_strategies, rules + memory:      median {t_memory * 1e3:8.2f} ms (cold)")


if __name__ == "__main__":
    main()
