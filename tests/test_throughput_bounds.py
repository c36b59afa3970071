"""A physical bound every evaluation must respect: no step runs faster than its matrix units allow. The
system's STPS times the FLOPs each token (prompt or generated) needs in the linear layers alone (2 per weight;
attention's own work and the head come on top) can never exceed the devices' peak matrix FLOP/s at the nominal
clock (DVFS only lowers it). Checked in prefill and decode over flat and per-module schedules, whole prompts and
prompts cut into slices, with and without PP, on the 8-device mini8 network (Llama-3.2-1B: hidden 2,048, 16
layers, 32 heads and 8 KV heads of 64, SwiGLU 8,192). A step that drops tokens (as prompt slices once did for a
per-module FFN) breaks it. A MoE model with CP or SP attention checks that an EP group routes the tokens of
every CP and SP rank (it once counted one rank's)."""

from __future__ import annotations

import pytest
from conftest import MINI8
from hypothesis import given, settings
from hypothesis import strategies as st

from deepstack import catalog
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate
from deepstack.models.hardware.device import resolve_device
from deepstack.models.pipeline import run_phase
from deepstack.schema import Scenario, Schedule

HIDDEN, LAYERS, KV_WIDTH, FFN = 2048, 16, 8 * 64, 8192
# q and o (hidden²), k and v (hidden × 8 KV heads × 64), gate, up and down (hidden × 8,192)
LINEAR_WEIGHTS = LAYERS * (2 * HIDDEN * HIDDEN + 2 * HIDDEN * KV_WIDTH + 3 * HIDDEN * FFN)
LINEAR_FLOPS_PER_TOKEN = 2 * LINEAR_WEIGHTS  # 2 FLOPs per weight
WEIGHT_BYTES = 2  # BF16


STANDARD = catalog.load("chips", "standard")
NETWORK = catalog.load("nocs", str(MINI8))
PEAK_FLOPS = 8 * resolve_device(STANDARD, 4, 4, NETWORK, None, 1.0).peak_matrix_flops  # 8 devices at m = n = 4


def _stps_on_mini8(model: str, phase: str, batch: int, budget: int, schedule: Schedule) -> float:
    """The system STPS of 1,024-token prompts (or their decode) on 8 Standard devices at m = n = 4."""
    scenario = Scenario(model=model, phase=phase, batch=batch, input_len=1024, prefill_chunk_tokens=budget)
    point = DesignPoint(chip=STANDARD, scenario=scenario, schedule=schedule, network=NETWORK, stacked_layers=4,
                        connected_layers=4)
    return evaluate(point, breakdown=False).metrics.stps


def test_the_linear_flops_per_token_by_hand():
    # per layer 2 · 2,048² + 2 · 2,048 · 512 + 3 · 2,048 · 8,192 = 8,388,608 + 2,097,152 + 50,331,648 = 60,817,408
    # weights; × 16 layers × 2 FLOPs = 1,946,157,056
    assert LINEAR_FLOPS_PER_TOKEN == 1_946_157_056


@settings(max_examples=80, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2]),
       st.sampled_from([128, 512, 1024, 8192]), st.sampled_from([1, 2, 4]), st.sampled_from(["prefill", "decode"]))
def test_no_step_beats_the_matrix_peak(attn_tp, ffn_tp, pp, budget, per_engine, phase):
    devices = 8 // pp  # per pipeline stage; attention on `engines` data replicas of attn_tp, the FFN on TP ffn_tp
    if attn_tp > devices or ffn_tp > devices:
        return
    engines = devices // attn_tp
    batch = engines * per_engine
    if devices // ffn_tp > batch:  # more FFN replicas than requests: not a schedule the search keeps
        return
    schedule = Schedule.parse(f"attn:tp={attn_tp},dp={engines};ffn:tp={ffn_tp},dp={devices // ffn_tp};pp={pp}")
    assert _stps_on_mini8("llama-3.2-1b", phase, batch, budget, schedule) * LINEAR_FLOPS_PER_TOKEN <= PEAK_FLOPS


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2]), st.sampled_from([1, 4, 16, 64]),
       st.sampled_from([(2, 1), (4, 4), (8, 8)]))
def test_no_decode_step_beats_its_weight_stream(tp, pp, batch, stacking):
    """A decode step reads every weight its device holds at least once: the step takes at least the device's
    share of the linear layers' weights (16 layers × 60,817,408 BF16 weights over TP and PP) at the DRAM's peak,
    so STPS ≤ batch × peak / share. Flat schedules on mini8 (8 devices: TP × PP × DP)."""
    dp = 8 // (tp * pp)
    if dp < 1 or dp > batch:
        return
    m, n = stacking
    chip, network = catalog.load("chips", "standard"), catalog.load("nocs", str(MINI8))
    scenario = Scenario(model="llama-3.2-1b", phase="decode", batch=batch, input_len=1024)
    schedule = Schedule.parse(f"tp={tp},pp={pp},dp={dp}")
    point = DesignPoint(chip=chip, scenario=scenario, schedule=schedule, network=network, stacked_layers=m,
                        connected_layers=n)
    report = evaluate(point, breakdown=False)
    share_B = LINEAR_WEIGHTS * WEIGHT_BYTES / (tp * pp)
    peak_Bps = resolve_device(chip, m, n, network, None, 1.0).dram.peak_bw_Bps
    assert report.metrics.stps <= batch * peak_Bps / share_B



