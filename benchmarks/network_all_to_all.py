"""Speed of the network model: a 256-device all-to-all (1 MiB per rank) routed on the TMS1 NoC.

The network model aims at milliseconds (the paper reports < 0.1 s for a 256-node topology). Run by hand:

    python benchmarks/network_all_to_all.py [--runs 50]

Prints the cold time (first call: builds and memoises the all-pairs routes), then the median, min and max of
warm runs of ``route_traffic`` after a warm-up, and the cold time of ``collective_time("all_to_all", ...)``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from deepstack import catalog
from deepstack.models import collectives, network

MiB = 1 << 20


def _all_to_all(devices: int, per_rank_B: float) -> np.ndarray:
    tm = np.full((devices, devices), per_rank_B / devices)
    np.fill_diagonal(tm, 0.0)
    return tm


def _timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noc", default="tms1")
    parser.add_argument("--runs", type=int, default=50, help="warm runs (≥ 20)")
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()

    topo = network.NetworkTopology.from_schema(catalog.load("nocs", args.noc))
    tm = _all_to_all(topo.devices, MiB)

    cold_s, result = _timed(lambda: network.route_traffic(tm, topo))
    for _ in range(args.warmup):
        network.route_traffic(tm, topo)
    warm = [_timed(lambda: network.route_traffic(tm, topo))[0] for _ in range(max(20, args.runs))]
    group = [tuple(range(topo.devices))]
    collective_s, collective = _timed(lambda: collectives.collective_time("all_to_all", MiB, group, topo))

    print(f"{topo.devices}-device all-to-all, 1 MiB per rank, on {args.noc}")
    print(f"  T_net = {result.time_s * 1e6:.3f} µs (L_net {result.latency_s * 1e6:.3f} µs + "
          f"T_cong {result.congestion_s * 1e6:.3f} µs), busiest link {result.max_link_bytes / 1e3:.1f} kB")
    print()
    print(f"{'measurement':<44}{'ms':>10}")
    print(f"{'route_traffic cold (builds routes)':<44}{cold_s * 1e3:>10.3f}")
    print(f"{f'route_traffic warm min ({len(warm)} runs)':<44}{min(warm) * 1e3:>10.3f}")
    print(f"{f'route_traffic warm max ({len(warm)} runs)':<44}{max(warm) * 1e3:>10.3f}")
    print(f"{'collective_time all_to_all auto (cold)':<44}{collective_s * 1e3:>10.3f}")
    print(f"{f'route_traffic warm MEDIAN ({len(warm)} runs)':<44}{statistics.median(warm) * 1e3:>10.3f}")
    print(f"  (auto picked {collective.algorithm}: {collective.time_s * 1e6:.3f} µs)")


if __name__ == "__main__":
    main()
