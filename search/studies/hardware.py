"""Study runners about the hardware (paper §5.5 and §4.1.2): DRAM stacking depth, the area it costs, stacked
versus connected layers, and the temperature of the resulting designs.

Every runner reports what the model computes; nothing here is tuned. Hardware points that the model cannot build
(no PE fits the area budget) or serve (no schedule fits memory) are kept in the CSV with their ``status``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.models import dram as dram_model
from deepstack.models.device import resolve_device
from deepstack.models.evaluate import DesignPoint, Report, device_effective_bw_Bps
from deepstack.schema import SramOption
from deepstack.schema.hardware import MAX_STACKED_LAYERS
from deepstack.search.studies import StudyContext, common, figure, runner

GBps = 1e9  # B/s per GB/s (the CSV's bandwidth unit)
AREA_PARTS = ("pes_mm2", "l2_mm2", "dram_interface_mm2", "noc_mm2", "overhead_mm2")  # AreaBreakdown, summed
EVALUATED, NO_PE, NO_SCHEDULE = "evaluated", "no PE fits", "no schedule fits"
BOUNDS = ("transaction curve", "Little's law", "L1 fill")  # the three terms of eq. 3 (+ L1 fill), in order
BOUND_MARKERS = dict(zip((*BOUNDS, NO_PE), ("o", "s", "^", "x"), strict=True))
L1_SHARE_IN_FLIGHT = 0.5  # as device_effective_bw_Bps: double buffering keeps half of every PE's L1 in flight
TARGET_C = 85.0  # paper §4.1.2: the safe junction-temperature target
HARD_LIMIT_C = 95.0  # paper §4.1.2: the hard limit
MAX_WORKERS = 256


# --- parameters --------------------------------------------------------------------------------------------

def _layer_values(ctx: StudyContext, key: str, default: Sequence[int]) -> list[int]:
    values = [int(v) for v in ctx.params.get(key, default)]
    if not values or any(not 1 <= v <= MAX_STACKED_LAYERS for v in values):
        raise UserInputError(f"study {ctx.recipe.name}: parameters.{key}: must be a non-empty list of layer "
                             f"counts in 1..{MAX_STACKED_LAYERS} (got {values})")
    return sorted(set(values))


def _stackings(ctx: StudyContext, square: bool) -> list[tuple[int, int]]:
    """(m, n) pairs: m = n when ``square``, else every n ≤ m (restricted to ``n_values`` when given)."""
    ms = _layer_values(ctx, "m_values", range(1, 11))
    if square:
        return [(m, m) for m in ms]
    ns = _layer_values(ctx, "n_values", range(1, max(ms) + 1))
    return [(m, n) for m in ms for n in ns if n <= m]


def _regimes(ctx: StudyContext) -> list[tuple[str, int]]:
    phases = list(ctx.param("phases", list(common.PHASES)))
    batches = [int(b) for b in ctx.param("batches", [4, 1024])]
    bad = [p for p in phases if p not in common.PHASES]
    if bad or not phases or not batches or any(b < 1 for b in batches):
        raise UserInputError(f"study {ctx.recipe.name}: parameters.phases must be from {', '.join(common.PHASES)} "
                             f"and parameters.batches positive integers (got {phases}, {batches})")
    return [(phase, batch) for phase in phases for batch in batches]


def _workers(ctx: StudyContext) -> int:
    workers = int(ctx.param("workers", 1))
    if not 1 <= workers <= MAX_WORKERS:
        raise UserInputError(f"study {ctx.recipe.name}: parameters.workers: must be in 1..{MAX_WORKERS} "
                             f"(got {workers})")
    return workers


def _noc_name(ctx: StudyContext, noc: str) -> str:
    return catalog.load("nocs", ctx.path(noc)).name


def _require_3d(ctx: StudyContext, chips: Sequence[str]) -> list[str]:
    flat = [c for c in chips if not catalog.load("chips", c).is_3d]
    if flat:
        raise UserInputError(f"study {ctx.recipe.name}: parameters.chip(s): must be 3D-stacked chips; "
                             f"{', '.join(flat)} use HBM beside the die (no m, n)")
    return list(chips)


def _regime_label(phase: str, batch: int) -> str:
    return f"{phase} b{batch}"


# --- one hardware point × one regime, evaluated with its best schedule(s) -----------------------------------

@dataclass(frozen=True)
class Cell:
    """A unit of work: names and numbers only, so a worker process can take it."""

    chip: str
    noc: str
    model: str
    phase: str
    batch: int
    input_len: int
    output_len: int
    precision: str | None
    stacked_layers: int
    connected_layers: int
    objectives: tuple[str, ...]


def _cells(ctx: StudyContext, chips: Sequence[str], nocs: Sequence[str], stackings: Sequence[tuple[int, int]],
           objectives: tuple[str, ...]) -> list[Cell]:
    model = ctx.param("model")
    lengths = int(ctx.param("input_len", 1024)), int(ctx.param("output_len", 1024))
    precision = ctx.params.get("precision")
    return [Cell(chip, ctx.path(noc), model, phase, batch, *lengths, precision, m, n, objectives)
            for phase, batch in _regimes(ctx) for chip in chips for noc in nocs for m, n in stackings]


def _best(design: DesignPoint, objective: str) -> Report | None:
    """``common.best``, bypassing its cache when the design point cannot be hashed (a Schedule carries a dict)."""
    try:
        hash(design)
    except TypeError:
        return common.best.__wrapped__(design, objective)
    return common.best(design, objective)


def _area_columns(area: dict) -> dict:
    out = {f"area_{part}": area[part] for part in AREA_PARTS}
    out["area_total_mm2"] = area["total_mm2"]
    return out


def evaluate_cell(cell: Cell) -> list[dict]:
    """One CSV row per objective: the best schedule's report flattened, with area and power density."""
    sc = common.scenario(cell.model, cell.phase, cell.batch, cell.input_len, cell.output_len, cell.precision)
    design = common.point(cell.chip, sc, cell.noc, cell.stacked_layers, cell.connected_layers)
    base = {"chip": cell.chip, "noc": design.network.name if design.network else "", "phase": cell.phase,
            "batch": cell.batch, "stacked_layers": cell.stacked_layers, "connected_layers": cell.connected_layers}
    try:
        dev = resolve_device(design.chip, design.stacked_layers, design.connected_layers, design.network)
    except UserInputError:
        return [{**base, "objective": objective, "status": NO_PE, "pes_per_device": 0}
                for objective in cell.objectives]
    rows = []
    for objective in cell.objectives:
        report = _best(design, objective)
        if report is None:
            rows.append({**base, "objective": objective, "status": NO_SCHEDULE, "pes_per_device": dev.pes,
                         **_area_columns(dev.area.as_dict())})
            continue
        out = common.row(report, **base, objective=objective, status=EVALUATED)
        out.update(_area_columns(report.hardware["area_per_device_mm2"]))
        out["power_w_per_device"] = report.breakdown["power_w_per_device"]
        out["w_per_mm2"] = report.metrics["power_w"] / report.metrics["area_mm2"]
        out["thermal_violation"] = any(v.startswith("thermal") for v in report.violations)
        rows.append(out)
    return rows