@pytest.mark.parametrize(("tp", "pp", "batch", "microbatches", "stage_times"), [
    (4, 2, 1, 1, 2),  # one request: its token crosses both stages in turn, the second idles during the first
    (2, 4, 2, 2, 4),  # two single-request microbatches cannot fill four stages: 4 stage-times, not 2
    (1, 8, 2, 2, 8),
    (1, 8, 64, 8, 8),  # 64 requests fill 8 stages: 8 microbatches of 8, one stage-time each in the steady state
])
def test_a_decode_step_is_max_of_microbatches_and_stages(tp, pp, batch, microbatches, stage_times):
    """A decode step on pp stages with m microbatches lasts max(m, pp) stage-times (paper §3.3.1): every token
    passes the stages one after another, so however few microbatches the batch makes, the step cannot end
    before the last one has crossed all pp stages. Flat schedules of Llama-3.2-1B on mini8, m = n = 4."""
    chip, network = catalog.load("chips", "standard"), catalog.load("nocs", str(MINI8))
    scenario = Scenario(model="llama-3.2-1b", phase="decode", batch=batch, input_len=1024)
    schedule = Schedule.parse(f"tp={tp},pp={pp},dp={8 // (tp * pp)}")
    point = DesignPoint(chip=chip, scenario=scenario, schedule=schedule, network=network, stacked_layers=4,
                        connected_layers=4)
    report = evaluate(point, with_ttft=False)
    assert report.schedule.microbatches == microbatches
    steps = report.breakdown
    assert steps.phase_time_s == pytest.approx(stage_times * steps.stage_time_s, rel=1e-12)
    assert report.metrics.stps == pytest.approx(batch / steps.phase_time_s, rel=1e-12)


@pytest.mark.parametrize(("phase", "batch", "parallel"), [("prefill", 16, "tp=4,pp=2"), ("decode", 256, "tp=2,pp=4")])
def test_the_pipeline_runs_its_fastest_microbatch_count(phase, batch, parallel):
    """Without a count in the schedule, the pipeline tries pp, 2·pp and 4·pp microbatches (docs/model.md §11) and
    runs the fastest: its step is no slower than any of them given explicitly, and equal to one. 16 prompts on
    pp = 2 as 2, 4 or 8 microbatches: 8 is the fastest here (m + pp − 1 = 9 stage-times of 2 prompts each,
    against 3 of 8 prompts: the bubble is a ninth of the step instead of a third); the first option would not be."""
    chip, network = catalog.load("chips", "standard"), catalog.load("nocs", str(MINI8))
    dev = resolve_device(chip, 4, 4, network)
    scenario = Scenario(model="llama-3.2-1b", phase=phase, batch=batch)

    def step_s(schedule: str) -> float:
        point = DesignPoint(chip=chip, network=network, scenario=scenario, schedule=Schedule.parse(schedule),
                            stacked_layers=4, connected_layers=4)
        return run_phase(point, dev, scenario).time_at(1.0)

    pp = Schedule.parse(parallel).pp
    given = [step_s(f"{parallel},microbatches={m}") for m in (pp, 2 * pp, 4 * pp)]
    assert len(set(given)) == 3  # the counts do differ
    assert step_s(parallel) == min(given)


# Qwen3-30B-A3B (hidden 2,048, 48 layers, 32 heads and 4 KV heads of 128, 128 experts of 768, top-8): q and o
# (2,048 × 4,096), k and v (2,048 × 512), the router (2,048 × 128) and the 8 experts a token visits (3 × 2,048 × 768)
MOE_LINEAR_FLOPS_PER_TOKEN = 2 * 48 * (2 * 2048 * 4096 + 2 * 2048 * 512 + 2048 * 128 + 8 * 3 * 2048 * 768)


def test_the_moe_linear_flops_per_token_by_hand():
    # per layer 16,777,216 + 2,097,152 + 262,144 + 37,748,736 = 56,885,248 weights a token uses; × 48 × 2
    assert MOE_LINEAR_FLOPS_PER_TOKEN == 5_460_983_808


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["cp", "sp"]), st.sampled_from([2, 4, 8]), st.sampled_from([1, 2]),
       st.sampled_from([128, 1024, 8192]), st.sampled_from([1, 2, 4]), st.sampled_from(["prefill", "decode"]))
def test_no_moe_step_beats_the_matrix_peak_under_cp_or_sp_attention(split, degree, pp, budget, per_engine, phase):
    devices = 8 // pp  # per pipeline stage: attention on `engines` replicas of CP (or SP) `degree`, experts on EP
    if degree > devices:
        return
    engines = devices // degree
    schedule = Schedule.parse(f"attn:{split}={degree},dp={engines};ffn:ep={devices};pp={pp}")
    stps = _stps_on_mini8("qwen3-30b-a3b", phase, engines * per_engine, budget, schedule)
    assert stps * MOE_LINEAR_FLOPS_PER_TOKEN <= PEAK_FLOPS
