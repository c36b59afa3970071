"""Extension points: a topology and a collective algorithm defined here, registered, and timed without any edit
to the library. Expected times are worked by hand from eq. 4 (per step: hops × δ + busiest link bytes / B)."""

from __future__ import annotations

import numpy as np
import pytest

from deepstack.errors import UserInputError
from deepstack.models import collectives, network
from deepstack.models.collectives import Algorithm, collective_time, step
from deepstack.models.hardware.area import noc_ports
from deepstack.models.network import NetworkTopology, Topology, TopologyLevel
from deepstack.registry import ALGORITHMS, TOPOLOGIES
from deepstack.schema import NetworkLevel, Schedule
from deepstack.schema.schedule import algorithms_for

S = 1e6  # bytes per rank
B = 100e9  # B/s per link and direction
DELTA = 100e-9  # s per hop


class Star(Topology):
    """Node 0 is the hub; leaf i has an up link i−1 (leaf → hub) and a down link (n−1) + (i−1) (hub → leaf).
    Leaf to leaf is two hops through the hub."""

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
    """All-reduce through rank 0: every other rank sends it its whole vector, then it sends the sum back."""

    name, ops = "reduce_then_broadcast", ("all_reduce",)

    def steps(self, op, p):
        others = np.arange(1, p)
        return [step("reduce", others, np.zeros_like(others), 1.0),
                step("broadcast", np.zeros_like(others), others, 1.0)]


@pytest.fixture
def star():
    network.register_topology("star", Star)
    yield NetworkTopology((TopologyLevel("star", (4,), B, DELTA),))
    network.unregister_topology("star")


@pytest.fixture
def reduce_then_broadcast():
    collectives.register_algorithm(ReduceThenBroadcast())
    yield "reduce_then_broadcast"
    collectives.unregister_algorithm("reduce_then_broadcast")


def test_a_registered_topology_routes_the_built_in_algorithms(star):
    # Ring all-reduce over devices 0..3: 2(p−1) = 6 steps; in each, 0→1 is one hop (down 1) and 1→2, 2→3 two
    # (up, down), 3→0 one (up 3): the six links carry one S/4 chunk each. Step = 2δ + (S/4)/B.
    result = collective_time("all_reduce", S, [(0, 1, 2, 3)], star, "ring")
    assert result.time_s == pytest.approx(6 * (2 * DELTA + S / 4 / B))
    assert result.latency_s == pytest.approx(12 * DELTA)
    assert result.max_link_bytes == pytest.approx(6 * S / 4)
    assert star.level_links == (6,)
    assert noc_ports("star", (4,)) == 3  # the NoC area model sees it too


def test_a_registered_algorithm_runs_on_a_registered_topology(star, reduce_then_broadcast):
    # Rank 0 is device 1, a leaf. Reduce: devices 0, 2, 3 send S to device 1; 0→1 is one hop, 2→1 and 3→1 two
    # (up, then the hub's down link to 1), so down link 1 carries 3S: 2δ + 3S/B. Broadcast mirrors it on up
    # link 1: 2δ + 3S/B. Total 4δ + 6S/B.
    expected = 4 * DELTA + 6 * S / B
    result = collective_time("all_reduce", S, [(1, 0, 2, 3)], star, reduce_then_broadcast)
    assert result.time_s == pytest.approx(expected)
    assert [(s.phase, s.count) for s in result.steps] == [("reduce", 1), ("broadcast", 1)]
    assert result.steps[0].max_link_bytes == pytest.approx(3 * S)
    assert result.level_bytes == (pytest.approx(10 * S),)  # per step: 1 + 2 + 2 link crossings of S
    # "auto" ranks it with the built-ins
    auto = collective_time("all_reduce", S, [(1, 0, 2, 3)], star)
    assert dict(auto.candidates)[reduce_then_broadcast] == pytest.approx(expected)
    assert auto.time_s == min(time for _, time in auto.candidates)


def test_unregistering_restores_the_library(star, reduce_then_broadcast):
    assert "star" in network.topology_names()
    assert reduce_then_broadcast in collectives.algorithms("all_reduce")
    built_in = tuple(n for n in collectives.algorithms("all_reduce") if n != reduce_then_broadcast)
    network.unregister_topology("star")
    collectives.unregister_algorithm(reduce_then_broadcast)
    try:
        with pytest.raises(ValueError, match="topology: must be one of"):
            TopologyLevel("star", (4,), B, DELTA)
        assert collectives.algorithms("all_reduce") == built_in == algorithms_for("all_reduce")
    finally:  # the fixtures unregister again
        network.register_topology("star", Star)
        collectives.register_algorithm(ReduceThenBroadcast())


def test_bad_registrations_are_refused():
    with pytest.raises(TypeError):
        network.register_topology("not_a_topology", object)
    with pytest.raises(ValueError, match="op must be one of"):
        collectives.register_algorithm(type("Broadcast", (Algorithm,), {"name": "x", "ops": ("broadcast",)}))
    with pytest.raises(ValueError, match="name"):
        collectives.register_algorithm(type("Auto", (Algorithm,), {"name": "auto", "ops": ("all_reduce",)}))
    assert "not_a_topology" not in network.topology_names()
    assert "x" not in collectives.algorithms("all_reduce")


def test_one_declaration_per_name():
    """The schema, the models and the CLI read one registry: the names each lists are the same, once each."""
    assert network.topology_names() == TOPOLOGIES.names() == (
        "switch", "ring", "chain", "mesh", "torus", "fully_connected")
    for op in collectives.OPS:
        assert collectives.algorithms(op) == algorithms_for(op)
    assert collectives.algorithms("all_reduce") == (
        "ring", "halving_doubling", "rabenseifner", "double_tree", "hierarchical", "hierarchical_ring", "two_shot")
    assert len(set(ALGORITHMS.names())) == len(ALGORITHMS.names())


def test_files_may_name_what_is_registered(star, reduce_then_broadcast):
    level = NetworkLevel(topology="star", dims=(4,), link_bw_GBps=100, hop_latency_ns=100, energy_pJ_per_bit=1)
    assert level.topology == "star"
    schedule = Schedule.parse("tp=4,all_reduce=reduce_then_broadcast")
    assert schedule.algorithm("all_reduce") == "reduce_then_broadcast"


def test_files_may_not_name_what_is_not_registered():
    with pytest.raises(ValueError, match="must be one of"):
        NetworkLevel(topology="star", dims=(4,), link_bw_GBps=100, hop_latency_ns=100, energy_pJ_per_bit=1)
    with pytest.raises(UserInputError, match="reduce_then_broadcast"):
        Schedule.parse("tp=4,all_reduce=reduce_then_broadcast")
