"""Network model (paper §4.1.4, eq. 4): routing, link loads, framing, mapping. Golden numbers worked by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from deepstack import catalog
from deepstack.models import clear_caches
from deepstack.models import network as nw
from deepstack.models.network import NetworkTopology, TopologyLevel, route_traffic, routing

GB = 1e9
NS = 1e-9


def all_to_all_tm(devices: int, per_pair_B: float) -> np.ndarray:
    tm = np.full((devices, devices), per_pair_B)
    np.fill_diagonal(tm, 0.0)
    return tm


def one_flow(devices: int, src: int, dst: int, size_B: float) -> np.ndarray:
    tm = np.zeros((devices, devices))
    tm[src, dst] = size_B
    return tm


# ---------------------------------------------------------------------------------------------------- topology


def test_from_schema_converts_to_si():
    topo = NetworkTopology.from_schema(catalog.load("nocs", "tms1"))
    assert topo.devices == 256  # switch 4 · mesh 2x2 · torus 4x4
    l1, l2, l3 = topo.levels
    assert (l1.topology, l1.dims, l1.link_bw_Bps) == ("switch", (4,), 800 * GB)
    assert l1.hop_latency_s == pytest.approx(10 * NS)
    assert (l2.topology, l2.dims, l2.packet_bytes, l2.header_bytes) == ("mesh", (2, 2), 256, 16)
    assert (l3.topology, l3.dims, l3.link_bw_Bps) == ("torus", (4, 4), 75 * GB)
    # switch (per device): up + down per node, 64 copies → 512; mesh 2x2 (shared: one per chip, not one per
    # cluster position): 2 chains of 2 per dimension = 8 links per chip, 16 chips → 128; torus 4x4 (shared: one
    # for the whole system): 4 rings of 4 per dimension, 8 links per ring → 64
    assert (l1.ports, l2.ports, l3.ports) == ("per_device", "shared_uplink", "shared_uplink")
    assert topo.level_links == (512, 128, 64)
    hash(topo)  # memoisable


def test_bad_level_is_rejected():
    with pytest.raises(ValueError, match="topology"):
        TopologyLevel("hypercube", (4,), GB, 0.0)
    with pytest.raises(ValueError, match="dims"):
        TopologyLevel("mesh", (4,), GB, 0.0)


def test_zero_traffic_costs_nothing():
    topo = NetworkTopology.single("torus", (4, 4), GB, 100 * NS)
    result = route_traffic(np.zeros((16, 16)), topo)
    assert (result.time_s, result.latency_s, result.congestion_s, result.max_link_bytes) == (0, 0, 0, 0)
    # bytes to self never touch the network
    assert route_traffic(np.eye(16) * 1e6, topo).time_s == 0


def test_wrong_shape_or_negative_traffic():
    topo = NetworkTopology.single("ring", 4, GB, 0.0)
    with pytest.raises(ValueError, match="4×4"):
        route_traffic(np.zeros((3, 3)), topo)
    with pytest.raises(ValueError, match="≥ 0"):
        route_traffic(-np.ones((4, 4)), topo)


# ---------------------------------------------------------------------------------------------------- one level


def test_all_to_all_on_a_4x4_torus():
    # 16 nodes, S = 1.6 MB per rank → m = S/16 = 100 kB per pair. XY routing: the x-ring of row y carries the
    # traffic of row y's 4 sources to every x; per (x_s, x_t) pair that is 4 destinations · m = 4m. On a ring of
    # 4 with this traffic, link i→i+1 carries the 1-hop flow i→i+1 (4m) plus the two half-way flows that cross
    # it, both routed up on the tie (i→i+2 and i−1→i+1): 4m + 4m + 4m = 12m; down links carry only the 1-hop
    # flows (4m). Same for the y-rings. Max link = 12m = 3S/4 = 1.2 MB.
    # Latency: the farthest pair is 2 + 2 = 4 hops.
    bw, delta = 100 * GB, 500 * NS
    topo = NetworkTopology.single("torus", (4, 4), bw, delta)
    result = route_traffic(all_to_all_tm(16, 100e3), topo)
    assert result.max_link_bytes == pytest.approx(1200e3)
    assert result.latency_s == pytest.approx(4 * delta)
    assert result.congestion_s == pytest.approx(1200e3 / bw)  # 12 µs
    assert result.time_s == pytest.approx(4 * delta + 1200e3 / bw)  # 14 µs
    (level,) = result.levels
    assert level.links == 64
    # the 32 up links carry 12 µs of bytes in 14 µs, the 32 down links 4 µs: mean (12 + 4) / 2 / 14
    assert level.max_busy_fraction == pytest.approx(12 / 14)
    assert level.mean_busy_fraction == pytest.approx(8 / 14)
    # a source's hops to all 16 nodes: 4 · (0+1+2+1) per dimension, two dimensions → 32 link crossings;
    # total = 16 sources · 32 · 100 kB
    assert level.total_bytes == pytest.approx(16 * 32 * 100e3)


def test_all_to_all_on_a_switch():
    # 8 nodes, 1 MB per pair: node i's uplink carries its 7 outgoing flows, its downlink 7 incoming ones.
    bw, delta = 50 * GB, 250 * NS
    topo = NetworkTopology.single("switch", 8, bw, delta)
    result = route_traffic(all_to_all_tm(8, 1e6), topo)
    assert result.max_link_bytes == pytest.approx(7e6)
    assert result.latency_s == pytest.approx(2 * delta)  # node → switch → node
    assert result.time_s == pytest.approx(2 * delta + 7e6 / bw)  # 0.5 µs + 140 µs


def test_ring_takes_the_shorter_way_and_breaks_ties_up():
    topo = NetworkTopology.single("ring", 6, GB, NS)
    # 0 → 5 is one hop down the ring, not five up
    assert route_traffic(one_flow(6, 0, 5, 1e3), topo).latency_s == pytest.approx(1 * NS, rel=1e-9, abs=0)
    # 0 → 3 and 1 → 4 are both half-way: both go up (dimension-order routers resolve a tie one way), sharing 1→2, 2→3
    first, second = nw.link_bytes(one_flow(6, 0, 3, 1e3), topo)[0], nw.link_bytes(one_flow(6, 1, 4, 1e3), topo)[0]
    assert np.flatnonzero(first).tolist() == [0, 1, 2]  # up links leaving 0, 1, 2
    assert np.flatnonzero(second).tolist() == [1, 2, 3]  # up links leaving 1, 2, 3
    assert route_traffic(one_flow(6, 0, 3, 1e3), topo).latency_s == pytest.approx(3 * NS)


def test_chain_and_mesh_route_dimension_order():
    chain = NetworkTopology.single("chain", 5, GB, NS)
    assert route_traffic(one_flow(5, 4, 0, 1e3), chain).latency_s == pytest.approx(4 * NS)  # no wrap-around
    mesh = NetworkTopology.single("mesh", (3, 3), GB, NS)
    # (0,0) → (2,2): 2 hops in x then 2 in y; links used: x links of row 0, then y links of column 2
    assert route_traffic(one_flow(9, 0, 8, 1e3), mesh).latency_s == pytest.approx(4 * NS)
    # every flow leaving node 0 goes first along x in row 0: the link 0→1 carries flows to 1, 2, 4, 5, 7, 8
    tm = np.zeros((9, 9))
    tm[0, 1:] = 1.0
    assert route_traffic(tm, mesh).max_link_bytes == pytest.approx(6.0)


def test_fully_connected_is_one_hop_per_pair():
    topo = NetworkTopology.single("fully_connected", 5, 10 * GB, 100 * NS)
    result = route_traffic(all_to_all_tm(5, 1e6), topo)
    assert result.latency_s == pytest.approx(100 * NS)
    assert result.max_link_bytes == pytest.approx(1e6)  # every ordered pair has its own link
    assert result.levels[0].links == 20


# ---------------------------------------------------------------------------------------------------- framing


def test_packet_framing_adds_exactly_the_header_share():
    # 4096 B in 256-B packets = 16 packets · 16 B header → 4352 B on each link = 4096 · (1 + 16/256)
    plain = NetworkTopology.single("switch", 4, GB, 0.0)
    framed = NetworkTopology.single("switch", 4, GB, 0.0, packet_bytes=256, header_bytes=16)
    tm = all_to_all_tm(4, 4096.0)
    bare, with_headers = route_traffic(tm, plain), route_traffic(tm, framed)
    assert with_headers.max_link_bytes == pytest.approx(3 * 4352)
    assert with_headers.congestion_s == pytest.approx(bare.congestion_s * (1 + 16 / 256))


def test_framing_rounds_packets_up_per_flow_and_per_level():
    # one flow of 1000 B crosses a switch (256-B packets, 16-B headers) and a chain (no framing):
    # ceil(1000/256) = 4 packets → 1064 B on the switch links, 1000 B on the chain link
    inner = TopologyLevel("switch", (4,), 100 * GB, 10 * NS, packet_bytes=256, header_bytes=16)
    outer = TopologyLevel("chain", (2,), 10 * GB, 100 * NS)
    topo = NetworkTopology((inner, outer))
    # device 1 = (switch port 1, chain 0) → device 6 = (switch port 2, chain 1)
    result = route_traffic(one_flow(8, 1, 6, 1000.0), topo)
    assert result.levels[0].max_link_bytes == pytest.approx(1064)
    assert result.levels[1].max_link_bytes == pytest.approx(1000)
    assert result.latency_s == pytest.approx(2 * 10 * NS + 100 * NS)
    assert result.congestion_s == pytest.approx(max(1064 / (100 * GB), 1000 / (10 * GB)))


# ---------------------------------------------------------------------------------------------------- hierarchy


def test_rail_style_ports_and_innermost_first_routing():
    # switch 4 inside, ring 4 outside (16 devices). Device d = port + 4·ring position.
    inner = TopologyLevel("switch", (4,), 100 * GB, 10 * NS)
    outer = TopologyLevel("ring", (4,), 10 * GB, 100 * NS)
    topo = NetworkTopology((inner, outer))
    # 1 → 6: switch hop in group 0 (port 1 → port 2), then ring 0 → 1 on rail 2 (ring copy 2)
    l1, l2 = nw.link_bytes(one_flow(16, 1, 6, 1.0), topo)
    assert np.flatnonzero(l1).tolist() == [1, 4 + 2]  # uplink of port 1, downlink to port 2 in group 0
    assert np.flatnonzero(l2).tolist() == [2 * 8 + 0]  # copy 2 (rail of port 2), up link leaving position 0
    # every device has its own outer port: the 4 devices of group 0 sending to their peers in group 1 use 4
    # different rails, so the ring link carries one flow each
    tm = np.zeros((16, 16))
    for port in range(4):
        tm[port, 4 + port] = 1e6
    result = route_traffic(tm, topo)
    assert result.levels[1].max_link_bytes == pytest.approx(1e6)
    assert result.latency_s == pytest.approx(100 * NS)  # no inner hop needed


def test_tms1_all_to_all_golden():
    # 256 devices, 1 MiB per rank → 4096 B per pair.
    # L1 switch uplink: L2 is a shared uplink, so every flow that leaves the die goes up through the die's switch
    # (252 of them) besides the flows to the 3 other clusters of the die → 255 · 4096 = 1,044,480 B (no framing).
    # Latency: 2 switch hops · 10 ns + 2 mesh hops · 20 ns + 4 torus hops · 500 ns = 2,060 ns.
    topo = NetworkTopology.from_schema(catalog.load("nocs", "tms1"))
    result = route_traffic(all_to_all_tm(256, 4096.0), topo)
    assert result.levels[0].max_link_bytes == pytest.approx(255 * 4096)
    assert result.latency_s == pytest.approx(2060 * NS)
    assert result.time_s == pytest.approx(result.latency_s + result.congestion_s)
    assert result.levels[2].max_busy_fraction == max(level.max_busy_fraction for level in result.levels)


# ---------------------------------------------------------------------------------------------------- paths agree


@pytest.mark.parametrize("seed", [0, 1])
def test_dense_sparse_and_uncached_routing_agree(monkeypatch, seed):
    rng = np.random.default_rng(seed)
    levels = (
        TopologyLevel("switch", (2,), 100 * GB, 10 * NS, packet_bytes=64, header_bytes=8),
        TopologyLevel("torus", (3, 2), 30 * GB, 50 * NS),
        TopologyLevel("fully_connected", (3,), 10 * GB, 400 * NS, packet_bytes=512, header_bytes=40),
    )
    topo = NetworkTopology(levels)
    tm = rng.integers(0, 5000, size=(36, 36)).astype(float) * (rng.random((36, 36)) < 0.5)
    reference = nw.link_bytes(tm, topo)
    expected = route_traffic(tm, topo)
    monkeypatch.setattr(routing, "_DENSE_FRACTION", 2.0)  # force the sliced (few-flows) path
    assert route_traffic(tm, topo) == expected
    monkeypatch.setattr(routing, "MAX_CACHED_DEVICES", 0)  # force routing on the fly
    assert route_traffic(tm, topo) == expected
    for ours, theirs in zip(nw.link_bytes(tm, topo), reference, strict=True):
        np.testing.assert_allclose(ours, theirs)


def test_flow_link_counts_gathered_from_prepared_routes_equal_routing_each_flow():
    """A prepared structure's collectives take their flows' routes from the all-pairs incidence; the counts
    (per cell and link) and hops must be those of routing every flow, repeated flows included."""
    rng = np.random.default_rng(3)
    topo = NetworkTopology((TopologyLevel("switch", (2,), 100 * GB, 10 * NS),
                            TopologyLevel("torus", (3, 2), 30 * GB, 50 * NS),
                            TopologyLevel("chain", (3,), 10 * GB, 400 * NS)))
    src = rng.integers(0, 36, 500)
    dst = (src + rng.integers(1, 36, 500)) % 36  # never a flow to itself; pairs repeat
    cell = rng.integers(0, 4, 500)
    clear_caches()  # forget every prepared structure
    assert not nw.is_prepared(topo.structure)
    routed = nw.flow_link_counts(topo.structure, src, dst, cell, 4)
    nw.prepare(topo)
    assert nw.is_prepared(topo.structure)
    gathered = nw.flow_link_counts(topo.structure, src, dst, cell, 4)
    np.testing.assert_array_equal(gathered[1], routed[1])
    assert [c.shape for c in gathered[0]] == [(4, n) for n in topo.level_links]
    for ours, theirs in zip(gathered[0], routed[0], strict=True):
        np.testing.assert_array_equal(ours, theirs)
    assert sum(int(c.sum()) for c in routed[0]) == int(routed[1].sum()) > 500  # every hop of every flow counted


def test_a_level_of_one_node_has_no_links(monkeypatch):
    topo = NetworkTopology(
        (TopologyLevel("switch", (1,), GB, NS), TopologyLevel("torus", (1, 4), GB, 10 * NS))
    )
    assert topo.devices == 4 and topo.level_links == (0, 8)  # the torus 1×4 is a single ring of 4
    tm = all_to_all_tm(4, 1e3)
    expected = route_traffic(tm, topo)
    assert expected.latency_s == pytest.approx(2 * 10 * NS)
    steps = [([0, 1], [2, 3], [1e3, 1e3]), ([3], [0], [5.0])]
    for batched, step in zip(nw.route_batch(steps, topo), steps, strict=True):
        assert batched.result == nw.route_flows(*step, topo).result
    monkeypatch.setattr(routing, "MAX_CACHED_DEVICES", 0)
    assert route_traffic(tm, topo) == expected


def test_route_flows_merges_duplicate_pairs():
    topo = NetworkTopology.single("chain", 3, GB, NS, packet_bytes=100, header_bytes=10)
    merged = nw.route_flows([0, 0], [2, 2], [60.0, 60.0], topo).result
    # one flow of 120 B → 2 packets → 140 B (two separate 60-B flows would be framed as 2·70 = 140 too, but
    # three 50-B flows vs one 150-B flow differ: 3·60 = 180 vs 150 + 20 = 170)
    assert merged.max_link_bytes == pytest.approx(140)
    assert nw.route_flows([0, 0, 0], [2, 2, 2], [50.0] * 3, topo).result.max_link_bytes == pytest.approx(170)


def test_bandwidth_does_not_change_the_cached_routes():
    topo = NetworkTopology.single("torus", (4, 4), GB, 0.0)
    faster = dataclasses.replace(topo, levels=(dataclasses.replace(topo.levels[0], link_bw_Bps=2 * GB),))
    tm = all_to_all_tm(16, 1e3)
    assert route_traffic(tm, faster).time_s == pytest.approx(route_traffic(tm, topo).time_s / 2)


# ---------------------------------------------------------------------------------------------------- mapping


def test_device_groups_put_the_first_dimension_innermost():
    layout = [("tp", 4), ("ep", 8), ("dp", 8)]
    tp = nw.device_groups(layout, "tp", devices=256)
    ep = nw.device_groups(layout, "ep", devices=256)
    dp = nw.device_groups(layout, "dp", devices=256)
    assert (len(tp), len(ep), len(dp)) == (64, 32, 32)
    assert tp[0] == (0, 1, 2, 3) and tp[1] == (4, 5, 6, 7)  # on one L1 switch of TMS1
    assert ep[0] == tuple(range(0, 32, 4)) and ep[1] == tuple(range(1, 32, 4))
    assert dp[0] == tuple(range(0, 256, 32))
    for groups in (tp, ep, dp):  # each dimension's groups partition the devices
        assert sorted(d for group in groups for d in group) == list(range(256))


def test_order_by_intensity_puts_the_busiest_dimension_first():
    layout = nw.order_by_intensity([("dp", 8), ("tp", 4), ("ep", 8)], {"tp": 1e9, "ep": 1e8, "dp": 1e6})
    assert layout == (("tp", 4), ("ep", 8), ("dp", 8))


def test_device_groups_rejects_a_layout_that_does_not_cover_the_network():
    with pytest.raises(ValueError, match="256"):
        nw.device_groups([("tp", 4), ("dp", 8)], "tp", devices=256)
    with pytest.raises(ValueError, match="unknown dimension"):
        nw.device_groups([("tp", 4)], "pp")


def test_route_batch_equals_routing_each_step(monkeypatch):
    topo = NetworkTopology(
        (
            TopologyLevel("switch", (4,), 100 * GB, 10 * NS, packet_bytes=256, header_bytes=16),
            TopologyLevel("ring", (4,), 10 * GB, 100 * NS),
        )
    )
    rng = np.random.default_rng(3)
    steps = [(rng.integers(0, 16, 40), rng.integers(0, 16, 40), rng.random(40) * 1e4) for _ in range(5)]
    steps.append(([0], [0], [1e3]))  # a step with nothing to route
    one_by_one = [nw.route_flows(*step, topo) for step in steps]
    monkeypatch.setattr(routing, "_BATCH_CELLS", 64)  # also exercise the chunking (2 steps per chunk)
    batched = nw.route_batch(steps, topo)
    assert len(batched) == len(steps)
    for ours, theirs in zip(batched, one_by_one, strict=True):
        for field in ("time_s", "latency_s", "congestion_s", "max_link_bytes", "flows"):
            assert getattr(ours.result, field) == pytest.approx(getattr(theirs.result, field))
        for mine, reference in zip(ours.link_bytes, theirs.link_bytes, strict=True):
            np.testing.assert_allclose(mine, reference)
