"""Who owns a level's links (per-device ports vs a group's shared uplink), when a step completes (delivery vs
acknowledgement) and the per-dimension collectives: golden numbers worked out by hand in the comments, and
property tests of the physical laws they must obey (docs/model.md, network section)."""

from __future__ import annotations

import pytest
from conftest import assert_user_error
from hypothesis import given, settings
from hypothesis import strategies as st

from deepstack.models.collectives import collective_time
from deepstack.models.network import SHARED_UPLINK_UTILISATION, NetworkTopology, TopologyLevel

GB = 1e9
NS = 1e-9
ETA = SHARED_UPLINK_UTILISATION
ALL64 = tuple(range(64))


def two_level(ports: str, l1_GBps: float = 256, l2_GBps: float = 32, completion: str = "delivery"):
    """8 groups of 8 NPUs: an 8-port switch per group (128 ns per hop), a switch of the 8 groups (512 ns)."""
    return NetworkTopology((TopologyLevel("switch", (8,), l1_GBps * GB, 128 * NS),
                            TopologyLevel("switch", (8,), l2_GBps * GB, 512 * NS, ports=ports)), completion)


# ------------------------------------------------------------------------------------------------ golden numbers


def test_all_to_all_on_8x8_per_device_ports():
    # m = 1 MB per destination (S = 64 m). A flow to another group first crosses L1 to the destination's
    # position inside the source group, then L2 on that position's own port (the rail). The L2 uplink of NPU
    # (g, c) carries what the 8 NPUs of group g send to position c of the 7 other groups: 56 m = 56 MB at
    # 32 GB/s = 1.75 ms. Each L1 uplink carries 63 m at 256 GB/s (0.246 ms): L2 is the bottleneck.
    # Latency: 2 L1 hops + 2 L2 hops = 2·128 + 2·512 = 1,280 ns.
    result = collective_time("all_to_all", 64e6, ALL64, two_level("per_device"), "direct")
    assert result.max_link_bytes == pytest.approx(56e6)
    assert result.time_s == pytest.approx(1280 * NS + 56e6 / (32 * GB))


def test_all_to_all_on_8x8_shared_uplink():
    # The group's one uplink carries everything its 8 NPUs send out: 8 · 56 m = 448 MB, delivered at
    # η · 32 GB/s (η = SHARED_UPLINK_UTILISATION): 448e6 / 30.72e9 = 14.583 ms, 8/η ≈ 8.3× the per-device time.
    result = collective_time("all_to_all", 64e6, ALL64, two_level("shared_uplink"), "direct")
    assert result.max_link_bytes == pytest.approx(448e6)
    assert result.time_s == pytest.approx(1280 * NS + 448e6 / (ETA * 32 * GB))
    assert result.time_s == pytest.approx(14.58461e-3, rel=1e-5)


def test_two_level_all_gather_far_partners_first():
    # Recursive doubling, far partners first, shard s = 1 MB: 3 steps across groups with 1, 2, 4 shards, then
    # 3 inside with 8, 16, 32 shards (1 flow per L1 link: k·s / 256 GB/s, 2 hops = 256 ns each).
    s, B1, B2 = 1e6, 256 * GB, 32 * GB
    inside = 3 * 256 * NS + 56 * s / B1
    # per-device ports: a partner across groups sits at the same position, so the flow takes no L1 hop (the
    # rails connect the NPUs directly): 2 L2 hops = 1,024 ns per step, k·s on the NPU's own port.
    per_device = collective_time("all_gather", s, ALL64, two_level("per_device"), "halving_doubling")
    assert per_device.time_s == pytest.approx(3 * 1024 * NS + 7 * s / B2 + inside)
    # shared uplink: all 8 NPUs of a group send k·s through one uplink (8 k s at η B2), and each flow reaches
    # it through the group's switch: 2 L1 + 2 L2 hops = 1,280 ns per step.
    shared = collective_time("all_gather", s, ALL64, two_level("shared_uplink"), "halving_doubling")
    assert shared.time_s == pytest.approx(3 * 1280 * NS + 8 * 7 * s / (ETA * B2) + inside)


def test_acknowledged_steps_pay_the_path_twice():
    # 8-port switch, 128 ns per hop, recursive doubling all-gather of 512 B: 3 steps of 2 hops. Delivered:
    # 3 · 256 ns; acknowledged: 3 · 512 ns; the bytes cost the same (1 + 2 + 4 shards of 512 B at 128 GB/s).
    bytes_s = 7 * 512 / (128 * GB)
    for completion, trips in (("delivery", 1), ("acknowledged", 2)):
        topo = NetworkTopology((TopologyLevel("switch", (8,), 128 * GB, 128 * NS),), completion)
        result = collective_time("all_gather", 512, tuple(range(8)), topo, "halving_doubling")
        assert result.latency_s == pytest.approx(3 * trips * 256 * NS)
        assert result.time_s == pytest.approx(3 * trips * 256 * NS + bytes_s)


TORUS = NetworkTopology((TopologyLevel("torus", (4, 4), 100 * GB, 100 * NS),))