def _evaluate_all(cells: list[Cell], workers: int) -> list[dict]:
    return [row for rows in _map(evaluate_cell, cells, workers) for row in rows]


def _map(fn: Callable, tasks: list, workers: int) -> list:
    """``map`` on a local process pool (in order); in-process for one worker or one task."""
    if workers <= 1 or len(tasks) <= 1:
        return [fn(task) for task in tasks]
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks))) as pool:
        return list(pool.map(fn, tasks))


def _evaluated(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["status"] == EVALUATED]


def _status_note(rows: list[dict]) -> str:
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in (EVALUATED, NO_SCHEDULE, NO_PE)}
    return (f"{len(rows)} rows: {counts[EVALUATED]} evaluated, {counts[NO_SCHEDULE]} where no schedule fits "
            f"(memory, L1), {counts[NO_PE]} where no PE fits the area budget.")


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
    layers = _layer_values(ctx, "m_values", range(1, MAX_STACKED_LAYERS + 1))
    capacities = [float(v) for v in ctx.param("l1_KiB", [128, 256, 512])]
    bandwidths = [float(v) for v in ctx.param("l1_bw_B_per_cycle", [128, 256, 512, 1024])]
    rows = []
    for kib in capacities:
        for bw in bandwidths:
            sram = SramOption(name=f"L1 {kib:g} KiB, {bw:g} B/cycle", l1_KiB=kib,
                              l1_bw_scale=bw / chip.pe.l1_bw_B_per_cycle)
            rows.extend(dram_bandwidth_row(chip, network, sram, m) for m in layers)
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
    chip, noc = ctx.path(ctx.param("chip", "standard")), ctx.param("noc", "tms1")
    objective = ctx.param("objective", "stps")
    stackings = _stackings(ctx, square=True)
    rows = _evaluate_all(_cells(ctx, _require_3d(ctx, [chip]), [noc], stackings, (objective,)), _workers(ctx))
    ctx.write_csv("points.csv", rows)
    regimes = _regimes(ctx)
    layers = [m for m, _ in stackings]

    fig, ax = figure()
    for phase, batch in regimes:
        series = [r for r in rows if r["phase"] == phase and r["batch"] == batch]
        ms = [r["stacked_layers"] for r in series if r["status"] == EVALUATED]
        stps = [r["stps"] for r in series if r["status"] == EVALUATED]
        ax.plot(ms, stps, marker="o", label=_regime_label(phase, batch))
        infeasible = [(r["stacked_layers"], r["stps"]) for r in series
                      if r["status"] == EVALUATED and not r["feasible"]]
        if infeasible:
            ax.scatter(*zip(*infeasible, strict=True), s=80, facecolors="none", edgecolors="red", zorder=3)
    ax.set_yscale("log")
    ax.set_xticks(layers)
    ax.set_xlabel("stacked = connected DRAM layers (m = n)")
    ax.set_ylabel("STPS (tokens/s, best schedule)")
    ax.set_title(f"{ctx.param('model')} on {chip}/{_noc_name(ctx, noc)} (red ring: violates a limit)")
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
        done = [r for r in _evaluated(rows) if r["phase"] == phase and r["batch"] == batch]
        if not done:
            best_rows.append({"regime": _regime_label(phase, batch), "best m": "none fits"})
            continue
        feasible = [r for r in done if r["feasible"]] or done
        top = max(feasible, key=lambda r: r["stps"])
        best_rows.append({"regime": _regime_label(phase, batch), "best m": top["stacked_layers"],
                          "STPS": top["stps"], "schedule": top["schedule"], "feasible": top["feasible"],
                          "PEs": top["pes_per_device"]})
    area_rows = [{"m = n": m, "PEs": area_by_m[m]["pes_per_device"],
                  **{p.removesuffix("_mm2"): area_by_m[m][f"area_{p}"] for p in AREA_PARTS},
                  "total": area_by_m[m]["area_total_mm2"]} for m in ms]
    ctx.write_summary(
        f"{ctx.param('model')} on {chip} × {_noc_name(ctx, noc)}, m = n over {layers}, regimes "
        f"{', '.join(_regime_label(*r) for r in regimes)}; each point with its best schedule by {objective}. "
        + _status_note(rows) + "\n\nThe m with the highest STPS per regime (among feasible points when any):\n\n"
        + ctx.key_table("The m with the highest STPS per regime (among feasible points when any)", best_rows)
        + "\nLogic-die area per device (mm²):\n\n"
        + ctx.key_table("Logic-die area per device (mm²)", area_rows, digits=4)
    )


