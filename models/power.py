"""Energy per operation and the energy of counted work (paper §4.1.2, docs/calibration.md §3, §8).

Per-operation energies are taken at 45 nm (Horowitz, ISSCC 2014) or 7 nm and scaled to the chip's node:

- 45 nm → 7 nm by C·V²: switched capacitance scales with the physical gate pitch — node names are not
  dimensions — from the 160 nm contacted poly pitch of a 45 nm process (Intel, IEDM 2007) to the 57 nm of TSMC
  N7 (IEDM 2016), and the supply drops from 0.9 V (Horowitz's 45 nm) to 0.7 V (7 nm nominal):
  (57/160)·(0.7/0.9)² = 0.216;
- 7 nm → the N5 family (5 nm, and NVIDIA's 4N / 4NP, which are N5 derivatives): TSMC's −30 % power at the same
  speed (Yeap et al., IEDM 2019).

The matrix unit spends far more per FLOP than its multiplier and adder: operands are distributed across the
array, accumulators read and written, every pipeline stage clocked. Horowitz's datapath (FP16 multiply + FP32
accumulate, 0.22 pJ/FLOP at 7 nm) and Dally et al.'s instruction and operand-fetch overhead (CACM 2020: 30 pJ
per instruction at 45 nm, only 22 % of a tensor-core HMMA's energy) leave most of a real engine's energy
unaccounted, and no public source itemises the rest. The matrix energy per FLOP is therefore the one calibrated
constant: set so that the paper's 7 nm baselines H100* and H200* under dense GEMM draw, on average, their rated
700 W TDP at the nominal clock (benchmarks/calibrate_power.py, docs/calibration.md §8). SRAM, DRAM and network
traffic are counted separately, per byte, so they are not part of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from deepstack.errors import UserInputError
from deepstack.models import memo
from deepstack.models.hardware import dram as dram_model
from deepstack.models.hashing import cached_hash, state_without_hash

PJ = 1e-12

FEATURE_SCALE = 57 / 160  # 45 nm → 7 nm capacitance: contacted poly pitch 160 nm (Intel 45 nm) → 57 nm (TSMC N7)
VOLTAGE_SCALE = (0.7 / 0.9) ** 2  # 0.9 V (45 nm) → 0.7 V (7 nm)
TECH_SCALE_45_TO_7 = FEATURE_SCALE * VOLTAGE_SCALE
N5_POWER_SCALE = 0.70  # TSMC N5 vs N7: −30 % power at the same speed (Yeap et al., IEDM 2019)
# energy per operation relative to 7 nm, by process node (nm); 4 nm = NVIDIA 4N / 4NP, N5-family processes
NODE_ENERGY_SCALE = {45: 1 / TECH_SCALE_45_TO_7, 7: 1.0, 5: N5_POWER_SCALE, 4: N5_POWER_SCALE}

# Horowitz ISSCC 2014, 45 nm (docs/calibration.md §3)
FP16_MULT_PJ_45 = 1.1
FP32_ADD_PJ_45 = 0.9
FP32_MULT_PJ_45 = 3.7
SRAM_READ_64BIT_PJ_45 = ((8 * 1024, 10.0), (32 * 1024, 20.0), (1024 * 1024, 100.0))  # (array bytes, pJ)
# Dally, Turakhia, Han, "Domain-specific hardware accelerators", CACM 2020: instruction fetch, decode and operand
# fetch cost ~30 pJ per instruction at 45 nm; a vector instruction is issued once for a warp of 32 lanes (SIMT)
INSTRUCTION_OVERHEAD_PJ_45 = 30.0
SIMT_LANES = 32
SFU_FP32_OPS_PER_OP = 4  # a transcendental ≈ a few FP32 FMAs of a polynomial/table unit (inferred)

# calibrated (benchmarks/calibrate_power.py, docs/calibration.md §8): the matrix engine at 7 nm per FP16 FLOP,
# operand delivery, accumulation, clocking and control included (3.9× Horowitz's datapath); set so that H100* and
# H200* (paper Table 2, 7 nm) under dense GEMM draw on average their 700 W TDP (H100/H200 SXM datasheets) at the
# nominal clock. Checked, not fitted: A100, DGX H100 and B200 GPUs at their TDP, a Standard cluster's W/mm².
MATRIX_PJ_PER_FLOP_7NM = 0.84


def node_energy_scale(process_nm: int) -> float:
    """Energy per operation at ``process_nm`` relative to 7 nm (see the module docstring)."""
    scale = NODE_ENERGY_SCALE.get(process_nm)
    if scale is None:
        known = ", ".join(str(node) for node in sorted(NODE_ENERGY_SCALE, reverse=True))
        raise UserInputError(f"process_nm: energy per operation is known for {known} nm (got {process_nm})")
    return scale


def matrix_datapath_J_per_flop(process_nm: int = 7) -> float:
    """Horowitz's datapath alone: an FP16 multiply and an FP32 accumulate per 2 FLOPs (for comparison)."""
    return (FP16_MULT_PJ_45 + FP32_ADD_PJ_45) / 2 * TECH_SCALE_45_TO_7 * node_energy_scale(process_nm) * PJ


