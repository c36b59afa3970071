"""The GPU execution terms (deepstack/models/gpu), each against a figure worked by hand."""

from __future__ import annotations

import pytest

from deepstack.catalog import load
from deepstack.models.gpu.collectives import allreduce
from deepstack.models.gpu.host import TRITON_LAUNCH_S, host_rows, uses_graphs
from deepstack.models.gpu.kernels import Kernels, step_kernels
from deepstack.schema import Scenario, Schedule

B200 = load("systems", "dgx-b200").architecture.gpu
B200_NETWORK = load("systems", "dgx-b200").network


def test_custom_allreduce_is_floor_plus_time_per_mib():
    # Llama-3.3-70B, batch 1: 8192 × 2 B = 16 KiB → 10.1 µs + 1/64 MiB × 17.5 µs/MiB = 10.373 µs
    assert allreduce(B200, 16384, 8, B200_NETWORK) == ("custom", pytest.approx(10.1e-6 + 17.5e-6 / 64))


def test_allreduce_above_the_custom_limit_goes_to_nccl():
    # 8 MiB > 1 MiB: NCCL's ring on the NVSwitch, each GPU's link carrying 2·7/8·8 MiB of payload at
    # 0.82 × 900 GB/s: 10.1 µs + 19.894 µs
    size = 8 * 1024 * 1024
    assert allreduce(B200, size, 8, B200_NETWORK) == ("ring", pytest.approx(10.1e-6 + 1.75 * size / (0.82 * 900e9)))


def test_no_allreduce_on_one_rank():
    assert allreduce(B200, 1e6, 1, B200_NETWORK) == ("none", 0.0)


def test_kernel_counts_per_step():
    llama = load("llms", "llama-3.3-70b")
    # 80 layers × (8 attention + 5 MLP) + 12 per step = 1052 kernels, none of them Triton; host ops
    # 80 × (18 + 7) + 15 = 2015
    assert step_kernels(llama, {"dense": 80}, False) == Kernels(1052, 1052, 0, 2015)
    dsv3 = load("llms", "deepseek-v3")
    # graph: 3 dense layers × (21 + 7) + 58 MoE layers × (21 + 19) + 12 = 2416 (sglang#29960: ~2,000 graph nodes
    # for an MLA + MoE decode step). Eager kernels: 3 × (34 + 7) + 58 × (34 + 27) + 12 = 3673. Triton launches
    # 3 × (6 + 2) + 58 × (6 + 6) = 720; host ops: a block-FP8 linear 7, MLA 65 + 4 × 7 = 93, MoE 48 + 2 × 7 = 62,
    # FP8 MLP 5 + 2 × 7 = 19 → 3 × 112 + 58 × 155 + 15 = 9341
    assert step_kernels(dsv3, {"dense": 3, "moe": 58}, True) == Kernels(2416, 3673, 720, 9341)


def test_kernel_counts_of_other_families_follow_their_features():
    qwen = load("llms", "qwen3-235b-a22b")
    # BF16 Qwen3-MoE layer: GQA attention 8 kernels (norm, qkv, rotary, cache, attention 2, o_proj, all-reduce)
    # + q/k norm 2; MoE: norm, router, align, w13, silu, w2, moe_sum, all-reduce 8 + softmax top-k and its
    # renormalisation 2 (no grouped top-k, no shared expert, no FP8 quant) → 20 per layer, 94 × 20 + 12 = 1892.
    # Host ops: attention 18 + q/k norm 8, MoE 25 + top-k 6 → 57 per layer, 94 × 57 + 15 = 5373; Triton: the two
    # fused-MoE GEMMs per layer, 188
    assert step_kernels(qwen, {"dense": 0, "moe": 94}, False) == Kernels(1892, 1986, 188, 5373)
    # block-FP8 Qwen3 (Qwen3-235B-A22B-FP8): each of the 2 attention linears + 1 quant kernel, 1 Triton launch and
    # 6 more host ops; the experts' 2 quants (Triton) and their 4 empties → 24 kernels, 6 Triton, 73 host ops
    assert step_kernels(qwen, {"moe": 94}, True) == Kernels(94 * 24 + 12, 94 * 25 + 12, 94 * 6, 94 * 73 + 15)
    mixtral = load("llms", "mixtral-8x7b")
    # GQA without q/k norm: 8 + 10 = 18 kernels per layer, 25 + 18 + 6 = 49 host ops (eager: the renormalising
    # sum and divide are 2 kernels, not 1)
    assert step_kernels(mixtral, {"moe": 32}, False) == Kernels(32 * 18 + 12, 32 * 19 + 12, 64, 32 * 49 + 15)


