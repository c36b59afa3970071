"""Chunked prefill (docs/model.md §7 and §11): the chunk plan under a per-replica token budget, the automatic budget
(vLLM's default halved until the schedule fits), activations of one chunk beside the KV cache of the whole batch,
attention over the keys cached by earlier chunks, prefill attention under CP and SP (docs/model.md §5), and TTFT
from the chunk schedule. Golden numbers are worked by hand in the comments, from
deepstack/catalog/llms/llama-3.2-1b.toml (hidden 2,048, 16 layers, 32 heads, 8 KV heads of 64, SwiGLU 8,192, vocab
128,256, a16w16).
"""

from __future__ import annotations

import itertools

import pytest
from conftest import assert_user_error
from hypothesis import given, settings
from hypothesis import strategies as st

from deepstack import catalog
from deepstack.models.compute.operators import Attention, Choice, Gemm
from deepstack.models.compute.workload import build_workload, ffn_share
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate
from deepstack.models.parallel import memory as memory_module
from deepstack.models.parallel.chunks import (
    AUTO_PREFILL_BUDGETS,
    DEFAULT_PREFILL_CHUNK_TOKENS,
    MIN_PREFILL_CHUNK_TOKENS,
    PrefillChunks,
    prefill_chunks,
)
from deepstack.models.parallel.memory import feasible_strategies, fits, memory_footprint
from deepstack.models.parallel.prefill_budget import prefill_budget
from deepstack.models.parallel.strategies import Strategy
from deepstack.models.pipeline.phase import _phase_shape
from deepstack.models.pipeline.stages import chunk_workload
from deepstack.schema import Scenario, Schedule

STANDARD = catalog.load("chips", "standard")
TMS1 = catalog.load("nocs", "tms1")
DSV3_M2 = ("evaluate", "--chip", "standard", "--noc", "tms1", "--stacked-layers", "2", "--connected-layers", "2",
           "--model", "deepseek-v3", "--phase", "prefill", "--batch", "1024")


def _scenario(budget: int | None = None, batch: int = 8, input_len: int = 1024, model: str = "llama-3.2-1b",
              phase: str = "prefill") -> Scenario:
    return Scenario(model=model, phase=phase, batch=batch, input_len=input_len, prefill_chunk_tokens=budget)


def _one_device(budget: int | None = None, batch: int = 8, input_len: int = 1024, phase: str = "prefill"):
    return evaluate(DesignPoint(chip=STANDARD, scenario=_scenario(budget, batch, input_len, phase=phase),
                                schedule=Schedule()))


# --- the chunk plan --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("budget, plan", [
    # 8 prompts × 1,024 = 8,192 tokens: one step of vLLM's default budget
    (None, PrefillChunks(replicas=1, count=1, requests=8, tokens=1024, context=1024)),
    # ⌊4,096 / 1,024⌋ = 4 prompts per step → ⌈8 / 4⌉ = 2 chunks; each halving of the budget doubles them
    (4096, PrefillChunks(1, 2, 4, 1024, 1024)),
    (2048, PrefillChunks(1, 4, 2, 1024, 1024)),
    (1024, PrefillChunks(1, 8, 1, 1024, 1024)),
    # a prompt longer than the budget: ⌈1,024 / 512⌉ = 2 slices of 512, 8 · 2 = 16 chunks; slice j attends to
    # 512 · j keys, mean (512 + 1,024) / 2 = 768
    (512, PrefillChunks(1, 16, 1, 512, 768)),
    # 4 slices of 256 → 32 chunks; mean of 256, 512, 768 and 1,024 keys = 640
    (256, PrefillChunks(1, 32, 1, 256, 640)),
])
def test_chunk_count_doubles_when_the_budget_halves(budget, plan):
    assert prefill_chunks(_scenario(budget), replicas=1) == plan


