"""Stage 2 of the dual-stage network abstraction (paper §4.1.4, eq. 4): route traffic matrices on a topology.

A traffic matrix (TM) says how many payload bytes each device sends to each other device in one step; all its
flows start together. Routing accumulates the bytes ``V_l`` every directed link ``l`` carries, and

    T_net = L_net + T_cong,   L_net = max over active flows of Σ_levels hops · δ_level,
                              T_cong = max over links of V_l / BW_l                          (eq. 4).

Stage 1 (which TMs a collective produces) is :mod:`deepstack.models.collectives`.

Physical numbering and routing (the assumptions every result rests on):

* **Numbering.** Levels are innermost first (L1 die, L2 chip, L3 system). Device ``d`` has one coordinate per
  level in mixed radix, innermost fastest: ``d = c1 + s1·(c2 + s2·c3)``. A 2-D level of dims ``(X, Y)``
  numbers its positions ``x + X·y``. The whole network is therefore a list of *axes* (one per 1-D level, two
  per mesh/torus), and a device's axis coordinates are its mixed-radix digits.
* **Who owns a level's links** (:attr:`TopologyLevel.ports`, a modelled choice every catalog network states).
  ``per_device`` (rail-optimised): every device has its own port into the level — the device with inner
  coordinates ``c`` is linked to the devices with the same inner coordinates in the other groups, so a level of
  size ``s`` is replicated ``N/s`` times (a DGX H100 node has one NIC per GPU). ``shared_uplink``: each group of
  inner devices (one node of the level) has one set of ports its devices share — a leaf switch's uplink, a
  die's UCIe edge, a chip's off-package SerDes — so the level is replicated once per group, not per device; a
  flow that leaves its group through it crosses the inner level's switch (up at the source, down at the
  destination, even between devices at the same inner position), and since the group's devices together can
  fill it faster than it drains it delivers ``SHARED_UPLINK_UTILISATION`` (0.96, calibrated) of its bandwidth.
* **Routing.** Dimension order over all axes, innermost first (L1, then L2 x, L2 y, then L3 x, L3 y): a flow first
  reaches the destination's L1 coordinate inside the source's group, then crosses L2 on the rail of the
  destination's L1 coordinate, then L3 (like NCCL's PXN: fast local hops first, one slow hop on the right rail).
  Per axis (each kind is a class in :mod:`.topologies`; more can be registered): *switch* — node→switch uplink +
  switch→node downlink (2 hops, one link each way per node); *fully_connected* — one direct link per ordered pair
  (1 hop); *chain* (and each mesh dimension) — the only minimal path; *ring* (and each torus dimension) — the
  shorter way round, and on a tie (even size, exactly half-way) up, as dimension-order torus routers (and
  ASTRA-sim's NS-3 reference) resolve it. A ring of two nodes is a chain (one link per direction).
* **Step completion** (:attr:`NetworkTopology.completion`): a dependent step starts when the previous one's last
  byte is delivered (one path latency), or when it is ``acknowledged`` (two: RDMA completions, ASTRA-sim's NS-3).
* **Links** are directed; ``link_bw_Bps`` is per link and direction (full duplex).
* **Framing.** On a level with ``packet_bytes`` set, a flow of ``b`` payload bytes occupies
  ``b + ceil(b / packet_bytes) · header_bytes`` bytes on each of that level's links it crosses (per flow, per
  level: a flow is re-framed at every level it crosses).
* Bytes a device sends to itself never touch the network; zero traffic costs zero time.

Routing is vectorised: for each topology *structure* (topologies, dims and port ownership; not bandwidths or
latencies) the flow→link incidence of every device pair is built once as one sparse matrix per level and
memoised, so routing a TM is one sparse matrix–vector product per level.

Modules: :mod:`.topologies` (a class per topology kind, the registry), :mod:`.axes` (axes of a structure, the
links of a route), :mod:`.levels` (:class:`TopologyLevel`, :class:`NetworkTopology`), :mod:`.incidence`
(all-pairs routes, :func:`prepare`), :mod:`.routing` (eq. 4 on traffic matrices), :mod:`.results` and
:mod:`.mapping` (ranks → devices). This package re-exports their public names.
"""

from deepstack.models.network.axes import PORTS, structure_devices
from deepstack.models.network.incidence import flow_link_counts, is_prepared, prepare
from deepstack.models.network.levels import (
    COMPLETIONS,
    SHARED_UPLINK_UTILISATION,
    NetworkTopology,
    TopologyLevel,
    as_topology,
    framed_bytes,
    readonly,
)
from deepstack.models.network.mapping import device_groups, order_by_intensity
from deepstack.models.network.results import LevelLoad, NetworkResult, RoutedFlows, level_loads, summarise_levels
from deepstack.models.network.routing import link_bytes, route_batch, route_flows, route_traffic
from deepstack.models.network.topologies import (
    Topology,
    register_topology,
    topology_kind,
    topology_names,
    unregister_topology,
)

__all__ = [
    "COMPLETIONS",
    "PORTS",
    "SHARED_UPLINK_UTILISATION",
    "LevelLoad",
    "NetworkResult",
    "NetworkTopology",
    "RoutedFlows",
    "Topology",
    "TopologyLevel",
    "as_topology",
    "device_groups",
    "flow_link_counts",
    "framed_bytes",
    "is_prepared",
    "level_loads",
    "link_bytes",
    "order_by_intensity",
    "prepare",
    "readonly",
    "register_topology",
    "route_batch",
    "route_flows",
    "route_traffic",
    "structure_devices",
    "summarise_levels",
    "topology_kind",
    "topology_names",
    "unregister_topology",
]
