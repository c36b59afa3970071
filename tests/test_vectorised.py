"""The vectorised and batched fast paths compute exactly what the scalar reference models do
(tests/scalar_reference.py), to the last digit."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import scalar_reference as reference
from hypothesis import given, settings
from hypothesis import strategies as st

from deepstack import catalog
from deepstack.models import clear_caches
from deepstack.models.compute import attention, gemm, gemm_tuner
from deepstack.models.compute.operators import Attention, Gemm
from deepstack.models.compute.overlap import overlap_time_s
from deepstack.models.hardware import dram
from deepstack.models.hardware.device import resolve_device
from deepstack.models.hashing import HashedTuple

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
    gemm_tuner.prepare_gemms(GEMMS, DEVICE)
    batched = {g: gemm_tuner.tilings(g, DEVICE) for g in GEMMS}
    for g in GEMMS:
        clear_caches()
        alone = gemm_tuner.tilings(g, DEVICE)
        for field in ("tm", "tn", "tk", "stages", "split", "grouped", "time_s", "waves"):
            assert np.array_equal(getattr(batched[g], field), getattr(alone, field)), (g.name, field)


def test_batched_gemm_candidates_equal_the_scalar_timing():
    """Every candidate's vectorised time and timing record are the scalar model's, to the last digit."""
    clear_caches()
    wgmma = resolve_device(catalog.load("chips", "wgmma"), 8, 3, catalog.load("nocs", "tms1"), None)
    for device, swizzle in ((DEVICE, True), (wgmma, True), (DEVICE, False)):
        for g in GEMMS:
            c = gemm_tuner.tilings(g, device, swizzle)
            for i in range(len(c.time_s)):
                scalar = reference.retime(g, device, c, i, swizzle)
                assert scalar.time_s == c.time_s[i], (g.name, i)
                assert gemm.record(g, device, c, i, swizzle) == scalar, (g.name, i)


ATTENTIONS = [Attention("decode", "decode", 64, 1, 1536, 16, 8, 128, 128, 512.0),
              Attention("prefill", "prefill", 2, 1024, 1024, 4, 8, 192, 128, 1024.0),
              Attention("mla", "decode", 32, 1, 4096, 128, 1, 576, 512, 1152.0),
              Attention("short", "decode", 1, 1, 40, 1, 1, 64, 64, 256.0),
              Attention("prefill_long", "prefill", 1, 4096, 8192, 8, 2, 128, 128, 512.0, causal=True),
              # a CP rank's share: 512 queries spread over a 1,024-token prompt, every key visible
              Attention("prefill_cp", "prefill", 2, 512, 1024, 4, 8, 128, 128, 512.0, q_span=1024)]


@pytest.mark.parametrize("op", ATTENTIONS, ids=lambda op: op.name)
def test_vectorised_attention_records_equal_the_scalar_timing(op):
    """Every fitting layout's time and full timing record (waves, bound, traffic, config) are the scalar model's,
    to the last digit; the tuned record is the scalar record of the fastest layout."""
    grid = [(hb, bq, split, stages, kv) for hb in (1, 2, 4, 8, 16) for bq in ((1,) if op.q_len == 1 else (16, 64))
            for split in ((1, 2, 4) if op.q_len == 1 else (1,)) for stages in (2, 3) for kv in (16, 64)]
    fitting = [c for c in grid if reference.time_attention(op, DEVICE, *c) is not None]
    assert fitting
    columns = [np.array(col) for col in zip(*fitting, strict=True)]
    head_block = np.minimum(columns[0], op.q_per_group)
    layouts = attention.time_layouts(op, DEVICE, head_block, columns[1], columns[2], columns[3], columns[4])
    for i, candidate in enumerate(fitting):
        scalar = reference.time_attention(op, DEVICE, *candidate)
        assert scalar.time_s == layouts.time_s[i], candidate
        assert attention.layout_record(op, DEVICE, layouts, i) == scalar, candidate
    clear_caches()
    tuned = attention.tune_attention(op, DEVICE)
    assert tuned.time_s <= min(reference.time_attention(op, DEVICE, *c).time_s for c in fitting)


@settings(max_examples=80, deadline=None)
@given(total=st.floats(0.0, 1e9), segment=st.floats(1.0, 1e6), direct=st.booleans())
def test_stream_time_on_floats_and_arrays_equals_the_scalar_reference(total, segment, direct):
    spec = DEVICE.dram if direct else resolve_device(catalog.load("chips", "h100-star")).dram
    expected = reference.stream_time_s(spec, total, segment)
    assert dram.stream_time_s(spec, total, segment) == expected
    assert dram.stream_time_s(spec, np.array([total, 0.0]), segment)[0] == expected


@settings(max_examples=80, deadline=None)
@given(bytes_B=st.floats(0.0, 1e9), in_flight=st.floats(0.0, 1e8), active=st.integers(1, 64),
       bank_s=st.floats(0.0, 1e-2))
def test_wave_dram_law_on_floats_and_arrays_equals_the_scalar_reference(bytes_B, in_flight, active, bank_s):
    expected = reference.dram_time_s(DEVICE, bytes_B, in_flight, active, bank_s)
    l1_fill = active * DEVICE.l1_bw_B_per_cycle * DEVICE.clock_Hz
    assert dram.wave_dram_time_s(DEVICE.dram, bytes_B, in_flight, l1_fill, bank_s) == expected
    arrays = dram.wave_dram_time_s(DEVICE.dram, np.array([bytes_B, 0.0]), np.array([in_flight, in_flight]),
                                   np.array([l1_fill, l1_fill]), np.array([bank_s, bank_s]))
    assert arrays[0] == expected and arrays[1] == 0.0


@settings(max_examples=80, deadline=None)
@given(waves=st.integers(0, 64), comp=st.floats(0.0, 1e-2), comm=st.floats(0.0, 1e-2), latency=st.floats(0.0, 1e-4))
def test_overlap_on_arrays_equals_overlap_on_floats(waves, comp, comm, latency):
    scalar = overlap_time_s(waves, comp, comm, latency)
    assert overlap_time_s(np.array([waves, 1]), np.array([comp, comp]), comm, latency)[0] == scalar


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
