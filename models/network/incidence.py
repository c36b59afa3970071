"""All-pairs routes of a structure as sparse flow→link incidence matrices, and gathering flows' rows from them.

Built once per topology *structure* (topologies and dims, not bandwidths or latencies) and memoised, so routing
a traffic matrix is one sparse matrix–vector product per level.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from deepstack.models import memo
from deepstack.models.network.axes import Structure, level_link_counts, pair_links, structure_devices
from deepstack.models.network.levels import as_topology

# Above this many devices the all-pairs incidence (N² rows) is not cached; the active flows are routed on the
# fly instead. 512 devices → 262,144 pairs, a few tens of MB of incidence (a memory choice, not a constant).
MAX_CACHED_DEVICES = 512


@dataclass(frozen=True, eq=False)
class Incidence:
    """All-pairs routes of one structure: per level a (pairs × links) CSR matrix and its transpose."""

    hops: np.ndarray  # (levels, N*N) int
    by_pair: tuple[sp.csr_matrix, ...]
    by_link: tuple[sp.csr_matrix, ...]


@memo.cached(maxsize=8)
def incidence(structure: Structure) -> Incidence:
    """The all-pairs routes of a structure (pair index s·N + d)."""
    devices = structure_devices(structure)
    pairs = np.arange(devices * devices, dtype=np.int64)
    links, hops = pair_links(structure, pairs // devices, pairs % devices)
    counts = level_link_counts(structure)
    by_pair, by_link = [], []
    for (flow_idx, link), n_links in zip(links, counts, strict=True):
        ones = np.ones(len(link))
        matrix = sp.csr_matrix((ones, (flow_idx, link)), shape=(devices * devices, n_links))
        by_pair.append(matrix)
        by_link.append(matrix.T.tocsr())
    hops.flags.writeable = False
    return Incidence(hops, tuple(by_pair), tuple(by_link))


def row_positions(matrix: sp.csr_matrix, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions in ``matrix.indices`` of the entries of ``rows`` (concatenated), and each row's entry count."""
    starts = matrix.indptr[rows]
    lengths = matrix.indptr[rows + 1] - starts
    ends = np.cumsum(lengths)
    positions = np.repeat(starts - ends + lengths, lengths) + np.arange(ends[-1] if len(ends) else 0)
    return positions, lengths


def gather_rows(matrix: sp.csr_matrix, rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``weights @ matrix[rows]`` without scipy's per-call slicing overhead (a few flows are common)."""
    positions, lengths = row_positions(matrix, rows)
    links = np.bincount(matrix.indices[positions], weights=np.repeat(weights, lengths), minlength=matrix.shape[1])
    return links.astype(float)


def gather_cells(by_pair: sp.csr_matrix, pairs: np.ndarray, cell: np.ndarray, cells: int, n_links: int,
                 weights: np.ndarray | None = None) -> np.ndarray:
    """(cells × links): on each link, how many of the pairs of each cell cross it (their ``weights`` summed when
    given), gathered from the rows of the all-pairs incidence ``by_pair``."""
    positions, lengths = row_positions(by_pair, pairs)
    index = np.repeat(cell, lengths) * n_links + by_pair.indices[positions]
    repeated = None if weights is None else np.repeat(weights, lengths)
    return np.bincount(index, weights=repeated, minlength=cells * n_links).reshape(cells, n_links)


# Structure → its all-pairs routes, for the structures prepare() was asked for (collective plans gather from
# them); as many as the incidence memo keeps.
_PREPARED = memo.Table("network.prepared", maxsize=8)


def prepare(topology) -> None:
    """Build (and memoise) the all-pairs routes of a topology now, e.g. before timing or forking workers. From
    then on the collectives planned on its structure take their flows' routes from them instead of routing each
    flow (about 4× faster per flow: worth it for a search, which plans every collective of many schedules, not
    for one evaluation, which plans a few)."""
    topology = as_topology(topology)
    if topology.devices <= MAX_CACHED_DEVICES:
        _PREPARED.put(topology.structure, incidence(topology.structure))


def is_prepared(structure: Structure) -> bool:
    """Whether :func:`prepare` built the all-pairs routes of this structure (and they are still kept)."""
    return structure in _PREPARED


def flow_link_counts(structure: Structure, src: np.ndarray, dst: np.ndarray, cell: np.ndarray, cells: int):
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
    prepared = _PREPARED.get(structure)
    if prepared is not None:  # the flows' routes are rows of the all-pairs incidence: gather them
        pairs = src * structure_devices(structure) + dst
        counts = tuple(gather_cells(by_pair, pairs, cell, cells, n_links)
                       for by_pair, n_links in zip(prepared.by_pair, level_link_counts(structure), strict=True))
        return counts, prepared.hops[:, pairs]
    links, hops = pair_links(structure, src, dst)
    counts = tuple(
        np.bincount(cell[flow_idx] * n_links + link, minlength=cells * n_links).reshape(cells, n_links)
        for (flow_idx, link), n_links in zip(links, level_link_counts(structure), strict=True)
    )
    return counts, hops
