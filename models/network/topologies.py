"""Topology kinds of one network level, behind a registry: everything that differs between a switch, a ring, a
mesh, ... lives in one class here; routing, area and validation ask the registry.

A level is routed as one or two *axes* (1-D routing dimensions, see :mod:`deepstack.models.network`). A 1-D kind
says how many directed links one copy of an axis of ``n`` nodes has, which of them a flow from position ``a``
to position ``b`` crosses, and how many ports one node drives; a 2-D kind (mesh, torus) says which 1-D kind
routes each of its dimensions.

To add a topology, subclass :class:`Topology` and register it (no library edit needed)::

    @register_topology("star")
    class Star(Topology):
        @classmethod
        def links(cls, n): ...
        @classmethod
        def path(cls, n, a, b): ...
        @classmethod
        def node_ports(cls, n): ...

Routes are memoised by topology name: registering or unregistering a kind clears every memo table. The kinds
live in :data:`deepstack.registry.TOPOLOGIES`, which the schema validates network files against, so a
registered kind (here or by a plugin) is named in files and flags like a built-in one.
"""

from __future__ import annotations

from collections.abc import Callable

from deepstack.models import memo
from deepstack.registry import TOPOLOGIES


class Topology:
    """One kind of network level. Subclasses override :meth:`links`, :meth:`path` and :meth:`node_ports` (1-D
    kinds) or :meth:`axis` (kinds routed as other kinds, e.g. each dimension of a mesh as a chain).

    Attributes:
        name: the registered name (set by :func:`register_topology`).
        dimensions: how many sizes a level of this kind has (1, or 2 for X × Y).
    """

    name: str = ""
    dimensions: int = 1
    hub: bool = False  # a level built around one switch, through which flows reach a shared outer uplink

    @classmethod
    def axis(cls, size: int) -> type[Topology]:
        """The 1-D kind that routes one dimension of ``size`` (> 1) nodes of this kind (itself by default)."""
        return cls

    @classmethod
    def links(cls, n: int) -> int:
        """Directed links of one copy of an axis of ``n`` nodes."""
        raise NotImplementedError(f"{cls.__name__} is routed through its axes")

    @classmethod
    def path(cls, n: int, a: int, b: int) -> list[int]:
        """Local link ids (0 … links(n)−1) a flow from position ``a`` to position ``b`` (≠ a) crosses, in order."""
        raise NotImplementedError(f"{cls.__name__} is routed through its axes")

    @classmethod
    def node_ports(cls, n: int) -> int:
        """Links one node drives on an axis of ``n`` (> 1) nodes (its degree; an interior node's where they
        differ), for the NoC area of :mod:`deepstack.models.hardware.area`."""
        raise NotImplementedError(f"{cls.__name__} is routed through its axes")

    @classmethod
    def ports(cls, dims: tuple[int, ...]) -> int:
        """Links one node drives at a level of these dims: the sum over its axes (0 for a level of one node)."""
        return sum(cls.axis(size).node_ports(size) for size in dims if size > 1)


def register_topology(name: str, kind: type[Topology] | None = None) -> Callable | type[Topology]:
    """Register a :class:`Topology` subclass under ``name`` (use directly or as a class decorator).

    Registering clears every memo table (routes are memoised by topology name).
    """

    def add(cls: type[Topology]) -> type[Topology]:
        _add(name, cls)
        memo.clear_caches()
        return cls

    return add if kind is None else add(kind)


def _add(name: str, cls: type[Topology]) -> type[Topology]:
    if not (isinstance(cls, type) and issubclass(cls, Topology)):
        raise TypeError(f"a topology must subclass Topology, got {cls!r}")
    if cls.dimensions not in (1, 2):
        raise ValueError(f"topology {name!r}: dimensions must be 1 or 2, got {cls.dimensions!r}")
    cls.name = name
    return TOPOLOGIES.declare(name, cls)


def _built_in(name: str) -> Callable[[type[Topology]], type[Topology]]:
    """Register a built-in kind at import (no memo to clear yet)."""
    return lambda cls: _add(name, cls)


