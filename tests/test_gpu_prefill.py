"""A GPU prefill as vLLM serves a batch (models/gpu/scheduler.py, models/gpu/prefill.py), against figures worked
by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import timing_device_of
from hypothesis import example, given, settings
from hypothesis import strategies as st

from deepstack.catalog import load
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import _gpu_step, evaluate
from deepstack.models.gpu.admission import admitted_batch, resident
from deepstack.models.gpu.kernels import Kernels, step_kernels
from deepstack.models.gpu.prefill import step_scenario
from deepstack.models.gpu.scheduler import Run, Step, _chunking, _whole_prompts_fit, cycle_steps, steady_cycle, wave
from deepstack.models.pipeline.rows import PhaseResult
from deepstack.schema import Scenario, Schedule

B200 = load("systems", "dgx-b200")


def test_wave_of_sixteen_prompts_under_vllms_budget():
    # 16 prompts of 1,024 tokens, 8,192 tokens per step: the first request alone (it wakes the engine); then 1 decode
    # + 7 whole prompts + 1,023 tokens of the 9th; then 8 decodes, the 9th's last token and 7 whole prompts
    assert wave(16, 1024, 1024, 8192, 1024) == (
        Run(Step(1024, 1, 0, 1), 1), Run(Step(8191, 8, 1, 7), 1), Run(Step(7169, 8, 8, 8), 1))


def test_wave_chunks_a_prompt_longer_than_what_the_budget_leaves():
    # 2 prompts of 10 tokens, budget 8: step 0 holds 8 tokens of the first (no first token); step 1 its last 2 and
    # 6 of the second (the first's first token); step 2 one decode and the second's last 4
    assert wave(2, 10, 5, 8, 4) == (Run(Step(8, 1, 0, 0), 1), Run(Step(8, 2, 0, 1), 1), Run(Step(4, 1, 1, 1), 1))


def test_wave_waits_for_a_place_when_max_num_seqs_are_running():
    # one place: each request prefills, decodes its second (last) token in the next step, then leaves
    prefill, decode = Run(Step(4, 1, 0, 1), 1), Run(Step(0, 0, 1, 0), 1)
    assert wave(3, 4, 2, 8, 1) == (prefill, decode, prefill, decode, prefill)


def test_wave_of_a_thousand_prompts_merges_its_decode_only_stretch():
    # 2,048 requests, 1,024 at a time: the second half waits while the first decodes its 1,023 tokens
    runs = wave(2048, 1024, 1024, 8192, 1024)
    assert sum(run.step.first_tokens * run.repeat for run in runs) == 2048
    assert sum(run.step.prefill_tokens * run.repeat for run in runs) == 2048 * 1024
    waiting = [run for run in runs if run.step.prefill_tokens == 0]
    assert waiting and all(run.step.decodes == 1024 for run in waiting)
    assert sum(run.repeat for run in waiting) > 800


def test_a_step_runs_a_cuda_graph_only_when_it_fits_the_largest_capture():
    scenario = Scenario(model="llama-3.3-70b", phase="prefill", batch=16, cuda_graphs=True)
    small = step_scenario(Run(Step(8, 1, 15, 1), 1), scenario, 512, 1)  # 23 tokens: replayed like a decode step
    assert (small.phase, small.batch) == ("decode", 23)
    big = step_scenario(Run(Step(7169, 8, 8, 8), 1), scenario, 512, 1)  # 7,177 tokens: no graph, 8 chunks of 898
    assert (big.phase, big.batch, big.input_len, big.prefill_chunk_tokens) == ("prefill", 8, 898, 7184)
    eager = step_scenario(Run(Step(8, 1, 15, 1), 1), scenario.model_copy(update={"cuda_graphs": False}), 512, 1)
    assert (eager.phase, eager.batch, eager.input_len) == ("prefill", 1, 23)


def test_a_step_runs_on_every_engine_of_the_schedule():
    # 4 data replicas are 4 vLLM engines, each running the same step at once: the step's scenario carries every
    # engine's tokens (4 × 23 decode tokens; 4 × 8 prompts of 898 tokens, each engine's budget still 7,184;
    # one sliced long prompt per engine)
    scenario = Scenario(model="llama-3.3-70b", phase="prefill", batch=64, cuda_graphs=True)
    small = step_scenario(Run(Step(8, 1, 15, 1), 1), scenario, 512, 4)
    assert (small.phase, small.batch) == ("decode", 92)
    big = step_scenario(Run(Step(7169, 8, 8, 8), 1), scenario, 512, 4)
    assert (big.phase, big.batch, big.input_len, big.prefill_chunk_tokens) == ("prefill", 32, 898, 7184)
    long = scenario.model_copy(update={"input_len": 16384, "prefill_chunk_tokens": 8192})
    sliced = step_scenario(Run(Step(8192, 1, 0, 0), 1), long, 512, 4)
    assert (sliced.phase, sliced.batch) == ("prefill", 4)


@pytest.mark.parametrize("parallel", ["tp=8", "tp=4,dp=2", "tp=2,dp=4"])
def test_prefill_throughput_stays_below_the_servers_matrix_peak(parallel):
    # Llama-3.3-70B (BF16) prefill costs at least 2 FLOPs per parameter and token; 8 B200s reach at most 8 × their
    # dense FP16 peak. Before each engine's step carried every engine's tokens, tp=2,dp=4 at batch 64 reported
    # 161,000 tokens/s, 1.25× this bound
    point = DesignPoint(chip=B200.architecture, network=B200.network, schedule=Schedule.parse(parallel),
                        scenario=Scenario(model="llama-3.3-70b", phase="prefill", batch=64))
    report = evaluate(point, breakdown=False)
    peak_flops = 8 * report.hardware["fp16_tflops_per_device"] * 1e12
    flops_per_token = 2 * load("llms", "llama-3.3-70b").parameter_count()
    assert report.metrics.stps * flops_per_token < peak_flops


def test_prefill_kernels_replace_the_decode_attention():
    llama = load("llms", "llama-3.3-70b")
    # a layer: norm, qkv, rotary, KV write, one flash-attention varlen kernel, o_proj, all-reduce (7) + the MLP's
    # norm, gate_up, silu_and_mul, down, all-reduce (5): 80 × 12 + 12 per step = 972 (decode: 1,052)
    assert step_kernels(llama, {"dense": 80}, False, prefill=True) == Kernels(972, 972, 0, 2015)
    dsv3 = load("llms", "deepseek-v3")
    # MLA prefill: 11 core kernels + 5 block-FP8 linears (kv_b_proj expands the latent) = 21 (decode: 13 + 4 × 2),
    # eager 24 + 10 = 34 (decode 26 + 8); Triton: the 5 linears' quant, no Triton MLA kernel (decode: 2 + 4);
    # host ops 58 + 5 × 7 = 93 (decode 65 + 4 × 7). With the MoE block (19, 27, 6, 62) and the per-step 12 kernels
    # and 15 host ops:
    assert step_kernels(dsv3, {"moe": 1}, True, prefill=True) == Kernels(21 + 19 + 12, 34 + 27 + 12, 5 + 6,
                                                                           93 + 62 + 15)
    assert step_kernels(dsv3, {"moe": 1}, True) == Kernels(21 + 19 + 12, 34 + 27 + 12, 6 + 6, 93 + 62 + 15)


def _point(scenario: Scenario, system=B200) -> tuple[DesignPoint, object]:
    point = DesignPoint(chip=system.architecture, scenario=scenario, schedule=Schedule.parse("tp=8"),
                        network=system.network)
    dev = timing_device_of(point)
    return point, dev


def test_two_eager_prompts_by_hand():
    """Llama-3.3-70B, batch 2, eager, TP8 on 8×B200: two steps (the first prompt alone; then the second with the
    first's decode), each with its kernel boundaries, host launches and per-step host work; the report's STPS and
    UTPS are what the benchmark computes from the two TTFTs."""
    scenario = Scenario(model="llama-3.3-70b", phase="prefill", batch=2, cuda_graphs=False)
    point, dev = _point(scenario)
    gpu = B200.architecture.gpu
    t = []
    for tokens in (1024, 1025):
        step = _gpu_step(point, dev, scenario.model_copy(update={"batch": 1, "input_len": tokens,
                                                                 "prefill_chunk_tokens": tokens}))
        rows = {r.timing.name: r.count * r.nominal_s for r in step.rows if hasattr(r, "timing")}
        # 972 kernels × 1.3 µs; 2,015 PyTorch calls × 10.9 µs shown beyond the GPU's work; 2.21 ms per step
        assert rows["kernel_boundaries (972 kernels)"] == pytest.approx(972 * 1.3e-6)
        assert rows["host_step"] == pytest.approx(gpu.host_step_us * 1e-6)
        work = step.time_at(1.0) - sum(v for k, v in rows.items() if k.startswith(("kernel_", "eager_", "host_")))
        exposed = max(0.0, 2015 * 10.9e-6 - work - 972 * 1.3e-6)
        assert rows["eager_host (2015 ops, 0 Triton launches)"] == pytest.approx(exposed, abs=1e-12)
        t.append(step.time_at(1.0))
    report = evaluate(point, with_ttft=False, breakdown=False)
    ttft_1, ttft_2 = t[0], t[0] + t[1]
    assert report.metrics.ttft_s == pytest.approx(ttft_2)
    assert report.metrics.stps == pytest.approx(2 * 1024 / ttft_2)
    assert report.metrics.utps == pytest.approx((1024 / ttft_1 + 1024 / ttft_2) / 2)


def test_a_decode_report_on_a_gpu_carries_the_prefill_wave_as_ttft():
    decode = Scenario(model="llama-3.3-70b", phase="decode", batch=16)
    point, _ = _point(decode)
    prefill, _ = _point(decode.model_copy(update={"phase": "prefill"}))
    assert evaluate(point).metrics.ttft_s == pytest.approx(evaluate(prefill, breakdown=False).metrics.ttft_s)


def test_3d_chips_keep_the_operator_models_prefill():
    from pathlib import Path

    from deepstack.api import evaluate as api_evaluate

    # no gpu table: one pass over the batch's chunks, STPS = tokens / time and UTPS = input_len / time
    nocs = Path(__file__).resolve().parent.parent / "search" / "spaces" / "nocs"
    report = api_evaluate(model="qwen3-30b-a3b", chip="large-vector", noc=str(nocs / "mini8.toml"), stacked_layers=6,
                          connected_layers=4, parallel="tp=8", phase="prefill", batch=16, breakdown=False)
    m = report.metrics
    assert m.stps == pytest.approx(16 * 1024 / m.ttft_s) and m.utps == pytest.approx(1024 / m.ttft_s)


def test_a_prompt_longer_than_the_budget_is_one_slice_per_step():
    # 32,768 tokens, budget 8,192: four steps, each a chunk of 8,192 tokens at the prompt's mean context (the
    # operator model's chunks of the same prompt), so the TTFT is that chunked prefill's time
    scenario = Scenario(model="llama-3.3-70b", phase="prefill", batch=1, input_len=32768, prefill_chunk_tokens=8192)
    assert wave(1, 32768, 1024, 8192, 1024) == (Run(Step(8192, 1, 0, 0), 3), Run(Step(8192, 1, 0, 1), 1))
    point, dev = _point(scenario)
    chunked = _gpu_step(point, dev, scenario)
    assert chunked.microbatches == 4
    # at the clock DVFS settles on: a 32k-token prefill holds the B200 at its 1,000 W TDP (the GPU power law of
    # models/gpu/power.py puts it there; before it, the step ran at the nominal clock)
    report = evaluate(point, with_ttft=False)
    assert report.breakdown.clock_scale < 1.0 and report.breakdown.power_w_per_device == pytest.approx(1000.0)
    assert report.metrics.ttft_s == pytest.approx(chunked.time_at(report.breakdown.clock_scale), rel=1e-9)


def test_steady_cycle_spreads_the_newcomers_prompts_over_a_requests_life():
    # 8 running requests of 410 tokens: 8 new prompts per 410 steps, one each in 8 steps (7 decodes beside it)
    assert steady_cycle(8, 634, 410, 8192) == ((Run(Step(634, 1, 7, 1), 8), Run(Step(0, 0, 8, 0), 402)), 8)
    # 511 running: 511 = 1 × 410 + 101, so 101 steps take two prompts and 309 one
    assert steady_cycle(511, 634, 410, 8192).runs == (Run(Step(1268, 2, 509, 2), 101),
                                                      Run(Step(634, 1, 510, 1), 309))


def test_steady_cycle_chunks_a_prompt_the_decodes_leave_no_room_for():
    # 64 running, prompts of 16,384 tokens, budget 8,192: beside 63 decodes a chunk is 8,129 tokens, so a prompt
    # spans 3 steps (8,129 + 8,129 + 126) and a request lives 1,024 + 2 steps; 64 prompts × 3 steps of the 1,026,
    # the other 834 decode all 64
    runs, requests = steady_cycle(64, 16384, 1024, 8192)
    assert runs == (Run(Step(8129, 1, 63, 0), 128), Run(Step(126, 1, 63, 1), 64), Run(Step(0, 0, 64, 0), 834))
    assert cycle_steps(runs) == 1026 and requests == 64
    # the same prompts at budget 512: chunks of 449, 3 steps each
    assert steady_cycle(64, 1024, 1024, 512).runs[:2] == (Run(Step(449, 1, 63, 0), 128),
                                                          Run(Step(126, 1, 63, 1), 64))


def test_a_busy_servers_steps_run_their_full_budget():
    # 512 running, a newcomer after each request's 128 tokens with a 2,048-token prompt, budget 8,192: whole prompts
    # (4 a step, 8,192 + 508 decodes) exceed the budget and chunked ones overlap. A request's work is 2,048 + 127
    # tokens, so the budget finishes 8,192 / 2,175 requests a step (< 512 / 128): every step is full, 8,192 requests
    # finish in 2,175 steps, and their 8,192 × 127 decodes make 478 a step in 1,441 steps and 479 in 734
    runs, requests = steady_cycle(512, 2048, 128, 8192)
    assert requests == 8192 and cycle_steps(runs) == 2175
    assert {r.step.tokens for r in runs} == {8192}
    by_decodes = {d: sum(r.repeat for r in runs if r.step.decodes == d) for d in (478, 479)}
    assert by_decodes == {478: 1441, 479: 734} and {r.step.prefill_tokens for r in runs} == {7714, 7713}
    assert sum(r.repeat * r.step.first_tokens for r in runs) == 8192
    # each step's 7,713–7,714 prompt tokens touch 4 or 5 prompts of the stream and complete 3 or 4
    assert {(r.step.prefill_requests, r.step.first_tokens) for r in runs} <= {(4, 3), (4, 4), (5, 4)}
    # 150 running with 5,000-token prompts, 100 output tokens: about 1.5 prompts a step fit the budget on average,
    # though two whole prompts do not. The budget keeps up, and with one prompt cut at each step's end the other
    # 149 requests finish in every 100 steps (150 = λ · 100 + 1): each step feeds 149 · 5,000 / 100 = 7,450 prompt
    # tokens beside 149 · 99 / 100 = 147.51 decodes (148 in 51 steps, 147 in 49), 7,597–7,598 tokens of 8,192
    runs, requests = steady_cycle(150, 5000, 100, 8192)
    assert requests == 149 and cycle_steps(runs) == 100
    assert {r.step.prefill_tokens for r in runs} == {7450}
    assert {d: sum(r.repeat for r in runs if r.step.decodes == d) for d in (147, 148)} == {147: 49, 148: 51}
    assert sum(r.repeat * r.step.first_tokens for r in runs) == 149


@settings(max_examples=200, deadline=None)
@given(running=st.integers(1, 300), prompt=st.integers(1, 20000), output_len=st.integers(1, 2000),
       budget=st.integers(64, 16384))
def test_a_steady_cycle_gives_every_request_its_tokens_within_the_budget(running, prompt, output_len, budget):
    runs, requests = steady_cycle(running, prompt, output_len, budget)
    assert all(r.step.prefill_tokens >= 0 and r.step.tokens <= budget and r.step.decodes <= running
               and r.step.first_tokens <= r.step.prefill_requests for r in runs)
    # over the cycle: every finished request's whole prompt, and output_len tokens each (its first and its decodes)
    assert sum(r.repeat * r.step.prefill_tokens for r in runs) == requests * prompt
    assert sum(r.repeat * (r.step.decodes + r.step.first_tokens) for r in runs) == requests * output_len
    # Little's law: a request lives running · cycle / requests steps, at least its output_len; a cycle of whole or
    # chunked prompts is one life of every running request
    assert running * cycle_steps(runs) >= requests * output_len
    # every step's requests are running ones: exactly in a cycle of whole or chunked prompts, and in a busy
    # server's mean to within the one prompt split over two steps
    exact = _whole_prompts_fit(running, prompt, output_len, budget) or _chunking(running, prompt, output_len, budget)
    assert all(r.step.decodes + r.step.prefill_requests <= running + (not exact) for r in runs)


def test_steady_state_is_the_mean_of_its_steps_and_slower_than_the_batch_alone():
    # 4× H100 engines ×2 (tp=4,dp=2), 16 requests (8 per engine) of 634 + 410 tokens, well below the TDP (clock
    # nominal): a cycle of 410 steps is 8 steps with a newcomer's prompt (634 + 7 tokens per engine: above the
    # largest graph, a prefill chunk) and 402 decode steps of 8 per engine, as the batch alone decodes them
    h100 = load("systems", "dgx-h100")
    scenario = Scenario(model="llama-3.3-70b", phase="decode", batch=16, input_len=634, output_len=410)
    point = DesignPoint(chip=h100.architecture, scenario=scenario, schedule=Schedule.parse("tp=4,dp=2"),
                        network=h100.network)
    alone = evaluate(point, with_ttft=False)
    steady = evaluate(replace(point, scenario=scenario.model_copy(update={"steady_state": True})), with_ttft=False)
    assert alone.metrics.frequency_ghz == steady.metrics.frequency_ghz == h100.architecture.clock_GHz
    dev = timing_device_of(point)
    budgeted_scenario = scenario.model_copy(update={"prefill_chunk_tokens": 8192})
    mixed = _gpu_step(point, dev, step_scenario(Run(Step(634, 1, 7, 1), 1), budgeted_scenario, 512, 2))
    decode_s = alone.breakdown.phase_time_s
    mean_s = (8 * mixed.time_at(1.0) + 402 * decode_s) / 410
    assert 1 / steady.metrics.utps == pytest.approx(mean_s, rel=1e-9)
    assert steady.metrics.stps == pytest.approx(16 / mean_s, rel=1e-9)
    assert steady.metrics.stps < alone.metrics.stps and steady.metrics.tokens_per_joule < alone.metrics.tokens_per_joule
    # a newcomer's first token comes at the end of the step that runs its prompt (no queue: the server keeps up),
    # not at the end of a wave of all 16 prompts arriving together
    with_ttft = evaluate(replace(point, scenario=scenario.model_copy(update={"steady_state": True})))
    assert with_ttft.metrics.ttft_s == pytest.approx(mixed.time_at(1.0), rel=1e-12)
    assert with_ttft.metrics.ttft_s < evaluate(point).metrics.ttft_s


def test_a_chunked_newcomers_first_token_waits_for_its_chunks():
    # 64 running on 8 B200s, 16,384-token prompts at budget 8,192 (the cycle above): a newcomer's prompt runs in
    # two steps of an 8,129-token chunk and one of its last 126 tokens, each beside 63 decodes, so its TTFT is
    # those three steps at the cycle's clock (no queue: the cycle is a request's life)
    scenario = Scenario(model="llama-3.3-70b", phase="decode", batch=64, input_len=16384, steady_state=True)
    point, dev = _point(scenario)
    report = evaluate(point)
    budgeted = scenario.model_copy(update={"prefill_chunk_tokens": 8192})
    # each such step is one slice of a long prompt at its mean context (the phase of both slices, taken once)
    chunk, last = (PhaseResult(_gpu_step(point, dev, step_scenario(Run(step, 1), budgeted, 512, 1)).parts, 1, 1)
                   for step in (Step(8129, 1, 63, 0), Step(126, 1, 63, 1)))
    scale = report.breakdown.clock_scale
    assert report.metrics.ttft_s == pytest.approx(2 * chunk.time_at(scale) + last.time_at(scale), rel=1e-12)
    assert report.metrics.ttft_s < evaluate(replace(point, scenario=scenario.model_copy(
        update={"steady_state": False}))).metrics.ttft_s  # a wave: the last of 64 prompts arriving together


def test_a_steady_state_holds_half_the_generation_in_its_kv_cache():
    # staggered requests hold input + output / 2 tokens each on average, so more of them fit than at the end of a
    # batch's generation (2 B200s per engine, as ML.ENERGY serves Llama-3.1-70B)
    scenario = Scenario(model="llama-3.3-70b", phase="decode", batch=4000, input_len=634, output_len=411,
                        steady_state=True)
    assert resident(scenario).output_len == 206
    assert resident(scenario.model_copy(update={"steady_state": False})).output_len == 411
    schedule = Schedule.parse("tp=2,dp=4")
    _, dev = _point(scenario)
    usable = 0.9 * dev.dram.capacity_B
    steady = admitted_batch(scenario, schedule, usable)
    alone = admitted_batch(scenario.model_copy(update={"steady_state": False}), schedule, usable)
    assert alone < steady < 4000


def test_cli_evaluates_a_servers_steady_state(cli):
    args = ("evaluate", "--system", "dgx-h100", "--model", "llama-3.3-70b", "--parallel", "tp=4,dp=2", "--batch",
            "16", "--input-len", "634", "--output-len", "410")
    steady = cli(*args, "--steady-state")
    assert steady.code == 0, steady.err
    assert "steady state: the breakdown covers 410 engine steps" in steady.out
    alone, steady_json = cli(*args, "--json"), cli(*args, "--steady-state", "--json")
    assert alone.json()["metrics"]["stps"] > steady_json.json()["metrics"]["stps"]
    # prompts that need more prefill than the budget leaves (512 per engine, the test above): every step runs its
    # full budget, 8,192 requests finish per engine in 2,175 steps, each running one gets 8,192 · 128 / 512 tokens
    crowded = ("evaluate", "--system", "dgx-b200", "--model", "llama-3.3-70b", "--parallel", "tp=4,dp=2", "--batch",
               "1024", "--input-len", "2048", "--output-len", "128", "--steady-state")
    busy = cli(*crowded, "--json").json()
    assert busy["breakdown"]["engine_steps"] == 2175
    assert busy["metrics"]["utps"] == pytest.approx(2048 / busy["breakdown"]["phase_time_s"], rel=1e-12)
    assert busy["metrics"]["stps"] == pytest.approx(2 * 8192 * 128 / busy["breakdown"]["phase_time_s"], rel=1e-12)
    assert "busy" in cli(*crowded).out and "a request lives 135.9 steps for its 128 tokens" in cli(*crowded).out
    # a newcomer waits in the queue and is prefilled for 135.9 − 127 steps before its first token; every step runs
    # the full budget, so each takes about the mean step (the wave's TTFT of all 512 prompts at once: ~27 s)
    mean_step_s = busy["breakdown"]["phase_time_s"] / 2175
    assert busy["metrics"]["ttft_s"] == pytest.approx((512 * 2175 / 8192 - 127) * mean_step_s, rel=0.01)
    # a prompt longer than the budget leaves is chunked: the cycle has the chunks' extra steps
    chunked = cli(*args, "--steady-state", "--prefill-chunk-tokens", "512", "--json").json()
    # 8 per engine: chunks of 512 − 7 = 505 tokens, 2 per prompt, so each request lives 411 steps
    assert chunked["breakdown"]["engine_steps"] == 411
    assert chunked["metrics"]["utps"] == pytest.approx(410 / chunked["breakdown"]["phase_time_s"], rel=1e-12)
    assert "engine_steps" not in alone.json()["breakdown"]  # one forward pass: the key is absent
    # other devices ignore it
    chip = ("evaluate", "--model", "llama-3.2-1b", "--chip", "standard", "--batch", "4", "--json")
    assert cli(*chip).json()["metrics"] == cli(*chip, "--steady-state").json()["metrics"]


def test_cli_names_the_engine_steps_a_gpu_prefill_covers(cli):
    # 16 prompts of 1,024 tokens at vLLM's 8,192-token budget: three engine steps (the wave above); the breakdown's
    # times are over all three, and the report says so where a 3D chip's says "per forward pass"
    gpu = cli("evaluate", "--system", "dgx-b200", "--model", "llama-3.3-70b", "--parallel", "tp=8", "--phase",
              "prefill", "--batch", "16")
    assert gpu.code == 0, gpu.err
    assert "over 3 vLLM engine steps" in gpu.out and "per forward pass" not in gpu.out
    chip = cli("evaluate", "--model", "llama-3.2-1b", "--chip", "standard", "--phase", "prefill", "--batch", "4")
    assert "per forward pass" in chip.out and "engine steps" not in chip.out


def test_a_long_prompts_last_slice_is_timed_as_its_own_tokens():
    # 10,000 tokens at a budget of 8,192: a full slice, then the last 1,808 tokens; each step is a slice of its own
    # tokens at the prompt's mean context (before: the last step cost a full 8,192-token slice)
    scenario = Scenario(model="llama-3.3-70b", phase="prefill", batch=1, input_len=10000, prefill_chunk_tokens=8192,
                        cuda_graphs=False)
    full, last = wave(1, 10000, 1024, 8192, 1024)
    assert (full, last) == (Run(Step(8192, 1, 0, 0), 1), Run(Step(1808, 1, 0, 1), 1))
    assert step_scenario(full, scenario, 512, 1).prefill_chunk_tokens == 8192
    assert step_scenario(last, scenario, 512, 1).prefill_chunk_tokens == 1808
    point, dev = _point(scenario)
    # one slice per step (the wave keeps one of the chunked prefill's slices): 8,192 tokens, then ~1,808
    slow, fast = (_gpu_step(point, dev, step_scenario(r, scenario, 512, 1)).nominal_stage_s for r in (full, last))
    assert fast < 0.5 * slow


H100 = load("systems", "dgx-h100")
LLAMA_8K = Scenario(model="llama-3.3-70b", phase="prefill", batch=512, input_len=8192, output_len=1)


def test_a_prefill_batch_whose_kv_does_not_fit_runs_the_requests_that_fit_at_once():
    # Llama-3.3-70B on 8 H100s, TP8: 512 prompts of 8,192 tokens hold 512 × 8,192 × 40,960 B = 160 GiB of KV per
    # GPU (1 KV head of 128 × (K, V) × 2 B per layer, 80 layers) beside ~16 GiB of weights in 72 GiB usable.
    # vLLM admits as many prompts as fit and the others wait for places (refused as infeasible before)
    from deepstack.models.gpu.admission import prefill_in_waves
    from deepstack.models.parallel.memory import memory_footprint, usable_capacity_B

    tp8 = Schedule.parse("tp=8")
    capacity_B = timing_device_of(_point(LLAMA_8K, H100)[0]).dram.capacity_B
    waved, places = prefill_in_waves(LLAMA_8K, tp8, capacity_B)
    # the budget stays vLLM's default: fewer requests, not smaller steps
    assert waved.prefill_chunk_tokens == 8192 and 100 < places < 512
    held = [memory_footprint(waved.model_copy(update={"batch": n}), tp8) for n in (places, places + 1)]
    assert held[0].kv_cache_B == places * 8192 * 80 * 512
    assert [f.total_B <= usable_capacity_B(capacity_B) for f in held] == [True, False]

    report = evaluate(_point(LLAMA_8K, H100)[0], breakdown=False)
    assert report.feasible and report.scenario.running_batch == places and report.scenario.batch == 512
    assert report.metrics.memory_gib * 2**30 == held[0].total_B
    # every request is served: the throughput is that of a batch that fits (it saturates), the last first token
    # comes about 512 / places times as late
    fitting = evaluate(_point(LLAMA_8K.model_copy(update={"batch": places}), H100)[0], breakdown=False)
    assert "running_batch" not in fitting.scenario.as_dict()
    assert report.metrics.stps == pytest.approx(fitting.metrics.stps, rel=0.03)
    assert report.metrics.ttft_s == pytest.approx(fitting.metrics.ttft_s * 512 / places, rel=0.05)


def test_a_prefill_just_past_what_fits_holds_about_as_many_as_one_that_fits():
    # the places are counted by the memory check a fitting batch passes: one batch past the edge holds nearly
    # the whole edge batch at once (within the two prompts a larger step budget's activations take)
    from deepstack.models.gpu.admission import prefill_in_waves

    tp8 = Schedule.parse("tp=8")
    capacity_B = timing_device_of(_point(LLAMA_8K, H100)[0]).dram.capacity_B
    sizes = [(batch, prefill_in_waves(LLAMA_8K.model_copy(update={"batch": batch}), tp8, capacity_B)[1])
             for batch in range(160, 200)]
    edge = max(batch for batch, places in sizes if places is None)
    first_waved = dict(sizes)[edge + 1]
    assert edge - 2 <= first_waved <= edge


def test_a_prefill_batch_that_fits_keeps_its_wave_and_one_that_cannot_start_is_refused():
    from deepstack.models.gpu.admission import prefill_in_waves
    from deepstack.models.parallel.prefill_budget import with_prefill_budget

    tp8 = Schedule.parse("tp=8")
    capacity_B = timing_device_of(_point(LLAMA_8K, H100)[0]).dram.capacity_B
    fitting = LLAMA_8K.model_copy(update={"batch": 64})
    assert prefill_in_waves(fitting, tp8, capacity_B) == (with_prefill_budget(fitting, tp8, capacity_B), None)
    # one prompt of 1.5 M tokens needs ~57 GiB of KV per GPU beside the weights and a step: not even one fits
    alone = LLAMA_8K.model_copy(update={"batch": 4, "input_len": 1_500_000})
    assert prefill_in_waves(alone, tp8, capacity_B)[1] is None
    assert not evaluate(_point(alone, H100)[0], breakdown=False).feasible


def test_cli_says_a_prefill_runs_its_requests_as_places_free_up(cli):
    done = cli("evaluate", "--system", "dgx-h100", "--model", "llama-3.3-70b", "--parallel", "tp=8", "--phase",
               "prefill", "--batch", "512", "--input-len", "8192", "--output-len", "1")
    assert done.code == 0, done.err
    assert "175 of the 512 requests fit at once; vLLM prefills the other 337" in done.out
    assert "the metrics cover the whole batch" in done.out


@settings(max_examples=8, deadline=None)
@given(batch=st.integers(1, 700), input_len=st.sampled_from([2048, 8192, 16384]), output_len=st.sampled_from([1, 512]))
@example(batch=512, input_len=8192, output_len=1).via("the waves of the hand-checked test")
@example(batch=300, input_len=16384, output_len=512).via("a long output: places free only after generations")
def test_a_prefill_that_runs_in_waves_fits_and_is_no_faster_than_its_places_alone(batch, input_len, output_len):
    # whatever the batch: a feasible report fits the usable memory; when the batch runs a place at a time, it holds
    # fewer than the batch at once and serves them no faster than those places would run alone (waiting adds
    # nothing a batch that fits does not have)
    from deepstack.models.parallel.memory import usable_capacity_B

    scenario = LLAMA_8K.model_copy(update={"batch": batch, "input_len": input_len, "output_len": output_len})
    point = _point(scenario, H100)[0]
    report = evaluate(point, breakdown=False)
    if not report.feasible:
        return
    assert report.metrics.memory_gib * 2**30 <= usable_capacity_B(timing_device_of(point).dram.capacity_B)
    places = report.scenario.running_batch
    if places is not None:
        assert places < batch
        alone = evaluate(_point(scenario.model_copy(update={"batch": places}), H100)[0], breakdown=False)
        assert report.metrics.stps <= alone.metrics.stps * 1.02
