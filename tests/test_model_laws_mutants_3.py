"""Laws of the GPU serving model and of the attention and GEMM kernels that a third mutation run found unchecked:
each test below fails with the code mutated as its docstring says.

- a data replica is its own engine: ⌈batch / replicas⌉ requests each, for its CUDA graph and its prefill wave;
- an operator's HBM floor is its bytes at the *achievable* bandwidth, and stretching an operator to it stretches
  every part (clocked waves, DRAM waves, prologue), so the floor holds at any clock;
- waiting SMs: never a negative time, and every microbatch of the step counted;
- vLLM's EP inside the TP group also when the MoE's EP × TP is the attention's TP; DSA's indexer linears;
- a prefill wave: the TTFT of every request of a run of first-token steps, the user speed weighted by requests,
  the wave's time its last TTFT under PP; a step of exactly the largest graph replays it; a prompt exactly the
  budget is not sliced;
- the steady state's boundaries: whole prompts filling the budget exactly, chunks filling every step, a busy
  server's rate limited by its running requests, the prompts a step touches;
- attention: a split reads ⌈keys / split⌉, splits down to 16 keys, gathered keys read a token at a time, q-blocks
  up to the prompt, a sparse prefill's queries gather their own keys;
- GEMM: an epilogue operand read through L2; the tuner's candidates at the register, split-K, K-edge, L1-depth
  and rasterisation limits.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import timing_device_of

from deepstack.catalog import load
from deepstack.models import power as power_model
from deepstack.models.compute.attention import time_layouts, tune_attention
from deepstack.models.compute.gemm_tuner import tilings, tune_gemm
from deepstack.models.compute.operators import Attention, Gemm
from deepstack.models.compute.timing import OpTiming, WaveTiming
from deepstack.models.gpu import power as gpu_power
from deepstack.models.gpu.efficiency import at_least_achievable
from deepstack.models.gpu.host import fixed_row, uses_graphs
from deepstack.models.gpu.kernels import Kernels, layer_kernels, step_kernels
from deepstack.models.gpu.prefill import Wave, step_scenario
from deepstack.models.gpu.scheduler import Cycle, Run, Step, steady_cycle
from deepstack.models.hardware.device import resolve_device
from deepstack.models.pipeline.rows import OpRow, PhaseResult
from deepstack.schema import Scenario, Schedule

B200_SYSTEM = load("systems", "dgx-b200")
B200_GPU = B200_SYSTEM.architecture.gpu
B200 = resolve_device(B200_SYSTEM.architecture)
H100 = resolve_device(load("systems", "dgx-h100").architecture)
STANDARD = resolve_device(load("chips", "standard"), 4, 4)


def _timing(time_s: float, dram_B: float, clocked_s: float, fixed_s: float, prologue_s: float,
            matrix_flops: float = 0.0, kind: str = "gemm") -> OpTiming:
    """An operator of one wave (``clocked_s`` of compute, ``fixed_s`` of DRAM) after a ``prologue_s``."""
    return OpTiming(name="op", kind=kind, time_s=time_s, bound="dram", matrix_flops=matrix_flops, vector_flops=0.0,
                    sfu_ops=0.0, dram_B=dram_B, l2_B=0.0, l1_B=0.0, waves=1, config="",
                    wave_timings=(WaveTiming(1, clocked_s, fixed_s, "dram"),), prologue_s=prologue_s)


# --- CUDA graphs: a data replica is its own engine --------------------------------------------------------------

def test_a_replicas_batch_rounds_up_when_choosing_a_cuda_graph():
    """Decode with DP 2 (TP 4 each) on a B200 (largest graph 512 tokens): batch 1,024 puts 512 requests on each
    engine, within the graph; batch 1,025 puts ⌈1,025 / 2⌉ = 513 on one of them, beyond it, so that step runs
    eagerly. (Rounding down: 512, a graph.)"""
    dp2 = Schedule.parse("tp=4,dp=2")
    assert B200_GPU.graph_max_batch == 512
    decode = Scenario(model="llama-3.3-70b", phase="decode", batch=1024)
    assert uses_graphs(B200_GPU, decode, dp2)
    assert not uses_graphs(B200_GPU, decode.model_copy(update={"batch": 1025}), dp2)


# --- the HBM floor --------------------------------------------------------------------------------------------

def test_the_hbm_floor_is_the_bytes_at_the_achievable_bandwidth():
    """B200: 8 TB/s peak × hbm_efficiency 0.87 = 6.96 TB/s achievable. An operator of 3 µs (prologue 1 µs, one
    wave of 1 µs compute and 2 µs DRAM) moving 41.76 MB has a floor of 41.76e6 / 6.96e12 = 6 µs: it is
    stretched by f = 2, to 6 µs, its DRAM bound. (At the peak bandwidth: 5.22 µs.)"""
    timing = _timing(3e-6, 41.76e6, 1e-6, 2e-6, 1e-6)
    stretched = at_least_achievable(timing, B200, B200_GPU)
    assert stretched.time_s == pytest.approx(6e-6, rel=1e-12)
    assert stretched.bound == "dram"
    # already slower than the floor: unchanged
    slow = _timing(7e-6, 41.76e6, 1e-6, 6e-6, 1e-6)
    assert at_least_achievable(slow, B200, B200_GPU) is slow


def test_stretching_to_the_hbm_floor_stretches_every_part_so_it_holds_at_any_clock():
    """The operator above stretched by f = 2: prologue 2 µs, wave 2 µs compute and 4 µs DRAM. At 0.8 × the clock
    its compute takes 2 / 0.8 = 2.5 µs < 4 µs of DRAM, so it still takes 2 + 4 = 6 µs, the floor. (DRAM part not
    stretched: 2 + max(2.5, 2) = 4.5 µs; prologue not stretched: 1 + 4 = 5 µs, both under the floor.) Its waves
    and prologue sum to its nominal time."""
    stretched = at_least_achievable(_timing(3e-6, 41.76e6, 1e-6, 2e-6, 1e-6), B200, B200_GPU)
    assert stretched.time_at(0.8) == pytest.approx(6e-6, rel=1e-12)
    (wave,) = stretched.wave_timings
    assert stretched.prologue_s + wave.count * max(wave.clocked_s, wave.fixed_s) == pytest.approx(
        stretched.time_s, rel=1e-12)


# --- waiting SMs -----------------------------------------------------------------------------------------------

# a memory-bound call of 1 ms on an H100 whose 98.94 GFLOP take 0.1 ms at the peak rate: 0.9 ms waiting
_MEMORY_BOUND_CALL = OpRow("layer", 1, _timing(1e-3, 0.0, 0.1e-3, 1e-3, 0.0, matrix_flops=98.942976e9, kind="matmul"))


def test_an_operator_faster_than_its_flops_at_the_peak_rate_has_no_waiting_sms():
    """H100 (989.43 TFLOP/s): a call of 0.5 ms counted with 989.43 GFLOP (1 ms at the peak rate) leaves its tensor
    cores idle for max(0, 0.5 − 1) = 0 ms, not −0.5 ms; beside it a memory-bound call of 1 ms with 98.94 GFLOP
    (0.1 ms) waits 0.9 ms. The step: 0.9 ms, 314.1637 W × 0.9 ms = 0.28275 J. (Unclamped: 0.4 ms.)"""
    fast = OpRow("layer", 1, _timing(0.5e-3, 0.0, 0.5e-3, 0.0, 0.0, matrix_flops=989.42976e9, kind="matmul"))
    phase = PhaseResult(parts=[fast, _MEMORY_BOUND_CALL])
    assert gpu_power.waiting_s(phase, H100, 1.0) == pytest.approx(0.9e-3, rel=1e-9)
    coefficients = power_model.coefficients(H100)
    assert gpu_power.waiting_energy_J(phase, H100, coefficients, 1.0) == pytest.approx(314.1637374 * 0.9e-3,
                                                                                        rel=1e-6)


def test_waiting_sms_count_every_microbatch_of_the_step():
    """The device computes ``microbatches`` stage-times per step: the 1 ms call above (0.9 ms waiting) in a phase
    of 3 microbatches waits 3 × 0.9 = 2.7 ms per step, 314.1637 W × 2.7 ms = 0.84824 J. (One microbatch: 0.9 ms.)"""
    phase = PhaseResult(parts=[_MEMORY_BOUND_CALL], microbatches=3)
    assert gpu_power.waiting_s(phase, H100, 1.0) == pytest.approx(2.7e-3, rel=1e-9)
    coefficients = power_model.coefficients(H100)
    assert gpu_power.waiting_energy_J(phase, H100, coefficients, 1.0) == pytest.approx(314.1637374 * 2.7e-3,
                                                                                        rel=1e-6)


# --- vLLM's expert parallelism inside the TP group ----------------------------------------------------------------

def test_vllm_expert_parallelism_covers_a_tp_group_split_into_experts_and_tensor_slices():
    """``attn:tp=8;moe:ep=4,tp=2`` on 8×B200: the MoE's 4 expert ranks × 2 tensor ranks are the attention's 8 GPUs
    (8 = 4 × 2), one DP replica, so vLLM runs it as EP inside the TP group: every FFN all-reduces its output
    (``ffn_ep_allreduce``) and no all-to-all or layout all-gather is left. (Asking 8 = EP alone: DeepStack's
    all-to-alls stay.)"""
    from deepstack.api import evaluate

    report = evaluate(model="deepseek-v3", system="dgx-b200", parallel="attn:tp=8;moe:ep=4,tp=2", phase="decode",
                      batch=64, with_ttft=False)
    names = {(op["layer"], op["name"]) for op in report.as_dict()["breakdown"]["operators"]}
    assert ("moe", "ffn_ep_allreduce") in names and ("dense", "ffn_ep_allreduce") in names
    assert not any("a2a" in name or "reshape" in name for _, name in names)


# --- kernel counts of DeepSeek Sparse Attention -------------------------------------------------------------------

def test_dsa_indexer_adds_its_two_linears_to_the_mla_layer():
    """DeepSeek-V3.2 (MLA + the DSA indexer, block-FP8): a MoE layer's attention is the MLA core (13, 26, 2, 65)
    + 4 FP8 linears (2, 2, 1, 7 each) = (21, 34, 6, 93), plus the indexer (8, 8, −1, 22), its wq_b at FP8
    (2, 2, 1, 7) and its fused wk + weights_proj in BF16 (1, 1, 0, 1) = (32, 45, 6, 123); the FP8 MoE block with
    grouped top-k and a shared expert (19, 27, 6, 62) and the per-step (12, 12, 0, 15): (63, 84, 12, 200).
    In BF16 a dense layer: MLA (17, 30, 2, 69) + indexer and two BF16 linears (10, 10, −1, 24) + the MLP (3, 3, 0, 5)
    and its 2 linears (2, 2, 0, 2) = (32, 45, 1, 100). (Without the BF16 wk: one kernel and one host op fewer.)"""
    dsv32 = load("llms", "deepseek-v3.2")
    assert dsv32.attention.sparse
    assert step_kernels(dsv32, {"moe": 1}, True) == Kernels(63, 84, 12, 200)
    assert layer_kernels(dsv32, "dense", False) == Kernels(32, 45, 1, 100)


# --- a prefill wave's first tokens ----------------------------------------------------------------------------------

def _steps(*runs):
    """((Run, phase), ...) with each step's phase a fixed row of the given time."""
    return tuple((Run(step, repeat), PhaseResult(parts=[fixed_row("step", t, "host")])) for step, repeat, t in runs)


