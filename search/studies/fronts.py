"""Study runner: Pareto fronts (paper §5.4) of every (hardware × flat schedule) point per model and batch."""

from __future__ import annotations

import numpy as np

from deepstack.search.pareto import nondominated_mask
from deepstack.search.studies import StudyContext, runner
from deepstack.search.studies.common import preset_ref, scenario_of, subplots
from deepstack.search.studies.point_search import Hardware, PointTask, run_tasks

FRONTS = {"front_stps_utps": ["stps", "utps"], "front_stps_tokens_per_joule": ["stps", "tokens_per_joule"]}


@runner("pareto_fronts")
def pareto_fronts(ctx: StudyContext) -> None:
    """Every (hardware × flat schedule) point per model and batch, with its STPS–UTPS and STPS–tokens/J fronts."""
    phase = ctx.param("phase", "decode")
    hardware = [Hardware(chip, preset_ref(ctx, noc), m, m) for chip in ctx.param("chips") for noc in ctx.param("nocs")
                for m in ctx.param("stacked_layers")]
    groups = [(model, batch) for model in ctx.param("models") for batch in ctx.param("batches")]
    tasks = [PointTask(hw, scenario_of(ctx, model, phase, batch)) for model, batch in groups for hw in hardware]
    results = iter(run_tasks(tasks, ctx.param("workers", 1), ctx.planned(len(tasks))))
    rows = []
    for model, batch in groups:
        group = []
        for _ in hardware:
            result = next(results)
            group += [{"model": model, "batch": batch, **c.columns(), "violations": c.violations}
                      for c in result.candidates]
        feasible = [r for r in group if r["feasible"]]
        for column, objectives in FRONTS.items():
            values = np.array([[r[k] for k in objectives] for r in feasible], dtype=float).reshape(-1, 2)
            mask = nondominated_mask(values, objectives)
            for r in group:
                r[column] = False
            for r, flag in zip(feasible, mask, strict=True):
                r[column] = bool(flag)
        rows += group
    # Across batches the STPS-UTPS trade-off is real (at one batch STPS = padded batch × UTPS in decode).
    for model in ctx.param("models"):
        feasible = [r for r in rows if r["model"] == model and r["feasible"]]
        values = np.array([[r["stps"], r["utps"]] for r in feasible], dtype=float).reshape(-1, 2)
        for r, flag in zip(feasible, nondominated_mask(values, ["stps", "utps"]), strict=True):
            r["front_stps_utps_all_batches"] = bool(flag)
    for r in rows:
        r.setdefault("front_stps_utps_all_batches", False)
    ctx.write_csv("points.csv", rows)
    for model, batch in groups:
        _plot_front(ctx, [r for r in rows if r["model"] == model and r["batch"] == batch], model, batch)
    _front_html(ctx, rows, groups)
    summary_rows = []
    for model, batch in groups:
        group = [r for r in rows if r["model"] == model and r["batch"] == batch]
        front = sorted((r for r in group if r["front_stps_tokens_per_joule"]), key=lambda r: -r["stps"])
        for r in front:
            summary_rows.append({"model": model, "batch": batch, "chip": r["chip"], "noc": r["noc"],
                                 "m=n": r["stacked_layers"], "schedule": r["schedule"], "STPS": r["stps"],
                                 "tokens/J": r["tokens_per_joule"], "UTPS": r["utps"]})
    counts = []
    for model, batch in groups:
        group = [r for r in rows if r["model"] == model and r["batch"] == batch]
        counts.append(f"{model} b{batch}: {len(group)} points, {sum(1 for r in group if r['feasible'])} feasible")
    ctx.write_summary(
        f"{len(hardware)} hardware points ({len(ctx.param('chips'))} chips × {len(ctx.param('nocs'))} NoCs × m = n "
        f"in {ctx.param('stacked_layers')}) × every feasible flat schedule, {phase}. {'; '.join(counts)}.\n\n"
        "STPS–tokens/J front per model and batch:\n\n"
        + ctx.key_table("STPS–tokens/J front per model and batch", summary_rows))


def _plot_front(ctx: StudyContext, group: list[dict], model: str, batch: int) -> None:
    fig, axes = subplots(2, 5.5, 4.5)
    feasible = [r for r in group if r["feasible"]]
    for ax, (column, (x_key, y_key)) in zip(axes, FRONTS.items(), strict=True):
        ax.scatter([r[y_key] for r in feasible], [r[x_key] for r in feasible], s=8, color="#99bbdd",
                   label="feasible points")
        front = sorted((r for r in feasible if r[column]), key=lambda r: r[y_key])
        ax.plot([r[y_key] for r in front], [r[x_key] for r in front], color="#cc3311", marker="o", markersize=4,
                label="non-dominated")
        ax.set_xlabel("UTPS (tokens/s per user)" if y_key == "utps" else "tokens per joule")
        ax.set_ylabel("STPS (tokens/s)")
        ax.legend(fontsize=8)
    fig.suptitle(f"{model}, batch {batch}: {len(feasible)} feasible of {len(group)} points")
    ctx.save_png(f"front_{model}_b{batch}.png", fig)


def _front_html(ctx: StudyContext, rows: list[dict], groups: list[tuple[str, int]]) -> None:
    import plotly.graph_objects as go

    fig = go.Figure()
    for model, batch in groups:
        feasible = [r for r in rows if r["model"] == model and r["batch"] == batch and r["feasible"]]
        text = [f"{r['chip']}/{r['noc']}/m{r['stacked_layers']} {r['schedule']}" for r in feasible]
        fig.add_trace(go.Scatter(x=[r["tokens_per_joule"] for r in feasible], y=[r["stps"] for r in feasible],
                                 mode="markers", name=f"{model} b{batch}", text=text, marker={"size": 5},
                                 hovertemplate="%{text}<br>tokens/J %{x:.3g}<br>STPS %{y:.4g}"))
        front = sorted((r for r in feasible if r["front_stps_tokens_per_joule"]), key=lambda r: r["tokens_per_joule"])
        fig.add_trace(go.Scatter(x=[r["tokens_per_joule"] for r in front], y=[r["stps"] for r in front],
                                 mode="lines+markers", name=f"front {model} b{batch}"))
    fig.update_layout(title="STPS vs tokens/J (every feasible point; lines: non-dominated)",
                      xaxis_title="tokens per joule", yaxis_title="STPS (tokens/s)", yaxis_type="log")
    ctx.save_html("fronts.html", fig)
