"""Study runner: the temperature distribution over a space of designs and the share above the 85 °C target
(paper §4.1.2)."""

from __future__ import annotations

import math

import numpy as np

from deepstack.search.studies import StudyContext, figure, runner
from deepstack.search.studies.cells import (
    EVALUATED,
    NO_PE,
    NO_SCHEDULE,
    cells_of,
    evaluate_all,
    evaluated_rows,
    layer_values,
    noc_name,
    regime_label,
    regimes_of,
    require_3d,
    stacking_grid,
    status_note,
    workers_of,
)

TARGET_C = 85.0  # paper §4.1.2: the safe junction-temperature target
HARD_LIMIT_C = 95.0  # paper §4.1.2: the hard limit


def share_above(rows: list[dict], limit_c: float) -> dict:
    """Designs above ``limit_c`` among the evaluated rows (feasible or not), and how they split."""
    done = evaluated_rows(rows)
    above = [r for r in done if r["temperature_c"] > limit_c]
    return {"evaluated": len(done), "above": len(above), "share_above": len(above) / len(done) if done else math.nan}


@runner("thermal_distribution")
def thermal_distribution(ctx: StudyContext) -> None:
    """Temperature distribution over chips × m × n × NoC (each with its best schedule) and the share above 85 °C."""
    chips = require_3d(ctx, [ctx.path(c) for c in ctx.param("chips")])
    nocs = list(ctx.param("nocs", ["tms1"]))
    limit_c = float(ctx.param("limit_c", TARGET_C))
    hard_c = float(ctx.param("hard_limit_c", HARD_LIMIT_C))
    objective = ctx.param("objective", "stps")
    rows = evaluate_all(cells_of(ctx, chips, nocs, stacking_grid(ctx, square=False), (objective,)), workers_of(ctx))
    for r in rows:
        if r["status"] == EVALUATED:
            r["above_limit"] = r["temperature_c"] > limit_c
    ctx.write_csv("points.csv", rows)

    table = []
    for phase, batch in regimes_of(ctx):
        regime = [r for r in rows if r["phase"] == phase and r["batch"] == batch]
        done = evaluated_rows(regime)
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
        ax.set_title(f"{ctx.param('model')} {regime_label(phase, batch)}: {len(done)} designs "
                     f"({share['above']} above {limit_c:g} °C)")
        ax.legend(fontsize=8)
        ctx.save_png(f"temperature_{phase}_b{batch}.png", fig)
    ctx.write_csv("share.csv", table)
    per_chip = []
    for chip in chips:
        done = [r for r in evaluated_rows(rows) if r["chip"] == chip]
        per_chip.append({"chip": chip, "evaluated": len(done), "above_limit": share_above(done, limit_c)["above"],
                         "max_temperature_c": max((r["temperature_c"] for r in done), default=math.nan),
                         "max_power_w_per_device": max((r["power_w_per_device"] for r in done), default=math.nan)})
    ctx.write_summary(
        f"{ctx.param('model')}: chips {', '.join(chips)} × NoCs {', '.join(noc_name(ctx, n) for n in nocs)} "
        "× every (m, n ≤ m) with m in "
        f"{layer_values(ctx, 'm_values', range(1, 11))}, each with its best schedule by {objective}. "
        + status_note(rows) + f" Temperatures are T = T_amb + R(m)·P at the DVFS-chosen clock (§4.1.2); "
        f"'above_limit' counts evaluated designs above {limit_c:g} °C whether or not another limit is violated.\n\n"
        + ctx.key_table(f"Designs and temperatures per regime (limit {limit_c:g} °C, hard limit {hard_c:g} °C)",
                        table, ["phase", "batch", "evaluated", "feasible", "infeasible", "thermal_violations",
                                "above_limit", "share_above_limit", "above_hard_limit", "median_temperature_c",
                                "max_temperature_c"])
        + "\nPer chip, over all regimes and stackings:\n\n"
        + ctx.key_table("Per chip, over all regimes and stackings", per_chip)
    )
