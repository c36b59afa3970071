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
* **Rail-style ports, no gateway.** Every device has its own port into every level: the device with inner
  coordinates ``c`` is linked to the devices with the same inner coordinates in the other groups. So a level
  of size ``s`` is replicated ``N/s`` times, one copy per combination of the other levels' coordinates, and
  its links are indexed by (copy, link of the level's topology). Why: Table 3 gives one bandwidth per link of
  each level and no gateway count; multi-accelerator systems give each accelerator its own NIC / UCIe edge
  (rail-optimised wiring), and a single gateway per group would silently divide an outer link among all inner
  devices. It also makes the network a Cartesian product, where dimension-order routing is exact and minimal.
* **Routing.** Dimension order over all axes, innermost first (L1, then L2 x, L2 y, then L3 x, L3 y): a flow
  first reaches the destination's L1 coordinate inside the source's group, then crosses L2 on the rail of the
  destination's L1 coordinate, then L3 (like NCCL's PXN: fast local hops first, one slow hop on the right
  rail). Per axis: *switch* — node→switch uplink + switch→node downlink (2 hops, one link each way per node);
  *fully_connected* — one direct link per ordered pair (1 hop); *chain* (and each mesh dimension) — the only
  minimal path; *ring* (and each torus dimension) — the shorter way round, and on a tie (even size, exactly
  half-way) a source at an even coordinate goes up and an odd one goes down, which is deterministic and keeps
  both directions equally loaded under all-to-all. A ring of two nodes is a chain (one link per direction).
* **Links** are directed; ``link_bw_Bps`` is per link and direction (full duplex).
* **Framing.** On a level with ``packet_bytes`` set, a flow of ``b`` payload bytes occupies
  ``b + ceil(b / packet_bytes) · header_bytes`` bytes on each of that level's links it crosses (per flow, per
  level: a flow is re-framed at every level it crosses).
* Bytes a device sends to itself never touch the network; zero traffic costs zero time.

Routing is vectorised: for each topology *structure* (topologies and dims, not bandwidths or latencies) the
flow→link incidence of every device pair is built once as one sparse matrix per level and memoised, so routing
a TM is one sparse matrix–vector product per level.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from deepstack.models import memo
from deepstack.models.hashing import cached_hash, state_without_hash

TOPOLOGIES = ("switch", "ring", "chain", "mesh", "torus", "fully_connected")
_TWO_D = ("mesh", "torus")

# Above this many devices the all-pairs incidence (N² rows) is not cached; the active flows are routed on the
# fly instead. 512 devices → 262,144 pairs, a few tens of MB of incidence (a memory choice, not a constant).
_MAX_CACHED_DEVICES = 512
# A TM with more active flows than this fraction of all pairs is routed by a full mat-vec instead of first
# slicing the incidence rows of its flows (slicing costs about as much as the full product beyond this).
_DENSE_FRACTION = 0.125
# route_batch routes at most this many (step, link) cells per level at once (bounds its memory to ~32 MB).
_BATCH_CELLS = 1 << 22


# --------------------------------------------------------------------------------------------------------------
# Topology description (SI units, frozen and hashable so everything downstream can be memoised)
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopologyLevel:
    """One level of the hierarchical network, in SI units.

    Attributes:
        topology: one of ``switch``, ``ring``, ``chain``, ``mesh``, ``torus``, ``fully_connected``.
        dims: one size, or two (X, Y) for mesh and torus.
        link_bw_Bps: bandwidth of one link in one direction, B/s.
        hop_latency_s: latency of one link traversal (δ_hop), s.
        packet_bytes: payload bytes per packet, or None for no framing.
        header_bytes: protocol overhead bytes per packet (ignored without ``packet_bytes``).
        label: free text for reports (e.g. "L3 system").
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

    def __post_init__(self) -> None:
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"topology: must be one of {', '.join(TOPOLOGIES)} (got {self.topology!r})")
        want = 2 if self.topology in _TWO_D else 1
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
    """A hierarchical network, innermost level first; ``devices`` = product of the level sizes."""

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    levels: tuple[TopologyLevel, ...]

    def __post_init__(self) -> None:
        if not self.levels:
            raise ValueError("a network needs at least one level")

    @functools.cached_property
    def devices(self) -> int:
        return math.prod(level.size for level in self.levels)

    @functools.cached_property
    def structure(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Topology and dims of each level: all that routing depends on (the memoisation key of routes)."""
        return tuple((level.topology, tuple(level.dims)) for level in self.levels)

    @functools.cached_property
    def framing(self) -> tuple[tuple[int | None, int], ...]:
        """(packet bytes, header bytes) of each level: with the structure, all a flow's wire bytes depend on."""
        return tuple((level.packet_bytes, level.header_bytes) for level in self.levels)

    @functools.cached_property
    def hop_latencies_s(self) -> tuple[float, ...]:
        return tuple(level.hop_latency_s for level in self.levels)

    @functools.cached_property
    def link_bw_column(self) -> np.ndarray:
        """Each level's link bandwidth, B/s, as a (levels × 1) column (to divide per-level loads by)."""
        return readonly(np.array([[level.link_bw_Bps] for level in self.levels]))

    @functools.cached_property
    def level_links(self) -> tuple[int, ...]:
        """Directed links of each level over the whole network (every copy of the level)."""
        return _level_link_counts(self.structure)

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
            )
            for level in levels
        )
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