def test_chunk_plan_edge_cases():
    assert DEFAULT_PREFILL_CHUNK_TOKENS == 8192
    # 5 prompts, 4 fit a step → ⌈5 / 4⌉ = 2 chunks, spread evenly: ⌈5 / 2⌉ = 3 prompts each (never over budget)
    assert prefill_chunks(_scenario(4096, batch=5), 1) == PrefillChunks(1, 2, 3, 1024, 1024)
    # a budget above the whole batch: one chunk, the unchunked prefill
    assert prefill_chunks(_scenario(100_000, batch=2), 1) == PrefillChunks(1, 1, 2, 1024, 1024)
    # 1,000 tokens under a 256 budget: ⌈1,000 / 256⌉ = 4 slices of 250; mean context ⌈250 · 5 / 2⌉ = 625
    assert prefill_chunks(_scenario(256, batch=1, input_len=1000), 1) == PrefillChunks(1, 4, 1, 250, 625)
    # the budget is per data replica: DeepSeek-V3 b1024 on tp4/ep64 has 64 replicas of ⌈1,024 / 64⌉ = 16
    # requests; 8 prompts of 1,024 fill vLLM's 8,192 → 2 chunks of 8
    dsv3 = _scenario(batch=1024, model="deepseek-v3")
    assert prefill_chunks(dsv3, replicas=64) == PrefillChunks(64, 2, 8, 1024, 1024)


def test_slices_attend_to_the_keys_of_earlier_chunks():
    # one 1,024-token prompt in 4 slices of 256 (mean context 640): per head, a slice sees
    # 256 · (640 − 256) cached-key pairs + 256 · 257 / 2 causal pairs = 98,304 + 32,896 = 131,200;
    # 4 slices → 524,800 = 1,024 · 1,025 / 2, the unchunked causal prefill exactly
    whole = _scenario(batch=1)
    slice_ = _scenario(batch=1, input_len=256)
    a, f = Schedule().attention, Schedule().ffn

    def attention(layers):
        return next(op for layer in layers for op in layer.ops if isinstance(op, Attention))

    chunked = attention(chunk_workload(slice_, a, f, 1, 0, context=640))
    assert (chunked.q_len, chunked.kv_len) == (256, 640)
    per_head = chunked.scores / (chunked.kv_groups * chunked.q_per_group)
    assert per_head == 131_200
    assert 4 * chunked.flops == attention(chunk_workload(whole, a, f, 1, 0)).flops
    # the context changes attention only: every GEMM of the slice is that of a 256-token prefill
    plain = chunk_workload(slice_, a, f, 1, 0)
    gemms = [[op for op in layer.ops if isinstance(op, Gemm)] for layer in plain]
    assert gemms == [[op for op in layer.ops if isinstance(op, Gemm)]
                     for layer in chunk_workload(slice_, a, f, 1, 0, context=640)]


def test_mla_slices_decompress_the_cached_latent_of_earlier_chunks():
    # DeepSeek-V3 (MLA): both forms of the core see the 640 keys, and the non-absorbed one decompresses all of
    # them (kv_b_proj: 1 request × 640 cached tokens)
    slice_ = _scenario(batch=1, input_len=256, model="deepseek-v3")
    layers = chunk_workload(slice_, Schedule().attention, Schedule().ffn, 1, 0, context=640)
    core = next(op for layer in layers if layer.kind == "moe" for op in layer.ops if isinstance(op, Choice))
    ops = [op for _, option in core.options for op in option]
    assert {op.kv_len for op in ops if isinstance(op, Attention)} == {640}
    assert next(op.m for op in ops if isinstance(op, Gemm) and op.name == "kv_b_proj") == 640


# --- prefill attention under CP and SP --------------------------------------------------------------------------


def _attention_of(scenario: Scenario, parallel: str, context: int | None = None) -> Attention:
    s = Schedule.parse(parallel) if parallel else Schedule()
    layers = build_workload(scenario.model, scenario, s.attention, s.ffn, s.pp, 0, context)
    return next(op for layer in layers for op in layer.ops if isinstance(op, Attention))


UNSPLIT_PAIRS = 32 * 1024 * 1025 // 2  # one 1,024-token prompt, 32 heads: 32 · S(S + 1)/2 = 16,793,600