def test_a_waves_first_tokens_and_user_prefill_speed_by_hand():
    """Prompts of 1,024 tokens: 2 steps of 1 ms each completing 2 prompts, 3 decode-only steps of 0.5 ms, 1 step of
    2 ms completing the last prompt. TTFTs: 2 requests at 1 ms, 2 at 2 ms, 1 at 2 + 1.5 + 2 = 5.5 ms. User prefill
    speed, mean over the 5 requests of 1,024 / TTFT: (2 · 1,024,000 + 2 · 512,000 + 1,024 / 5.5e-3) / 5 =
    651,636.36 tok/s. (Each run of first-token steps counted once: TTFTs 1, 4.5 ms; requests unweighted:
    (1,024,000 + 512,000 + 186,181.8) / 5.)"""
    wave = Wave([], 1, 1, 0, steps=_steps((Step(2048, 2, 0, 2), 2, 1e-3), (Step(0, 0, 4, 0), 3, 0.5e-3),
                                          (Step(1024, 1, 4, 1), 1, 2e-3)), prompt=1024)
    ttfts = wave.ttfts()
    assert [n for _, n in ttfts] == [2, 2, 1]
    assert [t for t, _ in ttfts] == pytest.approx([1e-3, 2e-3, 5.5e-3], rel=1e-12)
    assert wave.user_tps() == pytest.approx((2 * 1024 / 1e-3 + 2 * 1024 / 2e-3 + 1024 / 5.5e-3) / 5, rel=1e-12)
    assert wave.user_tps() == pytest.approx(651_636.3636, rel=1e-9)


