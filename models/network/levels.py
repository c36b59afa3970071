"""The network description: levels in SI units, frozen and hashable so everything downstream can be memoised."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from deepstack.models import memo
from deepstack.models.hashing import cached_hash, state_without_hash
from deepstack.models.network.axes import PORTS, level_link_counts
from deepstack.models.network.topologies import topology_kind
from deepstack.registry import ALGORITHMS

# When a step's messages count as done (see :class:`NetworkTopology`).
COMPLETIONS: tuple[str, ...] = ("delivery", "acknowledged")

# Fraction of its bandwidth a shared uplink delivers: its group's devices together inject faster than it drains,
# so queues fill and lossless flow control pauses the senders in bursts. CALIBRATED, the one network constant
# that is: docs/calibration.md §11 (set on the 8×8 two-level switch rows of validation/ns3_collectives.csv:
# all-to-all alone gives 0.955, all-reduce 0.970, all-gather 0.972).
SHARED_UPLINK_UTILISATION = 0.96


def readonly(array: np.ndarray) -> np.ndarray:
    """The array, made read-only (memoised results are shared: nobody may change them in place)."""
    array.flags.writeable = False
    return array


@dataclass(frozen=True)
class TopologyLevel:
    """One level of the hierarchical network, in SI units.

    Attributes:
        topology: a registered topology kind (built in: ``switch``, ``ring``, ``chain``, ``mesh``, ``torus``,
            ``fully_connected``; see :mod:`deepstack.models.network.topologies`).
        dims: one size, or two (X, Y) for mesh and torus.
        link_bw_Bps: bandwidth of one link in one direction, B/s.
        hop_latency_s: latency of one link traversal (δ_hop), s.
        packet_bytes: payload bytes per packet, or None for no framing.
        header_bytes: protocol overhead bytes per packet (ignored without ``packet_bytes``).
        label: free text for reports (e.g. "L3 system").
        ports: who owns this level's links: ``per_device`` (rail-optimised: every device has its own port
            into the level, e.g. one NIC per GPU) or ``shared_uplink`` (each group of inner devices — one
            node of this level — has one set of ports that its devices share, e.g. a leaf switch's uplink or a
            die's UCIe edge). The innermost level's groups are single devices, so there both mean the same.
        algorithm: the collective algorithm of this level (ASTRA-sim's per-dimension choice): ``auto``, or a
            registered algorithm that the collectives on this level run where it applies
            (:func:`deepstack.models.collectives.level_algorithm`).
    """

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    topology: str
    dims: tuple[int, ...]
    link_bw_Bps: float
    hop_latency_s: float
    packet_bytes: int | None = None
    header_bytes: int = 0
    label: str = ""
    ports: str = "per_device"
    algorithm: str = "auto"

    def __post_init__(self) -> None:
        want = topology_kind(self.topology).dimensions
        if len(self.dims) != want or any(int(d) != d or d < 1 for d in self.dims):
            raise ValueError(f"dims of a {self.topology} must be {want} positive integer(s), got {self.dims!r}")
        if not (self.link_bw_Bps > 0 and math.isfinite(self.link_bw_Bps)):
            raise ValueError(f"link_bw_Bps must be positive and finite, got {self.link_bw_Bps!r}")
        if not (self.hop_latency_s >= 0 and math.isfinite(self.hop_latency_s)):
            raise ValueError(f"hop_latency_s must be ≥ 0 and finite, got {self.hop_latency_s!r}")
        if self.packet_bytes is not None and self.packet_bytes < 1:
            raise ValueError(f"packet_bytes must be ≥ 1 or None, got {self.packet_bytes!r}")
        if self.header_bytes < 0:
            raise ValueError(f"header_bytes must be ≥ 0, got {self.header_bytes!r}")
        if self.ports not in PORTS:
            raise ValueError(f"ports must be one of {', '.join(PORTS)}, got {self.ports!r}")
        if self.algorithm != "auto" and self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be auto or one of {', '.join(ALGORITHMS.names())}, "
                             f"got {self.algorithm!r}")

    @property
    def size(self) -> int:
        """Nodes (groups of inner devices) on this level."""
        return math.prod(self.dims)

    def wire_bytes(self, payload_B: np.ndarray) -> np.ndarray:
        """Bytes a flow occupies on one of this level's links: payload plus ceil(payload/packet)·header.

        Args:
            payload_B: payload bytes per flow (any shape, ≥ 0).

        Returns:
            Wire bytes per flow, same shape (the input itself when the level has no framing).
        """
        return framed_bytes(payload_B, self.packet_bytes, self.header_bytes)


def framed_bytes(payload_B: np.ndarray, packet_bytes: int | None, header_bytes: int) -> np.ndarray:
    """Wire bytes of flows of ``payload_B`` on links with this framing (see :meth:`TopologyLevel.wire_bytes`)."""
    if packet_bytes is None or header_bytes <= 0:
        return payload_B
    return payload_B + np.ceil(payload_B / packet_bytes) * header_bytes


@dataclass(frozen=True)
class NetworkTopology:
    """A hierarchical network, innermost level first; ``devices`` = product of the level sizes.

    ``completion`` says when a step of a collective may start after the previous one: at ``delivery`` (the
    last byte has arrived: one path latency, the usual model of on-chip networks and NCCL-style protocols) or
    when the messages are ``acknowledged`` (the receiver learns its data is complete only when the sender's
    transport has the last acknowledgement back: two path latencies per dependent step, as ASTRA-sim's NS-3
    backend reports a message only when its RDMA queue pair completes).
    """

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    levels: tuple[TopologyLevel, ...]
    completion: str = "delivery"

    def __post_init__(self) -> None:
        if not self.levels:
            raise ValueError("a network needs at least one level")
        if self.completion not in COMPLETIONS:
            raise ValueError(f"completion must be one of {', '.join(COMPLETIONS)}, got {self.completion!r}")

    @functools.cached_property
    def devices(self) -> int:
        return math.prod(level.size for level in self.levels)

    @functools.cached_property
    def structure(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Topology, dims and port ownership of each level: all that routing depends on (the memoisation key of
        routes)."""
        return tuple((level.topology, tuple(level.dims), level.ports) for level in self.levels)

    @functools.cached_property
    def level_algorithms(self) -> tuple[str, ...] | None:
        """Each level's collective algorithm, or None when every level leaves the choice to auto."""
        named = tuple(level.algorithm for level in self.levels)
        return None if all(name == "auto" for name in named) else named

    @functools.cached_property
    def framing(self) -> tuple[tuple[int | None, int], ...]:
        """(packet bytes, header bytes) of each level: with the structure, all a flow's wire bytes depend on."""
        return tuple((level.packet_bytes, level.header_bytes) for level in self.levels)

    @functools.cached_property
    def hop_latencies_s(self) -> tuple[float, ...]:
        """What one hop of each level adds to a dependent step: δ, or 2δ when steps wait for acknowledgements
        (the acknowledgement crosses the same hops back)."""
        trips = 2.0 if self.completion == "acknowledged" else 1.0
        return tuple(trips * level.hop_latency_s for level in self.levels)

    @functools.cached_property
    def level_bw_Bps(self) -> tuple[float, ...]:
        """The bandwidth one link of each level delivers, B/s: its nominal bandwidth, times
        :data:`SHARED_UPLINK_UTILISATION` where a group of several devices shares the level's ports (its senders
        together can fill it faster than it drains; per-device ports are paced by their own sender)."""
        delivered, group = [], 1
        for level in self.levels:
            shared = level.ports == "shared_uplink" and group > 1
            delivered.append(level.link_bw_Bps * (SHARED_UPLINK_UTILISATION if shared else 1.0))
            group *= level.size
        return tuple(delivered)

    @functools.cached_property
    def link_bw_column(self) -> np.ndarray:
        """Each level's delivered link bandwidth, B/s, as a (levels × 1) column (to divide per-level loads by)."""
        return readonly(np.array([[bw] for bw in self.level_bw_Bps]))

    @functools.cached_property
    def level_links(self) -> tuple[int, ...]:
        """Directed links of each level over the whole network (every copy of the level)."""
        return level_link_counts(self.structure)

    @classmethod
    def from_schema(cls, network) -> NetworkTopology:
        """Convert a validated ``deepstack.schema.hardware.Network`` (or one ``NetworkLevel``) to SI."""
        return _from_schema(network)

    @classmethod
    def single(
        cls,
        topology: str,
        dims: int | Sequence[int],
        link_bw_Bps: float,
        hop_latency_s: float,
        packet_bytes: int | None = None,
        header_bytes: int = 0,
    ) -> NetworkTopology:
        """A one-level network (handy for tests and the ``collective`` command)."""
        dims_t = (int(dims),) if isinstance(dims, int) else tuple(int(d) for d in dims)
        level = TopologyLevel(topology, dims_t, float(link_bw_Bps), float(hop_latency_s), packet_bytes, header_bytes)
        return cls((level,))


@memo.cached(maxsize=256)
def _from_schema(network) -> NetworkTopology:
    levels = getattr(network, "levels", (network,))
    return NetworkTopology(
        tuple(
            TopologyLevel(
                topology=level.topology,
                dims=tuple(int(d) for d in level.dims),
                link_bw_Bps=float(level.link_bw_Bps),
                hop_latency_s=float(level.hop_latency_s),
                packet_bytes=level.packet_bytes,
                header_bytes=int(level.header_bytes),
                label=level.label,
                ports=getattr(level, "ports", "per_device"),
                algorithm=getattr(level, "algorithm", "auto"),
            )
            for level in levels
        ),
        completion=getattr(network, "completion", "delivery"),
    )


def as_topology(topology) -> NetworkTopology:
    """Accept a :class:`NetworkTopology`, a schema ``Network`` or a schema ``NetworkLevel``."""
    if isinstance(topology, NetworkTopology):
        return topology
    if isinstance(topology, TopologyLevel):
        return NetworkTopology((topology,))
    if hasattr(topology, "topology") or hasattr(topology, "levels"):
        return _from_schema(topology)
    raise TypeError(f"expected a NetworkTopology or a schema Network, got {type(topology).__name__}")
