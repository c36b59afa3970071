"""Eq. 4 on routed traffic matrices: dense (one sparse mat-vec per level over all pairs), sparse (the rows of
the active flows) or on the fly (networks too large for the all-pairs routes), one at a time or in batches."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from deepstack.models import memo
from deepstack.models.network.axes import pair_links
from deepstack.models.network.incidence import MAX_CACHED_DEVICES, gather_cells, gather_rows, incidence
from deepstack.models.network.levels import NetworkTopology, as_topology, readonly
from deepstack.models.network.results import NetworkResult, RoutedFlows, level_loads, summarise_levels

# A TM with more active flows than this fraction of all pairs is routed by a full mat-vec instead of first
# slicing the incidence rows of its flows (slicing costs about as much as the full product beyond this).
_DENSE_FRACTION = 0.125
# route_batch routes at most this many (step, link) cells per level at once (bounds its memory to ~32 MB).
_BATCH_CELLS = 1 << 22


def _zero_result(topology: NetworkTopology) -> RoutedFlows:
    link_bytes = tuple(readonly(np.zeros(n)) for n in topology.level_links)
    return RoutedFlows(NetworkResult(0.0, 0.0, 0.0, 0.0, 0, level_loads(topology, link_bytes, 0.0)), link_bytes)


def _cached(topology: NetworkTopology) -> bool:
    return topology.devices <= MAX_CACHED_DEVICES


def _is_dense(topology: NetworkTopology, flows: int) -> bool:
    return _cached(topology) and flows > _DENSE_FRACTION * topology.devices**2


@memo.cached(maxsize=32)
def _pair_latency(structure, hop_latencies_s: tuple[float, ...]) -> np.ndarray:
    """Zero-load latency Σ_levels hops·δ of every device pair (index s·N + d), s."""
    return readonly(np.asarray(hop_latencies_s) @ incidence(structure).hops)


def _route_dense(topology: NetworkTopology, full: np.ndarray) -> RoutedFlows:
    """Eq. 4 for a flattened N² payload vector (index s·N + d, zero diagonal): one mat-vec per level."""
    active = full > 0
    flows = int(np.count_nonzero(active))
    if flows == 0:
        return _zero_result(topology)
    routes = incidence(topology.structure)
    link_bytes = tuple(
        by_link @ level.wire_bytes(full) for level, by_link in zip(topology.levels, routes.by_link, strict=True)
    )
    latency = float(_pair_latency(topology.structure, topology.hop_latencies_s)[active].max())
    return _finish(topology, link_bytes, latency, flows)


def _route_sparse(topology: NetworkTopology, pairs: np.ndarray, payload: np.ndarray) -> RoutedFlows:
    """Eq. 4 for unique active pairs (index s·N + d, s ≠ d) carrying ``payload`` bytes each."""
    if len(pairs) == 0:
        return _zero_result(topology)
    if _cached(topology):
        routes = incidence(topology.structure)
        hops = routes.hops[:, pairs]
        link_bytes = tuple(
            gather_rows(by_pair, pairs, level.wire_bytes(payload))
            for level, by_pair in zip(topology.levels, routes.by_pair, strict=True)
        )
    else:
        devices = topology.devices
        links, hops = pair_links(topology.structure, pairs // devices, pairs % devices)
        link_bytes = tuple(
            np.bincount(link, weights=level.wire_bytes(payload)[flow_idx], minlength=n_links)
            for level, (flow_idx, link), n_links in zip(topology.levels, links, topology.level_links, strict=True)
        )
    latency = float((np.asarray(topology.hop_latencies_s) @ hops).max())
    return _finish(topology, link_bytes, latency, len(pairs))


def _finish(topology: NetworkTopology, link_bytes, latency_s: float, flows: int, peaks=None, totals=None):
    """Assemble a :class:`RoutedFlows` (per-level peaks and totals may be passed in when already known)."""
    link_bytes = tuple(readonly(np.asarray(links, dtype=float)) for links in link_bytes)
    if peaks is None:
        peaks = [float(links.max()) if links.size else 0.0 for links in link_bytes]
        totals = [float(links.sum()) if links.size else 0.0 for links in link_bytes]
    congestion = max(peak / bw for bw, peak in zip(topology.level_bw_Bps, peaks, strict=True))
    time = latency_s + congestion
    loads = summarise_levels(topology, peaks, totals, time)
    result = NetworkResult(time, latency_s, congestion, float(max(peaks)), flows, loads)
    return RoutedFlows(result, link_bytes)


def _active_flows(src, dst, payload_B, devices: int) -> tuple[np.ndarray, np.ndarray]:
    """Validated flows as pair indices ``s·N + d`` and payloads, without self and empty flows (not merged)."""
    src = np.asarray(src, dtype=np.int64).ravel()
    dst = np.asarray(dst, dtype=np.int64).ravel()
    payload = np.asarray(payload_B, dtype=float).ravel()
    if not (len(src) == len(dst) == len(payload)):
        raise ValueError("src, dst and payload_B must have the same length")
    if len(src) and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= devices):
        raise ValueError(f"device ids must be in 0..{devices - 1}")
    if len(payload) and not (np.all(np.isfinite(payload)) and payload.min() >= 0):
        raise ValueError("payload bytes must be finite and ≥ 0")
    keep = (payload > 0) & (src != dst)
    return src[keep] * devices + dst[keep], payload[keep]


def _route_active(topology: NetworkTopology, pairs: np.ndarray, payload: np.ndarray) -> RoutedFlows:
    devices = topology.devices
    if _is_dense(topology, len(pairs)):
        return _route_dense(topology, np.bincount(pairs, weights=payload, minlength=devices * devices))
    unique, inverse = np.unique(pairs, return_inverse=True)
    return _route_sparse(topology, unique, np.bincount(inverse, weights=payload, minlength=len(unique)))


def route_flows(src, dst, payload_B, topology) -> RoutedFlows:
    """Route a list of flows that all start together (one TM given sparsely) and apply eq. 4.

    Flows with the same (source, destination) are merged into one flow before framing; flows to self and
    empty flows are dropped.

    Args:
        src: source device ids (int array-like).
        dst: destination device ids, same length.
        payload_B: payload bytes per flow, same length, ≥ 0.
        topology: a :class:`NetworkTopology` or schema ``Network``.

    Returns:
        The eq. 4 result and the bytes on every link.
    """
    topology = as_topology(topology)
    return _route_active(topology, *_active_flows(src, dst, payload_B, topology.devices))


def route_batch(steps: Sequence[tuple], topology) -> tuple[RoutedFlows, ...]:
    """Route several independent traffic matrices (e.g. the steps of a collective) in one vectorised pass.

    Equivalent to ``tuple(route_flows(src, dst, payload_B, topology) for src, dst, payload_B in steps)``, but
    the per-call overhead is paid once, which matters for collectives with hundreds of small steps.

    Args:
        steps: ``(src, dst, payload_B)`` per traffic matrix, as for :func:`route_flows`.
        topology: a :class:`NetworkTopology` or schema ``Network``.
    """
    topology = as_topology(topology)
    flows = [_active_flows(src, dst, payload, topology.devices) for src, dst, payload in steps]
    if not _cached(topology) or len(flows) < 2:
        return tuple(_route_active(topology, pairs, payload) for pairs, payload in flows)
    chunk = max(1, _BATCH_CELLS // max(1, max(topology.level_links)))
    routed: list[RoutedFlows] = []
    for first in range(0, len(flows), chunk):
        routed += _route_chunk(topology, flows[first : first + chunk])
    return tuple(routed)


def _route_chunk(topology: NetworkTopology, flows: list[tuple[np.ndarray, np.ndarray]]) -> list[RoutedFlows]:
    """Route K traffic matrices at once: link bytes as K×L arrays via one bincount per level."""
    n_steps, n_pairs = len(flows), topology.devices**2
    step_of = np.repeat(np.arange(n_steps), [len(pairs) for pairs, _ in flows])
    keys = step_of * n_pairs + np.concatenate([pairs for pairs, _ in flows])
    unique, inverse = np.unique(keys, return_inverse=True)
    payload = np.bincount(inverse, weights=np.concatenate([p for _, p in flows]), minlength=len(unique))
    step, pairs = np.divmod(unique, n_pairs)
    routes = incidence(topology.structure)
    per_level = [gather_cells(by_pair, pairs, step, n_steps, n_links, level.wire_bytes(payload))
                 for level, by_pair, n_links in zip(topology.levels, routes.by_pair, topology.level_links,
                                                     strict=True)]
    latency = np.asarray(topology.hop_latencies_s) @ routes.hops[:, pairs]
    counts = np.bincount(step, minlength=n_steps)
    starts = np.cumsum(counts) - counts
    busy = counts > 0
    step_latency = np.zeros(n_steps)
    step_latency[busy] = np.maximum.reduceat(latency, starts[busy])
    empty = np.zeros(n_steps)  # a level of size 1 has no links
    peaks = np.stack([loads.max(axis=1) if loads.size else empty for loads in per_level], axis=1).tolist()
    totals = np.stack([loads.sum(axis=1) for loads in per_level], axis=1).tolist()  # (steps, levels)
    return [
        _finish(topology, tuple(loads[k] for loads in per_level), float(step_latency[k]), int(counts[k]),
                peaks[k], totals[k])
        if counts[k] else _zero_result(topology)
        for k in range(n_steps)
    ]


def _route_matrix(traffic_matrix, topology: NetworkTopology) -> RoutedFlows:
    devices = topology.devices
    flat = np.array(traffic_matrix, dtype=float)  # a copy: the diagonal is cleared below
    if flat.shape != (devices, devices):
        raise ValueError(f"traffic matrix must be {devices}×{devices} for this network, got shape {flat.shape}")
    flat = flat.ravel()
    if not np.all(np.isfinite(flat)) or flat.min() < 0:
        raise ValueError("traffic matrix entries must be finite and ≥ 0")
    flat[:: devices + 1] = 0.0  # bytes to self never touch the network
    if _is_dense(topology, int(np.count_nonzero(flat))):
        return _route_dense(topology, flat)
    pairs = np.flatnonzero(flat)
    return _route_sparse(topology, pairs, flat[pairs])


def route_traffic(traffic_matrix: np.ndarray, topology) -> NetworkResult:
    """Route one traffic matrix on the topology and apply eq. 4.

    Args:
        traffic_matrix: N×N payload bytes, entry (s, d) sent from device s to device d; the diagonal is ignored.
        topology: a :class:`NetworkTopology` or schema ``Network`` with N devices.

    Returns:
        ``time_s = latency_s + congestion_s`` and per-level loads; all zero for a zero matrix.
    """
    return _route_matrix(traffic_matrix, as_topology(topology)).result


def link_bytes(traffic_matrix: np.ndarray, topology) -> tuple[np.ndarray, ...]:
    """Bytes (payload + framing) on every directed link, one read-only array per level (e.g. for heat maps)."""
    return _route_matrix(traffic_matrix, as_topology(topology)).link_bytes
