"""Study runner: stacked versus connected DRAM layers (paper §5.5): heatmaps of the throughput- and
energy-optimal designs over every (m, n ≤ m)."""

from __future__ import annotations

import numpy as np

from deepstack.search.studies import StudyContext, figure, runner
from deepstack.search.studies.cells import (
    EVALUATED,
    NO_PE,
    evaluate_stacking_grid,
    evaluated_rows,
    noc_name,
    regime_label,
    regimes_of,
    status_note,
)

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
    objectives = ("stps", "tokens_per_joule")
    chip, noc, stackings, rows = evaluate_stacking_grid(ctx, square=False, objectives=objectives)
    ms = sorted({m for m, _ in stackings})
    ns = sorted({n for _, n in stackings})
    regimes = regimes_of(ctx)

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
            ax.set_title(f"{regime_label(phase, batch)}: {OBJECTIVE_LABELS[objective]}", fontsize=9)
        fig.suptitle(f"{ctx.param('model')} on {chip}/{noc_name(ctx, noc)}; "
                     "cell: value, schedule, W/mm² (* violates a limit)", fontsize=9)
        ctx.save_png(f"heatmap_{phase}_b{batch}.png", fig)
    ctx.save_html("heatmaps.html", _plotly_heatmaps(rows, regimes, objectives, ms, ns))

    summary = []
    for phase, batch in regimes:
        entry = {"regime": regime_label(phase, batch)}
        for objective, label in (("stps", "throughput"), ("tokens_per_joule", "energy")):
            done = [r for r in evaluated_rows(rows) if r["phase"] == phase and r["batch"] == batch
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
        f"{ctx.param('model')} on {chip} × {noc_name(ctx, noc)}, every (m, n ≤ m) with m in {ms}; "
        "per cell the best schedule by STPS and the best by tokens/J. " + status_note(rows)
        + "\n\nBest cell per regime and objective (among feasible cells when any):\n\n"
        + ctx.key_table("Best cell per regime and objective (among feasible cells when any)", summary)
        + "\nW/mm² is system power / system area (equal to per-device power over the device footprint).\n"
    )


def _paired(rows: list[dict], phase: str, batch: int) -> list[tuple[str, str]]:
    """(throughput-optimal schedule, energy-optimal schedule) of every evaluated cell of a regime."""
    by_key = {(r["stacked_layers"], r["connected_layers"], r["objective"]): r for r in evaluated_rows(rows)
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
            labels.append(f"{regime_label(phase, batch)}: {OBJECTIVE_LABELS[objective]}")
    buttons = [{"label": label, "method": "update",
                "args": [{"visible": [k == i for k in range(len(labels))]}, {"title": label}]}
               for i, label in enumerate(labels)]
    fig.update_layout(title=labels[0] if labels else "", xaxis_title="connected layers n",
                      yaxis_title="stacked layers m", updatemenus=[{"buttons": buttons, "x": 1.0, "y": 1.15}])
    return fig