def test_host_rows_graph_and_eager():
    kernels = Kernels(1000, 1200, 100, 3000)
    graph = host_rows(B200, kernels, 5e-3, graphs=True)
    # 1000 boundaries × 1.3 µs, then the per-step host work
    assert [r.nominal_s for r in graph] == pytest.approx([1.3e-3, B200.host_step_us * 1e-6])
    eager = host_rows(B200, kernels, 5e-3, graphs=False)
    # 3000 PyTorch calls × 10.9 µs + 100 Triton launches × 18 µs = 34.5 ms of host time
    host = 3000 * B200.eager_op_us * 1e-6 + 100 * TRITON_LAUNCH_S
    assert host == pytest.approx(34.5e-3)
    gaps = 1200 * 1.3e-6
    # the host shows only beyond the GPU's work and gaps
    assert [r.nominal_s for r in eager] == pytest.approx([gaps, host - 5e-3 - gaps, B200.host_step_us * 1e-6])


def test_graphs_only_up_to_the_largest_captured_batch():
    tp8 = Schedule.parse("tp=8")
    small = Scenario(model="llama-3.3-70b", phase="decode", batch=512)
    assert uses_graphs(B200, small, tp8)
    assert not uses_graphs(B200, small.model_copy(update={"batch": 513}), tp8)
    assert not uses_graphs(B200, small.model_copy(update={"cuda_graphs": False}), tp8)
    assert not uses_graphs(B200, small.model_copy(update={"phase": "prefill"}), tp8)


def test_3d_chips_have_no_gpu_table():
    for chip in ("standard", "h100-star", "h200-star"):
        assert load("chips", chip).gpu is None


def test_fused_moe_call_latency_per_moe_layer():
    from deepstack.api import evaluate

    # sglang PR #11816, Triton fused MoE at DeepSeek's TP8 block-FP8 shape on B200: 52.65 µs at batch 1, of which
    # 9 experts × 3 × 7168 × 256 B = 49.5 MB at 0.87 × 8 TB/s (7.12 µs) and 7 boundaries × 1.3 µs (9.1 µs)
    sourced_us = 52.65 - 9 * 3 * 7168 * 256 / (0.87 * 8e12) * 1e6 - 7 * 1.3
    assert pytest.approx(sourced_us, abs=0.05) == B200.moe_call_latency_us

    def latency_rows(model):
        report = evaluate(model=model, system="dgx-b200", parallel="tp=8", phase="decode", batch=1,
                          with_ttft=False)
        return [op for op in report.breakdown.operators if op.name == "fused_moe_latency"]

    # once per MoE layer (58 of DeepSeek-V3's 61), none for a dense model
    (row,) = latency_rows("deepseek-v3")
    assert row.count == 58 and row.time_s == pytest.approx(58 * 36.4e-6)
    assert latency_rows("llama-3.3-70b") == []
    # a system without a public figure pays nothing
    assert load("systems", "dgx-h100").architecture.gpu.moe_call_latency_us == 0.0


def _comm_rows(report, layer: str) -> dict[str, float]:
    return {op["name"]: op["time_s"] for op in report.as_dict()["breakdown"]["operators"]
            if op["layer"] == layer and ("allreduce" in op["name"] or "a2a" in op["name"] or "reshape" in op["name"])}