def unregister_topology(name: str) -> None:
    """Forget a registered topology kind (and every memo table, which may hold its routes)."""
    TOPOLOGIES.get(name)  # ValueError naming the registered kinds
    TOPOLOGIES.forget(name)
    memo.clear_caches()


def topology_names() -> tuple[str, ...]:
    """Names of the registered topology kinds, built-in ones first."""
    return TOPOLOGIES.names()


def topology_kind(name: str) -> type[Topology]:
    """The registered kind called ``name``.

    Raises:
        ValueError: no such kind.
    """
    try:
        return TOPOLOGIES.get(name)
    except ValueError as exc:
        raise ValueError(f"topology: {exc}") from None


# --------------------------------------------------------------------------------------------------------------
# Built-in kinds (per axis; link numbering is local to one copy of the axis)
# --------------------------------------------------------------------------------------------------------------


@_built_in("switch")
class Switch(Topology):
    """One switch: node→switch uplink + switch→node downlink (2 hops; uplink of a is link a, downlink to b is
    link n + b). It is the hub of its group: flows to a shared uplink of an outer level pass through it."""

    hub = True

    @classmethod
    def links(cls, n: int) -> int:
        return 2 * n

    @classmethod
    def path(cls, n: int, a: int, b: int) -> list[int]:
        return [a, n + b]

    @classmethod
    def node_ports(cls, n: int) -> int:
        return 1

    @classmethod
    def via_hub(cls, n: int, a, b):
        """Local ids of the uplink from position ``a`` and the downlink to position ``b`` (arrays welcome)."""
        return a, n + b


@_built_in("ring")
class Ring(Topology):
    """The shorter way round; on a tie (even n, exactly half-way) the up direction, as dimension-order torus
    routers and ASTRA-sim's NS-3 reference resolve it (under all-to-all the up links then carry more than the
    down links: on a ring of 4 each up link carries 3 of every source's per-destination messages, not 2). Up
    link leaving i is i, down link leaving i is n + i. A ring of two nodes is a chain (one link per direction)."""

    @classmethod
    def axis(cls, size: int) -> type[Topology]:
        return Chain if size <= 2 else Ring

    @classmethod
    def links(cls, n: int) -> int:
        return 2 * n

    @classmethod
    def path(cls, n: int, a: int, b: int) -> list[int]:
        forward = (b - a) % n
        backward = n - forward
        if forward <= backward:
            return [(a + k) % n for k in range(forward)]
        return [n + (a - k) % n for k in range(backward)]

    @classmethod
    def node_ports(cls, n: int) -> int:
        return 2


@_built_in("chain")
class Chain(Topology):
    """The only minimal path: up link leaving i is i (i < n−1), down link leaving i is (n−1) + (i−1)."""

    @classmethod
    def links(cls, n: int) -> int:
        return 2 * (n - 1)

    @classmethod
    def path(cls, n: int, a: int, b: int) -> list[int]:
        return list(range(a, b)) if a < b else [(n - 1) + (i - 1) for i in range(a, b, -1)]

    @classmethod
    def node_ports(cls, n: int) -> int:
        return 2 if n > 2 else 1


@_built_in("mesh")
class Mesh(Topology):
    """X × Y grid, each dimension a chain (dimension order: x, then y)."""

    dimensions = 2

    @classmethod
    def axis(cls, size: int) -> type[Topology]:
        return Chain


@_built_in("torus")
class Torus(Topology):
    """X × Y grid with wrap-around, each dimension a ring (a chain where it has two nodes)."""

    dimensions = 2

    @classmethod
    def axis(cls, size: int) -> type[Topology]:
        return Ring.axis(size)


@_built_in("fully_connected")
class FullyConnected(Topology):
    """One direct link per ordered pair (1 hop), numbered row-major over the pairs without the diagonal."""

    @classmethod
    def links(cls, n: int) -> int:
        return n * (n - 1)

    @classmethod
    def path(cls, n: int, a: int, b: int) -> list[int]:
        return [a * (n - 1) + (b if b < a else b - 1)]

    @classmethod
    def node_ports(cls, n: int) -> int:
        return n - 1