# --- 3. stacked-vs-connected: heatmaps over (m, n ≤ m) ------------------------------------------------------

OBJECTIVE_LABELS = {"stps": "throughput-optimal (STPS)", "tokens_per_joule": "energy-optimal (tokens/J)"}


def _short(value: float) -> str:
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def _two_lines(schedule: str) -> str:
    parts = schedule.split(",")
    half = (len(parts) + 1) // 2
    return ",".join(parts[:half]) + ("\n" + ",".join(parts[half:]) if parts[half:] else "")


def _grid(rows: list[dict], ms: list[int], ns: list[int], key: str) -> np.ndarray:
    grid = np.full((len(ms), len(ns)), np.nan)
    for r in rows:
        if r["status"] == EVALUATED:
            grid[ms.index(r["stacked_layers"]), ns.index(r["connected_layers"])] = r[key]
    return grid


def _cell_text(r: dict, key: str) -> str:
    if r["status"] != EVALUATED:
        return "no PE" if r["status"] == NO_PE else "no fit"
    mark = "" if r["feasible"] else "*"
    return f"{_short(r[key])}{mark}\n{_two_lines(r['schedule'])}\n{r['w_per_mm2']:.2f} W/mm²"


@runner("stacking_heatmap")
def stacking_heatmap(ctx: StudyContext) -> None:
    """Throughput- and energy-optimal designs over every (m, n ≤ m), with the winning schedule and W/mm²."""
    chip, noc = ctx.path(ctx.param("chip", "standard")), ctx.param("noc", "tms1")
    stackings = _stackings(ctx, square=False)
    objectives = ("stps", "tokens_per_joule")
    rows = _evaluate_all(_cells(ctx, _require_3d(ctx, [chip]), [noc], stackings, objectives), _workers(ctx))
    ctx.write_csv("points.csv", rows)
    ms = sorted({m for m, _ in stackings})
    ns = sorted({n for _, n in stackings})
    regimes = _regimes(ctx)

    for phase, batch in regimes:
        fig, _ = figure(2 * (0.85 * len(ns) + 1.5), 0.7 * len(ms) + 1.8)
        fig.clf()
        axes = fig.subplots(1, 2)
        for ax, objective in zip(axes, objectives, strict=True):
            cells = [r for r in rows if r["phase"] == phase and r["batch"] == batch and r["objective"] == objective]
            grid = _grid(cells, ms, ns, objective)
            image = ax.imshow(grid, origin="lower", cmap="viridis", aspect="auto")
            fig.colorbar(image, ax=ax, shrink=0.8, label=objective.replace("_", " "))
            for r in cells:
                i, j = ms.index(r["stacked_layers"]), ns.index(r["connected_layers"])
                shown = r["status"] == EVALUATED
                ax.text(j, i, _cell_text(r, objective), ha="center", va="center", fontsize=6,
                        color="white" if shown else "dimgray",
                        bbox={"facecolor": "black", "alpha": 0.3, "pad": 0.8, "lw": 0} if shown else None)
            ax.set_xticks(range(len(ns)), [str(n) for n in ns])
            ax.set_yticks(range(len(ms)), [str(m) for m in ms])
            ax.set_xlabel("connected layers n")
            ax.set_ylabel("stacked layers m")
            ax.set_title(f"{_regime_label(phase, batch)}: {OBJECTIVE_LABELS[objective]}", fontsize=9)
        fig.suptitle(f"{ctx.param('model')} on {chip}/{_noc_name(ctx, noc)}; "
                     "cell: value, schedule, W/mm² (* violates a limit)", fontsize=9)
        ctx.save_png(f"heatmap_{phase}_b{batch}.png", fig)
    ctx.save_html("heatmaps.html", _plotly_heatmaps(rows, regimes, objectives, ms, ns))

    summary = []
    for phase, batch in regimes:
        entry = {"regime": _regime_label(phase, batch)}
        for objective, label in (("stps", "throughput"), ("tokens_per_joule", "energy")):
            done = [r for r in _evaluated(rows) if r["phase"] == phase and r["batch"] == batch
                    and r["objective"] == objective]
            done = [r for r in done if r["feasible"]] or done
            if done:
                top = max(done, key=lambda r: r[objective])
                entry[f"{label}-optimal (m, n)"] = f"({top['stacked_layers']}, {top['connected_layers']})"
                entry[f"{label} value"] = top[objective]
                entry[f"{label} schedule"] = top["schedule"]
        pairs = _paired(rows, phase, batch)
        entry["cells where the two schedules differ"] = f"{sum(a != b for a, b in pairs)}/{len(pairs)}"
        summary.append(entry)
    ctx.write_summary(
        f"{ctx.param('model')} on {chip} × {_noc_name(ctx, noc)}, every (m, n ≤ m) with m in {ms}; "
        "per cell the best schedule by STPS and the best by tokens/J. " + _status_note(rows)
        + "\n\nBest cell per regime and objective (among feasible cells when any):\n\n"
        + ctx.key_table("Best cell per regime and objective (among feasible cells when any)", summary)
        + "\nW/mm² is system power / system area (equal to per-device power over the device footprint).\n"
    )


