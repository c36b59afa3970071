"""GPU execution: what a real GPU running a serving framework (vLLM) pays on top of the operators' work
(docs/model.md §GPU execution; every figure in docs/calibration.md §GPU execution).

Applied by :func:`deepstack.models.evaluate.evaluate` only to chips with a ``gpu`` table (the GPU systems of the
catalog); a statically scheduled accelerator (the 3D chips, the H100*/H200* abstractions) pays none of it. One
step of the phase becomes:

* the operators run one after another, each collective after its GEMM (vLLM does not overlap them), every
  operator at least as long as its DRAM bytes at the achievable HBM bandwidth (:mod:`.efficiency`);
* each TP all-reduce as vLLM's custom all-reduce or NCCL runs it (:mod:`.collectives`);
* expert parallelism inside the attention's TP group (``attn:tp=8;moe:ep=8``: vLLM's ``--enable-expert-parallel``
  without DP) as vLLM runs it: every GPU holds every token, computes its own experts' share and the TP group
  all-reduces the sum, so the EP all-to-alls and the layout all-gather become one all-reduce per MoE layer
  (:func:`vllm_expert_parallel`);
* one kernel boundary per launched kernel (:mod:`.kernels`), ``kernel_gap_us`` each;
* per MoE layer, the fixed latency of the fused-MoE call beyond its bytes and boundaries
  (``moe_call_latency_us``: a chain of seven small-grid kernels that wait on each other);
* the host: in a CUDA graph (decode batches up to ``graph_max_batch``) the step's fixed CPU work
  (``host_step_us``); in eager mode also the launch of every kernel from Python, which the GPU hides only while
  it is slower (:mod:`.host`).
"""

from __future__ import annotations

import dataclasses

from deepstack.models import memo
from deepstack.models.gpu.collectives import allreduce
from deepstack.models.gpu.efficiency import at_least_achievable
from deepstack.models.gpu.host import fixed_row, fixed_timing, host_rows, uses_graphs
from deepstack.models.gpu.kernels import step_kernels
from deepstack.models.hashing import HashedTuple
from deepstack.models.pipeline.rows import CommRow, OpRow, PhaseResult

__all__ = ["allreduce", "fixed_row", "gpu_phase", "uses_graphs", "vllm_expert_parallel"]

_GPU_PHASES = memo.Table("gpu phases", 4096, lru=True)  # (phase, design point, scenario) → PhaseResult


def gpu_phase(phase: PhaseResult, point, dev, scenario) -> PhaseResult:
    """``phase`` (already serialised: no compute–communication overlap) as a GPU runs it (memoised)."""
    key = HashedTuple((id(phase), point, scenario))
    found = _GPU_PHASES.lookup(key)
    if found is None or found[0] is not phase:
        found = (phase, _gpu_phase(phase, point, dev, scenario))
        _GPU_PHASES.put(key, found)
    return found[1]


def _gpu_phase(phase: PhaseResult, point, dev, scenario) -> PhaseResult:
    gpu = point.chip.gpu
    rows: list = []
    layers: dict[str, int] = {}
    for r in vllm_expert_parallel(phase.rows, point.schedule):
        if r.layer in ("dense", "moe"):
            layers[r.layer] = max(layers.get(r.layer, 0), r.count)
        if isinstance(r, CommRow):
            rows.append(CommRow(r.layer, r.count, r.name, _gpu_collective(gpu, r.result, point.network)))
        elif isinstance(r, OpRow):
            rows.append(OpRow(r.layer, r.count, at_least_achievable(r.timing, dev, gpu), r.choice))
        else:
            rows.append(r)
    if layers.get("moe") and gpu.moe_call_latency_us > 0:
        latency = fixed_timing("fused_moe_latency", gpu.moe_call_latency_us * 1e-6, "launch")
        rows.append(OpRow("moe", layers["moe"], latency))
    work_s = sum(r.count * r.nominal_s for r in rows)
    # 8-bit weights run vLLM's block-FP8 linear (a quantise kernel before each GEMM); 16-bit weights a plain GEMM,
    # and so do 4-bit ones: a weight-only kernel (Marlin) dequantises inside its one GEMM launch
    block_fp8 = scenario.precision.weight_bits == 8
    kernels = step_kernels(scenario.model, layers, block_fp8, scenario.phase == "prefill")
    rows += host_rows(gpu, kernels, work_s, uses_graphs(gpu, scenario, point.schedule))
    return PhaseResult(rows, phase.time_multiplier, phase.microbatches, phase.stage)


# the collectives DeepStack's expert parallelism adds that vLLM's EP inside the TP group does not run: the tokens
# are already on every GPU of the group, and the experts' partial outputs are summed by an all-reduce instead
_EP_LAYOUT_COMMS = ("moe_dispatch_a2a", "moe_combine_a2a", "reshape_to_attention", "reshape_to_ffn")


def vllm_expert_parallel(rows, schedule) -> list:
    """``rows`` with the MoE layers' expert-parallel collectives as vLLM runs EP inside the attention's TP group
    (one DP replica; vllm fused_moe ``FusedMoEParallelConfig``: all-to-all kernels only with DP > 1, otherwise
    the layer's output is all-reduced over the group like a TP MoE): the all-to-alls and layout all-gathers go,
    and each layer's FFN (MoE or dense) all-reduces its output as its attention does. Other schedules are
    returned unchanged."""
    a, f = schedule.attention, schedule.ffn
    if not (f.ep > 1 and a.replicas == 1 and a.tp == f.ep * f.tp):
        return list(rows)
    out = [r for r in rows if not (isinstance(r, CommRow) and r.name in _EP_LAYOUT_COMMS)]
    for r in rows:
        if isinstance(r, CommRow) and r.layer in ("dense", "moe") and r.name == "attn_tp_allreduce":
            out.append(CommRow(r.layer, r.count, "ffn_ep_allreduce", r.result))
    return out


def _gpu_collective(gpu, result, network):
    """``result`` re-timed as vLLM's all-reduce and named by what runs it (``custom``: vLLM's custom kernel; else
    NCCL's algorithm); other collectives keep the network model's time."""
    if result.op != "all_reduce" or result.group_size <= 1:
        return result
    algorithm, time_s = allreduce(gpu, result.bytes_per_rank, result.group_size, network)
    floor_s = min(time_s, gpu.allreduce_floor_us * 1e-6)
    return dataclasses.replace(result, algorithm=algorithm, time_s=time_s, latency_s=floor_s,
                               congestion_s=time_s - floor_s, overhead_s=0.0, candidates=((algorithm, time_s),))

