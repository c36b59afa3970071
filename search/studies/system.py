"""Study runners about schedules on a fixed machine."""

from __future__ import annotations

import numpy as np

from deepstack.models.design import DesignPoint
from deepstack.models.parallel.memory import feasible_strategies
from deepstack.schema import build_scenario
from deepstack.search.schedules import evaluate_schedules
from deepstack.search.studies import StudyContext, figure, runner
from deepstack.search.studies.common import point
from deepstack.wording import per_rule


@runner("strategy_histogram")
def strategy_histogram(ctx: StudyContext) -> None:
    """How many strategies reach each STPS level on one hardware point (paper Fig. 3)."""
    sc = build_scenario(ctx.param("model"), ctx.param("phase"), ctx.param("batch"), ctx.param("input_len", 1024),
                        ctx.param("output_len", 1024), origin="study scenario",
                        assumptions=ctx.param("assumptions", "default"))
    chip, noc = ctx.param("chip"), ctx.path(ctx.param("noc"))
    m = ctx.param("stacked_layers", 4)
    n = ctx.param("connected_layers", m)
    base: DesignPoint = point(chip, sc, noc, m, n)
    dev = base.device
    kept, pruned = feasible_strategies(sc, base.devices, dev.dram.capacity_B)
    limit = ctx.param("max_strategies", len(kept))
    strategies = kept[:limit]
    done = ctx.planned(1)  # one batch of schedules on one point
    evaluated = evaluate_schedules(base, [strategy.to_schedule() for strategy in strategies])
    done()
    rows = [{"schedule": strategy.label, "fsdp": strategy.fsdp, "feasible": report.feasible, **report.metrics}
            for strategy, (_, report) in zip(strategies, evaluated, strict=True)]
    ctx.write_csv("points.csv", rows)
    stps = np.array([r["stps"] for r in rows])
    fig, ax = figure()
    ax.hist(stps, bins=min(30, max(5, len(stps) // 3)), color="#4477aa")
    ax.set_xlabel("STPS (tokens/s)")
    ax.set_ylabel("strategies")
    ax.set_title(f"{sc.model.name} {sc.phase} b{sc.batch}: {len(rows)} strategies on {chip}/{base.network.name}")
    ctx.save_png("stps_histogram.png", fig)
    ranked = sorted(rows, key=lambda r: -r["stps"])
    best = ranked[0]["stps"] if ranked else 0.0
    within = sum(1 for r in rows if r["stps"] >= 0.9 * best)
    ctx.write_summary(
        f"{len(rows)} feasible strategies of {base.devices} devices (pruned by rule: {per_rule(pruned) or 'none'}). "
        "The best reaches "
        f"{best:,.0f} tokens/s; {within} ({within / max(len(rows), 1):.1%}) come within 10 % of it, and the median "
        f"reaches {np.median(stps) / best:.1%} of it — high-throughput schedules are rare, so the schedule must "
        "be searched together with the hardware.\n\n"
        + ctx.key_table("The 10 strategies with the highest STPS", ranked[:10],
                        ["schedule", "stps", "utps", "tokens_per_joule", "feasible"])
    )