def test_a_prefill_waves_requests_per_engine_round_up():
    """Prefill of 3 prompts with DP 2 (two vLLM engines of TP 4) on 8×B200: an engine gets ⌈3 / 2⌉ = 2 requests, so
    its wave is 2 engine steps (the first prompt alone, then the second), as for 4 prompts (2 per engine), and its
    last TTFT is theirs; 2 prompts (1 per engine) take one step. (Rounding down: 1 request, one step.)"""
    from deepstack.api import evaluate

    def wave(batch):
        report = evaluate(model="llama-3.3-70b", system="dgx-b200", parallel="tp=4,dp=2", phase="prefill",
                          batch=batch, with_ttft=False)
        return report.as_dict()["breakdown"]["engine_steps"], report.metrics.ttft_s

    (steps_2, ttft_2), (steps_3, ttft_3), (steps_4, ttft_4) = wave(2), wave(3), wave(4)
    assert (steps_2, steps_3, steps_4) == (1, 2, 2)
    assert ttft_3 == pytest.approx(ttft_4, rel=1e-12) and ttft_3 > ttft_2


# --- how one engine step is timed ------------------------------------------------------------------------------------

def test_a_step_of_exactly_the_largest_graphs_tokens_replays_it():
    """vLLM replays a CUDA graph for a step of up to ``graph_max_batch`` tokens: 500 prompt tokens + 12 decodes =
    512 tokens is timed as a decode step of 512; 513 tokens is a prefill chunk (no graph). (``<``: 512 eager.)"""
    scenario = Scenario(model="llama-3.3-70b", phase="prefill", batch=16, cuda_graphs=True)
    fits = step_scenario(Run(Step(500, 1, 12, 1), 1), scenario, 512, 1)
    assert (fits.phase, fits.batch) == ("decode", 512)
    beyond = step_scenario(Run(Step(501, 1, 12, 1), 1), scenario, 512, 1)
    assert beyond.phase == "prefill"


