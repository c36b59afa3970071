"""The host side of a GPU serving step and the kernel boundaries (docs/model.md §GPU execution).

* **CUDA graph** (vLLM's default for decode batches up to ``graph_max_batch``): the kernels run back to back from
  one graph launch; each boundary still idles the GPU ``kernel_gap_us`` (launch, ramp and tail of a kernel:
  ~1.3 µs on H100, Hazy Research, "Look Ma, No Bubbles", 2025). The CPU's per-step work (scheduling, input
  preparation, sampling bookkeeping: ``host_step_us``, calibrated) is not hidden.
* **Eager** (``--enforce-eager``, or a batch above the largest graph): the model's forward runs op by op from
  Python. Its host time is counted (:mod:`.kernels`): every PyTorch call (ATen op, view, allocation, custom C++
  op) costs ``eager_op_us`` (the one calibrated eager constant), every Triton JIT launch ``TRITON_LAUNCH_S``
  (sourced). The GPU runs behind the host: the step takes the longer of the two, plus the per-step work.
"""

from __future__ import annotations

from deepstack.models.compute.timing import OpTiming, WaveTiming
from deepstack.models.gpu.kernels import Kernels
from deepstack.models.pipeline.rows import OpRow

# Host time of one Triton JIT kernel launch from Python (JITFunction.run: argument binding and specialisation,
# cache look-up, grid, C launcher): triton PR #3648 (2024, the launcher vLLM's 2025 Triton 3.x inherits): 49 →
# 18 µs; tritonbench PR #669 (Triton 3.5): 13.2 µs with 19 arguments (fused_moe_kernel takes ~40)
TRITON_LAUNCH_S = 18e-6


def uses_graphs(gpu, scenario, schedule) -> bool:
    """Whether a step replays a CUDA graph: decode, graphs on, and the tokens of a step (the batch of one data
    replica) within the largest captured size."""
    per_replica = -(-scenario.batch // schedule.attention.replicas)
    return scenario.phase == "decode" and scenario.cuda_graphs and per_replica <= gpu.graph_max_batch


def fixed_timing(name: str, time_s: float, bound: str) -> OpTiming:
    """A timing of ``time_s`` that moves no data and does not scale with the clock."""
    return OpTiming(name, "gpu", time_s, bound, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1, bound,
                    (WaveTiming(1, 0.0, time_s, bound),), 0.0)


def fixed_row(name: str, time_s: float, bound: str) -> OpRow:
    return OpRow("gpu", 1, fixed_timing(name, time_s, bound))


def host_time_s(gpu, kernels: Kernels) -> float:
    """Host time of a step's forward run op by op from Python (eager)."""
    return kernels.host_ops * gpu.eager_op_us * 1e-6 + kernels.triton * TRITON_LAUNCH_S


def host_rows(gpu, kernels: Kernels, work_s: float, graphs: bool) -> list[OpRow]:
    """The rows a GPU adds to a step whose operators take ``work_s``: kernel boundaries, the host's launches
    where the GPU does not hide them, the per-step host work."""
    launched = kernels.graph if graphs else kernels.eager
    gaps_s = launched * gpu.kernel_gap_us * 1e-6
    rows = [fixed_row(f"kernel_boundaries ({launched} kernels)", gaps_s, "launch")]
    if not graphs:
        exposed_s = max(0.0, host_time_s(gpu, kernels) - work_s - gaps_s)
        name = f"eager_host ({kernels.host_ops} ops, {kernels.triton} Triton launches)"
        rows.append(fixed_row(name, exposed_s, "host"))
    rows.append(fixed_row("host_step", gpu.host_step_us * 1e-6, "host"))
    return rows