@pytest.mark.parametrize("parallel, devices, q_len, kv_groups, pairs", [
    ("", 1, 1024, 8, UNSPLIT_PAIRS),
    # CP = 2, load-balanced zig-zag: 4 chunks of c = 256, rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2; a
    # chunk j query block sees c·j earlier keys + c(c + 1)/2 causal pairs: rank 0 has 32,896 + 229,504 = 262,400
    # pairs per head, rank 1 98,432 + 163,968 = 262,400, both S(S + 1)/(2·CP); 512 queries at mean position 512.5
    # over all 1,024 keys (each rank sees every key through the ring) → × 32 heads = 8,396,800
    ("cp=2", 2, 512, 8, 8_396_800),
    # CP = 4: 256 queries · 512.5 = 131,200 per head · 32 = 4,198,400
    ("cp=4", 4, 256, 8, 4_198_400),
    # Ulysses SP = 2: after the all-to-all every rank has all 1,024 queries and keys of 16 heads (4 KV heads of 4
    # query heads each): 16 · 524,800 = 8,396,800
    ("sp=2", 2, 1024, 4, 8_396_800),
    # both: 512 spread queries of 16 heads: 262,400 · 16 = 4,198,400
    ("sp=2,cp=2", 4, 512, 4, 4_198_400),
])
def test_prefill_attention_pairs_per_device_under_cp_and_sp(parallel, devices, q_len, kv_groups, pairs):
    op = _attention_of(_scenario(batch=1), parallel)
    assert (op.q_len, op.kv_len, op.kv_groups, op.q_per_group) == (q_len, 1024, kv_groups, 4)
    assert op.scores == pairs
    assert devices * op.scores == UNSPLIT_PAIRS  # the devices share the unsplit causal work exactly
    assert devices * op.flops == _attention_of(_scenario(batch=1), "").flops


def test_decode_attention_under_cp_is_unchanged():
    # decode: one query per request at the end of its context; CP ranks hold a shard of the cache each
    # (1,024 + 1,024 / 2 = 1,536 mean context / 2 = 768 keys): 32 heads · 768 = 24,576 pairs
    op = _attention_of(_scenario(batch=1, phase="decode"), "cp=2")
    assert (op.q_len, op.kv_len, op.q_span, op.scores) == (1, 768, None, 24_576)


def test_chunk_queries_follow_the_earlier_chunks_under_cp():
    # a 256-token slice after 384 cached keys (context 640) on CP = 2: each rank 128 of the slice's queries,
    # spread over its 256 positions at the end of the 640 keys: 128 · (640 − 256) + 128 · 257/2 = 65,600 per head,
    # half the 131,200 of the whole slice
    slice_ = _scenario(batch=1, input_len=256)
    op = _attention_of(slice_, "cp=2", context=640)
    assert (op.q_len, op.q_span, op.kv_len) == (128, 256, 640)
    assert op.scores / 32 == 65_600 == _attention_of(slice_, "", context=640).scores / 32 / 2


def test_mla_prefill_under_sp_splits_heads_and_under_cp_queries():
    # DeepSeek-V3, 128 heads, one 1,024-token prompt. SP = 2: each rank attends for 64 heads (absorbed: 64 query
    # heads on the shared latent; non-absorbed: 64 K/V heads, so kv_b_proj decompresses 1,024 tokens into
    # 64 · (128 + 128) = 16,384 columns). CP = 2: 512 spread queries of all 128 heads over all 1,024 latents, each
    # rank decompressing every key it sees (1,024 × 32,768)
    dsv3 = _scenario(batch=1, model="deepseek-v3")
    for parallel, q_len, heads in (("sp=2", 1024, 64), ("cp=2", 512, 128)):
        s = Schedule.parse(parallel)
        layers = build_workload(dsv3.model, dsv3, s.attention, s.ffn, 1)
        core = next(op for layer in layers if layer.kind == "moe" for op in layer.ops if isinstance(op, Choice))
        forms = dict(core.options)
        absorbed = next(op for op in forms["absorbed"] if isinstance(op, Attention))
        plain = next(op for op in forms["non-absorbed"] if isinstance(op, Attention))
        kv_b = next(op for op in forms["non-absorbed"] if isinstance(op, Gemm))
        assert (absorbed.q_len, absorbed.kv_len, absorbed.q_per_group) == (q_len, 1024, heads)
        assert (plain.q_len, plain.kv_groups, kv_b.m, kv_b.n) == (q_len, heads, 1024, heads * 256)


