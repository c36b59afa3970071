"""The distributed half of a design point: shared links in a traffic matrix (eq. 4), the collective tuner's
choices, collectives per layer and their rank layouts, tile-level overlap (eq. 5), and monotone laws of the
whole evaluation. Golden numbers are worked by hand in the comments, never read back from the model.

What tests/test_network.py and tests/test_collectives.py already cover (ring all-reduce formula, 4×4 torus and
8-port switch all-to-all, auto = fastest candidate, bandwidth/size monotonicity of "auto" on flat and 2-level
networks) is not repeated here.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from deepstack import catalog
from deepstack.models import collectives as co
from deepstack.models import network as nw
from deepstack.models.collectives import collective_time
from deepstack.models.compute.gemm_tuner import tune_gemm, tune_gemm_overlapped
from deepstack.models.compute.operators import Gemm
from deepstack.models.compute.overlap import overlap_time_s
from deepstack.models.compute.workload import build_workload, device_share, ffn_share
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate
from deepstack.models.hardware.device import resolve_device
from deepstack.models.network import NetworkTopology, TopologyLevel, route_traffic
from deepstack.models.parallel import communication
from deepstack.models.pipeline.rows import CommRow, OverlapRow
from deepstack.schema import Scenario, Schedule

GB = 1e9
NS = 1e-9
US = 1e-6
MiB = 1 << 20


# ------------------------------------------------------------------------------------- eq. 4: links shared by flows


def test_two_flows_on_one_chain_link_carry_their_summed_bytes():
    # Chain 0 — 1 — 2 at 10 GB/s, δ = 100 ns. Flows 0→2 (3 MB) and 1→2 (1 MB) both cross the link 1→2.
    # Chain link ids: up link leaving i is i (0→1 = 0, 1→2 = 1), down links leaving 1, 2 are 2, 3.
    #   V(0→1) = 3 MB, V(1→2) = 3 + 1 = 4 MB → T_cong = 4 MB / 10 GB/s = 400 µs
    #   L_net = the 2-hop path of 0→2 = 200 ns → T_net = 400.2 µs
    chain = NetworkTopology.single("chain", 3, 10 * GB, 100 * NS)
    tm = np.zeros((3, 3))
    tm[0, 2], tm[1, 2] = 3e6, 1e6
    result = route_traffic(tm, chain)
    assert result.max_link_bytes == pytest.approx(4e6)
    assert result.congestion_s == pytest.approx(400 * US)
    assert result.latency_s == pytest.approx(200 * NS)
    assert result.time_s == pytest.approx(400.2 * US)
    assert nw.link_bytes(tm, chain)[0].tolist() == pytest.approx([3e6, 4e6, 0.0, 0.0])
    assert result.levels[0].total_bytes == pytest.approx(2 * 3e6 + 1e6)  # 0→2 counted on both its links
    assert result.flows == 2
    # Links are full duplex: 3 MB coming back 2→0 rides the down links only and shares nothing.
    tm[2, 0] = 3e6
    assert route_traffic(tm, chain).max_link_bytes == pytest.approx(4e6)


def test_dimension_order_routing_makes_flows_share_the_x_then_y_link():
    # 2×2 mesh, node id x + 2y: 0 = (0,0), 1 = (1,0), 2 = (0,1), 3 = (1,1); 100 GB/s, δ = 20 ns.
    # Flows into 3: 0→3 (3 MB), 1→3 (1 MB), 2→3 (2 MB).
    #   X first: 0→3 = 0→1 then 1→3, so link 1→3 carries 3 + 1 = 4 MB and 2→3 only 2 MB.
    #   (Y first would put 0→3 on 0→2→3 and load 2→3 with 3 + 2 = 5 MB instead.)
    #   T_cong = 4 MB / 100 GB/s = 40 µs; L_net = 2 hops · 20 ns = 40 ns; level total 2·3 + 1 + 2 = 9 MB.
    mesh = NetworkTopology.single("mesh", (2, 2), 100 * GB, 20 * NS)
    tm = np.zeros((4, 4))
    tm[0, 3], tm[1, 3], tm[2, 3] = 3e6, 1e6, 2e6
    result = route_traffic(tm, mesh)
    assert result.max_link_bytes == pytest.approx(4e6)
    assert result.congestion_s == pytest.approx(40 * US)
    assert result.latency_s == pytest.approx(40 * NS)
    assert result.levels[0].total_bytes == pytest.approx(9e6)
    loads = sorted(nw.link_bytes(tm, mesh)[0][nw.link_bytes(tm, mesh)[0] > 0].tolist())
    assert loads == pytest.approx([2e6, 3e6, 4e6])  # 0→1, 2→3, 1→3


# ----------------------------------------------------------------------------------------- collectives: goldens


def test_all_to_all_on_a_16_port_switch_with_framing():
    # 16-port switch, 50 GB/s per link and direction, δ = 250 ns, 4 KiB packets with 64-B headers.
    # S = 1 MiB per rank → S/16 = 65,536 B per destination = 16 packets → 65,536 + 16·64 = 66,560 B on the wire.
    # direct: every uplink carries 15 flows = 998,400 B (and every downlink the same), 2 hops
    #   T = 2·250 ns + 998,400 B / 50 GB/s = 0.5 µs + 19.968 µs = 20.468 µs
    # pairwise: 15 steps, each uplink/downlink carries one flow per step
    #   T = 15 · (0.5 µs + 66,560 / 50 GB/s = 1.3312 µs) = 27.468 µs → auto picks direct.
    # Level totals: 16·15 flows × 2 links × 66,560 B = 31,948,800 B over 32 links, all equally busy:
    #   busy fraction = 19.968 / 20.468.
    switch = NetworkTopology.single("switch", 16, 50 * GB, 250 * NS, packet_bytes=4096, header_bytes=64)
    group = [tuple(range(16))]
    direct = collective_time("all_to_all", MiB, group, switch, "direct")
    assert direct.max_link_bytes == pytest.approx(998_400)
    assert direct.time_s == pytest.approx(20.468 * US)
    assert direct.latency_s == pytest.approx(0.5 * US)
    pairwise = collective_time("all_to_all", MiB, group, switch, "pairwise")
    assert pairwise.time_s == pytest.approx(27.468 * US)
    assert pairwise.num_steps == 15
    auto = collective_time("all_to_all", MiB, group, switch)
    assert auto.algorithm == "direct" and auto.time_s == pytest.approx(20.468 * US)
    (load,) = auto.level_utilization
    assert load.links == 32 and load.total_bytes == pytest.approx(31_948_800)
    assert load.max_busy_fraction == pytest.approx(19.968 / 20.468)
    assert load.mean_busy_fraction == pytest.approx(19.968 / 20.468)


def test_two_all_to_all_groups_on_one_switch_do_not_contend():
    # Groups 0..7 and 8..15 on the same 16-port switch: every port has its own up/down link (non-blocking).
    # S = 1 MiB → S/8 = 131,072 B per destination = 32 packets → 131,072 + 32·64 = 133,120 B;
    # uplink: 7 flows = 931,840 B → T = 0.5 µs + 931,840 / 50 GB/s = 0.5 + 18.6368 = 19.1368 µs (= one group alone).
    switch = NetworkTopology.single("switch", 16, 50 * GB, 250 * NS, packet_bytes=4096, header_bytes=64)
    groups = nw.device_groups([("ep", 8), ("dp", 2)], "ep", 16)
    assert groups == (tuple(range(8)), tuple(range(8, 16)))
    both = collective_time("all_to_all", MiB, groups, switch, "direct")
    assert both.num_groups == 2 and both.group_size == 8
    assert both.max_link_bytes == pytest.approx(931_840)
    assert both.time_s == pytest.approx(19.1368 * US)


RING8 = NetworkTopology.single("ring", 8, 100 * GB, 1 * US)  # B = 100 GB/s per direction, δ = 1 µs
SWITCH8 = NetworkTopology.single("switch", 8, 100 * GB, 1 * US)
ALL8 = [tuple(range(8))]


def _ring8_all_reduce(S: float) -> dict[str, float]:
    """Hand times of every all-reduce on RING8 (p = 8, B, δ as above), s.

    ring: 14 steps of S/8, one hop, one flow per link              → 14δ + 1.75 S/B
    halving_doubling: partners at 1, 2, 4 hops with S/2, S/4, S/8; at distance 2 two flows share a link, at
      distance 4 (half-way: every flow takes the tie up) four flows share every up link
      → RS: (1 + 2 + 4)δ + (S/2 + 2·S/4 + 4·S/8)/B = 7δ + 1.5 S/B; AG mirrors it → 14δ + 3 S/B
    rabenseifner: RS distance 4 first with S/2 (4 flows per up link), 2 with S/4, 1 with S/8
      → RS 7δ + (2S + S/2 + S/8)/B = 7δ + 2.625 S/B; AG the same → 14δ + 5.25 S/B
    double_tree: in-order tree over 0..7 (root 3, height 3) and its copy shifted by one; the busiest ring
      link carries 3 tree edges and the longest edge (1–3, 2–4, 3–5, 4–6) is 2 hops. With C chunks,
      C + 2·3 − 1 steps of 2δ + 3·S/(2C)/B, C ∈ {1, 2, 4, …, 256} chosen to minimise it.
      Only C = 1 has less latency than the ring: 6 · (2δ + 1.5 S/B) = 12δ + 9 S/B (C = 2: 14δ + 5.25 S/B).
      At 1 MB (1.5 S/B = 15 µs) the best is C = 8: 13 · (2 + 15/8) µs = 50.375 µs.
    Crossover double_tree = ring: 12δ + 9 S/B = 14δ + 1.75 S/B → S* = 2δB / 7.25 = 27,586 B.
    """
    d, B = 1 * US, 100 * GB
    tree = min((c + 5) * (2 * d + 1.5 * S / (c * B)) for c in (1 << k for k in range(9)))
    return {"ring": 14 * d + 1.75 * S / B, "halving_doubling": 14 * d + 3 * S / B,
            "rabenseifner": 14 * d + 5.25 * S / B, "double_tree": tree}


@pytest.mark.parametrize(("S", "winner"), [(1e3, "double_tree"), (27_586 / 2, "double_tree"),
                                           (2 * 27_586, "ring"), (1e6, "ring")])
def test_auto_all_reduce_on_a_ring_tree_for_small_ring_for_large(S, winner):
    hand = _ring8_all_reduce(S)
    auto = collective_time("all_reduce", S, ALL8, RING8)
    assert auto.algorithm == winner
    assert auto.time_s == pytest.approx(hand[winner])
    assert dict(auto.candidates) == pytest.approx(hand)  # hierarchical does not apply to one level
    if winner == "double_tree":
        assert auto.detail == "chunks=1"


@pytest.mark.parametrize("S", [1e3, 1e6, 1e8])
def test_auto_all_reduce_on_a_switch_is_halving_doubling_at_every_size(S):
    # On a flat 8-port switch every pair is 2 hops and every port has its own up/down link, so:
    #   ring: 14 steps · (2δ + S/8/B) = 28δ + 1.75 S/B
    #   halving_doubling: 6 steps · 2δ, one flow per uplink per step, S/2 + S/4 + S/8 twice = 12δ + 1.75 S/B
    #   rabenseifner: the same steps in another order → the same time (HD is listed first and wins the tie)
    # Same bandwidth term, less latency: HD at every size — there is no crossover to the ring on a switch.
    d, B = 1 * US, 100 * GB
    auto = collective_time("all_reduce", S, ALL8, SWITCH8)
    assert auto.algorithm == "halving_doubling"
    assert auto.time_s == pytest.approx(12 * d + 1.75 * S / B)
    candidates = dict(auto.candidates)
    assert candidates["ring"] == pytest.approx(28 * d + 1.75 * S / B)
    assert candidates["rabenseifner"] == pytest.approx(candidates["halving_doubling"])
    assert candidates["double_tree"] > candidates["halving_doubling"]


@pytest.mark.parametrize(("S", "winner"), [(1e3, "direct"), (1e6, "ring")])
def test_auto_all_gather_on_a_ring_direct_for_small_ring_for_large(S, winner):
    # All-gather on RING8, S = shard per rank.
    #   ring: 7 steps of S, one hop → 7δ + 7 S/B
    #   direct: one step, every pair S, shortest way, half-way flows up: an up link carries 1 + 2 + 3 flows of
    #     distances 1-3 and 4 half-way flows (a down link only the 6) → 4δ + 10 S/B
    #   halving_doubling (far partners first, blocks S, 2S, 4S at distances 4, 2, 1; 4 flows per up link at
    #     distance 4, 2 at distance 2) → 7δ + (4S + 4S + 4S)/B = 7δ + 12 S/B
    # Crossover direct = ring: S = δB = 100 kB.
    d, B = 1 * US, 100 * GB
    hand = {"ring": 7 * d + 7 * S / B, "direct": 4 * d + 10 * S / B, "halving_doubling": 7 * d + 12 * S / B}
    auto = collective_time("all_gather", S, ALL8, RING8)
    assert auto.algorithm == winner
    assert dict(auto.candidates) == pytest.approx(hand)


# ------------------------------------------------------------------------------------ collectives: properties

# Three levels, innermost first: switch 2 · 2×2 mesh (framed) · ring 3 = 24 devices; groups come from a
# parallel layout, so several groups run at once and share links.
THREE_LEVELS = NetworkTopology((
    TopologyLevel("switch", (2,), 400 * GB, 10 * NS),
    TopologyLevel("mesh", (2, 2), 100 * GB, 50 * NS, packet_bytes=256, header_bytes=16),
    TopologyLevel("ring", (3,), 25 * GB, 500 * NS, packet_bytes=4096, header_bytes=82),
))
LAYOUT = [("tp", 2), ("ep", 4), ("dp", 3)]
DIM_GROUPS = {dim: nw.device_groups(LAYOUT, dim, 24) for dim, _ in LAYOUT}
DIM_GROUPS["ep_x_dp"] = nw.device_groups([("tp", 2), ("rest", 12)], "rest", 24)
TOPOS = {"three_levels": THREE_LEVELS, "ring8": RING8, "switch8": SWITCH8}


def _with_bw(topo: NetworkTopology, factor: float) -> NetworkTopology:
    return NetworkTopology(tuple(dataclasses.replace(lvl, link_bw_Bps=lvl.link_bw_Bps * factor) for lvl in topo.levels))


def _case(draw_topo: str, dim: str):
    if draw_topo == "three_levels":
        return THREE_LEVELS, DIM_GROUPS[dim]
    return TOPOS[draw_topo], ALL8


cases = st.tuples(
    st.sampled_from(sorted(TOPOS)),
    st.sampled_from(sorted(DIM_GROUPS)),
    st.sampled_from(co.OPS),
    st.floats(min_value=1.0, max_value=1e8, allow_nan=False),
)


@settings(max_examples=80, deadline=None)
@given(cases, st.data())
def test_doubling_link_bandwidth_never_slows_any_algorithm(case, data):
    name, dim, op, size = case
    algorithm = data.draw(st.sampled_from(("auto", *co.algorithms(op))), label="algorithm")
    topo, groups = _case(name, dim)
    try:
        base = collective_time(op, size, groups, topo, algorithm)
    except co.CollectiveError:
        assume(False)  # not defined for this op or these groups
    faster = collective_time(op, size, groups, _with_bw(topo, 2.0), algorithm)
    assert faster.time_s <= base.time_s * (1 + 1e-12)
    if algorithm not in ("auto", "double_tree", "hierarchical"):
        # a fixed TM sequence: routes and latencies stay, every link's serialisation halves exactly
        assert faster.latency_s == pytest.approx(base.latency_s)
        assert faster.congestion_s == pytest.approx(base.congestion_s / 2, rel=1e-9, abs=0)  # no 1e-12 s floor


@settings(max_examples=80, deadline=None)
@given(cases)
def test_doubling_the_message_never_speeds_up_auto_with_concurrent_groups(case):
    name, dim, op, size = case
    topo, groups = _case(name, dim)
    small = collective_time(op, size, groups, topo)
    large = collective_time(op, 2 * size, groups, topo)
    assert large.time_s >= small.time_s * (1 - 1e-12)
    assert large.max_link_bytes >= small.max_link_bytes * (1 - 1e-12)


# ----------------------------------------------------------------------------------------- eq. 5: overlap


def test_eq5_hand_examples():
    # W = 4, compute 4 µs (τ_comp 1), comm 2 µs (τ_comm 0.5), L 0.5 µs:
    #   1 + (0.5 + 0.5) + max(3·1, 3·0.5 + 0.5) = 2 + 3 = 5 µs (compute-bound steady state; serial 6.5 µs)
    assert overlap_time_s(4, 4 * US, 2 * US, 0.5 * US) == pytest.approx(5 * US)
    # W = 4, compute 2 µs (τ 0.5), comm 4 µs (τ 1), L 0.5 µs:
    #   0.5 + (1 + 0.5) + max(1.5, 3 + 0.5) = 2 + 3.5 = 5.5 µs (communication-bound)
    assert overlap_time_s(4, 2 * US, 4 * US, 0.5 * US) == pytest.approx(5.5 * US)
    # one wave (or none) serialises: T_comp + τ_comm + L
    assert overlap_time_s(1, 3 * US, 2 * US, 1 * US) == pytest.approx(6 * US)
    assert overlap_time_s(0, 3 * US, 2 * US, 1 * US) == pytest.approx(6 * US)


times = st.one_of(st.just(0.0), st.floats(min_value=1e-12, max_value=1e-2))  # 1 ps … 10 ms, or nothing


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=4096), times, times, times)
def test_eq5_is_never_faster_than_either_side_alone(waves, comp, comm, latency):
    t = overlap_time_s(waves, comp, comm, latency)
    assert t >= max(comp, comm + latency) * (1 - 1e-12)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=4096), times, times, st.floats(min_value=0.0, max_value=1.0))
def test_eq5_is_never_slower_than_serial_while_latency_fits_behind_compute(waves, comp, comm, fraction):
    # T − serial = max(−(W−1)τ_comm, L − (W−1)τ_comp), so eq. 5 stays ≤ serial exactly while
    # L ≤ (W−1)·τ_comp = comp·(W−1)/W. Here L is drawn inside that range (the test below shows the rest).
    latency = fraction * comp * max(waves - 1, 0) / max(waves, 1) if waves > 1 else fraction * comp
    t = overlap_time_s(waves, comp, comm, latency)
    assert t <= (comp + comm + latency) * (1 + 1e-12)


def test_eq5_is_never_slower_than_serial_when_latency_dominates():
    # W = 2, compute 1 µs, no bandwidth time, L = 10 µs: serial = 1 + 0 + 10 = 11 µs, but eq. 5 as printed gives
    # 0.5 + (0 + 10) + max(0.5, 0 + 10) = 20.5 µs — the latency is paid twice; the model caps it at serial.
    assert overlap_time_s(2, 1 * US, 0.0, 10 * US) == pytest.approx(11 * US)



# an 8-port switch at 100 GB/s, δ = 500 ns; a direct all-gather of 1 MB per rank: every uplink carries the 7 MB
# its rank sends, 70 µs, over 2 hops of 0.5 µs: T = 71 µs, of which L_net = 1 µs
SWITCH8_100 = NetworkTopology.single("switch", 8, 100 * GB, 500 * NS)


def _gather_1mb():
    result = collective_time("all_gather", 1e6, tuple(range(8)), SWITCH8_100, "direct")
    assert (result.time_s, result.latency_s) == (pytest.approx(71 * US), pytest.approx(1 * US))
    return result


@pytest.mark.parametrize(("behind_s", "exposed_s"), [(0.0, 71 * US), (30 * US, 41 * US), (70 * US, 1 * US),
                                                     (500 * US, 1 * US)])
def test_a_prefetched_gather_shows_its_bandwidth_beyond_the_compute_and_all_its_latency(behind_s, exposed_s):
    # FSDP's weight all-gather is prefetched behind the previous layer's compute (docs/model.md §10): the compute
    # hides the 70 µs of bandwidth time up to its own length, never the 1 µs of latency (the last byte still has
    # to cross the hops after the compute ends): 71 − 30 = 41 µs behind 30 µs; 1 µs behind 70 µs or more
    row = CommRow("attention", 1, "fsdp_all_gather", _gather_1mb(), hidden_behind_s=behind_s)
    assert row.time_at(1.0) == pytest.approx(exposed_s, rel=1e-9)


def test_an_overlapped_row_lies_between_its_slower_side_and_running_serially():
    # eq. 5 on rows: a GEMM overlapped with the 71 µs all-gather takes at least the longer of the two and at most
    # the GEMM followed by the whole collective. One wave (a decode GEMM of 4 rows on the 8 PEs) cannot pipeline:
    # exactly T_gemm + 71 µs. 256 waves (4,096 rows) compute-bound: T_gemm + τ_comm + L = T_gemm + 70/256 + 1 µs,
    # the last wave's share of the bandwidth and the latency.
    dev = resolve_device(catalog.load("chips", "standard"))
    gather = _gather_1mb()
    one_wave = tune_gemm(Gemm("o_proj", m=4, n=2048, k=2048), dev)
    many = tune_gemm(Gemm("o_proj", m=4096, n=2048, k=2048), dev)
    assert (one_wave.waves, many.waves) == (1, 256) and many.time_s > 10 * gather.time_s
    for timing in (one_wave, many):
        t = OverlapRow("attention", 1, timing, "tp_all_gather", gather).time_at(1.0)
        assert max(timing.time_s, gather.time_s) <= t <= timing.time_s + gather.time_s
    assert OverlapRow("attention", 1, one_wave, "tp_all_gather", gather).time_at(1.0) == pytest.approx(
        one_wave.time_s + 71 * US, rel=1e-12)
    assert OverlapRow("attention", 1, many, "tp_all_gather", gather).time_at(1.0) == pytest.approx(
        many.time_s + 70 * US / 256 + 1 * US, rel=1e-12)


@pytest.mark.parametrize(("comm_bw_s", "latency_s"), [(0.0, 0.0), (2 * US, 0.1 * US), (50 * US, 1 * US)])
def test_overlap_tuner_is_never_worse_than_the_plain_tiling(comm_bw_s, latency_s):
    # tune_gemm_overlapped minimises eq. 5 over the same candidates tune_gemm minimises time over.
    dev = resolve_device(catalog.load("chips", "standard"))
    gemm = Gemm("o_proj", m=64, n=2048, k=2048)
    plain = tune_gemm(gemm, dev)
    tuned = tune_gemm_overlapped(gemm, dev, comm_bw_s, latency_s)

    def eq5(t):
        return overlap_time_s(t.waves, t.time_s, comm_bw_s, latency_s)

    assert eq5(tuned) <= eq5(plain) * (1 + 1e-12)
    if comm_bw_s == latency_s == 0.0:
        assert tuned.time_s == pytest.approx(plain.time_s)  # nothing to hide: the fastest tiling


def test_the_overlap_tuner_gives_up_reuse_for_waves_when_the_collective_dominates():
    # o_proj 64 × 2048 × 2048 on a Standard cluster (8 PEs) before a collective of 50 µs bandwidth time and 1 µs
    # latency (paper §4.1.5, Fig. 7). Its fastest tiling alone runs 4 waves (64×64 tiles), too few to hide the
    # collective: eq. 5 = τ_comp + (12.5 + 1) + max(3 τ_comp, 3 · 12.5 + 1) µs = T/4 + 13.5 + 38.5 µs (T ≈ 11.8 µs
    # of GEMM: the communication-bound steady state). Smaller tiles make more waves, so each wave's share of the
    # collective shrinks: a slower GEMM, a faster GEMM + collective. The tuner must take that trade.
    dev = resolve_device(catalog.load("chips", "standard"))
    gemm = Gemm("o_proj", m=64, n=2048, k=2048)
    plain = tune_gemm(gemm, dev)
    tuned = tune_gemm_overlapped(gemm, dev, 50 * US, 1 * US)
    assert plain.waves == 4
    assert overlap_time_s(plain.waves, plain.time_s, 50 * US, 1 * US) == pytest.approx(
        plain.time_s / 4 + 13.5 * US + 38.5 * US, rel=1e-12)
    assert tuned.waves > plain.waves and tuned.time_s > plain.time_s
    assert (overlap_time_s(tuned.waves, tuned.time_s, 50 * US, 1 * US)
            < overlap_time_s(plain.waves, plain.time_s, 50 * US, 1 * US) - 1 * US)


# ------------------------------------------------------------------------ collectives per layer and layouts


def _scenario(model: str, batch: int, phase: str = "decode") -> Scenario:
    return Scenario.model_validate({"model": model, "phase": phase, "batch": batch})


def test_dense_tp_collectives_per_layer_and_their_sizes():
    # llama-3.2-1b (d = 2048, a16), tp=4, dp=64, decode batch 256: 256 / 64 = 4 requests = 4 tokens per device.
    # TP all-reduce after o_proj and after down_proj: 4 · 2048 · 2 B = 16,384 B each; the embedding all-reduce
    # the same; the sampler all-reduces a (max, sum) pair of 8 B per row: 4 · 8 = 32 B.
    sc = _scenario("llama-3.2-1b", 256)
    s = Schedule.parse("tp=4,dp=64")
    share = device_share(sc.model, sc, s.attention, s.pp)
    assert share.tokens == 4
    attention = communication.attention_comms(sc.model, sc, s, share)
    ffn = communication.ffn_comms(sc.model, sc, s, share, share, moe=False)
    stage = communication.stage_comms(sc.model, sc, s, share)
    assert [(c.name, c.op, c.dim, c.bytes_per_rank, c.after) for c in attention + ffn] == [
        ("attn_tp_allreduce", "all_reduce", "a_tp", 16384, "o_proj"),
        ("ffn_tp_allreduce", "all_reduce", "f_tp", 16384, "down_proj"),
    ]
    assert {c.name: c.bytes_per_rank for c in stage} == {"embedding_allreduce": 16384, "sampler_allreduce": 32}
    assert communication.fsdp_comms(sc.model, sc, s, moe=False) == []


def test_fsdp_gathers_one_layer_from_the_shards_of_its_dp_group():
    # llama-3.2-1b, tp=2, dp=4, fsdp: one layer's weights on a TP rank are attention (q 2048 × 16·64, k and v
    # 2048 × 4·64 each, o 16·64 × 2048: 2,097,152 + 2 · 524,288 + 2,097,152 = 5,242,880) + SwiGLU (3 · 2048 · 4096 =
    # 25,165,824) = 30,408,704 BF16 weights = 60,817,408 B, sharded over the 4 DP ranks: each rank's all-gather
    # input is its shard, 60,817,408 / 4 = 15,204,352 B (the all-gather then moves the other 3 shards to it)
    sc = _scenario("llama-3.2-1b", 8)
    s = Schedule.parse("tp=2,dp=4,fsdp")
    assert [(c.name, c.op, c.dim, c.bytes_per_rank) for c in communication.fsdp_comms(sc.model, sc, s, moe=False)] == [
        ("fsdp_weight_gather", "all_gather", "a_dp", 15_204_352)]


@pytest.mark.parametrize(("phase", "parallel", "tokens"), [
    ("prefill", "tp=1", 2 * 1024),  # 2 prompts of 1,024 on one device
    ("prefill", "cp=4", 2 * 1024 // 4),  # each CP rank projects its quarter of every prompt's tokens
    ("prefill", "sp=4", 2 * 1024 // 4),
    ("decode", "cp=4", 16 // 4),  # 16 requests' new tokens, a quarter per CP rank (flash decoding across ranks)
])
def test_cp_and_sp_split_the_tokens_of_the_linear_layers(phase, parallel, tokens):
    # llama-3.2-1b: the projections of a CP or SP rank see 1/4 of the tokens (docs/model.md §5), so its GEMMs
    # have that many rows; CP does not replicate the linear layers' work on every rank
    sc = _scenario("llama-3.2-1b", 2 if phase == "prefill" else 16, phase)
    s = Schedule.parse(parallel)
    assert device_share(sc.model, sc, s.attention, 1).tokens == tokens
    layer = next(layer for layer in build_workload(sc.model, sc, s.attention, s.ffn, 1) if layer.kind == "dense")
    rows = {op.name: op.m for op in layer.ops if op.name in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")}
    assert rows == dict.fromkeys(("qkv_proj", "o_proj", "gate_up_proj", "down_proj"), tokens)


def test_moe_ep_dispatch_and_combine_sizes():
    # qwen3-30b-a3b (d = 2048, top-8, no shared experts, a16), ep=16, tp=4, dp=4, decode batch 256:
    # attention replicas dp·ep = 64 → 4 tokens per device; dispatch sends top-k copies of each token:
    # 4 · 8 · 2048 · 2 B = 131,072 B per rank, before the expert GEMMs; combine the same, after them.
    sc = _scenario("qwen3-30b-a3b", 256)
    s = Schedule.parse("ep=16,tp=4,dp=4")
    share = device_share(sc.model, sc, s.attention, s.pp)
    comms = {c.name: c for c in communication.ffn_comms(sc.model, sc, s, share, share, moe=True)}
    assert comms["moe_dispatch_a2a"].bytes_per_rank == 4 * 8 * 2048 * 2
    assert comms["moe_dispatch_a2a"].before == "expert_gate_up"
    assert comms["moe_combine_a2a"].bytes_per_rank == 4 * 8 * 2048 * 2
    assert comms["moe_combine_a2a"].after == "expert_down"
    assert comms["ffn_tp_allreduce"].after is None  # no shared expert GEMM to hide it behind
    assert {c.op for c in comms.values()} == {"all_to_all", "all_reduce"}


def test_layouts_put_tp_innermost_and_pipeline_stages_outermost():
    # llama-3.2-1b, tp=2, pp=2, dp=64: TP groups are consecutive device pairs (one L1 switch of TMS1 holds two),
    # pipeline stages are the two halves of the machine: stage boundary pairs (d, d + 128).
    sc = _scenario("llama-3.2-1b", 256)
    layout = communication.layouts(sc.model, sc, Schedule.parse("tp=2,pp=2,dp=64"))
    assert layout.attention[0] == ("a_tp", 2) and layout.attention[-1] == ("pp", 2)
    assert layout.groups("a_tp")[:2] == ((0, 1), (2, 3))
    assert layout.groups("f_tp") == layout.groups("a_tp")  # a flat schedule maps both modules alike
    assert layout.groups("pp")[:2] == ((0, 128), (1, 129))
    assert len(layout.groups("a_dp")) == 4 and len(layout.groups("a_dp")[0]) == 64


def test_tp_all_reduce_time_on_tms1():
    # llama-3.2-1b tp=4, dp=64 on TMS1: 64 TP groups of 4 consecutive devices, each on its own L1 switch
    # (800 GB/s, δ = 10 ns, no framing). S = 16,384 B.
    #   halving_doubling: 4 steps · 2 hops · 10 ns = 80 ns + (S/2 + S/4)·2 / 800 GB/s = 30.72 ns → 110.72 ns
    #   ring: 6 steps · 20 ns = 120 ns + 1.5 S/B = 150.72 ns → auto picks halving_doubling.
    sc = _scenario("llama-3.2-1b", 256)
    s = Schedule.parse("tp=4,dp=64")
    topo = communication.topology_of(catalog.load("nocs", "tms1"))
    layout = communication.layouts(sc.model, sc, s)
    share = device_share(sc.model, sc, s.attention, s.pp)
    (comm,) = communication.attention_comms(sc.model, sc, s, share)
    result = communication.time_comm(comm, layout, topo, s)
    assert result.algorithm == "halving_doubling"
    assert result.num_groups == 64 and result.group_size == 4
    assert result.latency_s == pytest.approx(80 * NS)
    assert result.time_s == pytest.approx(110.72 * NS)
    # a collective choice in the schedule is honoured
    forced = Schedule.parse("tp=4,dp=64,all_reduce=ring")
    ring = communication.time_comm(comm, communication.layouts(sc.model, sc, forced), topo, forced)
    assert ring.algorithm == "ring" and ring.time_s == pytest.approx(150.72 * NS)
    # a one-rank group communicates nothing
    dp_only = Schedule.parse("dp=256")
    assert communication.time_comm(comm, communication.layouts(sc.model, sc, dp_only), topo, dp_only) is None


# ---------------------------------------------------------------------------- full evaluation: monotone laws

TMS1 = catalog.load("nocs", "tms1")
STANDARD = catalog.load("chips", "standard")
SCHEDULES = [("llama-3.2-1b", "tp=4,dp=64"), ("llama-3.2-1b", "tp=16,dp=16"),
             ("qwen3-30b-a3b", "ep=16,tp=4,dp=4"), ("qwen3-30b-a3b", "ep=64,tp=4"),
             ("llama-3.2-1b", "tp=2,pp=2,dp=64")]


def _scaled_network(factor: float):
    levels = tuple(level.model_copy(update={"link_bw_GBps": level.link_bw_GBps * factor}) for level in TMS1.levels)
    return TMS1.model_copy(update={"levels": levels})


def _point(model: str, parallel: str, factor: float) -> DesignPoint:
    # noc_bw_scale = 1/factor keeps the NoC area (∝ aggregate link bandwidth) and so the PE count of the device
    # unchanged: only the network's speed differs between the points compared.
    return DesignPoint(chip=STANDARD, scenario=_scenario(model, 256), schedule=Schedule.parse(parallel),
                       network=_scaled_network(factor), noc_bw_scale=1.0 / factor)


def test_iso_area_scaling_keeps_the_device():
    base, doubled = _point("llama-3.2-1b", "tp=4,dp=64", 1.0), _point("llama-3.2-1b", "tp=4,dp=64", 2.0)
    dev = resolve_device(base.chip, None, None, base.network, None, base.noc_bw_scale)
    dev2 = resolve_device(doubled.chip, None, None, doubled.network, None, doubled.noc_bw_scale)
    assert dev2.pes == dev.pes and dev2.area == dev.area
    assert [lvl.link_bw_Bps for lvl in doubled.network.levels] == pytest.approx(
        [2 * lvl.link_bw_Bps for lvl in base.network.levels])


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(SCHEDULES), st.sampled_from([0.5, 1.0, 3.0]))
def test_doubling_every_link_never_lowers_stps(case, factor):
    model, parallel = case
    slow = evaluate(_point(model, parallel, factor), with_ttft=False)
    fast = evaluate(_point(model, parallel, 2 * factor), with_ttft=False)
    assert math.isfinite(slow.metrics["stps"]) and slow.metrics["stps"] > 0
    assert fast.metrics["stps"] >= slow.metrics["stps"] * (1 - 1e-9)
    assert fast.hardware["pes_per_device"] == slow.hardware["pes_per_device"]


# ------------------------------------------------------------------ per-module schedules: the FFN's own tokens


def _expert_gate_up(model: str, batch: int, parallel: str, phase: str = "decode"):
    schedule = Schedule.parse(parallel)
    scenario = Scenario(model=model, phase=phase, batch=batch)
    layers = build_workload(scenario.model, scenario, schedule.attention, schedule.ffn, schedule.pp)
    moe = next(layer for layer in layers if layer.kind == "moe")
    return next(op for op in moe.ops if op.name == "expert_gate_up")


def test_ffn_with_more_replicas_than_attention_splits_the_shared_tokens():
    # attn:tp=8;moe:ep=8, DeepSeek-V3 decode b512: the 8 GPUs of the attention's TP group hold the same 512 tokens;
    # the EP group routes those 512 (not 8 × 512): 512 × 8 / 8 = 512 copies per GPU on average, the busiest
    # 512 · (1 + √(2 ln 8 / 512)) = 558.1 → 559, over its 32 experts (all touched) → ⌈559 / 32⌉ = 18 rows each
    gate = _expert_gate_up("deepseek-v3", 512, "attn:tp=8;moe:ep=8")
    assert (gate.groups, gate.m) == (32, 18)
    # one request: its 8 experts' single token, not 8 devices' rounded-up request each
    one = _expert_gate_up("deepseek-v3", 1, "attn:tp=8;moe:ep=8")
    assert one.groups * one.m <= 8


def test_ffn_with_fewer_replicas_than_attention_gathers_the_tokens():
    # attn:dp=8;moe:tp=8 (DP attention, TP experts), b512: attention holds 64 requests per GPU, the FFN all 512
    # (gathered at the module boundary); 512 × 8 = 4096 copies over the 256 experts → 16 rows each
    gate = _expert_gate_up("deepseek-v3", 512, "attn:dp=8;moe:tp=8")
    assert (gate.groups, gate.m) == (256, 16)
    assert gate.m == _expert_gate_up("deepseek-v3", 512, "tp=8").m  # the same per-GPU work as flat TP8


@pytest.mark.parametrize("split", ["cp", "sp"])
def test_an_ep_group_routes_the_tokens_of_every_cp_and_sp_rank(split):
    # Qwen3-235B-A22B prefill (128 experts, top-8), 8 prompts of 1,024 on attn:{cp|sp}=8,dp=8;ffn:ep=64: each
    # attention device holds 1,024 / 8 = 128 tokens of one prompt, the 64 devices together 8 × 1,024 = 8,192
    # distinct tokens, all routed by the one EP group: 8,192 × 8 / 64 = 1,024 slots per device on average, the
    # busiest 1,024 · (1 + √(2 ln 64 / 1,024)) = 1,116.3 → 1,117, over its 2 experts → 559 rows each. (Counting
    # 128 tokens per attention replica, as before, gave 1,024 tokens and 81 rows.)
    gate = _expert_gate_up("qwen3-235b-a22b", 8, f"attn:{split}=8,dp=8;ffn:ep=64", "prefill")
    assert (gate.groups, gate.m) == (2, 559)


def test_fewer_prompts_than_ffn_replicas_split_token_by_token():
    # DeepSeek-V3 prefill, 4 prompts of 1,024 on attn:tp=16,ep=4,sp=4;ffn:ep=64,sp=4 (256 devices): each
    # attention replica holds one prompt (256 tokens per SP rank); the FFN's 64 · 4 = 256 replicas split the
    # 4,096 tokens evenly, 16 each, not one 1,024-token prompt per replica (256 per SP rank) as before. Every op of
    # the FFN, its shared expert and the EP all-to-all see 16 tokens: 16 × 8 picks × 7,168 × 2 B = 1,835,008 B
    schedule = Schedule.parse("attn:tp=16,ep=4,sp=4;ffn:ep=64,sp=4")
    sc = Scenario(model="deepseek-v3", phase="prefill", batch=4, input_len=1024, precision="a16w16")
    a, f = schedule.attention, schedule.ffn
    assert ffn_share(sc.model, sc, a, f, 1).tokens == 16
    assert device_share(sc.model, sc, a, 1).tokens == 256
    moe = next(layer for layer in build_workload(sc.model, sc, a, f, 1) if layer.kind == "moe")
    assert {op.m for op in moe.ops if op.name in ("router", "shared_gate_up", "shared_down")} == {16}
    comms = {c.name: c for c in communication.ffn_comms(sc.model, sc, schedule, device_share(sc.model, sc, a, 1),
                                                        ffn_share(sc.model, sc, a, f, 1), moe=True)}
    assert comms["moe_dispatch_a2a"].bytes_per_rank == 16 * 8 * 7168 * 2 == 1_835_008
    # decode: a request is one token, so the token split is the request split
    dec = Scenario(model="deepseek-v3", phase="decode", batch=4)
    assert ffn_share(dec.model, dec, a, f, 1) == device_share(dec.model, dec, f, 1)


def test_a_decode_ep_group_routes_every_request_of_its_cp_ranks():
    # DeepSeek-V3 decode b128 on attn:tp=8,cp=8;ffn:tp=8,ep=8 (64 devices, one attention replica): CP splits the
    # linear layers' 128 tokens 16 per rank, and the EP group routes all 128: 128 × 8 / 8 = 128 slots per device
    # on average, the busiest 128 · (1 + √(2 ln 8 / 128)) = 151.1 → 152, over the 237.6 of 256 experts 128 tokens
    # touch under the hot-expert skew × 32 local / 256 = 29.7 → 30 groups → ⌈152 / 30⌉ = 6 rows each. (Routing
    # one CP rank's 16 tokens, as before, gave 25 slots over 11 groups: 3 rows.)
    gate = _expert_gate_up("deepseek-v3", 128, "attn:tp=8,cp=8;ffn:tp=8,ep=8")
    assert (gate.groups, gate.m) == (30, 6)
