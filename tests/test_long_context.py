"""Long-context decode on the GPU systems and DeepSeek Sparse Attention (issue 30, items 2 and 3).

Golden numbers are worked out by hand in the comments: one device's attention of one layer at TP8, one request.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deepstack.api import evaluate
from deepstack.catalog import load, names
from deepstack.models.compute.attention import tune_attention
from deepstack.models.compute.operators import Attention, Choice, capped_position_sum
from deepstack.models.compute.workload import build_workload
from deepstack.models.gpu.admission import admitted_batch
from deepstack.models.hardware.device import resolve_device
from deepstack.models.parallel.memory import MEMORY_RESERVE, memory_footprint
from deepstack.schema import Scenario, Schedule

B200 = load("systems", "dgx-b200")
DEV = resolve_device(B200.architecture, network=B200.network)
TP8 = Schedule.parse("tp=8")


def _attention_ops(model: str, context: int) -> dict[str, Attention]:
    """The attention operators of one MoE (or dense) layer of ``model`` on one of 8 TP ranks, decode, 1 request
    attending to ``context`` cached tokens."""
    llm = load("llms", model)
    sc = Scenario(model=llm, phase="decode", batch=1, input_len=context, output_len=2, decode_kv_len=context)
    layers = build_workload(llm, sc, TP8.attention, TP8.ffn, 1)
    layer = next(layer for layer in layers if layer.kind in ("dense", "moe"))
    ops = {}
    for op in layer.ops:
        inner = [o for _, opts in op.options for o in opts] if isinstance(op, Choice) else [op]
        ops.update({o.name: o for o in inner if isinstance(o, Attention)})
    return ops



def test_a_decode_step_attends_to_the_mean_cache_over_the_generation():
    # without decode_kv_len a decode step stands for the whole generation: a request holds its 1,024 prompt tokens
    # plus 0 … 511 of its 512 generated ones, 1,024 + 512/2 = 1,280 cached tokens on average (docs/model.md §5),
    # not the end-of-generation 1,536 that sizes the KV cache. Llama-3.3-70B at TP8: 8 query heads sharing one KV
    # head, 8 × 1,280 × (128 + 128) × 2 = 5,242,880 FLOPs, K and V of 1,280 × 128 × 2 B each = 655,360 B
    llm = load("llms", "llama-3.3-70b")
    sc = Scenario(model=llm, phase="decode", batch=1, input_len=1024, output_len=512)
    layer = next(layer for layer in build_workload(llm, sc, TP8.attention, TP8.ffn, 1) if layer.kind == "dense")
    op = next(op for op in layer.ops if isinstance(op, Attention))
    assert (op.kv_len, op.flops) == (1280, 5_242_880)
    assert tune_attention(op, DEV).dram_B == 655_360
    assert op == _attention_ops("llama-3.3-70b", 1280)["attention"]


def test_llama_70b_gqa_decode_at_32k_on_tp8_by_hand():
    # Llama-3.3-70B: 64 query heads, 8 KV heads of 128 → per TP8 rank 8 query heads sharing 1 KV head.
    # FLOPs: 8 heads × 32,768 keys × (128 MACs of q·k + 128 of p·v) × 2 = 134,217,728
    # bytes: K and V of 32,768 tokens × 128 × 2 B = 32,768 × 512 B = 16,777,216 (read once for the 8 heads)
    op = _attention_ops("llama-3.3-70b", 32768)["attention"]
    timing = tune_attention(op, DEV)
    assert op.flops == 134_217_728
    assert timing.dram_B == 16_777_216
    # one request, one KV head: 1 stream on 148 SMs, so the KV is split (flash decoding) far beyond the 16 splits
    # a static schedule searches, and the kernel runs near the HBM: ≥ 16 MiB / 8 TB/s, within 1.5× of it
    assert int(timing.config.split("split-KV ")[1].split(",")[0]) >= 32
    assert 16_777_216 / 8e12 < timing.time_s < 1.5 * 16_777_216 / (0.87 * 8e12)


def test_deepseek_v3_mla_absorbed_decode_at_32k_on_tp8_by_hand():
    # absorbed MLA: 128 / 8 = 16 heads per rank attend over the latent, q·k over 512 + 64 dims, p·v over 512
    # FLOPs: 16 × 32,768 × (576 + 512) × 2 = 1,140,850,688
    # bytes: one latent stream shared by the heads, 32,768 × (512 + 64) × 2 B = 37,748,736
    op = _attention_ops("deepseek-v3", 32768)["attention_mla_absorbed"]
    assert op.flops == 1_140_850_688
    assert tune_attention(op, DEV).dram_B == 37_748_736


def test_deepseek_v3_2_sparse_decode_at_32k_on_tp8_by_hand():
    ops = _attention_ops("deepseek-v3.2", 32768)
    # sparse MLA: the same 16 heads over the 2,048 selected latent entries only, gathered
    # FLOPs: 16 × 2,048 × 1,088 × 2 = 71,303,168; bytes: 2,048 × 1,152 B = 2,359,296
    sparse = ops["attention_mla_absorbed"]
    assert sparse.topk == 2048 and sparse.flops == 71_303_168
    assert tune_attention(sparse, DEV).dram_B == 2_359_296
    # lightning indexer, replicated on every rank: 64 FP8 heads of 128 score all 32,768 keys (no values)
    # FLOPs: 64 × 32,768 × 128 × 2 = 536,870,912; bytes: the FP8 key cache, 32,768 × (128 + 4 B scale) = 4,325,376
    indexer = ops["indexer_logits"]
    assert indexer.flops == 536_870_912
    assert tune_attention(indexer, DEV).dram_B == 4_325_376
    timing = tune_attention(indexer, DEV)
    assert timing.sfu_ops == 0 and timing.vector_flops == 3 * 64 * 32768  # ReLU, weight, sum: no exponentials
    # without the indexer a non-absorbed form is still offered for dense MLA, never for the sparse one
    assert "attention_mla_plain" in _attention_ops("deepseek-v3", 32768)
    assert "attention_mla_plain" not in ops


def test_sparse_attention_is_dense_attention_up_to_top_k_keys():
    short = _attention_ops("deepseek-v3.2", 2048)["attention_mla_absorbed"]
    dense = _attention_ops("deepseek-v3", 2048)["attention_mla_absorbed"]
    assert short.scores == dense.scores and short.flops == dense.flops
    # a causal prompt: the query at position p sees min(p, top-k) keys; positions 1..10 capped at 4:
    # 1 + 2 + 3 + 4 + 6 · 4 = 34
    assert capped_position_sum(1, 10, 4) == 34
    prompt = Attention("a", "prefill", 1, 10, 10, 1, 1, 8, 8, 16.0, topk=4)
    assert prompt.scores == 34


def _step_s(model: str, context: int, batch: int = 8) -> float:
    report = evaluate(model=model, system="dgx-b200", parallel="tp=8", batch=batch, input_len=context,
                      output_len=2, with_ttft=False, breakdown=False)
    assert report.scenario.running_batch is None  # the batch fits: nothing waits
    return batch / report.metrics.stps


def test_dsa_decode_grows_much_more_slowly_with_context_than_dense_mla():
    v3 = {n: _step_s("deepseek-v3", n) for n in (1024, 2048, 32768)}
    v32 = {n: _step_s("deepseek-v3.2", n) for n in (1024, 2048, 32768)}
    # up to top-k tokens the two attend alike; V3.2 adds only its indexer, at these contexts mostly its fixed
    # costs: 11 more kernels per layer (8 of the indexer, the FP8 wq_b's quant + GEMM, the BF16 wk + weights_proj),
    # 61 × 11 × 1.3 µs = 0.87 ms, and wq_b's 12.6 MB of FP8 weights per layer, ~0.13 ms: ~9 % of a 12.6 ms step
    for n in (1024, 2048):
        assert v32[n] == pytest.approx(v3[n], rel=0.10)
        assert v32[n] > v3[n]
    # past it the sparse attention is bounded by 2,048 keys; what grows is the indexer's 132 B per token against
    # dense MLA's 1,152 B (plus the top-k's logits), so the growth 2k → 32k is ~ 1/7 of DeepSeek-V3's
    growth_v3, growth_v32 = v3[32768] - v3[2048], v32[32768] - v32[2048]
    assert growth_v32 > 0
    assert growth_v32 < 0.25 * growth_v3


def test_indexer_key_cache_is_in_the_memory_footprint():
    # 4 requests × 8,192 tokens × 61 layers, each token per layer: the latent (512 + 64) × 2 B = 1,152 B, and
    # for V3.2 also the indexer's FP8 key (128 B + one 4 B scale) = 132 B (both replicated on every TP rank)
    v3, v32 = load("llms", "deepseek-v3"), load("llms", "deepseek-v3.2")
    kv = [memory_footprint(Scenario(model=m, phase="decode", batch=4, input_len=4096, output_len=4096), TP8).kv_cache_B
          for m in (v3, v32)]
    tokens = 4 * (4096 + 4096) * 61
    assert kv == [tokens * 1152, tokens * (1152 + 132)]


def test_a_batch_whose_kv_does_not_fit_runs_the_requests_that_fit():
    # DeepSeek-V3 on 8 × B200 at 32k prompts: 64 requests need ~2.4 GB of KV each per GPU (33,792 tokens × 61 ×
    # 1,152 B) beside ~80 GB of weights: not all fit in 162 GiB. vLLM admits those that do; the others wait.
    report = evaluate(model="deepseek-v3", system="dgx-b200", parallel="tp=8", batch=64, input_len=32768,
                      output_len=1024, with_ttft=False, breakdown=False)
    running = report.scenario.running_batch
    assert report.feasible and report.scenario.batch == 64 and 0 < running < 64
    usable = DEV.dram.capacity_B * (1 - MEMORY_RESERVE)
    sc = Scenario(model=load("llms", "deepseek-v3"), phase="decode", batch=64, input_len=32768, output_len=1024)
    fits = [memory_footprint(sc.model_copy(update={"batch": b}), TP8).total_B <= usable for b in (running, running + 1)]
    assert fits == [True, False] and admitted_batch(sc, TP8, usable) == running
    assert report.metrics.memory_gib * 2**30 <= usable
    # the metrics are those of the running requests: the same as asking for that batch
    alone = evaluate(model="deepseek-v3", system="dgx-b200", parallel="tp=8", batch=running, input_len=32768,
                     output_len=1024, with_ttft=False, breakdown=False)
    assert report.metrics.stps == alone.metrics.stps and "running_batch" not in alone.scenario.as_dict()


def test_explicit_microbatches_are_checked_against_the_requests_a_gpu_runs():
    # Llama-3.3-70B, TP4 × PP2 on 8 H100s, 64 requests of 128k tokens: the KV cache admits only some of them, and
    # 16 microbatches of those would leave some empty; at 64k more fit and 16 are fine
    from deepstack.errors import UserInputError

    point = {"model": "llama-3.3-70b", "system": "dgx-h100", "parallel": "tp=4,pp=2,microbatches=16", "batch": 64,
             "with_ttft": False, "breakdown": False}
    with pytest.raises(UserInputError, match=r"each data replica runs (\d+) at once \(those whose KV cache fits\)"):
        evaluate(**point, input_len=131072)
    report = evaluate(**point, input_len=65536)
    assert 16 <= report.scenario.running_batch < 64


def test_the_best_schedule_search_keeps_a_gpu_schedule_that_holds_one_request():
    # Llama-3.3-70B at 32k prompts, 256 requests on 8 H100s: no schedule holds them all (the search refused the
    # point, "no schedule of 8 devices fits"), but vLLM runs those that fit, so the search must rank schedules by
    # what they run; TP8 holds the most (one KV head a GPU) and wins
    report = evaluate(model="llama-3.3-70b", system="dgx-h100", batch=256, input_len=32768, with_ttft=False,
                      breakdown=False)
    assert report.feasible and report.schedule["text"] == "tp=8" and 0 < report.scenario.running_batch < 256
    pinned = evaluate(model="llama-3.3-70b", system="dgx-h100", parallel="tp=8", batch=256, input_len=32768,
                      with_ttft=False, breakdown=False)
    assert report.metrics.stps == pinned.metrics.stps


def test_the_best_schedule_search_on_a_gpu_ranks_only_what_vllm_runs():
    # vLLM has no FSDP and no Ulysses sequence parallelism: a GPU server's search drops them (counted as a rule),
    # a 3D chip's keeps them
    from deepstack.api import evaluate as api_evaluate

    search = api_evaluate(model="llama-3.3-70b", system="dgx-h100", phase="prefill", batch=8, input_len=8192,
                          with_ttft=False, breakdown=False).as_dict()["search"]
    assert search["pruned"]["not_in_vllm"] > 0
    texts = [row["schedule"] for row in search["top"]]
    assert texts and not any("fsdp" in t or "sp=" in t for t in texts)
    mini8 = Path(__file__).resolve().parent.parent / "search" / "spaces" / "nocs" / "mini8.toml"
    chip = api_evaluate(model="llama-3.2-1b", chip="standard", noc=str(mini8), phase="prefill", batch=4,
                        with_ttft=False, breakdown=False).as_dict()["search"]
    assert "not_in_vllm" not in chip["pruned"]


def test_a_3d_chip_still_reports_a_batch_that_does_not_fit_as_infeasible():
    from deepstack.errors import InfeasibleError

    with pytest.raises(InfeasibleError, match="memory"):
        evaluate(model="deepseek-v3", chip="wgmma", noc="tms1", batch=1024, parallel="tp=4,ep=32,dp=2",
                 with_ttft=False, breakdown=False)
    # and its best-schedule search counts the whole batch: schedules that hold one request but not all are out
    mini8 = Path(__file__).resolve().parent.parent / "search" / "spaces" / "nocs" / "mini8.toml"
    point = {"model": "llama-3.2-1b", "chip": "standard", "noc": str(mini8), "input_len": 32768, "with_ttft": False,
             "breakdown": False}
    assert evaluate(**point, batch=1).feasible
    with pytest.raises(InfeasibleError, match="no schedule of 8 devices fits"):
        evaluate(**point, batch=4096)


@pytest.mark.parametrize("system", names("systems"))
def test_every_gpu_system_decodes_32k_prompts(system):
    devices = load("systems", system).network.devices
    steps = []
    for context in (1024, 8192, 32768):
        report = evaluate(model="llama-3.3-70b", system=system, parallel=f"tp={devices}", batch=16,
                          input_len=context, output_len=2, with_ttft=False, breakdown=False)
        assert report.feasible
        steps.append((report.scenario.running_batch or 16) / report.metrics.stps)
    # every step reads more KV: the step time grows with the context
    assert steps[0] < steps[1] < steps[2]


def test_sparse_attention_fields_come_together_and_need_mla():
    from pydantic import ValidationError

    attention = type(load("llms", "deepseek-v3").attention)
    mla = load("llms", "deepseek-v3").attention.model_dump()
    with pytest.raises(ValidationError, match="together"):
        attention(**{**mla, "index_topk": 2048})
    gqa = load("llms", "llama-3.3-70b").attention.model_dump()
    with pytest.raises(ValidationError, match="mla"):
        attention(**{**gqa, "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048})