def test_attention_refuses_more_queries_than_keys():
    # the shape of the old CP bug: 1,024 queries over a 512-key shard gave 1,024 · (512 − 1,024) + 1,024 · 1,025/2
    # = 512 pairs
    with pytest.raises(ValueError, match="q_len ≤ q_span ≤ kv_len"):
        Attention("attention", "prefill", 1, 1024, 512, 4, 8, 64, 64, 256.0)


# --- memory ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("budget, tokens", [(None, 8192), (4096, 4096), (2048, 2048), (512, 512)])
def test_activations_are_one_chunk_and_the_kv_cache_the_whole_batch(budget, tokens):
    # llama-3.2-1b prefill, batch 8 × 1,024, one device. Per token live: residual 2,048 + the largest block,
    # the FFN 2,048 + 2 · 8,192 = 18,432 (> attention 2,048 + 9,216; logits ≤ 8 · 128,256 in all are fewer)
    # → tokens of one chunk × 20,480 × 2 buffers × 2 B: 8,192 → 671,088,640 B; 4,096 → 335,544,320 B;
    # 2,048 → 167,772,160 B; one 512-token slice → 41,943,040 B
    fp = memory_footprint(_scenario(budget), Strategy())
    assert fp.activations_B == tokens * 20_480 * 2 * 2
    # the KV cache of all 8 prompts, whatever the budget: 8 · 1,024 · 16 layers · (2 · 8 · 64) · 2 B
    assert fp.kv_cache_B == 8 * 1024 * 16 * 1024 * 2 == 268_435_456
    assert fp.weights_B == 2_471_628_800


def test_a_per_module_ffn_holds_its_token_share_of_the_step():
    # Qwen3-30B-A3B prefill (hidden 2,048, 128 experts of 768, top-8, no shared expert), 4 prompts of 1,024 on
    # attn:tp=4,dp=4;ffn:ep=16: four engines of one prompt each, one step of 4 · 1,024 = 4,096 tokens, which
    # cross the module boundary token by token as the timing splits them: 4,096 / 16 = 256 per FFN device (a
    # whole 1,024-token prompt per FFN replica before). Per token live: residual 2,048; the MoE block 2,048 +
    # 8 · (2 · 2,048 + 2 · 768) + 128 router logits = 47,232 elements (> attention 1,024 · (2,048 + 2 · 8 · 128
    # + 2 · 1 · 128 + 2,048) = 6,553,600 over its 1,024 tokens; logits 37,984):
    # (1,024 · 2,048 + 256 · 47,232) × 2 buffers × 2 B = (2,097,152 + 12,091,392) · 4 = 56,754,176 B
    scenario = _scenario(batch=4, model="qwen3-30b-a3b")
    fp = memory_footprint(scenario, Schedule.parse("attn:tp=4,dp=4;ffn:ep=16"))
    assert fp.activations_B == (1024 * 2048 + 256 * 47_232) * 2 * 2 == 56_754_176
    # a flat schedule keeps whole requests on both modules: its FFN holds the engine's 1,024-token prompt (the
    # experts on TP 4: 2,048 + 8 · (4,096 + 2 · 192) + 128 = 38,016 elements per token)
    flat = memory_footprint(scenario, Schedule.parse("tp=4,dp=4"))
    assert flat.activations_B == (1024 * 2048 + 1024 * 38_016) * 2 * 2 == 164_102_144


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 48), input_len=st.sampled_from([256, 1000, 1024, 3000]),
       budget=st.sampled_from([512, 2048, 8192]),
       parallel=st.sampled_from(["attn:tp=4,dp=4;ffn:ep=16", "attn:dp=16;ffn:ep=16", "attn:tp=2,dp=8;ffn:tp=2,ep=8",
                                 "attn:cp=4,dp=4;ffn:ep=16", "attn:sp=2,dp=8;ffn:ep=8,dp=2"]))
