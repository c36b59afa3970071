"""Results of routing traffic on a network: eq. 4's time and the load of every level."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from deepstack.models.network.levels import NetworkTopology


@dataclass(frozen=True)
class LevelLoad:
    """Traffic on one network level.

    Attributes:
        level: level index, 0 = innermost (L1).
        label: the level's label.
        links: directed links of the level over the whole network.
        total_bytes: bytes summed over the level's links (a flow counts once per link it crosses), B.
        max_link_bytes: bytes on the level's busiest link, B.
        max_busy_fraction: busiest link's serialisation time V/BW over the elapsed time (0 when nothing moved).
        mean_busy_fraction: the same averaged over all the level's links.
    """

    level: int
    label: str
    links: int
    total_bytes: float
    max_link_bytes: float
    max_busy_fraction: float
    mean_busy_fraction: float


@dataclass(frozen=True)
class NetworkResult:
    """Eq. 4 for one traffic matrix: ``time_s = latency_s + congestion_s``.

    Attributes:
        time_s: T_net, s.
        latency_s: L_net, the zero-load latency: max over active flows of Σ_levels hops·δ_level, s.
        congestion_s: T_cong = max over links of V_l / BW_l, s.
        max_link_bytes: bytes (payload + framing) on the most loaded link, B.
        flows: active flows (source ≠ destination, bytes > 0).
        levels: per-level load, innermost first.
    """

    time_s: float
    latency_s: float
    congestion_s: float
    max_link_bytes: float
    flows: int
    levels: tuple[LevelLoad, ...]


@dataclass(frozen=True, eq=False)
class RoutedFlows:
    """A :class:`NetworkResult` and the bytes on every link (one read-only array per level)."""

    result: NetworkResult
    link_bytes: tuple[np.ndarray, ...]


def level_loads(topology: NetworkTopology, link_bytes: Sequence[np.ndarray], time_s: float) -> tuple[LevelLoad, ...]:
    """Summarise per-link bytes into per-level loads over an elapsed time.

    Args:
        topology: the network.
        link_bytes: bytes per link, one array per level (as :attr:`RoutedFlows.link_bytes`), B.
        time_s: elapsed time the busy fractions refer to, s.
    """
    peaks = [float(links.max()) if links.size else 0.0 for links in link_bytes]
    totals = [float(links.sum()) if links.size else 0.0 for links in link_bytes]
    return summarise_levels(topology, peaks, totals, time_s)


def summarise_levels(topology: NetworkTopology, peaks, totals, time_s: float) -> tuple[LevelLoad, ...]:
    """Per-level loads from each level's busiest-link bytes and total bytes over an elapsed time."""
    loads = []
    for index, (level, bw, n_links, peak, total) in enumerate(
        zip(topology.levels, topology.level_bw_Bps, topology.level_links, peaks, totals, strict=True)
    ):
        busy = 1.0 / (bw * time_s) if time_s > 0 else 0.0
        mean = total / n_links * busy if n_links else 0.0
        loads.append(LevelLoad(index, level.label, n_links, float(total), float(peak), peak * busy, mean))
    return tuple(loads)
