"""Study runners about DRAM stacking depth (paper §5.5): theoretical vs effective DRAM bandwidth as m = n grows
(``dram_layers``), and end-to-end STPS with the logic-die area it costs (``layers_e2e``)."""

from __future__ import annotations

import numpy as np

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.models.hardware import dram as dram_model
from deepstack.models.hardware.device import resolve_device
from deepstack.models.reporting import device_effective_bw_Bps
from deepstack.schema import SramOption
from deepstack.schema.hardware import MAX_STACKED_LAYERS
from deepstack.search.studies import StudyContext, figure, runner
from deepstack.search.studies.cells import (
    AREA_PARTS,
    EVALUATED,
    NO_PE,
    evaluate_stacking_grid,
    evaluated_rows,
    layer_values,
    noc_name,
    regime_label,
    regimes_of,
    status_note,
)

GBps = 1e9  # B/s per GB/s (the CSV's bandwidth unit)
BOUNDS = ("transaction curve", "Little's law", "L1 fill")  # the three terms of eq. 3 (+ L1 fill), in order
BOUND_MARKERS = dict(zip((*BOUNDS, NO_PE), ("o", "s", "^", "x"), strict=True))
L1_SHARE_IN_FLIGHT = 0.5  # as device_effective_bw_Bps: double buffering keeps half of every PE's L1 in flight


# --- 1. dram-layers: theoretical vs effective DRAM bandwidth as m = n grows -----------------------------------

def dram_bandwidth_row(chip, network, sram: SramOption, layers: int) -> dict:
    """Theoretical and effective DRAM bandwidth of one device at m = n = ``layers``, with the three bounds of
    ``device_effective_bw_Bps`` (full-row transaction curve, Little's law on half of every PE's L1, L1 fill)."""
    theoretical_Bps = chip.device.dram.model_copy(
        update={"stacked_layers": layers, "connected_layers": layers}).peak_bw_Bps
    row = {"chip": chip.name, "sram": sram.name, "l1_KiB": sram.l1_KiB,
           "l1_bw_B_per_cycle": chip.pe.l1_bw_B_per_cycle * sram.l1_bw_scale,
           "stacked_layers": layers, "connected_layers": layers}
    try:
        dev = resolve_device(chip, layers, layers, network, sram)
    except UserInputError:  # no PE fits: nothing fills L1, nothing is in flight
        return {**row, "pes_per_device": 0, "theoretical_bw_GBps": theoretical_Bps / GBps, "curve_bw_GBps": None,
                "little_bw_GBps": 0.0, "l1_fill_bw_GBps": 0.0, "effective_bw_GBps": 0.0, "bound": NO_PE}
    terms = (dram_model.curve_bw_Bps(dev.dram, dev.dram.row_B),
             dram_model.little_bw_Bps(dev.pes * dev.l1_B * L1_SHARE_IN_FLIGHT, dev.dram.access_latency_s),
             dev.l1_bw_Bps)
    return {**row, "pes_per_device": dev.pes, "theoretical_bw_GBps": dev.dram.peak_bw_Bps / GBps,
            "curve_bw_GBps": terms[0] / GBps, "little_bw_GBps": terms[1] / GBps, "l1_fill_bw_GBps": terms[2] / GBps,
            "effective_bw_GBps": device_effective_bw_Bps(dev) / GBps, "bound": BOUNDS[int(np.argmin(terms))]}