def test_the_memory_check_holds_every_ffn_token_the_timing_runs(batch, input_len, budget, parallel):
    # One law for the module boundary: the FFN tokens the memory check counts for one step are at least those
    # of every microbatch the timing runs (the two count the step from the chunk plan and from the microbatch
    # scenario, which may round differently, never below)
    scenario = Scenario(model="qwen3-30b-a3b", phase="prefill", batch=batch, input_len=input_len,
                        prefill_chunk_tokens=budget)
    schedule = Schedule.parse(parallel)
    layout = memory_module._layout(schedule, "prefill")
    chunk = prefill_chunks(scenario, schedule.attention.replicas, budget)
    counted = memory_module._ffn_tokens(scenario, layout, chunk)
    stages, _, micros, context = _phase_shape(scenario, schedule)
    timed = max(ffn_share(m.model, m, schedule.attention, schedule.ffn, schedule.pp, stage, context).tokens
                for m in micros for stage in stages)
    assert counted >= timed


def test_memory_per_device_falls_with_the_budget():
    # DeepSeek-V3 b1024 on tp4/ep64 (the schedule of the issue): weights and KV stay, activations shrink
    scenario = _scenario(batch=1024, model="deepseek-v3")
    footprints = [memory_footprint(scenario.model_copy(update={"prefill_chunk_tokens": budget}),
                                   Strategy(tp=4, ep=64)) for budget in (8192, 4096, 2048, 1024, 512, 256)]
    assert len({(fp.weights_B, fp.kv_cache_B) for fp in footprints}) == 1
    totals = [fp.total_B for fp in footprints]
    assert all(smaller < larger for larger, smaller in itertools.pairwise(totals))


def test_a_prefill_footprint_ignores_the_pp_microbatch_count():
    # A prefill's microbatches are its chunks: the count a schedule names matters to decode only, where a stage
    # holds one microbatch's activations (llama-3.2-1b b8 on pp=2: 8 / 2 = 4 tokens against 8 / 4 = 2 in flight)
    def footprint(phase: str, microbatches: int):
        return memory_footprint(_scenario(phase=phase), Schedule.parse(f"pp=2,microbatches={microbatches}"))
    assert footprint("prefill", 2) == footprint("prefill", 4)
    decode_2, decode_4 = footprint("decode", 2), footprint("decode", 4)
    assert decode_2.activations_B == 2 * decode_4.activations_B
    assert (decode_2.weights_B, decode_2.kv_cache_B) == (decode_4.weights_B, decode_4.kv_cache_B)


# --- the automatic budget --------------------------------------------------------------------------------------

# llama-3.2-1b b8 × 1,024 on one device (see test_activations_are_one_chunk_and_the_kv_cache_the_whole_batch):
# weights 2,471,628,800 B + KV 268,435,456 B = 2,740,064,256 B, plus 81,920 B per token of a chunk (20,480 live
# elements × 2 buffers × 2 B): budget 8,192 → 3,411,152,896 B; 4,096 → 3,075,608,576; 2,048 → 2,907,836,416;
# 64 → 2,745,307,136 (each prompt in 16 slices of 64 tokens).
@pytest.mark.parametrize("usable_B, budget, fitting", [
    (3.5e9, 8192, True),  # vLLM's default fits
    (3.0e9, 2048, True),  # 8,192 and 4,096 do not, 2,048 does
    (2.746e9, 64, True),  # only the floor fits
    (2.745e9, 64, False),  # nothing fits: the floor, and the memory check fails
])
def test_auto_budget_halves_vllm_default_until_the_schedule_fits(usable_B, budget, fitting):
    assert AUTO_PREFILL_BUDGETS == (8192, 4096, 2048, 1024, 512, 256, 128, 64)
    assert MIN_PREFILL_CHUNK_TOKENS == 64
    capacity_B = usable_B / 0.9
    assert prefill_budget(_scenario(), Strategy(), capacity_B) == budget
    assert fits(_scenario(), Strategy(), capacity_B) is fitting
    # the footprint reported is the one of the budget chosen
    chosen = memory_footprint(_scenario(budget), Strategy())
    assert memory_footprint(_scenario(), Strategy(), capacity_B) == chosen
    assert (chosen.total_B <= usable_B) is fitting


