"""NVLink / xGMI transfers on a GPU server: the one place for the figures and laws of a GPU's collectives
(docs/calibration.md §GPU execution and "Distributed kernels"). Every time is the collective engine's
(:func:`deepstack.models.collectives.collective_time`) on the server's fabric derated to what it delivers in
practice (:func:`achievable_topology`); the per-system figures live in the system's ``gpu`` table.

* **Achievable payload rate**: a link carries ``gpu.nccl_bus_efficiency`` of its rate in payload (nccl-tests#212:
  NCCL's all-reduce reaches ~370 of the 450 GB/s per direction of H100 NVLink 4, 0.82; copy-engine copies reach
  the same), the model's packet framing already inside it. Copies issued by SM warps (NVSHMEM puts, loads from a
  peer's memory) reach :data:`SM_PUT_FRACTION` of that.
* **Fixed cost**: one kernel launch plus one cross-GPU flag exchange, ``gpu.allreduce_floor_us`` (sglang#2904:
  vLLM's custom all-reduce at TP8 on H100 takes 10.1 µs at 512 B), paid once by a serving all-reduce and once
  per copy/signal step or launch by a distributed kernel.
* **vLLM's tensor-parallel all-reduce** (:func:`allreduce`): up to a size limit per GPU architecture and
  group size (vllm/distributed/device_communicators/all_reduce_utils.py, ``CUSTOM_ALL_REDUCE_MAX_SIZES``: 256 KiB
  on sm90 at TP8, 1 MiB on sm100) vLLM's custom kernel, whose time is its measured curve: the floor plus a time
  per MiB (sglang#2904: 24.1 µs at 256 KiB, 45.0 µs at 1 MiB) — SM loads paced by flag barriers, not by the
  links (1 MiB reads 7 MiB from peers in 35 µs, half of what NVLink carries). Above it NCCL/RCCL: the floor plus
  the bandwidth time of the engine's run of :data:`NCCL_ALGORITHM` on the derated fabric (the floor stands for
  the engine's per-step latencies, which NCCL's pipelined channels hide behind the transfer).
"""

from __future__ import annotations

import dataclasses

from deepstack.models.collectives import collective_time
from deepstack.models.network import NetworkTopology, as_topology
from deepstack.schema.hardware import GpuExecution

MiB = 1024 * 1024

# DeepEP issue #16 (deepseek-ai/DeepEP): intranode dispatch with SM-issued NVLink copies reaches 337 GB/s on an
# H20 (NVLink 4, 450 GB/s per direction, as the H100), of the ~370 GB/s copy engines and NCCL reach
SM_PUT_FRACTION = 337 / 370

# How NCCL/RCCL's all-reduce loads a first-level topology: rings on a switch (each GPU's one link into the
# NVSwitches carries 2(p − 1)/p · S); on a fully connected platform one ring per channel over every peer link,
# which moves what a reduce-scatter then all-gather sending to every peer at once moves (two_shot)
NCCL_ALGORITHM = {"fully_connected": "two_shot"}
NCCL_DEFAULT_ALGORITHM = "ring"


def achievable_topology(network, efficiency: float, share: float = 1.0) -> NetworkTopology:
    """The server's fabric (its first network level) with every link carrying ``efficiency`` × its rate of
    payload at full load — the model's packet framing stays, so the raw rate is raised by the framing — times
    ``share`` (what the issuing engine reaches of it). Outer levels keep their rates."""
    topology = as_topology(network)
    level, *outer = topology.levels
    framing = level.packet_bytes / (level.packet_bytes + level.header_bytes) if level.packet_bytes else 1.0
    derated = dataclasses.replace(level, link_bw_Bps=level.link_bw_Bps * efficiency / framing * share)
    return dataclasses.replace(topology, levels=(derated, *outer))


def allreduce(gpu: GpuExecution, bytes_per_rank: float, ranks: int, network) -> tuple[str, float]:
    """One vLLM all-reduce of ``bytes_per_rank`` over GPUs 0…ranks−1 of the server's ``network``: what runs it
    (``custom``: vLLM's custom kernel, up to its size limit; above it NCCL's algorithm on the fabric; ``none``
    when nothing moves) and its time, s."""
    if ranks <= 1 or bytes_per_rank <= 0:
        return "none", 0.0
    floor_s = gpu.allreduce_floor_us * 1e-6
    if bytes_per_rank <= gpu.custom_allreduce_max_MiB * MiB:
        return "custom", floor_s + bytes_per_rank / MiB * gpu.allreduce_us_per_MiB * 1e-6
    topology = achievable_topology(network, gpu.nccl_bus_efficiency)
    algorithm = NCCL_ALGORITHM.get(topology.levels[0].topology, NCCL_DEFAULT_ALGORITHM)
    return algorithm, floor_s + collective_time("all_reduce", bytes_per_rank, tuple(range(ranks)), topology,
                                                algorithm=algorithm).congestion_s
