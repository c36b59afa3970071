"""Area model (paper §4.1.1): how many PEs fit in a device after DRAM interface, SRAM, NoC and overhead.

Component areas at 7 nm, in mm²:

- compute units scale linearly with throughput; the matrix unit pays an operand-delivery overhead per MAC that
  shrinks with the array edge (a k×k array is fed by 2k operand lanes for k² MACs, so overhead ∝ 1/k);
- SRAM = capacity part (mm² per MiB) + bandwidth part (mm² per B/cycle of port width);
- DRAM interface: memory controller + PHY ∝ peak bandwidth of the connected layers, plus a TSV / hybrid-bond
  peripheral per connected layer. Stacked-but-unconnected layers cost no logic-die area;
- NoC: each level ∝ (its link bandwidth per device / TMS1's at that level)^α, sub-linear, a level's baseline
  area of its own (a die switch, UCIe PHYs and SerDes cost differently per GB/s);
- +15 % for control and routing (paper §4.1.1).

The paper's post-synthesis anchors are not public; its area model's outputs are. The coefficients below were
calibrated once, by ``benchmarks/calibrate_area.py`` (a linear programme), to reproduce every PE count the paper
publishes: Table 2 at m = n = 4 on TMS1, the §5.5.5 NoC anchor (NoC bandwidth ×0.75 / ×1 / ×2 leaves 9 / 8 / 5
PEs), the §5.6 designs of 7 / 8 / 10 connected layers (6 / 5 / 4 SMs) and the SM counts of the Table 4
configurations (their L1 options and per-level NoC multipliers), with the largest margin from every fit/no-fit
boundary, then the coefficients closest to the earlier calibration within 90 % of that margin (0.33 mm² after
rounding). The DRAM controller coefficient is a fixed input (inferred); the per-layer part is calibrated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from deepstack.models.network import topology_kind

AREA_OVERHEAD = 0.15  # paper §4.1.1: +15 % of the summed components for control and routing

# --- calibrated by benchmarks/calibrate_area.py (see module docstring) ---
MATRIX_MM2_PER_FLOP_PER_CYCLE = 7.523e-4  # MAC array, per FP16 FLOP/cycle, excluding operand delivery
MATRIX_OPERAND_MM2_PER_FLOP_PER_CYCLE = 4.443e-3  # operand delivery × (1 / array edge in elements)
VECTOR_MM2_PER_FLOP_PER_CYCLE = 3.413e-3  # per FP32 FLOP/cycle
SFU_MM2_PER_OP_PER_CYCLE = 6.827e-3  # per transcendental op/cycle (≥ 2 FP32 lanes' area, a programme bound)
SRAM_MM2_PER_MiB = 0.7429  # capacity part; 7 nm HD macros with periphery are ~0.5–1 mm²/MiB (inferred)
L1_MM2_PER_B_PER_CYCLE = 6.195e-4  # bandwidth part of L1 (port width), per PE
L2_MM2_PER_B_PER_CYCLE = 3.976e-3  # bandwidth part of L2 (slices, crossbar)
# one device's NoC at TMS1's bandwidth, per level: L1 die switch, L2 chip mesh (UCIe), L3 system torus (SerDes)
NOC_LEVEL_BASELINE_MM2 = (7.07, 12.92, 4.192)
NOC_BW_ELASTICITY = 0.75  # α: NoC area ∝ bandwidth^α, sub-linear (paper §4.1.1); fixed input of the programme
DRAM_PERIPHERAL_MM2_PER_LAYER = 1.736  # TSV / hybrid-bond landing and repair per connected layer (calibrated)
# --- fixed input of the calibration (inferred: no public 3D logic-die breakdown gives it) ---
DRAM_CONTROLLER_MM2_PER_TBps = 3.0  # controller + hybrid-bond PHY per TB/s of peak bandwidth


def noc_ports(topology: str, dims: tuple[int, ...]) -> int:
    """Links one node drives at a network level (its degree): see :meth:`~deepstack.models.network.Topology.ports`
    (a mesh node counts its interior degree, up to 4; a torus node 4, or 2 per dimension of two nodes)."""
    return topology_kind(topology).ports(tuple(dims))


def network_bw_per_level_Bps(levels) -> tuple[float, ...]:
    """Outgoing link bandwidth one device pays for at each level: ports × link bandwidth, divided among the
    devices of a group where the level's ports are a shared uplink (one PHY per group, not per device)."""
    out, group = [], 1
    for level in levels:
        sharing = group if getattr(level, "ports", "per_device") == "shared_uplink" else 1
        out.append(noc_ports(level.topology, level.dims) * level.link_bw_Bps / sharing)
        group *= math.prod(level.dims)
    return tuple(out)


def network_bw_per_device_Bps(levels) -> float:
    """Aggregate outgoing link bandwidth one device pays for over all levels."""
    return sum(network_bw_per_level_Bps(levels))


