"""Element-wise and reduction operators (norms, RoPE, softmax, MoE dispatch): vector/SFU throughput against L2
(tensors resident there) or one DRAM stream."""

from __future__ import annotations

import math

from deepstack.models import memo
from deepstack.models.compute.operators import Vector
from deepstack.models.compute.timing import OpTiming, WaveTiming, l2_resident
from deepstack.models.hardware import dram as dram_model
from deepstack.models.hardware.device import DeviceSpec

VECTOR_OPERAND_BYTES = 12  # an element-wise FP32 op reads two 4-byte operands and writes one from registers


@memo.cached(maxsize=65536)
def time_vector(op: Vector, dev: DeviceSpec) -> OpTiming:
    """One wave over every PE; a tensor not resident in L2 streams from DRAM in ``op.segment_bytes`` transactions
    (whole rows when 0) with half of every PE's L1 in flight."""
    total_B = op.read_bytes + op.write_bytes
    vector_s = op.elements * op.vector_flops / dev.peak_vector_flops
    sfu_s = op.elements * op.sfu_ops / dev.peak_sfu_ops
    l2_s = total_B / dev.l2_bw_Bps
    if l2_resident(dev, total_B):
        dram_B, dram_s = 0.0, 0.0
    else:
        dram_B = total_B
        segment = op.segment_bytes or dev.dram.row_B
        bank_s = dram_model.stream_time_s(dev.dram, total_B, segment)
        dram_s = float(dram_model.wave_dram_time_s(dev.dram, total_B, dev.pes * dev.l1_B / 2,
                                                   dev.pes * dev.l1_bw_B_per_cycle * dev.clock_Hz, bank_s))
    parts = {"vector": vector_s, "sfu": sfu_s, "l2": l2_s, "dram": dram_s}
    waves = max(1, math.ceil(op.elements / (dev.pes * dev.vector_flops_per_cycle)))
    prologue = dev.dram.access_latency_s if dram_B else 0.0
    timing = WaveTiming(1, max(vector_s, sfu_s, l2_s), dram_s, max(parts, key=parts.get))
    return OpTiming(
        name=op.name, kind="vector", time_s=prologue + max(timing.clocked_s, timing.fixed_s), bound=timing.bound,
        matrix_flops=0.0, vector_flops=op.elements * op.vector_flops, sfu_ops=op.elements * op.sfu_ops,
        dram_B=dram_B, l2_B=total_B, l1_B=total_B, waves=waves, config="stream", wave_timings=(timing,),
        l0_B=op.elements * VECTOR_OPERAND_BYTES, prologue_s=prologue,
    )
