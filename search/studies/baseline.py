"""Study runner: the best 3D design against the H100*/H200* baselines at equal area (paper §5, "3D vs 2.5D")."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.search.studies import StudyContext, figure, runner
from deepstack.search.studies.common import preset_ref, scenario_of
from deepstack.search.studies.point_search import Candidate, Hardware, PointTask, run_tasks


def _system_area_mm2(hw: Hardware) -> float:
    """Silicon of the whole system: devices × the chip's device area (which must match the NoC's endpoint)."""
    net, chip = catalog.load("nocs", hw.noc), catalog.load("chips", hw.chip)
    if not math.isclose(chip.device.area_mm2, net.device_area_mm2):
        raise UserInputError(f"{hw.chip} devices are {chip.device.area_mm2:g} mm² but {net.name} connects "
                             f"{net.device_area_mm2:g} mm² endpoints")
    return net.devices * chip.device.area_mm2



@runner("baseline_comparison")
def baseline_comparison(ctx: StudyContext) -> None:
    """Best 3D design (chips × NoCs × flat schedules at fixed m, n) vs the 2.5D baselines, per scenario."""
    models, phases, batches = ctx.param("models"), ctx.param("phases"), ctx.param("batches")
    m = ctx.param("stacked_layers", 4)
    n = ctx.param("connected_layers", m)
    hw_3d = [Hardware(chip, preset_ref(ctx, noc), m, n) for chip in ctx.param("chips_3d")
             for noc in ctx.param("nocs_3d")]
    baseline_noc = preset_ref(ctx, ctx.param("baseline_noc"))
    hw_2p5d = [Hardware(chip, baseline_noc) for chip in ctx.param("baselines")]
    areas = {hw.label: _system_area_mm2(hw) for hw in hw_3d + hw_2p5d}
    if len(set(areas.values())) != 1:
        raise UserInputError(f"study {ctx.recipe.name}: the 3D and 2.5D networks must have equal area (mm²), "
                             f"got {areas}")
    area_mm2 = next(iter(areas.values()))
    scenarios = [(model, phase, batch) for model in models for phase in phases for batch in batches]
    tasks = [PointTask(hw, scenario_of(ctx, *key)) for key in scenarios for hw in hw_3d + hw_2p5d]
    results = iter(run_tasks(tasks, ctx.param("workers", 1)))
    points, rows = [], []
    for model, phase, batch in scenarios:
        best_3d: Candidate | None = None
        by_baseline: dict[str, tuple[Candidate | None, str]] = {}
        for hw in hw_3d + hw_2p5d:
            result = next(results)
            top = result.best()
            status = "ok" if top else result.status
            points.append({"model": model, "phase": phase, "batch": batch, "kind": "3d" if hw in hw_3d else "2.5d",
                           **hw.columns(), "status": status, "evaluated": len(result.candidates),
                           **({k: v for k, v in top.columns().items() if k not in hw.columns()} if top else {})})
            if hw in hw_3d:
                if top and (best_3d is None or top.value() > best_3d.value()):
                    best_3d = top
            else:
                by_baseline[hw.chip] = (top, status)
        feasible_2p5d = [c for c, _ in by_baseline.values() if c]
        best_2p5d = max(feasible_2p5d, key=lambda c: c.value(), default=None)
        row = {"model": model, "phase": phase, "batch": batch, "area_mm2": area_mm2,
               "stps_3d": best_3d.value() if best_3d else math.nan,
               "utps_3d": best_3d.value("utps") if best_3d else math.nan,
               "design_3d": f"{best_3d.hardware.label} {best_3d.schedule}" if best_3d else "infeasible"}
        for chip, (top, status) in by_baseline.items():
            row[f"stps_{chip}"] = top.value() if top else math.nan
            row[f"utps_{chip}"] = top.value("utps") if top else math.nan
            row[f"schedule_{chip}"] = top.schedule if top else ""
            row[f"status_{chip}"] = status
        row.update({"stps_2p5d": best_2p5d.value() if best_2p5d else math.nan,
                    "utps_2p5d": best_2p5d.value("utps") if best_2p5d else math.nan,
                    "best_2p5d": best_2p5d.hardware.chip if best_2p5d else "infeasible"})
        row["speedup"] = (row["stps_3d"] / row["stps_2p5d"]) if best_3d and best_2p5d else math.nan
        rows.append(row)
    ctx.write_csv("comparison.csv", rows)
    ctx.write_csv("points.csv", points)
    _plot_speedups(ctx, rows, models, phases, batches)
    shown = [{"model": r["model"], "phase": r["phase"], "batch": r["batch"], "3D STPS": r["stps_3d"],
              "2.5D STPS": r["stps_2p5d"], "best 2.5D": r["best_2p5d"], "3D UTPS": r["utps_3d"],
              "2.5D UTPS": r["utps_2p5d"], "speed-up": r["speedup"]} for r in rows]
    valid = [r["speedup"] for r in rows if math.isfinite(r["speedup"])]
    infeasible = [f"{r['model']} {r['phase']} b{r['batch']}" for r in rows if not math.isfinite(r["speedup"])]
    text = (f"Equal area: {area_mm2:,.0f} mm² on both sides. 3D: {len(ctx.param('chips_3d'))} chips × "
            f"{len(ctx.param('nocs_3d'))} NoCs at m = {m}, n = {n}, each with its best flat schedule; 2.5D: "
            f"{', '.join(ctx.param('baselines'))} on {Path(baseline_noc).stem}.\n\n")
    if valid:
        text += (f"Speed-up (best 3D STPS / best 2.5D STPS) over {len(valid)} scenarios: min {min(valid):.2f}×, "
                 f"median {float(np.median(valid)):.2f}×, max {max(valid):.2f}×.\n\n")
    if infeasible:
        text += "No feasible design on one side (speed-up not defined): " + ", ".join(infeasible) + ".\n\n"
    ctx.write_summary(text + ctx.key_table("Best 3D against best 2.5D design per scenario, at equal area", shown))


def _plot_speedups(ctx: StudyContext, rows: list[dict], models: list[str], phases: list[str],
                   batches: list[int]) -> None:
    fig, axes = figure(4.0 + 1.6 * len(models) * len(phases), 4.5)
    ax = axes
    groups = [(model, phase) for phase in phases for model in models]
    width = 0.8 / len(batches)
    lookup = {(r["model"], r["phase"], r["batch"]): r["speedup"] for r in rows}
    for i, batch in enumerate(batches):
        values = [lookup.get((model, phase, batch), math.nan) for model, phase in groups]
        x = np.arange(len(groups)) + (i - (len(batches) - 1) / 2) * width
        heights = [v if math.isfinite(v) else 0.0 for v in values]
        ax.bar(x, heights, width, label=f"batch {batch}")
        for xi, v in zip(x, values, strict=True):
            if not math.isfinite(v):
                ax.text(xi, 0.02, "n/f", ha="center", va="bottom", fontsize=7, rotation=90)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(np.arange(len(groups)), [f"{model}\n{phase}" for model, phase in groups], fontsize=8)
    ax.set_ylabel("speed-up: best 3D STPS / best 2.5D STPS")
    ax.set_title("3D vs 2.5D at equal area (n/f: no feasible design on a side)")
    ax.legend(fontsize=8)
    ctx.save_png("speedup.png", fig)
