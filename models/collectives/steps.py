"""Stage 1 building blocks: a step is one traffic matrix (TM) in rank space, and the TM patterns the built-in
algorithms are made of. Sizes are bytes per flow; algorithms build them per byte of ``S`` (the per-rank input)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Step:
    """One TM in rank space: rank ``src[i]`` sends ``nbytes[i]`` to rank ``dst[i]``; repeated ``count`` times.

    All flows of a step start together; ``count`` identical consecutive steps (the p−1 steps of a ring) are
    routed once. Build with :func:`step`.
    """

    phase: str
    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    count: int = 1


def step(phase: str, src, dst, nbytes, count: int = 1) -> Step:
    """A :class:`Step` from rank arrays and one size (or a size per flow): ``src[i]`` sends to ``dst[i]``.

    The flows of one step must all carry the same size (every built-in step does; the engine takes a step's
    size from its first flow).
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    return Step(phase, src, dst, np.broadcast_to(np.asarray(nbytes, dtype=float), src.shape), count)


def is_power_of_two(p: int) -> bool:
    return p >= 1 and p & (p - 1) == 0


def ring(phase: str, p: int, nbytes: float, count: int) -> Step:
    """Every rank sends ``nbytes`` to the next one round the ring, ``count`` times."""
    ranks = np.arange(p)
    return step(phase, ranks, (ranks + 1) % p, nbytes, count)


def exchange(phase: str, p: int, distance: int, nbytes: float) -> Step:
    """Recursive halving/doubling step: every rank exchanges ``nbytes`` with rank XOR ``distance``."""
    ranks = np.arange(p)
    return step(phase, ranks, ranks ^ distance, nbytes)


def all_pairs(phase: str, p: int, nbytes: float) -> Step:
    """Every rank sends ``nbytes`` to every other rank."""
    src, dst = np.divmod(np.arange(p * p), p)
    keep = src != dst
    return step(phase, src[keep], dst[keep], nbytes)


def halving(p: int, vector_B: float, near_first: bool) -> list[Step]:
    """Reduce-scatter by recursive halving: log2 p exchanges of S/2, S/4, …, S/p."""
    distances = [1 << k for k in range(p.bit_length() - 1)]
    if not near_first:
        distances.reverse()
    return [exchange("reduce_scatter", p, d, vector_B / (2 << k)) for k, d in enumerate(distances)]


def doubling(p: int, shard_B: float, far_first: bool) -> list[Step]:
    """All-gather by recursive doubling: log2 p exchanges of 1, 2, …, p/2 shards."""
    distances = [1 << k for k in range(p.bit_length() - 1)]
    if far_first:
        distances.reverse()
    return [exchange("all_gather", p, d, shard_B * (1 << k)) for k, d in enumerate(distances)]


def inorder_tree(p: int) -> tuple[np.ndarray, int]:
    """In-order binary tree over ranks 0..p−1: parent of every rank (−1 at the root) and the height in edges."""
    parent = np.full(p, -1, dtype=np.int64)
    height = 0
    stack = [(0, p - 1, -1, 0)]
    while stack:
        lo, hi, up, depth = stack.pop()
        if lo > hi:
            continue
        mid = (lo + hi) // 2
        parent[mid] = up
        height = max(height, depth)
        stack += [(lo, mid - 1, mid, depth + 1), (mid + 1, hi, mid, depth + 1)]
    return parent, height


def double_tree_step(p: int, chunk_B: float, count: int) -> Step:
    """Steady state of the pipelined double tree: one chunk up and one down every edge of both trees."""
    parent, _ = inorder_tree(p)
    child = np.flatnonzero(parent >= 0)
    edges = [(child, parent[child]), ((child + 1) % p, (parent[child] + 1) % p)]  # tree A, tree B = A shifted
    src = np.concatenate([np.concatenate([c, u]) for c, u in edges])
    dst = np.concatenate([np.concatenate([u, c]) for c, u in edges])
    return step("reduce+broadcast", src, dst, chunk_B, count)
