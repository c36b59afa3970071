"""Re-derive the area coefficients of models/hardware/area.py (run by hand: `python benchmarks/calibrate_area.py`).

Not a speed benchmark: the calibration behind the area model. The paper's post-synthesis anchors are not public,
so the per-unit areas are chosen by a linear programme that reproduces every Table 2 PE count at m = n = 4 on
TMS1 and the NoC anchor of docs/calibration.md §1 (NoC bandwidth ×0.75 / ×1 / ×2 leaves 9 / 8 / 5 PEs), with the
largest margin t from every fit / no-fit boundary. Fixed inputs (inferred, see models/hardware/area.py): DRAM controller
3 mm² per TB/s, 1.5 mm² per connected layer, NoC elasticity α = 0.75. Plausibility bounds: SRAM 0.4–1.0 mm²/MiB
(7 nm macros), the matrix unit ≥ 50 % of a PE, vector + SFU ≥ 10 %, an SFU op ≥ 2 FP32 lanes, and the operand
overhead edge k0 = Bk/A ≤ 40.

It then prints every area anchor with the PE count the committed model gives and whether it holds: the Table 2
rows, the NoC anchor, and the paper's §5.6 designs of 7 / 8 / 10 connected layers with 6 / 5 / 4 SMs per 100 mm²
cluster (their SRAM and NoC options are not stated; read here as Standard on TMS1, the §5.1 defaults). The §5.6
anchors are reported, not fitted: the last line says whether the programme could meet them together with
Table 2 and the NoC anchor (its best margin with them added; negative: no coefficients within the bounds can).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog

from deepstack import catalog
from deepstack.models.hardware import area
from deepstack.models.hardware.device import resolve_device

BUDGET = 100 / (1 + area.AREA_OVERHEAD)
NAMES = ["A", "Bk", "v", "f", "c", "b1", "b2", "N", "t"]  # per-unit areas, NoC area at 1×, margin
IDX = {n: i for i, n in enumerate(NAMES)}
LAYER_TBps = 1.6375 / 4  # docs/calibration.md §1: 409.375 GB/s per connected layer (13.1 TB/s / 8 clusters / 4)


def fixed_dram_mm2(layers: int = 4) -> float:
    """DRAM interface of ``layers`` connected layers: controller/PHY per TB/s + TSV/bond periphery per layer."""
    return layers * (LAYER_TBps * area.DRAM_CONTROLLER_MM2_PER_TBps + area.DRAM_PERIPHERAL_MM2_PER_LAYER)


# chip: (PE overrides, device overrides, PE count of paper Table 2 at m = n = 4 on TMS1)
CHIPS = {
    "standard": ({}, {}, 8), "weak-noc": ({}, {"noc": 0.75}, 9), "strong-noc": ({}, {"noc": 1.25}, 7),
    "strong-l2": ({}, {"l2_mib": 8, "l2bw": 2857}, 6), "strong-l1": ({"l1bw": 512}, {}, 7),
    "less-sm": ({"sram_kib": 256 + 1024}, {}, 7), "large-matrix": ({"k": 64, "sram_kib": 256}, {}, 10),
    "large-vector": ({"vec": 256, "sfu": 32}, {}, 7), "NoC anchor 2×": ({}, {"noc": 2.0}, 5),
}
TABLE2_PES = {name: pes for name, (_, _, pes) in CHIPS.items() if not name.startswith("NoC")} | {"wgmma": 8}
NOC_ANCHOR = {0.75: 9, 1.0: 8, 2.0: 5}  # docs/calibration.md §1 (paper §5.5.5): NoC bandwidth scale → PEs
LAYER_ANCHORS = {7: 6, 8: 5, 10: 4}  # paper §5.6: connected layers → SMs per 100 mm² cluster (7 nm)


def pe_row(mat=4096, k=16, vec=128, sfu=16, sram_kib=512, l1bw=256):
    r = np.zeros(len(NAMES))
    r[IDX["A"]], r[IDX["Bk"]], r[IDX["v"]], r[IDX["f"]] = mat, mat / k, vec, sfu
    r[IDX["c"]], r[IDX["b1"]] = sram_kib / 1024, l1bw
    return r


def device_row(l2_mib=4, l2bw=1170, noc=1.0):
    r = np.zeros(len(NAMES))
    r[IDX["c"]], r[IDX["b2"]], r[IDX["N"]] = l2_mib, l2bw, noc**area.NOC_BW_ELASTICITY
    return r


def solve(with_layer_anchors: bool = False):
    """The programme; ``with_layer_anchors`` adds the §5.6 designs (Standard at n connected layers) as a check."""
    anchors = [(pe_kw, dev_kw, 4, pes) for pe_kw, dev_kw, pes in CHIPS.values()]
    if with_layer_anchors:
        anchors += [({}, {}, layers, pes) for layers, pes in LAYER_ANCHORS.items()]
    a_ub, b_ub = [], []
    for pe_kw, dev_kw, layers, pes in anchors:
        pe, dev = pe_row(**pe_kw), device_row(**dev_kw)
        room = BUDGET - fixed_dram_mm2(layers)
        fit = pes * pe + dev
        fit[IDX["t"]] = 1
        a_ub.append(fit)
        b_ub.append(room)
        over = -((pes + 1) * pe + dev)
        over[IDX["t"]] = 1
        a_ub.append(over)
        b_ub.append(-room)

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
    bounds = [(0, None)] * (len(NAMES) - 1) + [(None, None)]  # a negative margin: the anchors cannot all hold
    return linprog(cost, A_ub=np.array(a_ub), b_ub=np.array(b_ub), bounds=bounds, method="highs")


def anchor_rows() -> list[tuple[str, int, int]]:
    """(anchor, published PEs per 100 mm² cluster, the committed model's PEs), every anchor on TMS1."""
    tms1 = catalog.load("nocs", "tms1")
    rows = []
    for name, pes in TABLE2_PES.items():
        rows.append((f"Table 2 {name} (m = n = 4)", pes, resolve_device(catalog.load("chips", name), 4, 4, tms1).pes))
    standard = catalog.load("chips", "standard")
    for scale, pes in NOC_ANCHOR.items():
        got = resolve_device(standard, 4, 4, tms1, noc_bw_scale=scale).pes
        rows.append((f"NoC bandwidth ×{scale:g} (§5.5.5)", pes, got))
    for layers, pes in LAYER_ANCHORS.items():
        got = resolve_device(standard, layers, layers, tms1).pes
        rows.append((f"{layers} connected layers (§5.6)", pes, got))
    return rows


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
    print()
    print(f"{'anchor (Standard on TMS1 unless named)':42s} {'paper PEs':>9s} {'model PEs':>9s}  holds")
    for name, published, got in anchor_rows():
        print(f"{name:42s} {published:9d} {got:9d}  {'yes' if got == published else 'no'}")
    standard = resolve_device(catalog.load("chips", "standard"), 4, 4, catalog.load("nocs", "tms1")).area
    per_layer = fixed_dram_mm2(1)
    print(f"one connected layer costs {per_layer:.3f} mm² of DRAM interface (+{area.AREA_OVERHEAD:.0%} overhead), "
          f"{per_layer / standard.pe_each_mm2:.2f} of a Standard PE ({standard.pe_each_mm2:.3f} mm²)")
    low, high = layer_cost_window_mm2(standard)
    print(f"the §5.6 anchors would all hold, every other coefficient as committed, if each connected layer beyond "
          f"m = n = 4 cost {low:.3f}–{high:.3f} mm²" if low < high else "no per-layer cost meets the §5.6 anchors")
    check = solve(with_layer_anchors=True)
    print(f"with the §5.6 anchors added the programme's best margin is {check.x[IDX['t']]:.3f} mm² "
          f"({'they could all hold' if check.x[IDX['t']] > 0 else 'no coefficients within the bounds meet them all'})")


def layer_cost_window_mm2(standard: area.AreaBreakdown) -> tuple[float, float]:
    """The per-layer DRAM-interface cost (beyond Standard's 4 layers) for which every §5.6 anchor holds: with
    room R at n = 4 and PE area p, n layers leave R − (n − 4)·c, which must fit ``pes`` PEs but not one more."""
    room = BUDGET - standard.l2_mm2 - standard.dram_interface_mm2 - standard.noc_mm2
    pe = standard.pe_each_mm2
    low = max((room - (pes + 1) * pe) / (layers - 4) for layers, pes in LAYER_ANCHORS.items())
    high = min((room - pes * pe) / (layers - 4) for layers, pes in LAYER_ANCHORS.items())
    return low, high


if __name__ == "__main__":
    main()
