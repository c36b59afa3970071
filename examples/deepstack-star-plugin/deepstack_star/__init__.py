"""An example DeepStack plugin: everything it adds is declared here, and nothing in DeepStack is edited.

* ``star``: a topology kind, one hub (position 0) with a link each way to every leaf, leaf to leaf through it;
* ``reduce_then_broadcast``: an all-reduce through rank 0 (every other rank sends it its whole vector, then it
  sends the sum back);
* the NoC preset ``star8`` (``catalog/nocs/star8.toml``): eight 100 mm² clusters around one hub, on a star.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from deepstack.models.collectives import Algorithm, register_algorithm, step
from deepstack.models.network import Topology, register_topology
from deepstack.registry import register_catalog


class Star(Topology):
    """Leaf i has an up link i − 1 (leaf → hub) and a down link (n − 1) + (i − 1) (hub → leaf)."""

    @classmethod
    def links(cls, n):
        return 2 * (n - 1)

    @classmethod
    def path(cls, n, a, b):
        up = [] if a == 0 else [a - 1]
        down = [] if b == 0 else [(n - 1) + (b - 1)]
        return up + down

    @classmethod
    def node_ports(cls, n):
        return n - 1  # the hub's


class ReduceThenBroadcast(Algorithm):
    """All-reduce through rank 0: the whole vector in, the sum out."""

    name, ops = "reduce_then_broadcast", ("all_reduce",)

    def steps(self, op, p):
        others = np.arange(1, p)
        return [step("reduce", others, np.zeros_like(others), 1.0),
                step("broadcast", np.zeros_like(others), others, 1.0)]


def register() -> None:
    """DeepStack's entry point (group ``deepstack.plugins``): declare the topology, the algorithm, the presets."""
    register_topology("star", Star)
    register_algorithm(ReduceThenBroadcast())
    register_catalog("deepstack-star-plugin", Path(__file__).parent / "catalog")
