"""Laws the GEMM tuner (models/compute/gemm_tuner.py) must keep whatever the shape: a device that is faster or
larger in one resource never runs a GEMM slower (its tuner can still choose what the smaller device ran; with
more PEs the same tiles run in fewer, fuller waves, which touch no more blocks than the waves they replace), and
the pipeline depth is searched (paper §3.3.2), not fixed at the deepest that fits."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from deepstack import catalog
from deepstack.models.compute.gemm_tuner import tilings, tune_gemm
from deepstack.models.compute.operators import Gemm
from deepstack.models.hardware.device import resolve_device

DEVICE = resolve_device(catalog.load("chips", "standard"), 4, 4, catalog.load("nocs", "tms1"), None)
ROW_MAJOR = dataclasses.replace(DEVICE, dram=dataclasses.replace(DEVICE.dram, weight_layout="row_major"))


def _larger(dev, resource: str):
    """``dev`` with twice the ``resource`` (half the DRAM access latency)."""
    if resource == "dram_bw":
        return dataclasses.replace(dev, dram=dataclasses.replace(dev.dram, peak_bw_Bps=2 * dev.dram.peak_bw_Bps))
    if resource == "dram_latency":
        faster = dataclasses.replace(dev.dram, access_latency_s=dev.dram.access_latency_s / 2)
        return dataclasses.replace(dev, dram=faster)
    return dataclasses.replace(dev, **{resource: 2 * getattr(dev, resource)})


@settings(max_examples=40, deadline=None)
@given(m=st.sampled_from([1, 4, 16, 37, 300, 2048]), n=st.sampled_from([8, 64, 384, 1536, 7168]),
       k=st.sampled_from([64, 128, 2048, 7168]), groups=st.sampled_from([1, 3, 4, 32]),
       b_bytes=st.sampled_from([1.0, 2.0]), weight=st.booleans(), row_major=st.booleans(),
       resource=st.sampled_from(["pes", "l1_B", "l1_bw_B_per_cycle", "l2_bw_B_per_cycle", "matrix_flops_per_cycle",
                                 "vector_flops_per_cycle", "dram_bw", "dram_latency"]))
# shapes that broke the law: a wave longer than an expert group counted as every block of each group it reaches
# (more PEs, longer waves, more bytes), a grouped wave on a one-column GEMM counted square (fewer PEs, too few
# activation blocks), and a larger L1 forcing a deeper pipeline whose wider bank window was slower
@example(m=16, n=1536, k=2048, groups=4, b_bytes=1.0, weight=True, row_major=False, resource="pes")
@example(m=16, n=1536, k=128, groups=32, b_bytes=2.0, weight=True, row_major=True, resource="pes")
@example(m=2048, n=8, k=2048, groups=32, b_bytes=2.0, weight=False, row_major=False, resource="pes")
@example(m=16, n=256, k=2048, groups=1, b_bytes=2.0, weight=True, row_major=False, resource="l1_B")
def test_a_larger_device_never_runs_a_gemm_slower(m, n, k, groups, b_bytes, weight, row_major, resource):
    g = Gemm("g", m, n, k, groups=groups, b_bytes=b_bytes, weight=weight)
    dev = ROW_MAJOR if row_major else DEVICE
    assert tune_gemm(g, _larger(dev, resource)).time_s <= tune_gemm(g, dev).time_s * (1 + 1e-12)


def test_a_shallower_pipeline_is_chosen_where_it_is_faster():
    """16 × 256 × 2048 on the standard chip with twice its L1: the tuner's tile (16 × 128 × 64, split-K 4) fits
    4 stages, but its wider bank window makes the 4-stage pipeline 1.94 µs against 0.94 µs at 3 stages; the
    tuner keeps 3, as on the standard L1 where 4 do not fit beside nothing else."""
    g = Gemm("g", 16, 256, 2048)
    big = dataclasses.replace(DEVICE, l1_B=2 * DEVICE.l1_B)
    chosen = tune_gemm(g, big)
    assert chosen.config == "tile 16x128x64, 3 stages, split-K 4, row raster"
    c = tilings(g, big)
    same = (c.tm == 16) & (c.tn == 128) & (c.tk == 64) & (c.split == 4) & ~c.grouped
    by_depth = dict(zip(c.stages[same].tolist(), c.time_s[same].tolist(), strict=True))
    assert set(by_depth) == {2, 3, 4} and min(by_depth, key=by_depth.get) == 3
    assert chosen.time_s == by_depth[3] < by_depth[4]
    assert chosen.time_s == tune_gemm(g, DEVICE).time_s


def test_of_equally_fast_depths_the_deepest_is_kept():
    """Llama-3.2-1B's gate/up projection at batch 1 (16 × 16,384 × 2,048): DRAM-bound, the same time at every
    depth that fits; the tuner keeps the deepest, as it did when only the deepest was timed."""
    g = Gemm("gate_up", 1, 16384, 2048)
    c = tilings(g, DEVICE)
    best = tune_gemm(g, DEVICE)
    i = int(np.argmin(c.time_s))
    same = (c.tm == c.tm[i]) & (c.tn == c.tn[i]) & (c.tk == c.tk[i]) & (c.split == c.split[i]) & (
        c.grouped == c.grouped[i])
    assert int(c.stages[i]) == int(c.stages[same].max())
    assert f"{int(c.stages[i])} stages" in best.config


# a larger problem may time a little faster at sub-microsecond sizes: its tiles spread over more banks (16 × 64 × 128
# in 0.173 µs, 24 × 64 × 128 in 0.165 µs), or a taller tile splits over the matrix units 2 × 2 and reads its
# activations twice instead of four times (16 × 8 × 64 in 12.9 ns of L1, 24 × 8 × 64 in 11.4 ns); never by a fifth
SIZE_SLACK = 0.8


@settings(max_examples=40, deadline=None)
@example(m=128, n=384, k=128, groups=32, b_bytes=1.0, weight=False, row_major=False, dim="n")
@given(m=st.sampled_from([1, 4, 16, 37, 300, 2048]), n=st.sampled_from([8, 64, 384, 1536, 7168]),
       k=st.sampled_from([64, 128, 2048, 7168]), groups=st.sampled_from([1, 3, 4, 32]),
       b_bytes=st.sampled_from([1.0, 2.0]), weight=st.booleans(), row_major=st.booleans(),
       dim=st.sampled_from(["m", "n", "k", "groups"]))
def test_a_larger_gemm_never_runs_much_faster(m, n, k, groups, b_bytes, weight, row_major, dim):
    """Half as much again along one dimension (one more group): never faster beyond the bank model's
    granularity. (A GEMM whose inputs stay in L2 once took 0.4 s, its posted writes bound by Little's law.)"""
    dev = ROW_MAJOR if row_major else DEVICE
    size = {"m": m, "n": n, "k": k, "groups": groups}
    larger = {**size, dim: size[dim] + (1 if dim == "groups" else max(1, size[dim] // 2))}
    small = tune_gemm(Gemm("g", **size, b_bytes=b_bytes, weight=weight), dev).time_s
    assert tune_gemm(Gemm("g", **larger, b_bytes=b_bytes, weight=weight), dev).time_s >= SIZE_SLACK * small
