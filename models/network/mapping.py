"""Mapping of logical ranks to devices: which devices form each group of a parallel dimension (§4.1.4, Stage 1)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np


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