def test_a_prompt_exactly_the_budget_is_not_cut_into_slices():
    """Prompts of 8,192 tokens at a budget of 8,192 fit a step whole, so they are not a long prompt's slices: a
    step running the end of one prompt and the start of the next (8,190 prompt tokens of 2 requests + 2 decodes,
    eager) is timed as 2 prompt chunks of ⌈8,192 / 2⌉ = 4,096 tokens (budget 8,192). (Treated as a slice: one
    request of 8,192 tokens.)"""
    scenario = Scenario(model="llama-3.3-70b", phase="prefill", batch=4, input_len=8192, prefill_chunk_tokens=8192,
                        cuda_graphs=False)
    step = step_scenario(Run(Step(8190, 2, 2, 1), 1), scenario, 512, 1)
    assert (step.phase, step.batch, step.input_len, step.prefill_chunk_tokens) == ("prefill", 2, 4096, 8192)


def test_a_waves_time_is_its_last_first_token_under_pipeline_parallelism():
    """Prefill of 3 prompts on 8×B200 with TP 4 × PP 2: each engine step crosses both pipeline stages (its phase
    takes ``time_multiplier`` = 2 stage-times), and the wave, made of every step's rows, takes exactly the time to
    the last request's first token: Σ steps × their full time. (Rows counted once per step, not per stage-time:
    about half of it.)"""
    from deepstack.models.design import DesignPoint
    from deepstack.models.evaluate import _on_device

    scenario = Scenario(model="llama-3.3-70b", phase="prefill", batch=3, prefill_chunk_tokens=8192)
    point = DesignPoint(chip=B200_SYSTEM.architecture, scenario=scenario, schedule=Schedule.parse("tp=4,pp=2"),
                        network=B200_SYSTEM.network)
    dev = timing_device_of(point)
    wave = _on_device(point, dev, scenario, False)
    assert isinstance(wave, Wave)
    assert {phase.time_multiplier for _, phase in wave.steps} == {2}
    last_ttft, _ = wave.ttfts()[-1]
    assert wave.time_at(1.0) == pytest.approx(last_ttft, rel=1e-9)
    assert last_ttft == pytest.approx(sum(run.repeat * phase.time_at(1.0) for run, phase in wave.steps), rel=1e-12)


