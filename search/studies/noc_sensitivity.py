"""Study runner: NoC sensitivity (paper §5.5): STPS and PEs per device as link bandwidth and hop latency scale."""

from __future__ import annotations

import math
from dataclasses import replace

from deepstack import catalog
from deepstack.search.studies import StudyContext, runner
from deepstack.search.studies.common import preset_ref, scenario_of, subplots
from deepstack.search.studies.point_search import Hardware, PointTask, run_tasks


@runner("noc_sensitivity")
def noc_sensitivity(ctx: StudyContext) -> None:
    """STPS (best flat schedule per point) and PE count as NoC bandwidth and hop latency are scaled."""
    model, phase = ctx.param("model"), ctx.param("phase", "decode")
    m = ctx.param("stacked_layers", 4)
    base = Hardware(ctx.param("chip"), preset_ref(ctx, ctx.param("noc")), m, ctx.param("connected_layers", m))
    batches = ctx.param("batches")
    sweeps = sweeps_of(base, ctx.param("bandwidth_scales"), ctx.param("hop_latency_scales"),
                       ctx.param("level_bandwidth_scales"))
    done = ctx.planned(len(dict.fromkeys(hw for *_, hw in sweeps)) * len(batches))
    rows = sensitivity_rows(base, {b: scenario_of(ctx, model, phase, b) for b in batches}, sweeps,
                            ctx.param("workers", 1), done)
    ctx.write_csv("points.csv", rows)
    _plot_sensitivity(ctx, rows, batches, "bandwidth", "link bandwidth scale (×)", "stps_vs_bandwidth.png")
    _plot_sensitivity(ctx, rows, batches, "hop_latency", "hop latency scale (×)", "stps_vs_latency.png")
    shown = [{"batch": r["batch"], "sweep": r["sweep"], "level": r["level"], "scale": r["scale"],
              "PEs/device": r["pes_per_device"], "STPS": r["stps"], "schedule": r.get("schedule", r["status"])}
             for r in rows]
    ctx.write_summary(
        f"{model} {phase} on {base.label} (best flat schedule per point). Bandwidth scales every link of the "
        "named level(s); the NoC area grows with it, so fewer PEs fit. Hop latency scales every level's "
        "per-hop delay.\n\n" + ctx.key_table("STPS and PEs per device at each NoC bandwidth and hop-latency scale",
                                               shown))


def sweeps_of(base: Hardware, bandwidth_scales, hop_latency_scales, level_bandwidth_scales) -> list[tuple]:
    """(sweep, level, scale, hardware point): every level's bandwidth at once, every level's hop latency at once,
    then one level's bandwidth at a time (the others nominal)."""
    levels = len(catalog.load("nocs", base.noc).levels)
    sweeps: list[tuple[str, str, float, Hardware]] = []
    for s in bandwidth_scales:
        sweeps.append(("bandwidth", "all", s, replace(base, level_bw_scales=(float(s),) * levels)))
    for s in hop_latency_scales:
        sweeps.append(("hop_latency", "all", s, replace(base, hop_latency_scale=float(s))))
    for level in range(levels):
        for s in level_bandwidth_scales:
            scales = tuple(float(s) if i == level else 1.0 for i in range(levels))
            sweeps.append(("bandwidth", f"L{level + 1}", s, replace(base, level_bw_scales=scales)))
    return sweeps


def sensitivity_rows(base: Hardware, scenarios: dict, sweeps: list[tuple], workers: int = 1,
                     done=None) -> list[dict]:
    """One row per batch (``scenarios``: batch → scenario) and sweep point: the point's PEs per device and its
    best flat schedule's metrics (``done``: a study's progress count, one per point solved)."""
    rows = []
    unique = list(dict.fromkeys(hw for *_, hw in sweeps))
    for batch, sc in scenarios.items():
        results = dict(zip(unique, run_tasks([PointTask(hw, sc) for hw in unique], workers, done), strict=True))
        for sweep, level, scale, hw in sweeps:
            result = results[hw]
            top = result.best()
            row = {"batch": batch, "sweep": sweep, "level": level, "scale": scale, **hw.columns(),
                   "status": "ok" if top else result.status}
            if top:
                row.update({k: v for k, v in top.columns().items() if k not in hw.columns()})
            else:  # the PE count still tells what the NoC costs
                any_point = result.candidates[0] if result.candidates else None
                row.update(pes_per_device=any_point.pes_per_device if any_point else math.nan, stps=math.nan)
            rows.append(row)
    return rows


def _plot_sensitivity(ctx: StudyContext, rows: list[dict], batches: list[int], sweep: str, xlabel: str,
                      name: str) -> None:
    fig, axes = subplots(len(batches))
    for ax, batch in zip(axes, batches, strict=True):
        mine = [r for r in rows if r["batch"] == batch and r["sweep"] == sweep]
        for level in dict.fromkeys(r["level"] for r in mine):
            line = sorted((r for r in mine if r["level"] == level), key=lambda r: r["scale"])
            ax.plot([r["scale"] for r in line], [r["stps"] for r in line], marker="o",
                    linestyle="-" if level == "all" else ":", label=f"{level} levels" if level == "all" else level)
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("STPS (tokens/s)")
        ax.set_title(f"batch {batch}")
        ax.legend(fontsize=8)
        if sweep == "bandwidth":
            line = sorted((r for r in mine if r["level"] == "all"), key=lambda r: r["scale"])
            twin = ax.twinx()
            twin.plot([r["scale"] for r in line], [r["pes_per_device"] for r in line], color="grey",
                      linestyle="--", marker="x")
            twin.set_ylabel("PEs per device (grey)")
    ctx.save_png(name, fig)
