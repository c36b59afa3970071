"""Re-derive the area coefficients of models/hardware/area.py (run by hand: `python benchmarks/calibrate_area.py`).

Not a speed benchmark: the calibration behind the area model. The paper's post-synthesis anchors are not public,
so the per-unit areas are chosen by a linear programme that reproduces every Table 2 PE count at m = n = 4 on
TMS1 and the NoC anchor of docs/calibration.md §1 (NoC bandwidth ×0.75 / ×1 / ×2 leaves 9 / 8 / 5 PEs), with the
largest margin t from every fit / no-fit boundary. Fixed inputs (inferred, see models/hardware/area.py): DRAM controller
3 mm² per TB/s, 1.5 mm² per connected layer, NoC elasticity α = 0.75. Plausibility bounds: SRAM 0.4–1.0 mm²/MiB
(7 nm macros), the matrix unit ≥ 50 % of a PE, vector + SFU ≥ 10 %, an SFU op ≥ 2 FP32 lanes, and the operand
overhead edge k0 = Bk/A ≤ 40.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog

from deepstack.models.hardware import area

BUDGET = 100 / (1 + area.AREA_OVERHEAD)
NAMES = ["A", "Bk", "v", "f", "c", "b1", "b2", "N", "t"]  # per-unit areas, NoC area at 1×, margin
IDX = {n: i for i, n in enumerate(NAMES)}
FIXED_DRAM = 1.6375 * area.DRAM_CONTROLLER_MM2_PER_TBps + 4 * area.DRAM_PERIPHERAL_MM2_PER_LAYER

# chip: (PE overrides, device overrides, PE count of paper Table 2 at m = n = 4 on TMS1)
CHIPS = {
    "standard": ({}, {}, 8), "weak-noc": ({}, {"noc": 0.75}, 9), "strong-noc": ({}, {"noc": 1.25}, 7),
    "strong-l2": ({}, {"l2_mib": 8, "l2bw": 2857}, 6), "strong-l1": ({"l1bw": 512}, {}, 7),
    "less-sm": ({"sram_kib": 256 + 1024}, {}, 7), "large-matrix": ({"k": 64, "sram_kib": 256}, {}, 10),
    "large-vector": ({"vec": 256, "sfu": 32}, {}, 7), "NoC anchor 2×": ({}, {"noc": 2.0}, 5),
}


def pe_row(mat=4096, k=16, vec=128, sfu=16, sram_kib=512, l1bw=256):
    r = np.zeros(len(NAMES))
    r[IDX["A"]], r[IDX["Bk"]], r[IDX["v"]], r[IDX["f"]] = mat, mat / k, vec, sfu
    r[IDX["c"]], r[IDX["b1"]] = sram_kib / 1024, l1bw
    return r


def device_row(l2_mib=4, l2bw=1170, noc=1.0):
    r = np.zeros(len(NAMES))
    r[IDX["c"]], r[IDX["b2"]], r[IDX["N"]] = l2_mib, l2bw, noc**area.NOC_BW_ELASTICITY
    return r


def solve():
    a_ub, b_ub = [], []
    for pe_kw, dev_kw, pes in CHIPS.values():
        pe, dev = pe_row(**pe_kw), device_row(**dev_kw)
        fit = pes * pe + dev
        fit[IDX["t"]] = 1
        a_ub.append(fit)
        b_ub.append(BUDGET - FIXED_DRAM)
        over = -((pes + 1) * pe + dev)
        over[IDX["t"]] = 1
        a_ub.append(over)
        b_ub.append(-(BUDGET - FIXED_DRAM))

    def bound(coefs: dict, limit: float):
        r = np.zeros(len(NAMES))
        for k, v in coefs.items():
            r[IDX[k]] = v
        a_ub.append(r)
        b_ub.append(limit)

    bound({"c": 1}, 1.0)
    bound({"c": -1}, -0.4)
    bound({"v": 2, "f": -1}, 0)
    bound({"Bk": 1, "A": -40}, 0)
    std = pe_row()
    matrix_share = 0.5 * std
    matrix_share[IDX["A"]] -= 4096
    matrix_share[IDX["Bk"]] -= 4096 / 16
    a_ub.append(matrix_share)
    b_ub.append(0)
    vector_share = 0.1 * std
    vector_share[IDX["v"]] -= 128
    vector_share[IDX["f"]] -= 16
    a_ub.append(vector_share)
    b_ub.append(0)
    cost = np.zeros(len(NAMES))
    cost[IDX["t"]] = -1
    return linprog(cost, A_ub=np.array(a_ub), b_ub=np.array(b_ub), bounds=[(0, None)] * len(NAMES), method="highs")


def main() -> None:
    result = solve()
    committed = {"A": area.MATRIX_MM2_PER_FLOP_PER_CYCLE, "Bk": area.MATRIX_OPERAND_MM2_PER_FLOP_PER_CYCLE,
                 "v": area.VECTOR_MM2_PER_FLOP_PER_CYCLE, "f": area.SFU_MM2_PER_OP_PER_CYCLE,
                 "c": area.SRAM_MM2_PER_MiB, "b1": area.L1_MM2_PER_B_PER_CYCLE, "b2": area.L2_MM2_PER_B_PER_CYCLE,
                 "N": area.NOC_BASELINE_MM2}
    print(f"{'coefficient':12s} {'LP':>12s} {'models/hardware/area.py':>15s}")
    for name in NAMES[:-1]:
        print(f"{name:12s} {result.x[IDX[name]]:12.5g} {committed[name]:15.5g}")
    print(f"margin from every fit/no-fit boundary: {result.x[IDX['t']]:.3f} mm²")


if __name__ == "__main__":
    main()