# --- a server's steady state ---------------------------------------------------------------------------------------

def test_whole_prompts_fit_when_the_steps_with_the_most_of_them_fill_the_budget_exactly():
    """8 running requests of 100-token prompts and 4 output tokens: 8 / 4 = 2 prompts join per step, and a step
    holds 2 × 100 prompt tokens + the other 6 requests' decodes = 206 tokens. At a budget of 206 that fits exactly:
    4 equal steps, each prefilling 2 whole prompts beside 6 decodes; all 8 requests finish over the cycle. At 205
    it does not (a busy server: 7 requests over 4 steps). (Counting the 2 prompts' requests as decodes too:
    208 > 206, the busy cycle.)"""
    assert steady_cycle(8, 100, 4, 206) == Cycle((Run(Step(200, 2, 6, 2), 4),), 8)
    assert steady_cycle(8, 100, 4, 205).requests == 7


def test_a_busy_server_finishes_no_more_than_its_running_requests_allow():
    """5 running requests of 100-token prompts, 4 output tokens, budget 120: no whole prompts fit beside the
    decodes (⌈5 / 4⌉ = 2 prompts: 2 · 100 + 3 = 203 > 120) and chunking (chunk 120 − 4 = 116, 1 step a prompt)
    overlaps (5 · 1 > 4 + 1 − 1), so the server is busy. A request's work is W = 100 + 3 = 103 tokens, and
    requests finish at λ = min((5 − 1) / 4, 120 / 103) = 1 a step: the running requests, not the budget, limit
    it. The cycle is one step of one 100-token prompt and 3 decodes, one request finishing; the step's 100 prompt
    tokens end exactly where its prompt ends, so it touches 1 prompt, not 2. (Taking 5 · 103 > 4 · 120 as the
    budget's limit: 120 requests over 103 steps, more than the 4 past their prompt can finish.)"""
    assert steady_cycle(5, 100, 4, 120) == Cycle((Run(Step(100, 1, 3, 1), 1),), 1)


def test_chunked_prompts_may_fill_every_step_of_the_cycle():
    """4 running requests of 150-token prompts, 7 output tokens, budget 103: whole prompts do not fit beside 3
    decodes (150 + 3 > 103), so each prompt is chunked in 103 − 3 = 100 tokens, n = ⌈150 / 100⌉ = 2 steps; a
    request lives 7 + 2 − 1 = 8 steps and the 4 prompts take 4 × 2 = 8 of them: every step holds one chunk, none
    overlap. Cycle: 4 steps of a first 100-token chunk and 4 of a last 50-token one (first token), each beside 3
    decodes; 4 requests finish. (A strict ``<``: the busy server's cycle.)"""
    assert steady_cycle(4, 150, 7, 103) == Cycle((Run(Step(100, 1, 3, 0), 4), Run(Step(50, 1, 3, 1), 4)), 4)


# --- attention: split-KV decode ---------------------------------------------------------------------------------

def test_a_split_reads_the_ceiling_of_its_share_of_the_keys():
    """Decode of one request with 1,000 cached keys of 256 B in 16 splits on a B200: each split's tile reads
    ⌈1,000 / 16⌉ = 63 keys (the last one fewer), 63 × 256 = 16,128 B; 16 tiles; the unique stream read from DRAM
    is still the 1,000 keys, 256,000 B. (Rounding down: 62 keys, 15,872 B, and 8 keys nobody reads.)"""
    op = Attention("decode", "decode", 1, 1, 1000, 1, 1, 128, 128, 256.0)
    one = np.array([1])
    layouts = time_layouts(op, B200, one, one, np.array([16]), np.array([2]), np.array([64]))
    assert layouts.kv_tile_B.tolist() == [63 * 256] == [16128]
    assert layouts.tiles.tolist() == [16]
    assert layouts.dram_B.tolist() == [1000 * 256]


