"""A collective algorithm per network level (ASTRA-sim's per-dimension algorithms): a level may name one; groups
on that level run it, groups across levels run the hierarchical algorithm with each level's phases so, and auto
stays the default. Times are worked by hand from eq. 4 (per step: hops × δ + busiest link's bytes / B)."""

from __future__ import annotations

import pytest
from conftest import assert_user_error

from deepstack.models.collectives import collective_time, level_algorithm
from deepstack.models.network import NetworkTopology, TopologyLevel
from deepstack.schema import NetworkLevel

S = 1e6  # bytes per rank
RING, SWITCH = (100e9, 100e-9), (50e9, 1e-6)  # (B/s per link, s per hop): a ring of 4 inside a switch of 2
ALL = tuple(range(8))
INNER = ((0, 1, 2, 3), (4, 5, 6, 7))


def _net(inner: str = "auto", outer: str = "auto") -> NetworkTopology:
    return NetworkTopology((TopologyLevel("ring", (4,), *RING, algorithm=inner),
                            TopologyLevel("switch", (2,), *SWITCH, algorithm=outer)))


def test_groups_on_one_level_run_its_algorithm():
    # a ring all-reduce over the 4 ranks of the ring: 2·3 steps of S/4 over one link, 1 hop each
    ring_step_s = S / 4 / RING[0] + RING[1]
    result = collective_time("all_reduce", S, INNER, _net(inner="ring"))
    assert result.algorithm == "ring" and result.candidates == (("ring", pytest.approx(6 * ring_step_s)),)
    assert result.time_s == pytest.approx(6 * ring_step_s)  # 15.6 µs
    # auto, left alone, finds the double tree faster here (13.775 µs)
    assert collective_time("all_reduce", S, INNER, _net()).algorithm == "double_tree"


def test_groups_across_levels_run_each_levels_algorithm_in_the_hierarchical_phases():
    ring_step_s = S / 4 / RING[0] + RING[1]  # a ring reduce-scatter / all-gather step inside: 2.6 µs
    switch_step_s = S / 4 / 2 / SWITCH[0] + 2 * SWITCH[1]  # the S/4 shard's all-reduce of 2 ranks: 4.5 µs
    result = collective_time("all_reduce", S, ALL, _net(inner="ring"))
    assert result.algorithm == "hierarchical"
    assert result.detail == "inner reduce_scatter=ring, outer all_reduce=ring, inner all_gather=ring"
    assert result.time_s == pytest.approx(3 * ring_step_s + 2 * switch_step_s + 3 * ring_step_s)  # 24.6 µs
    outer = collective_time("all_reduce", S, ALL, _net(outer="halving_doubling"))
    assert outer.detail == "inner reduce_scatter=direct, outer all_reduce=halving_doubling, inner all_gather=direct"


def test_an_algorithm_that_does_not_apply_leaves_the_choice_to_auto():
    three = ((0, 1, 2), (4, 5, 6))  # halving-doubling needs a power of two ranks
    assert level_algorithm("all_reduce", three, _net(inner="halving_doubling")) == "auto"
    named, auto = (collective_time("all_reduce", S, three, net) for net in (_net(inner="halving_doubling"), _net()))
    assert (named.algorithm, named.time_s) == (auto.algorithm, auto.time_s)
    # an algorithm that does not implement the collective either: double_tree names no all-gather
    assert level_algorithm("all_gather", INNER, _net(inner="double_tree")) == "auto"


def test_every_level_auto_is_the_network_it_was():
    net = _net()
    assert net.level_algorithms is None
    for groups in (ALL, INNER):
        assert level_algorithm("all_reduce", groups, net) == "auto"


def test_noc_files_name_a_level_algorithm(tmp_path, cli):
    level = dict(topology="ring", dims="4", link_bw_GBps=100, hop_latency_ns=100, energy_pJ_per_bit=1)
    assert NetworkLevel(**level, algorithm="ring").algorithm == "ring"
    with pytest.raises(ValueError, match="must be auto or one of ring, halving_doubling"):
        NetworkLevel(**level, algorithm="nope")
    noc = tmp_path / "ring4x2.toml"
    noc.write_text('kind = "noc"\nname = "ring4x2"\nsource = "test"\ndevice_area_mm2 = 100.0\n'
                   '[[levels]]\ntopology = "ring"\ndims = "4"\nlink_bw_GBps = 100.0\nhop_latency_ns = 100.0\n'
                   'energy_pJ_per_bit = 1.0\nalgorithm = "ring"\n'
                   '[[levels]]\ntopology = "switch"\ndims = "2"\nlink_bw_GBps = 50.0\nhop_latency_ns = 1000.0\n'
                   'energy_pJ_per_bit = 1.0\n')
    result = cli("collective", "--op", "all_reduce", "--bytes", "1e6", "--noc", str(noc), "--json")
    assert result.code == 0, result.err
    assert result.json()["detail"] == "inner reduce_scatter=ring, outer all_reduce=ring, inner all_gather=ring"
    assert result.json()["time_s"] == pytest.approx(24.6e-6)
    bad = noc.read_text().replace('algorithm = "ring"', 'algorithm = "nope"')
    noc.write_text(bad)
    assert_user_error(cli("collective", "--op", "all_reduce", "--bytes", "1e6", "--noc", str(noc)),
                      "levels.0.algorithm: must be auto or one of")
