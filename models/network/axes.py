"""Axes of a network structure and the links a flow crosses on them (dimension-order routing, vectorised).

A *structure* is a topology's ``((topology name, dims, ports), ...)`` per level, innermost first: all that
routing depends on. Its axes are the 1-D routing dimensions (one per level, two per mesh/torus), in device-id
digit order. An axis of a ``per_device`` level is replicated once per combination of the other axes'
coordinates (rail-style ports: every device has its own); an axis of a ``shared_uplink`` level once per
combination of the other axes' coordinates *outside its level's inner groups*, so all devices of one group
share one set of links.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from deepstack.models import memo
from deepstack.models.network.topologies import Topology, topology_kind

Structure = tuple[tuple[str, tuple[int, ...], str], ...]

# Who owns a level's links (see :class:`~deepstack.models.network.TopologyLevel`).
PORTS: tuple[str, ...] = ("per_device", "shared_uplink")


@dataclass(frozen=True)
class Axis:
    """One routing dimension: a 1-D level, or one dimension of a mesh/torus."""

    level: int
    kind: type[Topology]  # the 1-D kind that routes it
    size: int
    stride: int  # mixed-radix weight of this axis' digit in the device id
    offset: int  # first link id of this axis inside its level
    group: int  # devices sharing one copy's ports: 1 (per device), or the devices inside one node of the level
    copies: int  # copies of this axis in the network
    exit_stride: int  # flows whose ids differ above this radix leave through a shared outer level (0: none)


def structure_devices(structure: Structure) -> int:
    """Devices of a topology structure: the product of every level's dimensions."""
    return math.prod(math.prod(dims) for _, dims, _ in structure)


@memo.cached(maxsize=64)
def axes(structure: Structure) -> tuple[Axis, ...]:
    """The axes of a structure with more than one node, innermost first."""
    devices = structure_devices(structure)
    found: list[Axis] = []
    stride = 1
    starts = [1]  # device-id radix where each level starts
    for _, dims, _ in structure:
        starts.append(starts[-1] * math.prod(dims))
    for level, (topology, dims, ports) in enumerate(structure):
        offset = 0
        level_kind = topology_kind(topology)
        group = stride if ports == "shared_uplink" else 1  # the devices inside one node of this level
        shared_above = [starts[j] for j in range(level + 1, len(structure)) if structure[j][2] == "shared_uplink"]
        for size in dims:
            if size > 1:
                kind = level_kind.axis(size)
                copies = devices // size // group
                exit_stride = shared_above[0] if shared_above and kind.hub else 0
                found.append(Axis(level, kind, size, stride, offset, group, copies, exit_stride))
                offset += copies * kind.links(size)
            stride *= size
    return tuple(found)


@memo.cached(maxsize=64)
def level_link_counts(structure: Structure) -> tuple[int, ...]:
    """Directed links of each level over the whole network (every copy of the level)."""
    counts = [0] * len(structure)
    for axis in axes(structure):
        counts[axis.level] += axis.copies * axis.kind.links(axis.size)
    return tuple(counts)


@memo.cached(maxsize=64)
def local_table(kind: type[Topology], n: int) -> np.ndarray:
    """Padded route table of one axis: ``table[a, b, h]`` = h-th local link from a to b, −1 past the end."""
    paths = [[kind.path(n, a, b) if a != b else [] for b in range(n)] for a in range(n)]
    width = max(1, max(len(path) for row in paths for path in row))
    table = np.full((n, n, width), -1, dtype=np.int64)
    for a in range(n):
        for b in range(n):
            table[a, b, : len(paths[a][b])] = paths[a][b]
    table.flags.writeable = False
    return table


@memo.cached(maxsize=64)
def _axis_digits(structure: Structure) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None], ...]:
    """Per axis, indexed by device id: its coordinate on the axis, the two terms of the copy of the axis a flow
    travels on (``lower[dst] + upper[src]``: in innermost-first dimension order the lower axes already hold the
    destination's digits, the higher ones still the source's; inside a group the lower digits pick no port),
    and its block above ``exit_stride`` (None without one) — looked up per flow instead of dividing every flow's
    ids again."""
    devices = np.arange(structure_devices(structure), dtype=np.int64)
    out = []
    for axis in axes(structure):
        coordinate = (devices // axis.stride) % axis.size
        lower = (devices % axis.stride) // axis.group
        upper = (axis.stride // axis.group) * (devices // (axis.stride * axis.size))
        block = devices // axis.exit_stride if axis.exit_stride else None  # read only for a shared uplink
        for array in (coordinate, lower, upper, block):
            if array is not None:
                array.flags.writeable = False
        out.append((coordinate, lower, upper, block))
    return tuple(out)


def pair_links(structure: Structure, src: np.ndarray, dst: np.ndarray):
    """Route flows ``src[i] → dst[i]`` (vectorised).

    Returns:
        ``(links, hops)``: ``links[k]`` = (flow index array, link id array) of the level-k links the flows use
        (one entry per link traversal), ``hops`` = int array (levels × flows) of link traversals per level.
    """
    hops = np.zeros((len(structure), len(src)), dtype=np.int64)
    rows: list[list[np.ndarray]] = [[] for _ in structure]
    cols: list[list[np.ndarray]] = [[] for _ in structure]
    for axis, (coordinate, lower, upper, block) in zip(axes(structure), _axis_digits(structure), strict=True):
        at_src, at_dst = coordinate[src], coordinate[dst]
        if not axis.exit_stride and np.array_equal(at_src, at_dst):
            continue  # no flow moves along this axis (a collective's groups often differ in a few axes only)
        table = local_table(axis.kind, axis.size)
        # one gather of rows by the flat (source, destination) position: faster than two index arrays
        local = table.reshape(axis.size * axis.size, -1)[at_src * axis.size + at_dst]
        copy = lower[dst] + upper[src]
        if axis.exit_stride:
            # A flow leaving its group through a shared uplink reaches it through this level's hub (switch): up
            # from the source in its group, down to the destination in the destination's group — even where
            # the two sit at the same position of their groups.
            leaves = block[src] != block[dst]
            dst_l = dst[leaves]
            up, down = axis.kind.via_hub(axis.size, at_src[leaves], at_dst[leaves])
            local[leaves] = -1
            local[leaves, 0] = up
            down_links = axis.offset + (lower[dst_l] + upper[dst_l]) * axis.kind.links(axis.size) + down
        flow_idx, hop_idx = np.nonzero(local >= 0)
        link = axis.offset + copy[flow_idx] * axis.kind.links(axis.size) + local[flow_idx, hop_idx]
        hops[axis.level] += np.bincount(flow_idx, minlength=len(src))  # the links each flow crosses here
        if axis.exit_stride:
            flow_idx = np.concatenate([flow_idx, np.flatnonzero(leaves)])
            link = np.concatenate([link, down_links])
            hops[axis.level] += leaves  # and the down hop
        rows[axis.level].append(flow_idx)
        cols[axis.level].append(link)
    empty = np.zeros(0, dtype=np.int64)
    links = tuple(
        (np.concatenate(r) if r else empty, np.concatenate(c) if c else empty) for r, c in zip(rows, cols, strict=True)
    )
    return links, hops