def test_vllm_expert_parallelism_inside_the_tp_group_all_reduces_instead_of_all_to_all():
    from pathlib import Path

    from deepstack.api import evaluate

    # on a GPU system: vLLM's --enable-expert-parallel without DP keeps every token on every GPU, each GPU runs its
    # own experts and the group all-reduces the sum: one all-reduce per FFN, the same size as attention's
    gpu = evaluate(model="deepseek-v3", system="dgx-b200", parallel="attn:tp=8;moe:ep=8", phase="decode", batch=64,
                   with_ttft=False)
    for layer in ("moe", "dense"):
        rows = _comm_rows(gpu, layer)
        assert set(rows) == {"attn_tp_allreduce", "ffn_ep_allreduce"}
        assert rows["ffn_ep_allreduce"] == pytest.approx(rows["attn_tp_allreduce"])
    # a 3D chip keeps DeepStack's expert parallelism: dispatch and combine all-to-all (overlapped with the expert
    # GEMMs, eq. 5, so inside their rows) and the boundary all-gather; no all-reduce after the experts
    nocs = Path(__file__).resolve().parent.parent / "search" / "spaces" / "nocs"
    chip = evaluate(model="qwen3-30b-a3b", chip="large-vector", noc=str(nocs / "mini8.toml"), stacked_layers=6,
                    connected_layers=4, parallel="attn:tp=8;moe:ep=8", phase="decode", batch=16, with_ttft=False)
    assert set(_comm_rows(chip, "moe")) == {"reshape_to_attention"}  # the all-reduce overlaps o_proj (eq. 5)
    # flat schedules are left alone
    flat = evaluate(model="deepseek-v3", system="dgx-b200", parallel="tp=8", phase="decode", batch=64,
                    with_ttft=False)
    assert set(_comm_rows(flat, "moe")) == {"attn_tp_allreduce", "ffn_tp_allreduce"}


def test_a_batch_that_does_not_divide_the_expert_replicas_evaluates():
    from deepstack.api import evaluate

    # attention TP8, experts EP8: 6 requests split 6 : 1 between the modules; the boundary all-gather spans the next
    # group the 8 devices split into (it raised "layout degrees multiply to 6" before). A prefill wave meets such
    # steps (6 prompts in a step) at every batch size
    for phase in ("decode", "prefill"):
        report = evaluate(model="qwen3-235b-a22b", system="dgx-h200", parallel="attn:tp=8;moe:ep=8", phase=phase,
                          batch=6, with_ttft=False, breakdown=False)
        assert report.metrics.stps > 0


def test_nccl_on_a_fully_connected_platform_uses_every_peer_link():
    # a fully connected MI325X platform: one Infinity Fabric link (64 GB/s each way) to each peer, every one of
    # them carrying RCCL's rings. 16 MiB (above the 8 MiB custom kernel) over 8 GPUs: each GPU sends 16/8 MiB to
    # each of 7 peers twice, at 0.82 × 64 GB/s: 7.2 µs + 2 × 2 MiB / (0.82 × 64 GB/s) = 7.2 µs + 79.9 µs, the
    # bus-bandwidth law 2·7/8·S over all 7 links
    mi8 = load("systems", "mi325x-8")
    size = 16 * 1024 * 1024
    expected = 7.2e-6 + 2 * (size / 8) / (0.82 * 64e9)
    assert expected == pytest.approx(7.2e-6 + 1.75 * size / (0.82 * 7 * 64e9))
    assert allreduce(mi8.architecture.gpu, size, 8, mi8.network) == ("two_shot", pytest.approx(expected))
    # a pair has one link between them: 7.2 µs + 2 × 8 MiB / (0.82 × 64 GB/s)
    assert allreduce(mi8.architecture.gpu, size, 2, mi8.network)[1] == pytest.approx(
        7.2e-6 + 2 * (size / 2) / (0.82 * 64e9))


def test_only_8_bit_weights_run_the_block_fp8_linear():
    from deepstack.api import evaluate

    def boundaries(precision):
        report = evaluate(model="llama-3.3-70b", system="dgx-b200", parallel="tp=8", phase="decode", batch=1,
                          precision=precision, with_ttft=False)
        (name,) = [op.name for op in report.breakdown.operators if op.name.startswith("kernel_boundaries")]
        return name

    # 4-bit weights are a weight-only GEMM (one launch per linear, as BF16); 8-bit adds a quantise kernel to each
    # of a Llama layer's 4 linears: 80 layers × 4 = 320 more kernels
    assert boundaries("a16w4") == boundaries("a16w16")
    assert int(boundaries("a16w8").split("(")[1].split()[0]) == int(boundaries("a16w16").split("(")[1].split()[0]) + 320