@runner("dram_layers")
def dram_layers(ctx: StudyContext) -> None:
    """Theoretical vs effective DRAM bandwidth and PEs per device as m = n grows, per L1 capacity × bandwidth."""
    chip = catalog.load("chips", ctx.path(ctx.param("chip", "standard")))
    if not chip.is_3d:
        raise UserInputError(f"study {ctx.recipe.name}: parameters.chip: must be a 3D-stacked chip (got {chip.name})")
    network = catalog.load("nocs", ctx.path(ctx.param("noc", "tms1")))
    layers = layer_values(ctx, "m_values", range(1, MAX_STACKED_LAYERS + 1))
    capacities = [float(v) for v in ctx.param("l1_KiB", [128, 256, 512])]
    bandwidths = [float(v) for v in ctx.param("l1_bw_B_per_cycle", [128, 256, 512, 1024])]
    rows = []
    done = ctx.planned(len(capacities) * len(bandwidths) * len(layers))
    for kib in capacities:
        for bw in bandwidths:
            sram = SramOption(name=f"L1 {kib:g} KiB, {bw:g} B/cycle", l1_KiB=kib,
                              l1_bw_scale=bw / chip.pe.l1_bw_B_per_cycle)
            for m in layers:
                rows.append(dram_bandwidth_row(chip, network, sram, m))
                done()
    ctx.write_csv("points.csv", rows)

    for key, ylabel, name in (("effective_bw_GBps", "DRAM bandwidth per device (GB/s)", "bandwidth_vs_m.png"),
                              ("pes_per_device", "PEs per device", "pes_vs_m.png")):
        fig, _ = figure(5.0 * len(capacities), 4.5)
        fig.clf()
        axes = np.atleast_1d(fig.subplots(1, len(capacities), sharey=True))
        for ax, kib in zip(axes, capacities, strict=True):
            for bw in bandwidths:
                series = [r for r in rows if r["l1_KiB"] == kib and r["l1_bw_B_per_cycle"] == bw]
                line, = ax.plot([r["stacked_layers"] for r in series], [r[key] for r in series], lw=1.2,
                                label=f"L1 {bw:g} B/cycle")
                for bound, marker in BOUND_MARKERS.items():
                    hits = [(r["stacked_layers"], r[key]) for r in series if r["bound"] == bound]
                    if hits:
                        ax.scatter(*zip(*hits, strict=True), marker=marker, s=18, color=line.get_color(), zorder=3)
            if key == "effective_bw_GBps":
                ax.plot(layers, [r["theoretical_bw_GBps"] for r in series], "k--", lw=1,
                        label="theoretical (n layers)")
            ax.set_title(f"{chip.name}: L1 {kib:g} KiB per PE")
            ax.set_xlabel("stacked = connected DRAM layers (m = n)")
            ax.grid(alpha=0.3)
        axes[0].set_ylabel(ylabel)
        for bound, marker in BOUND_MARKERS.items():  # legend entries for the bound markers
            axes[-1].scatter([], [], marker=marker, color="grey", label=f"bound: {bound}")
        axes[-1].legend(fontsize=7)
        ctx.save_png(name, fig)

    best_rows = []
    for kib in capacities:
        for bw in bandwidths:
            series = [r for r in rows if r["l1_KiB"] == kib and r["l1_bw_B_per_cycle"] == bw]
            top = max(series, key=lambda r: r["effective_bw_GBps"])  # first (smallest) m among ties
            best_rows.append({"L1 KiB": kib, "L1 B/cycle": bw, "best m": top["stacked_layers"],
                              "effective GB/s": top["effective_bw_GBps"],
                              "theoretical GB/s": top["theoretical_bw_GBps"], "bound there": top["bound"],
                              "PEs there": top["pes_per_device"]})
    bounds = {b: sum(1 for r in rows if r["bound"] == b) for b in (*BOUNDS, NO_PE)}
    ctx.write_summary(
        f"Chip {chip.name}, NoC area of {network.name}, m = n over {layers[0]}…{layers[-1]}; "
        f"{len(capacities)} L1 capacities × {len(bandwidths)} L1 bandwidths ({len(rows)} points). Effective "
        "bandwidth = min(full-row transaction curve, Little's law on half of every PE's L1 in flight, aggregate "
        "L1 fill bandwidth), as `device_effective_bw_Bps` computes it.\n\n"
        "The m that maximises effective DRAM bandwidth per L1 option (smallest m among ties):\n\n"
        + ctx.key_table("The m that maximises effective DRAM bandwidth per L1 option (smallest m among ties)",
                        best_rows)
        + "\nPoints limited by each bound: "
        + ", ".join(f"{name} {count}" for name, count in bounds.items()) + ".\n"
    )


# --- 2. layers-e2e: end-to-end STPS and area breakdown as m = n grows ----------------------------------------