def test_a_budget_given_stays_fixed():
    # 8,192 given: kept even where it does not fit (2,048 would); without a capacity an unset budget is vLLM's
    assert prefill_budget(_scenario(8192), Strategy(), 3.0e9 / 0.9) == 8192
    assert not fits(_scenario(8192), Strategy(), 3.0e9 / 0.9)
    assert prefill_budget(_scenario(), Strategy()) == DEFAULT_PREFILL_CHUNK_TOKENS
    # a decode scenario's budget is that of the prefill its TTFT times (the prefill's footprint, not decode's)
    decode = _scenario(phase="decode")
    assert prefill_budget(decode, Strategy(), 3.0e9 / 0.9) == 2048


def test_a_schedule_fits_under_auto_iff_it_fits_at_the_floor():
    # the footprint only shrinks with the budget, so the memory check of every strategy needs one footprint: at 64
    auto = _scenario(batch=1024, model="deepseek-v3")
    floor = auto.model_copy(update={"prefill_chunk_tokens": MIN_PREFILL_CHUNK_TOKENS})
    capacity_B = 2 * 2 * 2**30  # Standard at m = 2: two 2 GiB layers
    kept, dropped = feasible_strategies(auto, 256, capacity_B)
    assert (kept, dropped) == feasible_strategies(floor, 256, capacity_B)
    assert len(kept) == 7 and dropped["memory"] == 2044
    assert all(memory_footprint(auto, s, capacity_B).total_B <= 0.9 * capacity_B for s in kept)


def test_evaluate_runs_the_budget_that_fits():
    # b144 on one Standard device (4 layers × 2 GiB, usable 7,730,941,132.8 B): weights 2,471,628,800 + KV
    # 144 · 1,024 · 16 · 1,024 · 2 = 4,831,838,208 B leave 427,474,124 B, 5,218 tokens of 81,920 B: 8,192 does not
    # fit, 4,096 does → 36 chunks of 4 prompts; the same report as the budget 4,096 given, and 8,192 given fails
    auto = evaluate(DesignPoint(chip=STANDARD, scenario=_scenario(batch=144), schedule=Schedule()))
    given = evaluate(DesignPoint(chip=STANDARD, scenario=_scenario(4096, batch=144), schedule=Schedule()))
    assert auto.scenario["prefill_chunk_tokens"] == 4096 and auto.schedule["microbatches"] == 36
    assert auto.feasible and auto.metrics == given.metrics
    assert auto.metrics.memory_gib == pytest.approx((7_303_467_008 + 4096 * 81_920) / 2**30, rel=1e-12)
    too_big = evaluate(DesignPoint(chip=STANDARD, scenario=_scenario(8192, batch=144), schedule=Schedule()))
    assert not too_big.feasible and too_big.violations[0].startswith("memory")


# --- time: the chunk schedule ----------------------------------------------------------------------------------


@pytest.mark.parametrize("budget, chunks, per_chunk", [(4096, 2, 4), (2048, 4, 2), (1024, 8, 1)])
def test_ttft_is_the_sum_over_whole_prompt_chunks(budget, chunks, per_chunk):
    # each chunk is a prefill of its own prompts: 8 prompts under the budget take `chunks` times the prefill of
    # `per_chunk` prompts alone (same power per step, so the same clock)
    chunked = _one_device(budget)
    alone = _one_device(None, batch=per_chunk)
    assert chunked.schedule.microbatches == chunks
    assert chunked.metrics.ttft_s == pytest.approx(chunks * alone.metrics.ttft_s, rel=1e-12)
    assert chunked.metrics.stps == pytest.approx(8 * 1024 / chunked.metrics.ttft_s, rel=1e-12)


def test_ttft_grows_with_the_number_of_chunks():
    # halving the budget doubles the chunks (1 → 64); each chunk re-reads every weight, and slices re-read the
    # keys of their predecessors, so TTFT rises with every halving
    reports = [_one_device(budget) for budget in (8192, 4096, 2048, 1024, 512, 256, 128)]
    assert [r.schedule.microbatches for r in reports] == [1, 2, 4, 8, 16, 32, 64]
    ttfts = [r.metrics.ttft_s for r in reports]
    assert all(earlier < later for earlier, later in itertools.pairwise(ttfts))
    for r in reports:  # without PP the prefill is the chunks one after another
        assert r.metrics.ttft_s == pytest.approx(r.schedule.microbatches * r.breakdown.stage_time_s, rel=1e-12)
    # a slice attends to the keys of earlier slices: the 512-token slice (mean context 768) is slower than a
    # 512-token prompt prefilled alone
    assert reports[4].breakdown.stage_time_s > _one_device(None, batch=1, input_len=512).metrics.ttft_s