# TMS1 (paper Table 3, read as docs/calibration.md §11 says): switch 4 @ 800 GB/s (1 port per cluster) + mesh 2x2
# @ 384 GB/s (2 ports per die, shared by its 4 clusters) + torus 4x4 @ 75 GB/s (4 ports per chip, shared by its 16)
TMS1_LEVEL_BW_Bps = (1 * 800e9, 2 * 384e9 / 4, 4 * 75e9 / 16)
TMS1_NOC_BW_Bps = sum(TMS1_LEVEL_BW_Bps)


def noc_area_mm2(level_bw_Bps) -> float:
    """NoC area of a device whose levels carry ``level_bw_Bps`` (innermost first): each level priced against
    TMS1's level at its position (a level past the third as the third: only the 2.5D systems, whose PE counts are
    fixed, have other shapes)."""
    last = len(NOC_LEVEL_BASELINE_MM2) - 1
    return sum(NOC_LEVEL_BASELINE_MM2[min(i, last)] * (bw / TMS1_LEVEL_BW_Bps[min(i, last)]) ** NOC_BW_ELASTICITY
               for i, bw in enumerate(level_bw_Bps) if bw > 0)


@dataclass(frozen=True)
class AreaBreakdown:
    """Logic-die area of one device, mm² (overhead included in ``total_mm2``)."""

    pes: int
    pe_each_mm2: float
    pes_mm2: float
    l2_mm2: float
    dram_interface_mm2: float
    noc_mm2: float
    overhead_mm2: float
    total_mm2: float
    budget_mm2: float

    def as_dict(self) -> dict[str, float]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def pe_area_mm2(pe, l1_KiB: float, l1_bw_B_per_cycle: float) -> float:
    """Area of one PE: matrix, vector, SFU units, L0 registers and L1 (capacity + bandwidth)."""
    array_edge = min(pe.min_tile.m, pe.min_tile.n)
    matrix = pe.matrix_flops_per_cycle * (
        MATRIX_MM2_PER_FLOP_PER_CYCLE + MATRIX_OPERAND_MM2_PER_FLOP_PER_CYCLE / array_edge
    )
    vector = pe.vector_flops_per_cycle * VECTOR_MM2_PER_FLOP_PER_CYCLE
    sfu = pe.sfu_ops_per_cycle * SFU_MM2_PER_OP_PER_CYCLE
    sram = (pe.l0_KiB + l1_KiB) / 1024 * SRAM_MM2_PER_MiB + l1_bw_B_per_cycle * L1_MM2_PER_B_PER_CYCLE
    return matrix + vector + sfu + sram


def fixed_area_mm2(l2_MiB: float, l2_bw_B_per_cycle: float, dram_peak_bw_Bps: float, connected_layers: int,
                   noc_level_bw_Bps: tuple[float, ...]) -> tuple[float, float, float]:
    """(L2, DRAM interface, NoC) areas of a device; ``noc_level_bw_Bps``: its link bandwidth per level."""
    l2 = l2_MiB * SRAM_MM2_PER_MiB + l2_bw_B_per_cycle * L2_MM2_PER_B_PER_CYCLE
    dram = dram_peak_bw_Bps / 1e12 * DRAM_CONTROLLER_MM2_PER_TBps + connected_layers * DRAM_PERIPHERAL_MM2_PER_LAYER
    return l2, dram, noc_area_mm2(noc_level_bw_Bps)


def device_area(*, pe, pes: int | None, budget_mm2: float, l1_KiB: float, l1_bw_B_per_cycle: float, l2_MiB: float,
                l2_bw_B_per_cycle: float, dram_peak_bw_Bps: float, connected_layers: int,
                noc_level_bw_Bps: tuple[float, ...], extra_dram_mm2: float = 0.0) -> AreaBreakdown:
    """Area breakdown; with ``pes=None`` the PE count is derived: as many as fit in the budget (may be 0).
    ``extra_dram_mm2`` adds PHY area the bandwidth rule does not cover (2.5D HBM PHYs)."""
    pe_each = pe_area_mm2(pe, l1_KiB, l1_bw_B_per_cycle)
    l2, dram, noc = fixed_area_mm2(l2_MiB, l2_bw_B_per_cycle, dram_peak_bw_Bps, connected_layers, noc_level_bw_Bps)
    dram += extra_dram_mm2
    fixed = l2 + dram + noc
    if pes is None:
        room = budget_mm2 / (1 + AREA_OVERHEAD) - fixed
        pes = max(0, math.floor(room / pe_each + 1e-9))
    components = pes * pe_each + fixed
    overhead = components * AREA_OVERHEAD
    return AreaBreakdown(pes=pes, pe_each_mm2=pe_each, pes_mm2=pes * pe_each, l2_mm2=l2, dram_interface_mm2=dram,
                         noc_mm2=noc, overhead_mm2=overhead, total_mm2=components + overhead, budget_mm2=budget_mm2)