def test_the_decode_tuner_may_split_the_keys_down_to_sixteen_per_split():
    """One request's MLA decode (128 query heads sharing one 576-dim latent stream, 1,024 cached keys) on a
    B200's 148 SMs: without splits its 128 heads make at most a few tiles, so the tuner splits the keys to fill the
    SMs, and may go as far as 16 keys a split (1,024 / 16 = 64 splits). It takes more than 1,024 / 128 = 8 splits
    (the limit were a split never shorter than the largest 128-key block) and never a split below 16 keys."""
    op = Attention("mla", "decode", 1, 1, 1024, 128, 1, 576, 512, 1152.0)
    config = tune_attention(op, B200).config
    split = int(re.search(r"split-KV (\d+)", config).group(1))
    assert 8 < split <= 1024 // 16



def test_gathered_keys_are_read_a_token_at_a_time():
    """Sparse attention gathers its keys one cache token at a time; dense attention reads them in pages of
    ``KV_PAGE_TOKENS`` (16) tokens. A sparse decode whose top-k is every key (64 requests × 4,096 keys of 64 B, one
    head) reads the same 16,777,216 B as the dense one, but in 64-B transactions, which the Standard chip's 3D DRAM
    serves far slower than 1-KiB pages: it takes longer. (Gathers read in pages: the two are equal.)"""
    dense = Attention("d", "decode", 64, 1, 4096, 1, 1, 64, 64, 64.0)
    sparse = Attention("d", "decode", 64, 1, 4096, 1, 1, 64, 64, 64.0, topk=4096)
    t_dense, t_sparse = tune_attention(dense, STANDARD), tune_attention(sparse, STANDARD)
    assert t_dense.dram_B == t_sparse.dram_B == 64 * 4096 * 64
    assert t_sparse.time_s > 1.5 * t_dense.time_s


def test_a_prefill_tile_may_hold_every_query_of_a_short_prompt():
    """Prefill query blocks are searched up to the prompt's length (16 … 128, at least 16): a 32-query prompt (4
    requests, 8 KV groups of one head) may be tiled 32 queries at a time. On the Standard chip that layout (1 head,
    q-block 32, 16-key blocks, 4 stages) is faster than q-blocks of 16, so the tuner's choice is at least as fast as
    it. (Blocks strictly shorter than the prompt: only q-block 16, slower.)"""
    op = Attention("p", "prefill", 4, 32, 32, 1, 8, 128, 128, 512.0)

    def layout_s(bq):
        one = np.array([1])
        return float(time_layouts(op, STANDARD, one, np.array([bq]), one, np.array([4]), np.array([16])).time_s[0])

    assert layout_s(32) < layout_s(16)
    assert tune_attention(op, STANDARD).time_s <= layout_s(32)


def test_a_sparse_prefill_query_gathers_its_own_keys():
    """DSA prefill of 64 queries at the end of a 4,096-token context, each attending to its own top 2,048 keys
    (latent 656 B; 16 heads sharing it, 576 + 512 dims): a tile holds one query's 16 heads, so the DRAM reads are
    every query's gathered keys, 64 × 2,048 × 656 = 85,983,232 B, plus each tile's queries and outputs, 64 tiles ×
    16 rows × 1,088 × 2 B = 2,228,224 B: 88,211,456 B on the Standard chip and a B200 alike. (Tiles of 16 queries
    sharing one stream: a quarter of the keys or fewer.)"""
    op = Attention("s", "prefill", 1, 64, 4096, 16, 1, 576, 512, 656.0, topk=2048)
    for dev in (STANDARD, B200):
        timing = tune_attention(op, dev)
        assert "q-block 1," in timing.config
        assert timing.dram_B == 64 * 2048 * 656 + 64 * 16 * 1088 * 2 == 88_211_456


# --- GEMM: the L2 traffic of a fused epilogue; the tuner's candidates -------------------------------------------------