def matrix_energy_J_per_flop(process_nm: int = 7) -> float:
    """The matrix engine per FP16 FLOP, everything but SRAM/DRAM traffic included (calibrated, see above)."""
    return MATRIX_PJ_PER_FLOP_7NM * node_energy_scale(process_nm) * PJ


def vector_energy_J_per_flop(process_nm: int = 7) -> float:
    """An FP32 FMA per 2 FLOPs plus the instruction overhead shared by a warp's lanes."""
    fma_pj = FP32_ADD_PJ_45 + FP32_MULT_PJ_45 + INSTRUCTION_OVERHEAD_PJ_45 / SIMT_LANES
    return fma_pj / 2 * TECH_SCALE_45_TO_7 * node_energy_scale(process_nm) * PJ


def sfu_energy_J_per_op(process_nm: int = 7) -> float:
    return SFU_FP32_OPS_PER_OP * 2 * vector_energy_J_per_flop(process_nm)


def sram_energy_J_per_B(array_B: float, process_nm: int = 7) -> float:
    """Read energy per byte of an SRAM array of ``array_B`` bytes: log-log interpolation of Horowitz's three
    points (8 KB, 32 KB, 1 MB), extrapolated with the last slope, scaled to the node."""
    points = SRAM_READ_64BIT_PJ_45
    size = max(array_B, 1.0)
    if size <= points[0][0]:
        pj = points[0][1]
    else:
        (s0, e0), (s1, e1) = (points[0], points[1]) if size <= points[1][0] else (points[1], points[2])
        slope = math.log(e1 / e0) / math.log(s1 / s0)
        pj = e0 * (size / s0) ** slope
    return pj / 8 * TECH_SCALE_45_TO_7 * node_energy_scale(process_nm) * PJ


@dataclass(frozen=True)
class EnergyCoefficients:
    """Per-operation and per-byte energies of one device at nominal voltage (J)."""

    __hash__ = cached_hash  # keys the energies each run of rows keeps per device
    __getstate__ = state_without_hash

    matrix_J_per_flop: float
    vector_J_per_flop: float
    sfu_J_per_op: float
    l0_J_per_B: float
    l1_J_per_B: float
    l2_J_per_B: float
    dram_J_per_B: float
    dram_J_per_row: float  # one more row activation (a transaction shorter than a row opens a row of its own)


@memo.cached(maxsize=4096)
def coefficients(device) -> EnergyCoefficients:
    """Energies for a :class:`~deepstack.models.hardware.device.DeviceSpec` at its process node. Register files
    are small banked arrays (Horowitz's 8 KB point); L1 and L2 by their capacity. DRAM traffic is charged as
    full-row streams (one activation per row of data, :func:`~deepstack.models.hardware.dram.access_energy_J`):
    the operators stream their tensors in row-sized or larger segments."""
    node = device.process_nm
    return EnergyCoefficients(
        matrix_J_per_flop=matrix_energy_J_per_flop(node),
        vector_J_per_flop=vector_energy_J_per_flop(node),
        sfu_J_per_op=sfu_energy_J_per_op(node),
        l0_J_per_B=sram_energy_J_per_B(8 * 1024, node),
        l1_J_per_B=sram_energy_J_per_B(device.l1_B, node),
        l2_J_per_B=sram_energy_J_per_B(device.l2_B, node),
        dram_J_per_B=dram_model.stream_energy_J_per_B(device.dram),
        dram_J_per_row=device.dram.activation_J_per_row,
    )


def operator_energy_J(count: int, timing, coefficients: EnergyCoefficients) -> tuple[float, float]:
    """(core energy at the nominal clock, DRAM energy) of ``count`` runs of an operator timed as ``timing``
    (an :class:`~deepstack.models.compute.timing.OpTiming`: its counted FLOPs and bytes per memory level)."""
    t = timing
    core = count * (t.matrix_flops * coefficients.matrix_J_per_flop
                    + t.vector_flops * coefficients.vector_J_per_flop
                    + t.sfu_ops * coefficients.sfu_J_per_op
                    + t.l0_B * coefficients.l0_J_per_B + t.l1_B * coefficients.l1_J_per_B
                    + t.l2_B * coefficients.l2_J_per_B)
    return core, count * (t.dram_B * coefficients.dram_J_per_B + t.dram_extra_rows * coefficients.dram_J_per_row)
