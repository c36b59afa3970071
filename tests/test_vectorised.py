"""The vectorised and batched fast paths compute exactly what the scalar models do (issue "Speed")."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepstack import catalog
from deepstack.models import clear_caches, dram, operators
from deepstack.models.device import resolve_device
from deepstack.models.hashing import HashedTuple
from deepstack.models.workload import Attention, Gemm

DEVICE = resolve_device(catalog.load("chips", "standard"), 4, 2, catalog.load("nocs", "tms1"), None)
GEMMS = [Gemm("q", 64, 4096, 7168), Gemm("experts", 48, 2048, 7168, groups=8),
         Gemm("scores", 1024, 512, 128, weight=False), Gemm("down", 1, 7168, 18432, epilogue_vector_flops=1)]


@settings(max_examples=60, deadline=None)
@given(blocks=st.integers(1, 24), stride_rows=st.integers(0, 40), stride_extra=st.integers(0, 2047),
       window=st.integers(1, 1 << 18), swizzle=st.booleans())
def test_window_service_times_equal_the_scalar_bank_model(blocks, stride_rows, stride_extra, window, swizzle):
    spec = DEVICE.dram
    stride = stride_rows * spec.row_B + stride_extra
    starts = np.arange(blocks) * stride
    offsets = np.arange(blocks) * math.ceil(window / spec.row_B) if swizzle else None
    scalar, _ = dram.bank_service_time_s(spec, starts, np.full(blocks, window), offsets)
    vector = dram.window_service_times_s(spec, [blocks], [stride], [window], swizzle)
    assert vector[0] == scalar


def test_gemms_tuned_in_one_batch_equal_gemms_tuned_alone():
    clear_caches()
    operators.prepare_gemms(GEMMS, DEVICE)
    batched = {g: operators._candidates(g, DEVICE) for g in GEMMS}
    for g in GEMMS:
        clear_caches()
        alone = operators._candidates(g, DEVICE)
        for field in ("tm", "tn", "tk", "stages", "split", "grouped", "time_s", "waves"):
            assert np.array_equal(getattr(batched[g], field), getattr(alone, field)), (g.name, field)


def test_batched_gemm_candidates_equal_the_scalar_timing():
    """Every candidate's vectorised time and timing record are the scalar model's, to the last digit."""
    clear_caches()
    wgmma = resolve_device(catalog.load("chips", "wgmma"), 8, 3, catalog.load("nocs", "tms1"), None)
    for device, swizzle in ((DEVICE, True), (wgmma, True), (DEVICE, False)):
        for g in GEMMS:
            c = operators._candidates(g, device, swizzle)
            for i in range(len(c.time_s)):
                scalar = operators._retime(g, device, c, i, swizzle)
                assert scalar.time_s == c.time_s[i], (g.name, i)
                assert operators._record(g, device, c, i, swizzle) == scalar, (g.name, i)


def test_vectorised_attention_equals_the_scalar_timing():
    ops = [Attention("decode", "decode", 64, 1, 1536, 16, 8, 128, 128, 512.0),
           Attention("prefill", "prefill", 2, 1024, 1024, 4, 8, 192, 128, 1024.0)]
    for op in ops:
        grid = [(hb, bq, split, stages, kv) for hb in (1, 2, 4, 8, 16) for bq in ((1,) if op.q_len == 1 else (16, 64))
                for split in ((1, 2, 4) if op.q_len == 1 else (1,)) for stages in (2, 3) for kv in (16, 64)]
        fitting = [c for c in grid if operators._time_attention(op, DEVICE, *c) is not None]
        assert fitting
        columns = [np.array(col) for col in zip(*fitting, strict=True)]
        head_block = np.minimum(columns[0], op.q_per_group)
        times = operators._attention_times(op, DEVICE, head_block, columns[1], columns[2], columns[3], columns[4])
        for candidate, time_s in zip(fitting, times, strict=True):
            assert operators._time_attention(op, DEVICE, *candidate).time_s == time_s, candidate


def test_cached_hashes_never_cross_a_process_boundary():
    hash(DEVICE)
    state = pickle.loads(pickle.dumps(DEVICE)).__dict__
    assert "_hash" not in state and pickle.loads(pickle.dumps(DEVICE)) == DEVICE
    groups = HashedTuple(((0, 1), (2, 3)))
    hash(groups)
    copy = pickle.loads(pickle.dumps(groups))
    assert copy == groups and "_hash" not in copy.__dict__ and hash(copy) == hash(((0, 1), (2, 3)))


def test_ranked_collective_times_equal_the_full_runs():
    """"auto" ranks algorithms from per-step times without per-link sums; each equals the full run's time."""
    from deepstack.models import collectives, network

    topology = network.NetworkTopology.from_schema(catalog.load("nocs", "tms1"))
    for op, groups in (("all_reduce", network.device_groups([("tp", 4), ("dp", 64)], "tp")),
                       ("all_reduce", network.device_groups([("tp", 4), ("dp", 64)], "dp")),
                       ("all_gather", network.device_groups([("dp", 8), ("tp", 32)], "tp")),
                       ("all_to_all", network.device_groups([("ep", 32), ("dp", 8)], "ep"))):
        clear_caches()
        auto = collectives.collective_time(op, 3.0e6, groups, topology)
        assert len(auto.candidates) >= (1 if op == "all_to_all" else 2)  # auto skips pairwise all-to-all
        for algorithm, time_s in auto.candidates:
            assert collectives.collective_time(op, 3.0e6, groups, topology, algorithm).time_s == time_s, algorithm
        assert auto.time_s == min(time for _, time in auto.candidates)
        # the bytes per level come from per-step flow counts; the full run (built lazily) sums every link
        explicit = collectives.collective_time(op, 3.0e6, groups, topology, auto.algorithm)
        assert auto.level_bytes == pytest.approx(explicit.level_bytes, rel=1e-12)
        assert auto.steps == explicit.steps and auto.latency_s == explicit.latency_s
        assert [load.total_bytes for load in auto.level_utilization] == list(auto.level_bytes)