def test_an_epilogue_operand_is_read_through_l2_once_per_output_element():
    """A 1,024³ BF16 GEMM on the Standard chip, tiled 64×64×64 (split-K 1): 16 × 16 = 256 tiles, each streaming
    its 1,024-deep A and B panels through L2, 1,024 × (64 · 2 + 64 · 2) = 262,144 B, and writing its 64 × 64 × 2 B
    output: 270,336 B a tile, 69,206,016 B. A fused residual (2 B an output element) adds 64 × 64 × 2 = 8,192 B a
    tile: 71,303,168 B, i.e. m · n · 2 = 2,097,152 B more. (Epilogue reads not counted: no change.)"""
    plain = tune_gemm(Gemm("g", 1024, 1024, 1024), STANDARD)
    fused = tune_gemm(Gemm("g", 1024, 1024, 1024, epilogue_read_bytes=2.0), STANDARD)
    assert plain.config.startswith("tile 64x64x64, ") and "split-K 1," in plain.config
    assert fused.config == plain.config
    assert plain.l2_B == 256 * (1024 * (64 * 2 + 64 * 2) + 64 * 64 * 2) == 69_206_016
    assert fused.l2_B == 256 * (1024 * (64 * 2 + 64 * 2) + 64 * 64 * (2 + 2)) == 71_303_168


def _candidates(g, dev):
    c = tilings(g, dev)
    return {(int(tm), int(tn), int(split)) for tm, tn, split in zip(c.tm, c.tn, c.split, strict=True)}


def test_a_tile_whose_accumulators_fill_exactly_their_share_of_the_registers_is_a_candidate():
    """B200: 256 KiB of registers per SM, half of it (131,072 B) for FP32 accumulators. A 128 × 256 tile holds
    128 · 256 · 4 = 131,072 B of them, exactly the share: a candidate (either way round); 256 × 256 (262,144 B)
    is not. (A strict limit: neither 128 × 256 nor 256 × 128.)"""
    shapes = {(tm, tn) for tm, tn, _ in _candidates(Gemm("g", 1024, 1024, 1024), B200)}
    assert B200.l0_B == 262_144
    assert {(128, 256), (256, 128)} <= shapes
    assert (256, 256) not in shapes


def test_split_k_is_a_candidate_up_to_four_tiles_per_pe_and_two_minimum_tiles_deep():
    """Standard chip (8 PEs, 16×16×16 minimum tiles). A 256 × 256 × 4,096 GEMM in 64 × 64 tiles is 16 tiles: split-K
    2 makes 32 = 4 × 8 PEs, the most allowed, a candidate; split-K 4 (64 tiles) is not. A 16 × 16 × 64 GEMM (1 tile)
    may be split until each slice is 2 minimum tiles deep: split-K 2 (32 deep), not 4 (16 deep). (At most 2 tiles
    per PE: no split 2 for the first; slices one minimum tile deep: split 4 for the second.)"""
    assert {s for tm, tn, s in _candidates(Gemm("g", 256, 256, 4096), STANDARD) if (tm, tn) == (64, 64)} == {1, 2}
    assert {s for _, _, s in _candidates(Gemm("g", 16, 16, 64), STANDARD)} == {1, 2}


def test_tuner_candidates_k_edge_depth_and_rasterisation():
    """Standard chip, 256 KiB of L1, a 1,024³ BF16 GEMM: the K edge of a tile is searched up to 128 (not the
    256 of M and N); a 128 × 128 × 128 tile stages 128 · 128 · 2 + 128 · 128 · 2 = 65,536 B, so 4 stages fill L1
    exactly and are a candidate, as are 2 and 3. A GEMM one 16-row block tall (16 × 4,096 × 4,096) has only row
    rasterisation: a grouped wave needs several row blocks. (K edges to 256; only ≤ 3 stages; grouped duplicates.)"""
    c = tilings(Gemm("g", 1024, 1024, 1024), STANDARD)
    assert int(c.tk.max()) == 128
    depths = {int(s) for tm, tn, tk, s in zip(c.tm, c.tn, c.tk, c.stages, strict=True) if (tm, tn, tk) == (128,) * 3}
    assert depths == {2, 3, 4}
    tall = tilings(Gemm("g", 16, 4096, 4096), STANDARD)
    assert set(tall.tm.tolist()) == {16}
    assert not tall.grouped.any()
