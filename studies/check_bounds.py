"""Check study results against a physical bound: no design point serves tokens faster than its matrix units
allow. STPS × the FFN FLOPs every token needs (2 per weight of the dense FFN, or of the routed experts it visits
and the shared ones; attention and the head come on top, so this is a lower bound) ≤ devices × PEs per device ×
matrix FLOPs per PE-cycle × the nominal clock (DVFS only lowers it).

Run it after a study run (the results are not committed): ``python studies/check_bounds.py [studies/out]``.
It prints every row that breaks the bound and exits 1 if there is one. Two token-accounting faults of
per-module MoE schedules once put 33 rows of the 3d-vs-2.5d study above it (docs/calibration.md).
"""

from __future__ import annotations

import csv
import sys
import tomllib
from pathlib import Path

from deepstack import catalog
from deepstack.models.hardware.device import resolve_device

STUDIES = Path(__file__).resolve().parent


def ffn_flops_per_token(model) -> float:
    """2 FLOPs per FFN weight a token meets: the dense FFN layers' weights, and in each MoE layer those of the
    top-k routed and the shared experts (3 matrices of hidden × expert intermediate each)."""
    weights = model.dense_layers * model.dense_ffn_parameters()
    if model.moe:
        expert = 3 * model.hidden * model.moe.expert_intermediate
        weights += model.moe_layers * (model.moe.top_k + model.moe.shared_experts) * expert
    return 2.0 * weights


def study_model(study_dir: Path) -> str | None:
    """The model a study's rows are about when they do not name it: its TOML's ``parameters.model``."""
    toml = STUDIES / f"{study_dir.name.removesuffix('-paper')}.toml"
    return tomllib.loads(toml.read_text()).get("parameters", {}).get("model") if toml.exists() else None


def peak_flops(chip: str, noc: str, m: int, n: int, pes: int) -> float:
    """The system's matrix FLOP/s: every device of the network with ``pes`` PEs at the chip's nominal clock."""
    network = catalog.load("nocs", noc)
    dev = resolve_device(catalog.load("chips", chip), m, n, network, None, 1.0)
    return network.devices * pes * dev.peak_matrix_flops / dev.pes


def rows_above_peak(points: Path, model: str | None = None) -> tuple[int, list[str]]:
    """(rows checked, the rows above the bound) of one points.csv; ``model`` for rows that do not name one."""
    broken, checked = [], 0
    with points.open() as f:
        for row in csv.DictReader(f):
            name = row.get("model") or model
            try:
                stps = float(row.get("stps") or 0)
                m, n, pes = int(row["stacked_layers"]), int(row["connected_layers"]), int(row["pes_per_device"])
                chip, noc = row["chip"], row["noc"]
            except (KeyError, ValueError):
                continue  # a row without a design point (a failed cell, a bandwidth-only table)
            if not name or stps <= 0:
                continue
            if noc.startswith("../"):
                noc = str((STUDIES / noc).resolve())
            bound = peak_flops(chip, noc, m, n, pes) / ffn_flops_per_token(catalog.load("llms", name))
            checked += 1
            if stps > bound:
                broken.append(f"{points.parent.name}: {name} {row.get('phase', '')} b{row.get('batch')} "
                              f"{chip}/{noc}/m{m}n{n} {row.get('schedule')}: {stps:,.0f} > {bound:,.0f} STPS")
    return checked, broken


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else STUDIES / "out"
    total, broken = 0, []
    for points in sorted(out.glob("*/points.csv")):
        checked, above = rows_above_peak(points, study_model(points.parent))
        total += checked
        broken += above
    print("\n".join(broken) if broken else f"{total:,} rows checked under {out}: none above the matrix peak")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