@runner("layers_e2e")
def layers_e2e(ctx: StudyContext) -> None:
    """End-to-end STPS (best schedule per point) and the logic-die area breakdown as m = n grows."""
    objective = ctx.param("objective", "stps")
    chip, noc, stackings, rows = evaluate_stacking_grid(ctx, square=True, objectives=(objective,))
    regimes = regimes_of(ctx)
    layers = [m for m, _ in stackings]

    fig, ax = figure()
    for phase, batch in regimes:
        series = [r for r in rows if r["phase"] == phase and r["batch"] == batch]
        ms = [r["stacked_layers"] for r in series if r["status"] == EVALUATED]
        stps = [r["stps"] for r in series if r["status"] == EVALUATED]
        ax.plot(ms, stps, marker="o", label=regime_label(phase, batch))
        infeasible = [(r["stacked_layers"], r["stps"]) for r in series
                      if r["status"] == EVALUATED and not r["feasible"]]
        if infeasible:
            ax.scatter(*zip(*infeasible, strict=True), s=80, facecolors="none", edgecolors="red", zorder=3)
    ax.set_yscale("log")
    ax.set_xticks(layers)
    ax.set_xlabel("stacked = connected DRAM layers (m = n)")
    ax.set_ylabel("STPS (tokens/s, best schedule)")
    ax.set_title(f"{ctx.param('model')} on {chip}/{noc_name(ctx, noc)} (red ring: violates a limit)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    ctx.save_png("stps_vs_m.png", fig)

    area_by_m: dict[int, dict] = {}
    for r in rows:
        if "area_total_mm2" in r:
            area_by_m.setdefault(r["stacked_layers"], r)
    fig, ax = figure()
    ms = sorted(area_by_m)
    bottom = np.zeros(len(ms))
    for part in AREA_PARTS:
        values = np.array([area_by_m[m][f"area_{part}"] for m in ms])
        ax.bar(ms, values, bottom=bottom, label=part.removesuffix("_mm2").replace("_", " "))
        bottom += values
    budget = catalog.load("chips", chip).device.area_mm2
    ax.axhline(budget, color="k", ls="--", lw=1, label="area budget")
    ax.set_xticks(ms)
    ax.set_xlabel("stacked = connected DRAM layers (m = n)")
    ax.set_ylabel("logic-die area per device (mm²)")
    ax.set_title(f"{chip}: area breakdown (PEs derived: as many as fit)")
    ax.legend(fontsize=8, loc="lower right")
    ctx.save_png("area_breakdown.png", fig)

    best_rows = []
    for phase, batch in regimes:
        done = [r for r in evaluated_rows(rows) if r["phase"] == phase and r["batch"] == batch]
        if not done:
            best_rows.append({"regime": regime_label(phase, batch), "best m": "none fits"})
            continue
        feasible = [r for r in done if r["feasible"]] or done
        top = max(feasible, key=lambda r: r["stps"])
        best_rows.append({"regime": regime_label(phase, batch), "best m": top["stacked_layers"],
                          "STPS": top["stps"], "schedule": top["schedule"], "feasible": top["feasible"],
                          "PEs": top["pes_per_device"]})
    area_rows = [{"m = n": m, "PEs": area_by_m[m]["pes_per_device"],
                  **{p.removesuffix("_mm2"): area_by_m[m][f"area_{p}"] for p in AREA_PARTS},
                  "total": area_by_m[m]["area_total_mm2"]} for m in ms]
    ctx.write_summary(
        f"{ctx.param('model')} on {chip} × {noc_name(ctx, noc)}, m = n over {layers}, regimes "
        f"{', '.join(regime_label(*r) for r in regimes)}; each point with its best schedule by {objective}. "
        + status_note(rows) + "\n\nThe m with the highest STPS per regime (among feasible points when any):\n\n"
        + ctx.key_table("The m with the highest STPS per regime (among feasible points when any)", best_rows)
        + "\nLogic-die area per device (mm²):\n\n"
        + ctx.key_table("Logic-die area per device (mm²)", area_rows, digits=4)
    )
