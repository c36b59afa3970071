"""Energy coefficients and the energy of counted work (paper §4.1.2, docs/calibration.md §3).

Horowitz (ISSCC 2014) gives 45 nm energies. They are scaled to 7 nm explicitly by C·V²: switched capacitance
scales with the physical gate pitch — node names are not dimensions — from the 160 nm contacted poly pitch of
a 45 nm process (Intel, IEDM 2007) to the 57 nm of TSMC N7 (IEDM 2016), and the supply drops from 0.9 V
(Horowitz's 45 nm) to 0.7 V (7 nm nominal): a factor (57/160)·(0.7/0.9)² = 0.216. Sanity bound
(docs/calibration.md §3): H100 reaches 0.71 pJ/FLOP at board level in 4 nm, everything included; our 7 nm per-FLOP
datapath energy must stay below it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from deepstack.models import memo
from deepstack.models.hashing import cached_hash, state_without_hash

PJ = 1e-12

FEATURE_SCALE = 57 / 160  # 45 nm → 7 nm capacitance: contacted poly pitch 160 nm (Intel 45 nm) → 57 nm (TSMC N7)
VOLTAGE_SCALE = (0.7 / 0.9) ** 2  # 0.9 V (45 nm) → 0.7 V (7 nm)
TECH_SCALE_45_TO_7 = FEATURE_SCALE * VOLTAGE_SCALE

# Horowitz ISSCC 2014, 45 nm (docs/calibration.md §3)
FP16_ADD_PJ_45 = 0.4
FP16_MULT_PJ_45 = 1.1
FP32_ADD_PJ_45 = 0.9
FP32_MULT_PJ_45 = 3.7
SRAM_READ_64BIT_PJ_45 = ((8 * 1024, 10.0), (32 * 1024, 20.0), (1024 * 1024, 100.0))  # (array bytes, pJ)
SFU_FP32_OPS_PER_OP = 4  # a transcendental ≈ a few FP32 FMAs of a polynomial/table unit (inferred)


def matrix_energy_J_per_flop(process_nm: float = 7) -> float:
    """FP16 FMA (mult + add) per 2 FLOPs, scaled to 7 nm."""
    return (FP16_ADD_PJ_45 + FP16_MULT_PJ_45) / 2 * TECH_SCALE_45_TO_7 * PJ


def vector_energy_J_per_flop() -> float:
    return (FP32_ADD_PJ_45 + FP32_MULT_PJ_45) / 2 * TECH_SCALE_45_TO_7 * PJ


def sfu_energy_J_per_op() -> float:
    return SFU_FP32_OPS_PER_OP * 2 * vector_energy_J_per_flop()


def sram_energy_J_per_B(array_B: float) -> float:
    """Read energy per byte of an SRAM array of ``array_B`` bytes: log-log interpolation of Horowitz's three
    points (8 KB, 32 KB, 1 MB), extrapolated with the last slope, scaled to 7 nm."""
    points = SRAM_READ_64BIT_PJ_45
    size = max(array_B, 1.0)
    if size <= points[0][0]:
        pj = points[0][1]
    else:
        (s0, e0), (s1, e1) = (points[0], points[1]) if size <= points[1][0] else (points[1], points[2])
        slope = math.log(e1 / e0) / math.log(s1 / s0)
        pj = e0 * (size / s0) ** slope
    return pj / 8 * TECH_SCALE_45_TO_7 * PJ


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


@memo.cached(maxsize=4096)
def coefficients(device) -> EnergyCoefficients:
    """Energies for a :class:`~deepstack.models.hardware.device.DeviceSpec`. Register files are small banked arrays
    (Horowitz's 8 KB point); L1 and L2 by their capacity."""
    return EnergyCoefficients(
        matrix_J_per_flop=matrix_energy_J_per_flop(),
        vector_J_per_flop=vector_energy_J_per_flop(),
        sfu_J_per_op=sfu_energy_J_per_op(),
        l0_J_per_B=sram_energy_J_per_B(8 * 1024),
        l1_J_per_B=sram_energy_J_per_B(device.l1_B),
        l2_J_per_B=sram_energy_J_per_B(device.l2_B),
        dram_J_per_B=device.dram.energy_J_per_B,
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
    return core, count * t.dram_B * coefficients.dram_J_per_B
