"""Re-derive the area coefficients of models/hardware/area.py (run by hand: `python benchmarks/calibrate_area.py`).

Not a speed benchmark: the calibration behind the area model. The paper's post-synthesis areas are not public,
but the PE (SM) counts its area model gives are, for four kinds of design: Table 2 (every 3D chip at m = n = 4 on
TMS1), the NoC anchor of §5.5.5 (NoC bandwidth ×0.75 / ×1 / ×2 leaves 9 / 8 / 5 PEs), the §5.6 designs of 7 / 8 /
10 connected layers (6 / 5 / 4 SMs, read as Standard on TMS1 with the default SRAM) and the four Table 4
configurations beyond m = 4 (validation/paper_table4.csv: their L1 options and per-level NoC multipliers). A
linear programme chooses the per-unit areas so that every one of them holds with the largest margin t from every
fit / no-fit boundary (stage 1), then, among the coefficient sets within 90 % of that margin, the one closest to
the earlier calibration (stage 2: least summed relative change), so the change is the smallest the anchors ask.

Unknowns: matrix array A and operand delivery Bk, vector v, SFU f, SRAM capacity c and L1 / L2 bandwidth parts
b1, b2, each NoC level's area at TMS1's bandwidth N1..N3 (a die switch, UCIe PHYs and SerDes cost differently per
GB/s: one aggregate term cannot meet both Table 4 NoC variants), and the DRAM interface per connected layer dl
(1–4 mm²). Fixed inputs (inferred): the controller's 3 mm² per TB/s (only its sum with dl per layer is pinned by
the anchors) and the NoC elasticity α = 0.75. Plausibility bounds: SRAM 0.4–1.0 mm²/MiB (7 nm macros), the
matrix unit ≥ 50 % of a PE, vector + SFU ≥ 10 %, an SFU op ≥ 2 FP32 lanes, the operand-overhead edge Bk/A ≤ 40.
It prints both stages' coefficients beside the committed ones and every anchor with the committed model's count.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog

from deepstack import catalog
from deepstack.models.hardware import area
from deepstack.models.hardware.device import resolve_device
from deepstack.schema import SramOption
from deepstack.search.space import scaled_network

BUDGET = 100 / (1 + area.AREA_OVERHEAD)
NAMES = ["A", "Bk", "v", "f", "c", "b1", "b2", "N1", "N2", "N3", "dc", "dl", "t"]
IDX = {n: i for i, n in enumerate(NAMES)}
LAYER_TBps = 1.6375 / 4  # docs/calibration.md §1: 409.375 GB/s per connected layer (13.1 TB/s / 8 clusters / 4)
STAGE2_MARGIN = 0.9  # stage 2 keeps at least this share of the best margin

# anchor: (name, PE overrides, device overrides, m = n, per-level NoC multipliers, published PEs per 100 mm²)
_TABLE2 = {
    "standard": ({}, {}, 8), "weak-noc": ({}, {"noc": 0.75}, 9), "strong-noc": ({}, {"noc": 1.25}, 7),
    "strong-l2": ({}, {"l2_mib": 8, "l2bw": 2857}, 6), "strong-l1": ({"l1bw": 512}, {}, 7),
    "less-sm": ({"sram_kib": 256 + 1024}, {}, 7), "large-matrix": ({"k": 64, "sram_kib": 256}, {}, 10),
    "large-vector": ({"vec": 256, "sfu": 32}, {}, 7),
}
ANCHORS = (
    [(f"Table 2 {name} (m = n = 4)", pe, dev, 4, (1, 1, 1), pes) for name, (pe, dev, pes) in _TABLE2.items()]
    + [(f"NoC bandwidth ×{s:g} (§5.5.5)", {}, {"noc": s}, 4, (1, 1, 1), pes) for s, pes in ((0.75, 9), (2.0, 5))]
    + [(f"{m} connected layers (§5.6)", {}, {}, m, (1, 1, 1), pes) for m, pes in ((7, 6), (8, 5), (10, 4))]
    + [("Table 4: m = 10, L1 256 KiB × 1024 B/cycle", {"l1bw": 1024}, {}, 10, (1, 1, 1), 4),
       ("Table 4: m = 9, L1 256 KiB × 1024, NoC 0.7/0.9/1.9", {"l1bw": 1024}, {}, 9, (0.7, 0.9, 1.9), 4),
       ("Table 4: m = 7, L1 128 KiB × 1024", {"l1bw": 1024, "sram_kib": 256 + 128}, {}, 7, (1, 1, 1), 6),
       ("Table 4: m = 7, L1 128 KiB × 1024, NoC 1.9/0.4/1.7", {"l1bw": 1024, "sram_kib": 256 + 128}, {}, 7,
        (1.9, 0.4, 1.7), 6)]
)
COMMITTED_BEFORE = {"A": 6.49e-4, "Bk": 4.443e-3, "v": 3.413e-3, "f": 6.827e-3, "c": 0.7282, "b1": 2.133e-3,
                    "b2": 3.976e-3, "dl": 1.5, "N": 23.98}  # the calibration on Table 2 and the NoC anchor alone


def pe_row(mat=4096, k=16, vec=128, sfu=16, sram_kib=512, l1bw=256):
    r = np.zeros(len(NAMES))
    r[IDX["A"]], r[IDX["Bk"]], r[IDX["v"]], r[IDX["f"]] = mat, mat / k, vec, sfu
    r[IDX["c"]], r[IDX["b1"]] = sram_kib / 1024, l1bw
    return r


def device_row(layers, scales, l2_mib=4, l2bw=1170, noc=1.0):
    r = np.zeros(len(NAMES))
    r[IDX["c"]], r[IDX["b2"]] = l2_mib, l2bw
    for level, scale in enumerate(scales):
        r[IDX[f"N{level + 1}"]] = (noc * scale) ** area.NOC_BW_ELASTICITY
    r[IDX["dc"]], r[IDX["dl"]] = layers * LAYER_TBps, layers
    return r


def _constraints() -> tuple[np.ndarray, np.ndarray, list]:
    a_ub, b_ub = [], []
    for _, pe_kw, dev_kw, layers, scales, pes in ANCHORS:
        pe, dev = pe_row(**pe_kw), device_row(layers, scales, **dev_kw)
        fit = pes * pe + dev
        fit[IDX["t"]] = 1
        over = -((pes + 1) * pe + dev)
        over[IDX["t"]] = 1
        a_ub += [fit, over]
        b_ub += [BUDGET, -BUDGET]

    def bound(coefs: dict, limit: float) -> None:
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
    vector_share = 0.1 * std
    vector_share[IDX["v"]] -= 128
    vector_share[IDX["f"]] -= 16
    a_ub += [matrix_share, vector_share]
    b_ub += [0, 0]
    dc = area.DRAM_CONTROLLER_MM2_PER_TBps
    bounds = [(0, None)] * 10 + [(dc, dc), (1.0, 4.0), (None, None)]  # a negative margin: anchors cannot all hold
    return np.array(a_ub), np.array(b_ub), bounds


def solve_margin():
    """Stage 1: the largest margin t."""
    a_ub, b_ub, bounds = _constraints()
    cost = np.zeros(len(NAMES))
    cost[IDX["t"]] = -1
    return linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")


def solve_closest(margin: float):
    """Stage 2: within ``margin``, the least summed relative change from the earlier calibration (the NoC as
    its total at TMS1)."""
    a_ub, b_ub, bounds = _constraints()
    targets = list(COMMITTED_BEFORE.items())
    nv, nd = len(NAMES), len(targets)
    rows, rhs = [], []
    for j, (name, value) in enumerate(targets):
        r = np.zeros(nv + nd)
        for part in (("N1", "N2", "N3") if name == "N" else (name,)):
            r[IDX[part]] = 1 / value
        r[nv + j] = -1
        rows.append(r.copy())  # x / value − 1 ≤ d_j
        rhs.append(1.0)
        r[:nv] *= -1
        rows.append(r)  # 1 − x / value ≤ d_j
        rhs.append(-1.0)
    keep = np.zeros(nv + nd)
    keep[IDX["t"]] = -1
    rows.append(keep)
    rhs.append(-margin)
    a = np.vstack([np.hstack([a_ub, np.zeros((len(a_ub), nd))]), *rows])
    cost = np.concatenate([np.zeros(nv), np.ones(nd)])
    return linprog(cost, A_ub=a, b_ub=np.concatenate([b_ub, rhs]), bounds=bounds + [(0, None)] * nd,
                   method="highs")


def committed() -> dict[str, float]:
    n1, n2, n3 = area.NOC_LEVEL_BASELINE_MM2
    return {"A": area.MATRIX_MM2_PER_FLOP_PER_CYCLE, "Bk": area.MATRIX_OPERAND_MM2_PER_FLOP_PER_CYCLE,
            "v": area.VECTOR_MM2_PER_FLOP_PER_CYCLE, "f": area.SFU_MM2_PER_OP_PER_CYCLE, "c": area.SRAM_MM2_PER_MiB,
            "b1": area.L1_MM2_PER_B_PER_CYCLE, "b2": area.L2_MM2_PER_B_PER_CYCLE, "N1": n1, "N2": n2, "N3": n3,
            "dc": area.DRAM_CONTROLLER_MM2_PER_TBps, "dl": area.DRAM_PERIPHERAL_MM2_PER_LAYER}


def anchor_rows() -> list[tuple[str, int, int]]:
    """(anchor, published PEs per 100 mm² cluster, the committed model's PEs)."""
    rows = []
    for name, pe_kw, dev_kw, layers, scales, pes in ANCHORS:
        chip = catalog.load("chips", name.split()[2] if name.startswith("Table 2") else "standard")
        sram = None
        if "l1bw" in pe_kw:
            l1 = pe_kw.get("sram_kib", 512) - chip.pe.l0_KiB
            sram = SramOption(name="anchor", l1_KiB=l1, l1_bw_scale=pe_kw["l1bw"] / chip.pe.l1_bw_B_per_cycle)
        got = resolve_device(chip, layers, layers, scaled_network("tms1", 1.0, scales), sram,
                             noc_bw_scale=dev_kw.get("noc", 1.0) if not name.startswith("Table 2") else 1.0).pes
        rows.append((name, pes, got))
    return rows


def main() -> None:
    best = solve_margin()
    margin = best.x[IDX["t"]]
    closest = solve_closest(STAGE2_MARGIN * margin)
    mine = committed()
    print(f"{'coefficient':12s} {'max margin':>12s} {'closest':>12s} {'area.py':>12s}")
    for name in NAMES[:-1]:
        print(f"{name:12s} {best.x[IDX[name]]:12.5g} {closest.x[IDX[name]]:12.5g} {mine[name]:12.5g}")
    print(f"best margin from every fit/no-fit boundary: {margin:.3f} mm²; stage 2 keeps {closest.x[IDX['t']]:.3f}")
    print()
    print(f"{'anchor (Standard on TMS1 unless named)':52s} {'paper':>6s} {'model':>6s}  holds")
    for name, published, got in anchor_rows():
        print(f"{name:52s} {published:6d} {got:6d}  {'yes' if got == published else 'no'}")


if __name__ == "__main__":
    main()
