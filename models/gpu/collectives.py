"""Tensor-parallel all-reduce as vLLM runs it on a GPU server (docs/calibration.md §GPU execution).

vLLM reduces a TP group's activations with its custom all-reduce (peer-to-peer over NVLink / xGMI) up to a size
limit per GPU architecture and group size (vllm/distributed/device_communicators/all_reduce_utils.py,
``CUSTOM_ALL_REDUCE_MAX_SIZES``: 256 KiB on sm90 at TP8, 1 MiB on sm100), and with NCCL/RCCL above it:

* custom all-reduce: a latency floor (flag barriers between the ranks, one kernel) plus a time per MiB, both
  measured (sglang#2904, vLLM's kernel at TP8 on H100: 10.1 µs at 512 B, 24.1 µs at 256 KiB, 45.0 µs at 1 MiB);
* NCCL ring: the same floor plus 2(p − 1)/p · S over the bus bandwidth NCCL reaches on a GPU's links
  (nccl-tests#212: ~370 of 450 GB/s on H100 NVLink, 0.82). The links are all a GPU's links into the fabric
  (:func:`gpu_link_Bps`): its NVLink bandwidth into the NVSwitches, or the sum of its links to every peer of a
  fully connected platform (MI325X: 7 × 64 GB/s), over which NCCL/RCCL run one ring per channel.
"""

from __future__ import annotations

from deepstack.schema.hardware import GpuExecution

MiB = 1024 * 1024


def allreduce_time_s(gpu: GpuExecution, bytes_per_rank: float, ranks: int, link_Bps: float) -> float:
    """Time of one all-reduce of ``bytes_per_rank`` over ``ranks`` GPUs whose links carry ``link_Bps`` each way."""
    if ranks <= 1 or bytes_per_rank <= 0:
        return 0.0
    floor_s = gpu.allreduce_floor_us * 1e-6
    if bytes_per_rank <= gpu.custom_allreduce_max_MiB * MiB:
        return floor_s + bytes_per_rank / MiB * gpu.allreduce_us_per_MiB * 1e-6
    bus_B = 2 * (ranks - 1) / ranks * bytes_per_rank
    return floor_s + bus_B / (gpu.nccl_bus_efficiency * link_Bps)


def gpu_link_Bps(network) -> float:
    """What one GPU's links carry each way into its first network level, B/s: the level's per-device link
    bandwidth on a switch, that of all its links to the level's other GPUs when they are fully connected."""
    if network is None:
        return 0.0
    level = network.levels[0]
    if level.topology == "fully_connected":
        return (level.dims[0] - 1) * level.link_bw_Bps
    return level.link_bw_Bps
