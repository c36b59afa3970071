"""Speed of the distributed half of the model: ``python benchmarks/network.py [--runs 30] [--cold-runs 3]``.

(a) One 256-device all-to-all on TMS1, 1 MiB per rank (docs/model.md: "a 256-node all-to-all must cost
    milliseconds"; target ≤ 10 ms):
    - ``collective_time`` cold: every memo cleared (``deepstack.models.clear_caches()``), so the all-pairs routes
      of TMS1 are built as well (the first call a process makes);
    - ``collective_time`` of a new collective on a known topology (Stage 1 + Stage 2 in full): before each run
      every memo table of ``deepstack.models.collectives`` is cleared and the network's (routes, link counts)
      kept; median, for "auto" and for each of its candidates (direct is one traffic matrix, pairwise 255);
    - ``collective_time`` memo hit, median;
    - ``route_traffic`` on a prebuilt traffic matrix: cold (routes cleared) and warm median.
(b) One full 256-device design point with a fixed schedule: DeepSeek-V3 decode, batch 1024, 1024 + 1024
    tokens, standard chip, TMS1, ``tp=4,ep=32,pp=2``, ``evaluate(point, with_ttft=False)`` (target memoised
    ≤ 5 ms): cold (``clear_caches()`` before each run) median, and memoised median.

Every measurement has a warm-up first and reports the median (these machines are noisy). Nothing is written.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from deepstack import catalog
from deepstack.models import clear_caches, collectives, memo, network
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate
from deepstack.schema import Scenario, Schedule

MiB = 1 << 20
ALL_TO_ALL_TARGET_S = 10e-3  # docs/model.md ("milliseconds"); the paper's own figure is < 0.1 s (§4.1.4)
DESIGN_POINT_TARGET_S = 5e-3  # memoised design point: millions of evaluations per study must stay affordable


def clear_collective_layer() -> None:
    """Forget what the collectives package memoised (every table it registered), keep the network's routes."""
    for table in memo.registered():
        if getattr(table, "__module__", "").startswith(collectives.__name__ + "."):
            table.cache_clear()


def timed(function: Callable[[], object]) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def median_s(function: Callable[[], object], runs: int, before: Callable[[], None] | None = None) -> float:
    """Median wall time of ``function`` over ``runs`` runs after one warm-up (``before`` runs untimed first)."""
    if before:
        before()
    function()  # warm-up
    times = []
    for _ in range(runs):
        if before:
            before()
        times.append(timed(function))
    return statistics.median(times)


def row(label: str, seconds: float, target_s: float | None = None) -> None:
    ratio = f"{seconds / target_s:>8.3f}" if target_s else f"{'':>8}"
    target = f"{target_s * 1e3:>11.1f}" if target_s else f"{'':>11}"
    print(f"  {label:<70}{seconds * 1e3:>11.3f}{target}{ratio}")


def header(title: str) -> None:
    print(title)
    print(f"  {'measurement':<70}{'ms':>11}{'target ms':>11}{'ratio':>8}")


def bench_all_to_all(runs: int) -> None:
    tms1 = catalog.load("nocs", "tms1")
    topo = network.NetworkTopology.from_schema(tms1)
    devices = topo.devices
    group = [tuple(range(devices))]
    tm = np.full((devices, devices), MiB / devices)
    np.fill_diagonal(tm, 0.0)

    def a2a(algorithm: str = "auto"):
        return lambda: collectives.collective_time("all_to_all", MiB, group, topo, algorithm)

    clear_caches()
    cold_s = timed(a2a())  # first call of the process: imports done, but every route and memo built here
    result = a2a()()
    new_s = {name: median_s(a2a(name), runs, before=clear_collective_layer)
             for name in ("auto", *collectives.algorithms("all_to_all"))}
    hit_s = median_s(a2a(), runs)
    clear_caches()
    topo = network.NetworkTopology.from_schema(tms1)
    route_cold_s = timed(lambda: network.route_traffic(tm, topo))
    route_warm_s = median_s(lambda: network.route_traffic(tm, topo), runs)

    header(f"(a) {devices}-device all-to-all on tms1, 1 MiB per rank: auto → {result.algorithm}, "
           f"T = {result.time_s * 1e6:.3f} µs, busiest link {result.max_link_bytes / 1e3:.1f} kB")
    row("collective_time, cold (routes + memos built)", cold_s, ALL_TO_ALL_TARGET_S)
    for name, seconds in new_s.items():
        row(f"collective_time {name}, routes kept, collective memos cleared ({runs} runs)", seconds,
            ALL_TO_ALL_TARGET_S)
    row(f"collective_time, memo hit (median of {runs})", hit_s)
    row("route_traffic on a prebuilt TM, cold (routes built)", route_cold_s, ALL_TO_ALL_TARGET_S)
    row(f"route_traffic on a prebuilt TM, warm (median of {runs})", route_warm_s, ALL_TO_ALL_TARGET_S)


def bench_design_point(runs: int, cold_runs: int) -> None:
    scenario = Scenario(model=catalog.load("llms", "deepseek-v3"), phase="decode", batch=1024, input_len=1024,
                        output_len=1024)
    point = DesignPoint(chip=catalog.load("chips", "standard"), scenario=scenario,
                        schedule=Schedule.parse("tp=4,ep=32,pp=2"), network=catalog.load("nocs", "tms1"))

    def one():
        return evaluate(point, with_ttft=False)

    cold_s = median_s(one, cold_runs, before=clear_caches)
    report = one()
    warm_s = median_s(one, runs)
    header(f"(b) design point: deepseek-v3 decode b1024, standard, tms1, {report.schedule['text']}: "
           f"STPS {report.metrics['stps']:,.0f}")
    row(f"evaluate, cold: clear_caches() of {len(memo.registered())} memo tables (median of {cold_runs})", cold_s)
    row(f"evaluate, memoised (median of {runs})", warm_s, DESIGN_POINT_TARGET_S)
    print(f"  cold / memoised = {cold_s / warm_s:,.0f}×")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="warm runs per measurement (≥ 20)")
    parser.add_argument("--cold-runs", type=int, default=3, help="cold design-point runs (≥ 3)")
    args = parser.parse_args()
    runs, cold_runs = max(20, args.runs), max(3, args.cold_runs)
    bench_all_to_all(runs)
    print()
    bench_design_point(runs, cold_runs)


if __name__ == "__main__":
    main()
