"""Axes of a network structure and the links a flow crosses on them (dimension-order routing, vectorised).

A *structure* is a topology's ``((topology name, dims), ...)`` per level, innermost first: all that routing
depends on. Its axes are the 1-D routing dimensions (one per level, two per mesh/torus), in device-id digit
order; each is replicated once per combination of the other axes' coordinates (rail-style ports).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from deepstack.models import memo
from deepstack.models.network.topologies import Topology, topology_kind

Structure = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class Axis:
    """One routing dimension: a 1-D level, or one dimension of a mesh/torus."""

    level: int
    kind: type[Topology]  # the 1-D kind that routes it
    size: int
    stride: int  # mixed-radix weight of this axis' digit in the device id
    offset: int  # first link id of this axis inside its level


def structure_devices(structure: Structure) -> int:
    """Devices of a topology structure: the product of every level's dimensions."""
    return math.prod(math.prod(dims) for _, dims in structure)


@memo.cached(maxsize=64)
def axes(structure: Structure) -> tuple[Axis, ...]:
    """The axes of a structure with more than one node, innermost first."""
    devices = structure_devices(structure)
    found: list[Axis] = []
    stride = 1
    for level, (topology, dims) in enumerate(structure):
        offset = 0
        level_kind = topology_kind(topology)
        for size in dims:
            if size > 1:
                kind = level_kind.axis(size)
                found.append(Axis(level, kind, size, stride, offset))
                offset += (devices // size) * kind.links(size)
            stride *= size
    return tuple(found)


@memo.cached(maxsize=64)
def level_link_counts(structure: Structure) -> tuple[int, ...]:
    """Directed links of each level over the whole network (every copy of the level)."""
    devices = structure_devices(structure)
    counts = [0] * len(structure)
    for axis in axes(structure):
        counts[axis.level] += (devices // axis.size) * axis.kind.links(axis.size)
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


def pair_links(structure: Structure, src: np.ndarray, dst: np.ndarray):
    """Route flows ``src[i] → dst[i]`` (vectorised).

    Returns:
        ``(links, hops)``: ``links[k]`` = (flow index array, link id array) of the level-k links the flows use
        (one entry per link traversal), ``hops`` = int array (levels × flows) of link traversals per level.
    """
    hops = np.zeros((len(structure), len(src)), dtype=np.int64)
    rows: list[list[np.ndarray]] = [[] for _ in structure]
    cols: list[list[np.ndarray]] = [[] for _ in structure]
    for axis in axes(structure):
        table = local_table(axis.kind, axis.size)
        local = table[(src // axis.stride) % axis.size, (dst // axis.stride) % axis.size]
        valid = local >= 0
        # Innermost-first dimension order: lower axes already hold the destination's digits, higher axes
        # still the source's; together they name the copy of this axis the flow travels on.
        copy = dst % axis.stride + axis.stride * (src // (axis.stride * axis.size))
        flow_idx, hop_idx = np.nonzero(valid)
        link = axis.offset + copy[flow_idx] * axis.kind.links(axis.size) + local[flow_idx, hop_idx]
        rows[axis.level].append(flow_idx)
        cols[axis.level].append(link)
        hops[axis.level] += valid.sum(axis=1)
    empty = np.zeros(0, dtype=np.int64)
    links = tuple(
        (np.concatenate(r) if r else empty, np.concatenate(c) if c else empty) for r, c in zip(rows, cols, strict=True)
    )
    return links, hops