def _paired(rows: list[dict], phase: str, batch: int) -> list[tuple[str, str]]:
    """(throughput-optimal schedule, energy-optimal schedule) of every evaluated cell of a regime."""
    by_key = {(r["stacked_layers"], r["connected_layers"], r["objective"]): r for r in _evaluated(rows)
              if r["phase"] == phase and r["batch"] == batch}
    return [(r["schedule"], by_key[(m, n, "tokens_per_joule")]["schedule"])
            for (m, n, objective), r in by_key.items()
            if objective == "stps" and (m, n, "tokens_per_joule") in by_key]


def _plotly_heatmaps(rows, regimes, objectives, ms, ns):
    """One interactive heatmap; a menu switches regime × objective, hovering shows schedule and W/mm²."""
    import plotly.graph_objects as go

    fig = go.Figure()
    labels = []
    for phase, batch in regimes:
        for objective in objectives:
            cells = [r for r in rows if r["phase"] == phase and r["batch"] == batch and r["objective"] == objective]
            text = np.full((len(ms), len(ns)), "", dtype=object)
            for r in cells:
                i, j = ms.index(r["stacked_layers"]), ns.index(r["connected_layers"])
                text[i, j] = (f"{r['schedule']}<br>{r['w_per_mm2']:.3f} W/mm²<br>feasible: {r['feasible']}"
                              if r["status"] == EVALUATED else r["status"])
            grid = _grid(cells, ms, ns, objective)
            fig.add_trace(go.Heatmap(z=np.where(np.isnan(grid), None, grid).tolist(), x=ns, y=ms,
                                     customdata=text.tolist(), colorscale="Viridis", visible=not labels,
                                     colorbar={"title": objective},
                                     hovertemplate="m=%{y}, n=%{x}<br>" + objective
                                     + "=%{z:.4g}<br>%{customdata}<extra></extra>"))
            labels.append(f"{_regime_label(phase, batch)}: {OBJECTIVE_LABELS[objective]}")
    buttons = [{"label": label, "method": "update",
                "args": [{"visible": [k == i for k in range(len(labels))]}, {"title": label}]}
               for i, label in enumerate(labels)]
    fig.update_layout(title=labels[0] if labels else "", xaxis_title="connected layers n",
                      yaxis_title="stacked layers m", updatemenus=[{"buttons": buttons, "x": 1.0, "y": 1.15}])
    return fig