# --------------------------------------------------------------------------------------------------------------
# Axes and local routes
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Axis:
    """One routing dimension: a 1-D level, or one dimension of a mesh/torus."""

    level: int
    kind: str  # switch | fully_connected | chain | ring
    size: int
    stride: int  # mixed-radix weight of this axis' digit in the device id
    offset: int  # first link id of this axis inside its level


_AXIS_KIND = {"switch": "switch", "fully_connected": "fully_connected", "ring": "ring", "torus": "ring"}


def _axis_kind(topology: str, size: int) -> str:
    kind = _AXIS_KIND.get(topology, "chain")
    return "chain" if kind == "ring" and size <= 2 else kind


def structure_devices(structure: tuple[tuple[str, tuple[int, ...]], ...]) -> int:
    """Devices of a topology structure: the product of every level's dimensions."""
    return math.prod(math.prod(dims) for _, dims in structure)


@memo.cached(maxsize=64)
def _axes(structure: tuple[tuple[str, tuple[int, ...]], ...]) -> tuple[_Axis, ...]:
    devices = structure_devices(structure)
    axes: list[_Axis] = []
    stride = 1
    for level, (topology, dims) in enumerate(structure):
        offset = 0
        for size in dims:
            if size > 1:
                kind = _axis_kind(topology, size)
                axes.append(_Axis(level, kind, size, stride, offset))
                offset += (devices // size) * _local_links(kind, size)
            stride *= size
    return tuple(axes)


@memo.cached(maxsize=64)
def _level_link_counts(structure: tuple[tuple[str, tuple[int, ...]], ...]) -> tuple[int, ...]:
    devices = structure_devices(structure)
    counts = [0] * len(structure)
    for axis in _axes(structure):
        counts[axis.level] += (devices // axis.size) * _local_links(axis.kind, axis.size)
    return tuple(counts)


def _local_links(kind: str, n: int) -> int:
    """Directed links of one copy of an axis of n nodes."""
    return {"switch": 2 * n, "fully_connected": n * (n - 1), "chain": 2 * (n - 1), "ring": 2 * n}[kind]


def _local_path(kind: str, n: int, a: int, b: int) -> list[int]:
    """Link ids (local to one axis copy) a flow from position a to position b traverses, in order."""
    if a == b:
        return []
    if kind == "switch":  # uplink of a is link a, downlink to b is link n + b
        return [a, n + b]
    if kind == "fully_connected":  # links numbered row-major over ordered pairs without the diagonal
        return [a * (n - 1) + (b if b < a else b - 1)]
    if kind == "chain":  # up link leaving i is i (i < n-1); down link leaving i is (n-1) + (i-1)
        return list(range(a, b)) if a < b else [(n - 1) + (i - 1) for i in range(a, b, -1)]
    forward = (b - a) % n  # ring: up link leaving i is i, down link leaving i is n + i
    backward = n - forward
    if forward < backward or (forward == backward and a % 2 == 0):
        return [(a + k) % n for k in range(forward)]
    return [n + (a - k) % n for k in range(backward)]


@memo.cached(maxsize=64)
def _local_table(kind: str, n: int) -> np.ndarray:
    """Padded route table of one axis: ``table[a, b, h]`` = h-th local link from a to b, −1 past the end."""
    paths = [[_local_path(kind, n, a, b) for b in range(n)] for a in range(n)]
    width = max(1, max(len(path) for row in paths for path in row))
    table = np.full((n, n, width), -1, dtype=np.int64)
    for a in range(n):
        for b in range(n):
            table[a, b, : len(paths[a][b])] = paths[a][b]
    table.flags.writeable = False
    return table


# --------------------------------------------------------------------------------------------------------------
# Incidence: flow → links
# --------------------------------------------------------------------------------------------------------------


def _pair_links(structure, src: np.ndarray, dst: np.ndarray):
    """Route flows ``src[i] → dst[i]`` (vectorised).

    Returns:
        ``(links, hops)``: ``links[k]`` = (flow index array, link id array) of the level-k links the flows use
        (one entry per link traversal), ``hops`` = int array (levels × flows) of link traversals per level.
    """
    hops = np.zeros((len(structure), len(src)), dtype=np.int64)
    rows: list[list[np.ndarray]] = [[] for _ in structure]
    cols: list[list[np.ndarray]] = [[] for _ in structure]
    for axis in _axes(structure):
        table = _local_table(axis.kind, axis.size)
        local = table[(src // axis.stride) % axis.size, (dst // axis.stride) % axis.size]
        valid = local >= 0
        # Innermost-first dimension order: lower axes already hold the destination's digits, higher axes
        # still the source's; together they name the copy of this axis the flow travels on.
        copy = dst % axis.stride + axis.stride * (src // (axis.stride * axis.size))
        flow_idx, hop_idx = np.nonzero(valid)
        link = axis.offset + copy[flow_idx] * _local_links(axis.kind, axis.size) + local[flow_idx, hop_idx]
        rows[axis.level].append(flow_idx)
        cols[axis.level].append(link)
        hops[axis.level] += valid.sum(axis=1)
    empty = np.zeros(0, dtype=np.int64)
    links = tuple(
        (np.concatenate(r) if r else empty, np.concatenate(c) if c else empty) for r, c in zip(rows, cols, strict=True)
    )
    return links, hops


@dataclass(frozen=True, eq=False)
class _Incidence:
    """All-pairs routes of one structure: per level a (pairs × links) CSR matrix and its transpose."""

    hops: np.ndarray  # (levels, N*N) int
    by_pair: tuple[sp.csr_matrix, ...]
    by_link: tuple[sp.csr_matrix, ...]


@memo.cached(maxsize=8)
def _incidence(structure) -> _Incidence:
    devices = structure_devices(structure)
    pairs = np.arange(devices * devices, dtype=np.int64)
    links, hops = _pair_links(structure, pairs // devices, pairs % devices)
    counts = _level_link_counts(structure)
    by_pair, by_link = [], []
    for (flow_idx, link), n_links in zip(links, counts, strict=True):
        ones = np.ones(len(link))
        matrix = sp.csr_matrix((ones, (flow_idx, link)), shape=(devices * devices, n_links))
        by_pair.append(matrix)
        by_link.append(matrix.T.tocsr())
    hops.flags.writeable = False
    return _Incidence(hops, tuple(by_pair), tuple(by_link))


def flow_link_counts(structure, src: np.ndarray, dst: np.ndarray, cell: np.ndarray, cells: int):
    """How many of the flows ``src[i] → dst[i]`` cross every link, per cell (e.g. per step of a collective).

    Routes only these flows, so it is cheap for the few pairs of a collective; on a structure whose all-pairs
    routes :func:`prepare` built, it gathers the flows' rows from those instead.

    Args:
        structure: a topology's :attr:`NetworkTopology.structure`.
        src, dst: device ids per flow (src ≠ dst).
        cell: which cell (0 … cells−1) each flow belongs to.
        cells: number of cells.

    Returns:
        ``(counts, hops)``: per level a (cells × links) int array of flows crossing each link, and the
        (levels × flows) link traversals of every flow.
    """
    incidence = _PREPARED.get(structure)
    if incidence is not None:  # the flows' routes are rows of the all-pairs incidence: gather them
        pairs = src * structure_devices(structure) + dst
        counts = tuple(_gather_cells(by_pair, pairs, cell, cells, n_links)
                       for by_pair, n_links in zip(incidence.by_pair, _level_link_counts(structure), strict=True))
        return counts, incidence.hops[:, pairs]
    links, hops = _pair_links(structure, src, dst)
    counts = tuple(
        np.bincount(cell[flow_idx] * n_links + link, minlength=cells * n_links).reshape(cells, n_links)
        for (flow_idx, link), n_links in zip(links, _level_link_counts(structure), strict=True)
    )
    return counts, hops


class _Prepared(dict):
    """Structure → its all-pairs routes, for the structures :func:`prepare` was asked for (collective plans
    gather from them); forgotten with the memo tables, like the incidence itself."""

    cache_clear = dict.clear


_PREPARED = _Prepared()


def prepare(topology) -> None:
    """Build (and memoise) the all-pairs routes of a topology now, e.g. before timing or forking workers. From
    then on the collectives planned on its structure take their flows' routes from them instead of routing each
    flow (about 4× faster per flow: worth it for a search, which plans every collective of many schedules, not
    for one evaluation, which plans a few)."""
    topology = as_topology(topology)
    if topology.devices <= _MAX_CACHED_DEVICES:
        _PREPARED[topology.structure] = _incidence(topology.structure)


# --------------------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------------------


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
    for index, (level, n_links, peak, total) in enumerate(
        zip(topology.levels, topology.level_links, peaks, totals, strict=True)
    ):
        busy = 1.0 / (level.link_bw_Bps * time_s) if time_s > 0 else 0.0
        mean = total / n_links * busy if n_links else 0.0
        loads.append(LevelLoad(index, level.label, n_links, float(total), float(peak), peak * busy, mean))
    return tuple(loads)


def _zero_result(topology: NetworkTopology) -> RoutedFlows:
    link_bytes = tuple(readonly(np.zeros(n)) for n in topology.level_links)
    return RoutedFlows(NetworkResult(0.0, 0.0, 0.0, 0.0, 0, level_loads(topology, link_bytes, 0.0)), link_bytes)


def readonly(array: np.ndarray) -> np.ndarray:
    """The array, made read-only (memoised results are shared: nobody may change them in place)."""
    array.flags.writeable = False
    return array


# --------------------------------------------------------------------------------------------------------------
# Routing
# --------------------------------------------------------------------------------------------------------------


def _cached(topology: NetworkTopology) -> bool:
    return topology.devices <= _MAX_CACHED_DEVICES


def _is_dense(topology: NetworkTopology, flows: int) -> bool:
    return _cached(topology) and flows > _DENSE_FRACTION * topology.devices**2


@memo.cached(maxsize=32)
def _pair_latency(structure, hop_latencies_s: tuple[float, ...]) -> np.ndarray:
    """Zero-load latency Σ_levels hops·δ of every device pair (index s·N + d), s."""
    return readonly(np.asarray(hop_latencies_s) @ _incidence(structure).hops)


def _route_dense(topology: NetworkTopology, full: np.ndarray) -> RoutedFlows:
    """Eq. 4 for a flattened N² payload vector (index s·N + d, zero diagonal): one mat-vec per level."""
    active = full > 0
    flows = int(np.count_nonzero(active))
    if flows == 0:
        return _zero_result(topology)
    incidence = _incidence(topology.structure)
    link_bytes = tuple(
        by_link @ level.wire_bytes(full) for level, by_link in zip(topology.levels, incidence.by_link, strict=True)
    )
    latency = float(_pair_latency(topology.structure, topology.hop_latencies_s)[active].max())
    return _finish(topology, link_bytes, latency, flows)


def _row_positions(matrix: sp.csr_matrix, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions in ``matrix.indices`` of the entries of ``rows`` (concatenated), and each row's entry count."""
    starts = matrix.indptr[rows]
    lengths = matrix.indptr[rows + 1] - starts
    ends = np.cumsum(lengths)
    positions = np.repeat(starts - ends + lengths, lengths) + np.arange(ends[-1] if len(ends) else 0)
    return positions, lengths


def _gather_rows(matrix: sp.csr_matrix, rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``weights @ matrix[rows]`` without scipy's per-call slicing overhead (a few flows are common)."""
    positions, lengths = _row_positions(matrix, rows)
    links = np.bincount(matrix.indices[positions], weights=np.repeat(weights, lengths), minlength=matrix.shape[1])
    return links.astype(float)


def _gather_cells(by_pair: sp.csr_matrix, pairs: np.ndarray, cell: np.ndarray, cells: int, n_links: int,
                  weights: np.ndarray | None = None) -> np.ndarray:
    """(cells × links): on each link, how many of the pairs of each cell cross it (their ``weights`` summed when
    given), gathered from the rows of the all-pairs incidence ``by_pair``."""
    positions, lengths = _row_positions(by_pair, pairs)
    index = np.repeat(cell, lengths) * n_links + by_pair.indices[positions]
    repeated = None if weights is None else np.repeat(weights, lengths)
    return np.bincount(index, weights=repeated, minlength=cells * n_links).reshape(cells, n_links)


def _route_sparse(topology: NetworkTopology, pairs: np.ndarray, payload: np.ndarray) -> RoutedFlows:
    """Eq. 4 for unique active pairs (index s·N + d, s ≠ d) carrying ``payload`` bytes each."""
    if len(pairs) == 0:
        return _zero_result(topology)
    if _cached(topology):
        incidence = _incidence(topology.structure)
        hops = incidence.hops[:, pairs]
        link_bytes = tuple(
            _gather_rows(by_pair, pairs, level.wire_bytes(payload))
            for level, by_pair in zip(topology.levels, incidence.by_pair, strict=True)
        )
    else:
        devices = topology.devices
        links, hops = _pair_links(topology.structure, pairs // devices, pairs % devices)
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
    congestion = max(peak / level.link_bw_Bps for level, peak in zip(topology.levels, peaks, strict=True))
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
    incidence = _incidence(topology.structure)
    per_level = [_gather_cells(by_pair, pairs, step, n_steps, n_links, level.wire_bytes(payload))
                 for level, by_pair, n_links in zip(topology.levels, incidence.by_pair, topology.level_links,
                                                     strict=True)]
    latency = np.asarray(topology.hop_latencies_s) @ incidence.hops[:, pairs]
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


# --------------------------------------------------------------------------------------------------------------
# Rank → device mapping
# --------------------------------------------------------------------------------------------------------------


def order_by_intensity(
    degrees: Sequence[tuple[str, int]], bytes_per_dim: Mapping[str, float]
) -> tuple[tuple[str, int], ...]:
    """Order parallel dimensions innermost first by communication volume (paper §4.1.4, Stage 1).

    The most communication-intensive dimension (usually TP) goes innermost, so its groups land on the
    innermost, fastest level. Ties keep the given order.

    Args:
        degrees: (name, degree) per dimension, e.g. ``[("dp", 8), ("tp", 4), ("ep", 8)]``.
        bytes_per_dim: bytes each dimension's collectives move (any consistent measure); missing names count 0.
    """
    ranked = sorted(enumerate(degrees), key=lambda item: (-bytes_per_dim.get(item[1][0], 0.0), item[0]))
    return tuple((name, int(size)) for _, (name, size) in ranked)


def device_groups(
    layout: Sequence[tuple[str, int]], dim: str, devices: int | None = None
) -> tuple[tuple[int, ...], ...]:
    """Device ids of every group of one parallel dimension.

    Ranks are numbered in mixed radix over ``layout`` with its first dimension fastest, and rank r runs on
    device r; since device ids put the innermost network level fastest, the first dimension of the layout is
    placed innermost (use :func:`order_by_intensity` to put the busiest dimension first).

    Args:
        layout: (name, degree) per dimension, innermost first, e.g. ``[("tp", 4), ("ep", 8), ("dp", 8)]``.
        dim: the dimension whose groups are wanted.
        devices: if given, the degrees must multiply to it.

    Returns:
        One tuple of device ids per group (in rank order within the group), groups ordered by their first device.
    """
    names = [name for name, _ in layout]
    sizes = [int(size) for _, size in layout]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate dimension names in layout {names}")
    if any(size < 1 for size in sizes):
        raise ValueError(f"degrees must be ≥ 1, got {sizes}")
    if dim not in names:
        raise ValueError(f"unknown dimension {dim!r}; layout has {', '.join(names)}")
    total = math.prod(sizes)
    if devices is not None and total != devices:
        raise ValueError(f"layout degrees multiply to {total}, but the network has {devices} devices")
    index = names.index(dim)
    stride = math.prod(sizes[:index])
    size = sizes[index]
    ranks = np.arange(total).reshape(-1, size, stride)  # (outer, this dim, inner) in C order
    groups = ranks.transpose(0, 2, 1).reshape(-1, size)
    return tuple(map(tuple, groups.tolist()))