@pytest.mark.parametrize("budget, chunks", [(1024, 4), (512, 8)])
def test_chunks_stream_through_the_pipeline(budget, chunks):
    # llama-3.2-1b b256 on TMS1, tp=2,pp=2,dp=64: 64 replicas of 4 prompts. Budget 1,024: 4 chunks, so at least
    # 4 microbatches (of PP, 2·PP, 4·PP ≤ 4 prompts: 2 and 4 → 4); budget 512: 2 slices per prompt, 8 chunks,
    # exactly 8 microbatches. The prefill takes (chunks + PP − 1) stage times.
    report = evaluate(DesignPoint(chip=STANDARD, network=TMS1, scenario=_scenario(budget, batch=256),
                                  schedule=Schedule.parse("tp=2,pp=2,dp=64")))
    assert report.schedule.microbatches == chunks
    assert report.metrics.ttft_s == pytest.approx((chunks + 2 - 1) * report.breakdown.stage_time_s, rel=1e-12)


def test_decode_steps_are_not_chunked_but_their_ttft_is():
    small, default = _one_device(256, phase="decode"), _one_device(None, phase="decode")
    assert small.metrics.stps == default.metrics.stps
    assert small.metrics.ttft_s == pytest.approx(_one_device(256).metrics.ttft_s, rel=1e-12)
    assert small.metrics.ttft_s > default.metrics.ttft_s
    # the report names the budget of the prefill behind its TTFT: 8 × 1,024 fit vLLM's default on 8 GiB
    assert (small.scenario["prefill_chunk_tokens"], default.scenario["prefill_chunk_tokens"]) == (256, 8192)


# --- end to end ------------------------------------------------------------------------------------------------


def test_deepseek_v3_prefill_b1024_at_m_n_2_is_feasible_with_the_defaults(cli):
    # the acceptance: weights + KV of the leanest layouts take ~3.4 of the 3.6 GiB usable at m = 2, so
    # vLLM's 8,192 fits nothing; halving it, the best schedule (ep=8,pp=32) fits at 256 tokens per step (not at 512)
    best, capacity_B = Strategy(ep=8, pp=32), 2 * 2 * 2**30
    dsv3 = _scenario(batch=1024, model="deepseek-v3")
    assert fits(dsv3.model_copy(update={"prefill_chunk_tokens": 256}), best, capacity_B)
    assert not fits(dsv3.model_copy(update={"prefill_chunk_tokens": 512}), best, capacity_B)
    result = cli(*DSV3_M2, "--json")
    assert result.code == 0, result.err
    report = result.json()
    assert report["feasible"] is True and report["violations"] == []
    assert report["schedule"]["text"] == "ep=8,pp=32" and report["scenario"]["prefill_chunk_tokens"] == 256
    assert report["search"]["feasible_after_evaluation"] == 13  # 7 flat strategies and 6 in vLLM's TP→EP form
    assert report["metrics"]["memory_gib"] <= 0.9 * 4
    assert report["metrics"]["stps"] == pytest.approx(1024 * 1024 / report["metrics"]["ttft_s"], rel=1e-9)
    # the same schedule at the budget given by hand: the same figures
    given = cli(*DSV3_M2, "--prefill-chunk-tokens", "256", "--json").json()
    assert given["metrics"] == report["metrics"]
    # a budget given stays fixed: vLLM's default by hand fits nothing
    assert_user_error(cli(*DSV3_M2, "--prefill-chunk-tokens", "8192"), "no schedule")
    text = cli(*DSV3_M2)
    assert "prefill: 256 tokens per step of each data replica (auto: vLLM's 8,192 halved" in text.out


def test_bad_budget_is_one_line(cli):
    assert_user_error(cli("evaluate", "--chip", "standard", "--phase", "prefill", "--prefill-chunk-tokens", "0"),
                      "--prefill-chunk-tokens", "greater than or equal to 1")