# --- 4. thermal: temperature distribution over a space of designs --------------------------------------------

def share_above(rows: list[dict], limit_c: float) -> dict:
    """Designs above ``limit_c`` among the evaluated rows (feasible or not), and how they split."""
    done = _evaluated(rows)
    above = [r for r in done if r["temperature_c"] > limit_c]
    return {"evaluated": len(done), "above": len(above), "share_above": len(above) / len(done) if done else math.nan}


@runner("thermal_distribution")
def thermal_distribution(ctx: StudyContext) -> None:
    """Temperature distribution over chips × m × n × NoC (each with its best schedule) and the share above 85 °C."""
    chips = _require_3d(ctx, [ctx.path(c) for c in ctx.param("chips")])
    nocs = list(ctx.param("nocs", ["tms1"]))
    limit_c = float(ctx.param("limit_c", TARGET_C))
    hard_c = float(ctx.param("hard_limit_c", HARD_LIMIT_C))
    objective = ctx.param("objective", "stps")
    rows = _evaluate_all(_cells(ctx, chips, nocs, _stackings(ctx, square=False), (objective,)), _workers(ctx))
    for r in rows:
        if r["status"] == EVALUATED:
            r["above_limit"] = r["temperature_c"] > limit_c
    ctx.write_csv("points.csv", rows)

    table = []
    for phase, batch in _regimes(ctx):
        regime = [r for r in rows if r["phase"] == phase and r["batch"] == batch]
        done = _evaluated(regime)
        share = share_above(regime, limit_c)
        temps = np.array([r["temperature_c"] for r in done])
        table.append({
            "phase": phase, "batch": batch, "designs": len(regime), "evaluated": share["evaluated"],
            "no_schedule": sum(1 for r in regime if r["status"] == NO_SCHEDULE),
            "no_pe": sum(1 for r in regime if r["status"] == NO_PE),
            "feasible": sum(1 for r in done if r["feasible"]),
            "infeasible": sum(1 for r in done if not r["feasible"]),
            "thermal_violations": sum(1 for r in done if r["thermal_violation"]),
            "above_limit": share["above"], "share_above_limit": share["share_above"],
            "above_hard_limit": int((temps > hard_c).sum()),
            "min_temperature_c": float(temps.min()) if done else math.nan,
            "median_temperature_c": float(np.median(temps)) if done else math.nan,
            "max_temperature_c": float(temps.max()) if done else math.nan,
        })
        fig, ax = figure()
        groups = [[r["temperature_c"] for r in done if r["feasible"]],
                  [r["temperature_c"] for r in done if not r["feasible"]]]
        if done:
            ax.hist(groups, bins=30, stacked=True, color=["#4477aa", "#cc6677"],
                    label=["feasible", "infeasible (a violation)"])
        ax.axvline(limit_c, color="k", ls="--", lw=1, label=f"{limit_c:g} °C target")
        ax.axvline(hard_c, color="r", ls=":", lw=1, label=f"{hard_c:g} °C hard limit")
        ax.set_xlabel("junction temperature (°C)")
        ax.set_ylabel("designs")
        ax.set_title(f"{ctx.param('model')} {_regime_label(phase, batch)}: {len(done)} designs "
                     f"({share['above']} above {limit_c:g} °C)")
        ax.legend(fontsize=8)
        ctx.save_png(f"temperature_{phase}_b{batch}.png", fig)
    ctx.write_csv("share.csv", table)
    per_chip = []
    for chip in chips:
        done = [r for r in _evaluated(rows) if r["chip"] == chip]
        per_chip.append({"chip": chip, "evaluated": len(done), "above_limit": share_above(done, limit_c)["above"],
                         "max_temperature_c": max((r["temperature_c"] for r in done), default=math.nan),
                         "max_power_w_per_device": max((r["power_w_per_device"] for r in done), default=math.nan)})
    ctx.write_summary(
        f"{ctx.param('model')}: chips {', '.join(chips)} × NoCs {', '.join(_noc_name(ctx, n) for n in nocs)} "
        "× every (m, n ≤ m) with m in "
        f"{_layer_values(ctx, 'm_values', range(1, 11))}, each with its best schedule by {objective}. "
        + _status_note(rows) + f" Temperatures are T = T_amb + R(m)·P at the DVFS-chosen clock (§4.1.2); "
        f"'above_limit' counts evaluated designs above {limit_c:g} °C whether or not another limit is violated.\n\n"
        + ctx.key_table(f"Designs and temperatures per regime (limit {limit_c:g} °C, hard limit {hard_c:g} °C)",
                        table, ["phase", "batch", "evaluated", "feasible", "infeasible", "thermal_violations",
                                "above_limit", "share_above_limit", "above_hard_limit", "median_temperature_c",
                                "max_temperature_c"])
        + "\nPer chip, over all regimes and stackings:\n\n"
        + ctx.key_table("Per chip, over all regimes and stackings", per_chip)
    )
