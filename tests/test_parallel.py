"""Parallel-strategy composer, pruning rules and memory footprint (models/parallel/; paper §3.3.1, §4.2.3).

Golden numbers are derived by hand in the comments next to them.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.models.parallel.memory import (
    MEMORY_RULE,
    feasible_strategies,
    fits,
    memory_footprint,
)
from deepstack.models.parallel.strategies import (
    PRUNING_RULES,
    Strategy,
    divisors,
    enumerate_strategies,
    ordered_factorizations,
    pipeline_stage_layers,
    prime_factors,
    prune_reason,
)
from deepstack.schema.llm import LLM
from deepstack.schema.scenario import Scenario
from deepstack.schema.schedule import Schedule

GiB = 1024**3


def _model(name: str) -> LLM:
    return catalog.load("llms", name)


def _scenario(name: str, phase: str = "decode", batch: int = 8, **kwargs) -> Scenario:
    return Scenario(model=_model(name), phase=phase, batch=batch, **kwargs)


def _variant(name: str, **changes) -> LLM:
    """A validated copy of a preset with some fields replaced (nested dicts merge one level deep)."""
    data = _model(name).model_dump()
    for key, value in changes.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) else value
    return LLM.model_validate(data)


# --- enumeration ----------------------------------------------------------------------------------------


def test_counts_for_256_devices():
    # 256 = 2⁸: eight exponent units over six factors, C(8 + 5, 5) = 1,287; × FSDP on/off = 2,574 (§4.2.2).
    assert len(ordered_factorizations(256)) == 1287
    assert len(enumerate_strategies(256)) == 2574
    assert len(set(enumerate_strategies(256))) == 2574
    assert all(s.devices == 256 for s in enumerate_strategies(256))


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 20000))
def test_prime_factors_and_divisors_match_trial_division(n):
    factors = prime_factors(n)
    assert math.prod(p**e for p, e in factors) == n
    assert [p for p, _ in factors] == sorted({p for p, _ in factors})
    assert all(e >= 1 and all(p % q for q in range(2, p)) for p, e in factors)  # exponents ≥ 1, primes prime
    assert divisors(n) == tuple(d for d in range(1, n + 1) if n % d == 0)


def test_prime_factors_and_divisors_by_hand():
    assert prime_factors(1) == () and divisors(1) == (1,)
    assert prime_factors(360) == ((2, 3), (3, 2), (5, 1))
    assert divisors(12) == (1, 2, 3, 4, 6, 12)
    assert divisors(2**20)[-3:] == (2**18, 2**19, 2**20)
    with pytest.raises(UserInputError):
        prime_factors(0)


@pytest.mark.parametrize("n", [1, 2, 12, 30, 64])
def test_factorizations_match_brute_force(n):
    divs = [d for d in range(1, n + 1) if n % d == 0]
    brute = sorted(t for t in itertools.product(divs, repeat=6) if math.prod(t) == n)
    assert list(ordered_factorizations(n)) == brute


@pytest.mark.parametrize(("n", "parts"), [(12, 3), (7, 1), (1, 4), (360, 2)])
def test_factorizations_other_part_counts(n, parts):
    divs = [d for d in range(1, n + 1) if n % d == 0]
    brute = sorted(t for t in itertools.product(divs, repeat=parts) if math.prod(t) == n)
    assert list(ordered_factorizations(n, parts)) == brute


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5000))
def test_factorization_count_is_stars_and_bars(n):
    # ∏ over primes p^e of C(e + 5, 5).
    expected, m, p = 1, n, 2
    while m > 1:
        e = 0
        while m % p == 0:
            m //= p
            e += 1
        expected *= math.comb(e + 5, 5)
        p += 1
    result = ordered_factorizations(n)
    assert len(result) == expected == len(set(result))
    assert all(math.prod(t) == n for t in result)


def test_bad_device_count_is_a_user_error():
    with pytest.raises(UserInputError, match="devices"):
        ordered_factorizations(0)
    with pytest.raises(UserInputError, match="pp"):
        Strategy(pp=0)
    with pytest.raises(UserInputError, match="tp"):
        Strategy(tp=True)


# --- Strategy ---------------------------------------------------------------------------------------------


def test_label_and_schedule():
    s = Strategy(tp=8, ep=32)
    assert s.label == "tp=8,ep=32"
    assert Strategy().label == "tp=1"
    assert Strategy(tp=2, dp=4, pp=2, fsdp=True).label == "tp=2,dp=4,pp=2,fsdp"
    schedule = s.to_schedule()
    assert schedule.attention == schedule.ffn
    assert (schedule.attention.tp, schedule.attention.ep, schedule.pp, schedule.fsdp) == (8, 32, 1, False)
    assert Strategy.from_schedule(schedule) == s


def test_every_label_parses_back():
    for s in enumerate_strategies(16):
        assert Schedule.parse(s.label) == s.to_schedule()
        assert Strategy.from_schedule(Schedule.parse(s.label)) == s


def test_per_module_schedule_has_no_flat_strategy():
    with pytest.raises(UserInputError, match="not a flat strategy"):
        Strategy.from_schedule(Schedule.parse("attn:tp=4,dp=2;moe:ep=8"))


# --- pruning rules: (rule, scenario, pruned example, kept example) ---------------------------------------

_GQA_12_4 = _variant("llama-3.2-1b", attention={"heads": 12, "kv_heads": 4})
_ODD_FFN = _variant("llama-3.2-1b", dense_intermediate=8190)  # 8190 = 2·3²·5·7·13
_ODD_EXPERT = _variant("qwen3-30b-a3b", moe={"expert_intermediate": 100})

RULE_CASES = [
    ("sp_in_decode", _scenario("llama-3.2-1b"), Strategy(sp=2), Strategy(cp=2)),
    ("sp_in_decode", _scenario("llama-3.2-1b", "prefill"), None, Strategy(sp=2)),
    ("fsdp_without_dp", _scenario("mixtral-8x7b"), Strategy(ep=4, fsdp=True), Strategy(dp=2, fsdp=True)),
    # batch 4: 8 replicas would leave 4 idle; EP counts as attention DP in prefill too.
    ("replicas_exceed_batch", _scenario("llama-3.2-1b", batch=4), Strategy(dp=8), Strategy(dp=4)),
    ("replicas_exceed_batch", _scenario("mixtral-8x7b", "prefill", batch=4), Strategy(dp=2, ep=4), Strategy(ep=4)),
    # batch 8 over dp=2: ⌈8/2⌉ = 4 single-token microbatches cannot fill 8 stages.
    ("pp_exceeds_microbatches", _scenario("llama-3.2-1b"), Strategy(dp=2, pp=8), Strategy(dp=2, pp=4)),
    ("pp_exceeds_microbatches", _scenario("llama-3.2-1b", "prefill", batch=1), None, Strategy(pp=8)),
    ("pp_exceeds_layers", _scenario("llama-3.2-1b", batch=64), Strategy(pp=32), Strategy(pp=16)),
    ("tp_heads", _scenario("llama-3.3-70b"), Strategy(tp=3), Strategy(tp=16)),  # tp=16 replicates 8 kv heads
    # 12 heads / 4 kv heads: tp=6 divides the heads but neither divides nor is a multiple of 4 kv heads.
    ("tp_heads", Scenario(model=_GQA_12_4, phase="decode", batch=8), Strategy(tp=6), Strategy(tp=12)),
    ("tp_intermediate", Scenario(model=_ODD_FFN, phase="decode", batch=8), Strategy(tp=4), Strategy(tp=2)),
    ("tp_intermediate", Scenario(model=_ODD_EXPERT, phase="decode", batch=8), Strategy(tp=8), Strategy(tp=4)),
    ("ep_experts", _scenario("mixtral-8x7b", batch=64), Strategy(ep=16), Strategy(ep=8)),  # 8 routed experts
    ("ep_experts", _scenario("llama-3.2-1b"), Strategy(ep=2), Strategy(dp=2)),  # dense: EP duplicates DP
    ("sequence_overpartitioned", _scenario("llama-3.2-1b", "prefill", input_len=4), Strategy(sp=4, cp=2),
     Strategy(sp=2, cp=2)),
    ("sequence_overpartitioned", _scenario("llama-3.2-1b", input_len=1, output_len=1), Strategy(cp=4),
     Strategy(cp=2)),
]


@pytest.mark.parametrize(("rule", "scenario", "pruned", "kept"), RULE_CASES,
                         ids=[f"{c[0]}-{c[1].phase}-{i}" for i, c in enumerate(RULE_CASES)])
def test_pruning_rule(rule, scenario, pruned, kept):
    check = dict(PRUNING_RULES)[rule]
    if pruned is not None:
        reason = check(scenario, pruned)
        assert isinstance(reason, str) and reason
        assert prune_reason(scenario, pruned)[0] == rule
    assert check(scenario, kept) is None


def test_every_rule_has_a_case():
    assert {name for name, _ in PRUNING_RULES} == {case[0] for case in RULE_CASES}


def test_deepseek_v3_decode_batch_1024_rules_only():
    # From 2,574 (sp, fsdp vary; 256 = 2⁸ over tp, ep, sp, cp, dp, pp):
    #   sp > 1: 1,287 − C(12, 4) = 792 factorizations × 2 = 1,584
    #   fsdp with dp = 1 (sp = 1): 2⁸ over tp, ep, cp, pp = C(11, 3) = 165
    #   dp·ep ≤ 256 < 1024 and pp·dp·ep ≤ 256 < 1024: the batch rules never fire
    #   pp > 61 layers: pp=256: 1; pp=128: 4 + 1 (fsdp, dp=2); pp=64: C(5, 3) = 10 + 3 (dp=2) + 1 (dp=4) → 20
    #   tp = 256 does not divide 128 heads: 1 (the rest sp = 1, dp = 1, no fsdp)
    #   2,574 − 1,584 − 165 − 20 − 1 = 804
    scenario = _scenario("deepseek-v3", batch=1024)
    kept, dropped = feasible_strategies(scenario, 256, None)
    assert dropped == {"sp_in_decode": 1584, "fsdp_without_dp": 165, "pp_exceeds_layers": 20, "tp_heads": 1}
    assert len(kept) == 804 < 2574
    assert all(prune_reason(scenario, s) is None for s in kept)


def test_memory_check_keeps_only_what_fits():
    scenario = _scenario("deepseek-v3", batch=1024)
    capacity = 8 * GiB  # 64 GiB per 800 mm² = 8 GiB per 100 mm² device (docs/calibration.md §1)
    rules_only, _ = feasible_strategies(scenario, 256, None)
    kept, dropped = feasible_strategies(scenario, 256, capacity)
    assert 0 < len(kept) < len(rules_only)
    assert len(kept) + sum(dropped.values()) == 2574
    assert dropped[MEMORY_RULE] == len(rules_only) - len(kept)
    assert all(fits(scenario, s, capacity) for s in kept)
    assert not any(fits(scenario, s, capacity) for s in set(rules_only) - set(kept))
    # 671 G FP8 weights: no strategy without expert sharding fits 7.2 GiB.
    assert all(s.ep * s.pp * s.tp > 1 for s in kept)


# --- memory footprint -----------------------------------------------------------------------------------


def test_llama_3_2_1b_on_one_device():
    # decode, batch 8, 1024 in + 1024 out, a16w16.
    # weights: 1,235,814,400 parameters × 2 B = 2,471,628,800 B
    # KV: 8 requests × 2,048 tokens × 16 layers × (2·8 kv heads·64) × 2 B = 536,870,912 B
    # activations (elements per token): residual 2,048; attention 2,048 + 2·32·64 + 2·8·64 + 2,048 = 9,216;
    #   FFN 2,048 + 2·8,192 = 18,432; logits 128,256 per request → peak 8·2,048 + 8·128,256 = 1,042,432
    #   × 2 buffers × 2 B = 4,169,728 B
    scenario = _scenario("llama-3.2-1b", batch=8, input_len=1024, output_len=1024)
    assert _model("llama-3.2-1b").parameter_count() == 1_235_814_400
    fp = memory_footprint(scenario, Strategy())
    assert fp.weights_B == 2_471_628_800
    assert fp.kv_cache_B == 8 * 2048 * 16 * (2 * 8 * 64) * 2 == 536_870_912
    assert fp.activations_B == 4_169_728
    assert fp.total_B == pytest.approx(2_471_628_800 + 536_870_912 + 4_169_728)


def test_llama_3_3_70b_tp8_pp4():
    # decode, batch 64, 1024 + 1024, a16w16, tp=8, pp=4 → 20 layers per stage.
    # per layer per device: attention 8 heads·128: q 8,192·1,024 = 8,388,608, k+v 2·8,192·128 = 2,097,152,
    #   o 8,388,608 → 18,874,368; norms 16,384; FFN 3·8,192·(28,672/8) = 88,080,384 → 106,971,136
    # last stage (worst): 20 × 106,971,136 + LM head (128,256/8)·8,192 = 131,334,144 + final norm 8,192
    #   = 2,270,765,056 parameters × 2 B = 4,541,530,112 B (the first stage's embedding lacks the 8,192 norm)
    # KV: 64 requests × 2,048 tokens × 20 layers × (2·1 kv head·128) × 2 B = 1,342,177,280 B
    # activations: a stage holds one PP microbatch at a time, at least pp = 4 of them → 16 requests:
    #   residual 16·8,192 + attention 16·(8,192 + 2·1,024 + 2·128 + 8,192) = 131,072 + 299,008
    #   (> FFN 16·15,360 and logits 16·16,032) → 430,080 × 2 × 2 B = 1,720,320 B
    scenario = _scenario("llama-3.3-70b", batch=64)
    fp = memory_footprint(scenario, Strategy(tp=8, pp=4))
    assert fp.stage == 3
    assert fp.weights_B == 4_541_530_112
    assert fp.kv_cache_B == 1_342_177_280
    assert fp.activations_B == 1_720_320
    # A Schedule gives the same answer as the Strategy it came from.
    assert memory_footprint(scenario, Schedule.parse("tp=8,pp=4")) == fp
    # 8 microbatches of 8 requests: (8·8,192 + 8·18,688) × 2 × 2 B = 860,160 B; weights and KV unchanged
    eight = memory_footprint(scenario, Schedule.parse("tp=8,pp=4,microbatches=8"))
    assert (eight.activations_B, eight.weights_B, eight.kv_cache_B) == (860_160, fp.weights_B, fp.kv_cache_B)


def test_gqa_kv_heads_replicate_beyond_tp_8():
    # 8 kv heads: tp=16 still leaves one kv head (2·128 elements per token) per device; MLA never splits.
    llama = _model("llama-3.3-70b")
    assert llama.attention.kv_cache_elements_per_token(8) == llama.attention.kv_cache_elements_per_token(16) == 256
    assert llama.attention.kv_cache_elements_per_token(1) == llama.attention.kv_cache_elements_per_token() == 2048
    deepseek = _model("deepseek-v3")
    assert deepseek.attention.kv_cache_elements_per_token(128) == 512 + 64


def test_mla_down_projections_are_replicated():
    # replicated: 7,168·1,536 + 1,536 (q_a + norm) + 7,168·576 + 512 (kv_a + norm) = 15,140,864
    # split over 128 heads, 1 per device: 1,536·192 + 512·256 + 128·7,168 = 1,343,488 → 16,484,352
    deepseek = _model("deepseek-v3")
    assert deepseek.attention.parameter_count(deepseek.hidden, tp=128) == 16_484_352


def test_gqa_attention_parameters_split_heads_and_replicate_kv_heads_beyond_tp():
    # Llama-3.3-70B: 64 query heads, 8 KV heads of 128, hidden 8,192. tp=16: 4 query heads (q + o:
    # 2·8,192·4·128 = 8,388,608) and ⌈8 / 16⌉ = 1 KV head (k + v: 2·8,192·128 = 2,097,152) → 10,485,760.
    att = _model("llama-3.3-70b").attention
    assert att.parameter_count(8192, tp=16) == 10_485_760
    assert att.parameter_count(8192) == 2 * 8192 * 64 * 128 + 2 * 8192 * 8 * 128


@pytest.mark.parametrize("name", catalog.names("llms"))
def test_one_device_holds_every_parameter(name):
    scenario = _scenario(name, batch=1)
    weights = memory_footprint(scenario, Strategy()).weights_B
    assert weights == _model(name).parameter_count() * scenario.precision.weight_bytes


def test_fsdp_shards_over_dp_plus_one_gathered_layer():
    # Llama-3.2-1B, dp=4: 1,235,814,400 / 4 = 308,953,600 shard + the largest gathered unit, the tied
    # embedding 128,256·2,048 = 262,668,288 (a layer is 10,485,760 + 4,096 + 50,331,648 = 60,821,504)
    # → 571,621,888 × 2 B = 1,143,243,776 B
    assert memory_footprint(_scenario("llama-3.2-1b"), Strategy(dp=4, fsdp=True)).weights_B == 1_143_243_776


def test_fsdp_moe_shards_experts_over_dp_only():
    # Mixtral-8x7B, ep=2, dp=2, fsdp. Non-expert weights over dp·ep = 4, each device's 4 experts over dp = 2.
    # non-expert: 32 × (attention 41,943,040 + norms 8,192 + router 32,768) + 2 × 32,000·4,096 + 4,096
    #   = 1,605,636,096 → / 4 = 401,409,024
    # experts: 32 layers × 4 × 3·4,096·14,336 = 22,548,578,304 → / 2 = 11,274,289,152
    # gathered layer: 41,951,232 + 32,768 + 4·176,160,768 = 746,627,072
    # → 12,422,325,248 × 2 B = 24,844,650,496 B
    weights = memory_footprint(_scenario("mixtral-8x7b", batch=64), Strategy(ep=2, dp=2, fsdp=True)).weights_B
    assert weights == 24_844_650_496


def test_per_module_schedule():
    # Mixtral, attention tp=8 (4 heads, 1 kv head), MoE ep=8 (1 expert per device, unsplit).
    # per layer: attention 4,096·512·2 + 2·4,096·128 = 5,242,880 + norms 8,192; router 32,768 + one expert
    #   176,160,768 → 181,444,608 × 32 = 5,806,227,456; vocab-parallel embedding + head 2·4,000·4,096
    #   + final norm 4,096 → 5,838,999,552 × 2 B = 11,677,999,104 B
    scenario = _scenario("mixtral-8x7b", batch=64)
    assert memory_footprint(scenario, Schedule.parse("attn:tp=8;moe:ep=8")).weights_B == 11_677_999_104


def test_prefill_counts_the_prompt_only():
    # prefill batch 2, prompt 4,096 on cp=4: KV = 2 × 1,024 tokens × 16 × 1,024 × 2 B; no output tokens.
    scenario = _scenario("llama-3.2-1b", "prefill", batch=2, input_len=4096, output_len=512)
    assert memory_footprint(scenario, Strategy(cp=4)).kv_cache_B == 2 * 1024 * 16 * 1024 * 2
    single = memory_footprint(scenario, Strategy()).activations_B
    assert memory_footprint(scenario, Strategy(sp=2, cp=2)).activations_B == pytest.approx(single / 4)


@pytest.mark.parametrize(("layers", "pp", "sizes"), [
    (61, 4, (15, 15, 16, 15)),  # vLLM's documented example
    (80, 4, (20, 20, 20, 20)),
    (5, 3, (2, 2, 1)),
    (3, 2, (2, 1)),
    (16, 1, (16,)),
])
def test_pipeline_stage_layers(layers, pp, sizes):
    assert pipeline_stage_layers(layers, pp) == sizes


def test_fits_respects_the_reserve():
    scenario = _scenario("llama-3.2-1b")
    total = memory_footprint(scenario, Strategy()).total_B
    assert fits(scenario, Strategy(), total / 0.9)
    assert not fits(scenario, Strategy(), total / 0.9 * 0.999)
    assert fits(scenario, Strategy(), total, reserve=0)
    with pytest.raises(UserInputError, match="capacity_B"):
        fits(scenario, Strategy(), 0)
    with pytest.raises(UserInputError, match="reserve"):
        fits(scenario, Strategy(), GiB, reserve=1.0)


# --- properties -------------------------------------------------------------------------------------------

_MODELS = st.sampled_from(catalog.names("llms"))
_POW2 = st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128])


@settings(max_examples=60, deadline=None)
@given(_MODELS, st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]), st.sampled_from([16, 64, 256]))
def test_more_pp_microbatches_never_increase_decode_activations(name, pp, more, batch):
    """A decode stage holds one microbatch's activations: more microbatches hold fewer tokens at once, while the
    weights and the KV cache (all requests, to the end of generation) stay as they are."""
    scenario = _scenario(name, batch=batch, input_len=512, output_len=256)
    fewest = memory_footprint(scenario, Schedule.parse(f"tp=4,pp={pp}"))
    many = memory_footprint(scenario, Schedule.parse(f"tp=4,pp={pp},microbatches={pp * more}"))
    assert many.activations_B < fewest.activations_B if more > 1 else many == fewest
    assert (many.weights_B, many.kv_cache_B) == (fewest.weights_B, fewest.kv_cache_B)


@settings(max_examples=80, deadline=None)
@given(_MODELS, st.sampled_from(["prefill", "decode"]), _POW2, _POW2, _POW2, _POW2,
       st.sampled_from([1, 2, 4, 8]), st.booleans())
def test_more_tp_never_increases_memory(name, phase, tp_small, factor, ep, dp, pp, fsdp):
    scenario = _scenario(name, phase, batch=64, input_len=512, output_len=256)
    small = Strategy(tp=tp_small, ep=ep, dp=dp, pp=pp, fsdp=fsdp)
    large = Strategy(tp=tp_small * factor, ep=ep, dp=dp, pp=pp, fsdp=fsdp)
    assert memory_footprint(scenario, large).total_B <= memory_footprint(scenario, small).total_B
    # Weights on one stage (the reported stage may move with PP; a single stage isolates the weights).
    weights = [
        memory_footprint(scenario, Strategy(tp=tp, ep=ep, dp=dp, fsdp=fsdp)).weights_B
        for tp in (tp_small, tp_small * factor)
    ]
    assert weights[1] <= weights[0]


@settings(max_examples=80, deadline=None)
@given(_MODELS, _POW2, _POW2, st.floats(1e8, 1e12), st.floats(1.0, 10.0), st.floats(0.0, 0.5))
def test_fits_is_monotone_in_capacity(name, tp, ep, capacity, scale, reserve):
    scenario = _scenario(name, batch=16)
    strategy = Strategy(tp=tp, ep=ep)
    if fits(scenario, strategy, capacity, reserve):
        assert fits(scenario, strategy, capacity * scale, reserve)
        assert fits(scenario, strategy, capacity, reserve * 0.5)