@pytest.mark.parametrize("batch, engines, per_step", [(256, 64, 64), (200, 64, 50)])
def test_a_step_of_sliced_prompts_holds_a_slice_on_every_engine(batch, engines, per_step):
    # budget 512 cuts each 1,024-token prompt into 2 slices; with dp=64 each engine holds ⌈batch / 64⌉ prompts, so
    # 4 · 2 = 8 steps, and a step holds one slice on every engine that still has one: 64 slices at b256, and at b200
    # (engines of 4 and 3 prompts) 200 / 4 = 50 on average — 8 · 50 · 512 = 200 · 1,024 tokens. (The batch's share
    # of the 8 steps, ⌈256 / 8⌉ = 32 requests, left half the engines' slices out.)
    schedule = Schedule.parse(f"tp=2,pp=2,dp={engines}")
    _, options, micros, context = _phase_shape(_scenario(512, batch=batch), schedule)
    assert options == (8,) and context == 768
    assert (micros[0].batch, micros[0].input_len) == (per_step, 512)
    assert options[0] * micros[0].batch * micros[0].input_len == batch * 1024


def test_sliced_prompts_give_a_narrower_module_every_engines_tokens():
    # per-module: attention on 64 engines (tp=2), the FFN on 16 replicas of tp=8 (2 stages of 128 devices). A step
    # of 512-token slices holds 64 · 512 = 32,768 tokens, 32,768 / 16 = 2,048 per FFN replica: the gate/up GEMM of
    # each FFN device is 2,048 rows of 2 · 8,192 / 8 = 2,048 columns over the hidden 2,048
    schedule = Schedule.parse("attn:tp=2,dp=64;ffn:tp=8,dp=16;pp=2")
    _, _, micros, context = _phase_shape(_scenario(512, batch=256), schedule)
    layers = chunk_workload(micros[0], schedule.attention, schedule.ffn, schedule.pp, 0, context)
    gate_up = {(op.m, op.n, op.k) for layer in layers for op in layer.ops
               if isinstance(op, Gemm) and op.name == "gate_up_proj"}
    assert gate_up == {(2048, 2048, 2048)}
    qkv = {op.m for layer in layers for op in layer.ops if isinstance(op, Gemm) and op.name == "qkv_proj"}
    assert qkv == {512}  # one slice of one prompt on each attention device


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from([4, 8, 16, 32]), st.sampled_from([1, 2, 4, 8, 16]),
       st.sampled_from([1, 2, 3]), st.sampled_from([128, 256, 512, 1024, 2048, 8192]), st.sampled_from([1, 2]))
def test_every_module_of_a_prefill_step_sees_the_same_tokens(attn_tp, engines, ffn_tp, per_engine, budget, pp):
    """Conservation of tokens in a chunked prefill, flat and per-module schedules, Llama-3.2-1B, prompts of 1,024
    (each engine holding the same number): with whole prompts attention's engines and the FFN's replicas process
    the same tokens in a step when the step's prompts divide over both; with slices every step holds one slice on
    each engine, so the FFN's replicas together see at least those tokens, and the steps cover the batch once."""
    devices = attn_tp * engines
    if devices % ffn_tp:
        return
    ffn_dp = devices // ffn_tp
    batch = engines * per_engine
    schedule = Schedule.parse(f"attn:tp={attn_tp},dp={engines};ffn:tp={ffn_tp},dp={ffn_dp};pp={pp}")
    if ffn_dp > batch:  # more FFN replicas than requests: not a schedule the search keeps
        return
    _, options, micros, context = _phase_shape(_scenario(budget, batch=batch), schedule)
    for steps, micro in zip(options, micros, strict=True):
        layers = chunk_workload(micro, schedule.attention, schedule.ffn, schedule.pp, 0, context)
        rows = {op.name: op.m for layer in layers for op in layer.ops if isinstance(op, Gemm)}
        step_tokens = rows["qkv_proj"] * engines
        if micro.input_len < 1024:  # slices: one on each engine per step
            assert step_tokens == engines * micro.input_len
            assert rows["gate_up_proj"] * ffn_dp >= step_tokens
            assert steps * step_tokens == batch * 1024
        elif micro.batch % engines == 0 and micro.batch % ffn_dp == 0:
            assert rows["gate_up_proj"] * ffn_dp == step_tokens