def test_per_dimension_all_gather_on_a_torus():
    # hierarchical_ring, shard s: the y rings first (3 steps of s, one hop each), then the x rings with the
    # 4-shard bundle (3 steps of 4 s): 6 δ + (3 + 12) s / B.
    s = 1e6
    result = collective_time("all_gather", s, tuple(range(16)), TORUS, "hierarchical_ring")
    assert result.time_s == pytest.approx(6 * 100 * NS + 15 * s / (100 * GB))
    assert result.detail.startswith("outer all_gather=ring")


def test_per_dimension_reduce_scatter_on_a_torus():
    # hierarchical_ring, vector S: the x rings first (3 steps of S/4), then the y rings on the S/4 shard
    # (3 steps of S/16): 6 δ + (3/4 + 3/16) S / B.
    S = 16e6
    result = collective_time("reduce_scatter", S, tuple(range(16)), TORUS, "hierarchical_ring")
    assert result.time_s == pytest.approx(6 * 100 * NS + (3 / 4 + 3 / 16) * S / (100 * GB))
    assert result.detail.startswith("inner reduce_scatter=ring")


def test_per_dimension_all_reduce_on_a_torus_has_the_flat_ring_bandwidth_with_fewer_steps():
    # RS along x, all-reduce along y, AG along x: 4 · 3 steps of one hop; bytes 2 (N − 1)/N S as a flat ring of
    # 16 (which needs 30 steps).
    S = 16e6
    result = collective_time("all_reduce", S, tuple(range(16)), TORUS, "hierarchical_ring")
    assert result.time_s == pytest.approx(12 * 100 * NS + 2 * 15 / 16 * S / (100 * GB))


def test_cli_takes_ports_and_completion(cli):
    args = ("collective", "--op", "all_to_all", "--bytes", "64e6", "--topology", "switch,switch", "--dims", "8,8",
            "--link-bw-GBps", "256,32", "--hop-latency-ns", "128,512", "--algorithm", "direct", "--json")
    per_device = cli(*args)
    shared = cli(*args, "--ports", "per_device,shared_uplink", "--completion", "acknowledged")
    assert per_device.code == 0 and shared.code == 0, shared.err
    assert per_device.json()["time_s"] == pytest.approx(1280 * NS + 56e6 / (32 * GB))
    assert shared.json()["time_s"] == pytest.approx(2 * 1280 * NS + 448e6 / (ETA * 32 * GB))
    assert_user_error(cli(*args, "--ports", "rail,rail"), "ports")
    assert_user_error(cli(*args, "--completion", "ack"), "--completion")


# ------------------------------------------------------------------------------------------------ physical laws

OPS = {"all_reduce": "auto", "all_gather": "auto", "reduce_scatter": "auto", "all_to_all": "direct"}
sizes = st.floats(min_value=1.0, max_value=1e9)
speedups = st.floats(min_value=1.0, max_value=16.0)


@settings(max_examples=40, deadline=None)
@given(op=st.sampled_from(sorted(OPS)), S=sizes, ports=st.sampled_from(["per_device", "shared_uplink"]),
       l1=speedups, l2=speedups, completion=st.sampled_from(["delivery", "acknowledged"]))
def test_more_bandwidth_is_never_slower(op, S, ports, l1, l2, completion):
    base = collective_time(op, S, ALL64, two_level(ports, completion=completion), OPS[op]).time_s
    faster = collective_time(op, S, ALL64, two_level(ports, 256 * l1, 32 * l2, completion), OPS[op]).time_s
    assert faster <= base * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(op=st.sampled_from(sorted(OPS)), S=sizes, more=st.floats(min_value=1.0, max_value=64.0),
       ports=st.sampled_from(["per_device", "shared_uplink"]))
def test_more_bytes_are_never_faster(op, S, more, ports):
    topo = two_level(ports)
    assert collective_time(op, S * more, ALL64, topo, OPS[op]).time_s >= collective_time(op, S, ALL64, topo,
                                                                                          OPS[op]).time_s


@settings(max_examples=40, deadline=None)
@given(op=st.sampled_from(sorted(OPS)), S=sizes, l2=st.floats(min_value=1.0, max_value=1000.0),
       completion=st.sampled_from(["delivery", "acknowledged"]))
def test_a_shared_uplink_is_never_faster_than_per_device_ports_of_the_same_bandwidth(op, S, l2, completion):
    per_device = collective_time(op, S, ALL64, two_level("per_device", l2_GBps=l2, completion=completion), OPS[op])
    shared = collective_time(op, S, ALL64, two_level("shared_uplink", l2_GBps=l2, completion=completion), OPS[op])
    assert shared.time_s >= per_device.time_s * (1 - 1e-12)


def test_bad_ports_and_completion_are_refused():
    with pytest.raises(ValueError, match="ports must be one of per_device, shared_uplink"):
        TopologyLevel("switch", (8,), GB, NS, ports="rail")
    with pytest.raises(ValueError, match="completion must be one of delivery, acknowledged"):
        NetworkTopology((TopologyLevel("switch", (8,), GB, NS),), "ack")
