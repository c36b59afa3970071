"""Study runner: junction temperatures and power densities over a space of 3D designs, in one or more cooling
environments, and what the thermal limit does to them (paper §4.1.2): which designs DVFS slows (the thermal
clock, the power wall, the thermal wall) and which the limit removes (above it at any clock)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from deepstack import catalog
from deepstack.accuracy.paper import FAILS, HOLDS
from deepstack.errors import UserInputError
from deepstack.models import assumptions, dvfs
from deepstack.models.assumptions import PAPER_AMBIENT_C
from deepstack.models.design import DesignPoint
from deepstack.models.results import Report
from deepstack.schema import build_scenario
from deepstack.search import executor
from deepstack.search.studies import StudyContext, common, figure, runner
from deepstack.search.studies.cells import (
    EVALUATED,
    NO_PE,
    NO_SCHEDULE,
    Cell,
    area_columns,
    best_report,
    cells_of,
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

HARD_LIMIT_C = 95.0  # paper §4.1.2: the hard limit (counted, not enforced)
THROTTLED = (dvfs.THERMAL_CLOCK, dvfs.POWER_WALL, dvfs.THERMAL_WALL)
DESIGN_KEYS = ("dvfs", "chip", "noc", "phase", "batch", "stacked_layers", "connected_layers")  # one design, any ambient
POLICIES = (dvfs.STATIC, dvfs.BOOST)


def share_above(rows: list[dict], limit_c: float) -> dict:
    """Designs above ``limit_c`` among the evaluated rows (feasible or not), and how they split."""
    done = evaluated_rows(rows)
    above = [r for r in done if r["temperature_c"] > limit_c]
    return {"evaluated": len(done), "above": len(above), "share_above": len(above) / len(done) if done else math.nan}


@dataclass(frozen=True)
class ThermalCell:
    """One hardware point × regime, evaluated in every cooling environment in one process (the environments
    share its timed phases)."""

    cell: Cell
    ambients_c: tuple[float, ...]
    max_temp_c: float | None  # None: each chip's limit
    policies: tuple[str, ...] = (dvfs.STATIC,)  # DVFS clock policies (schema Thermal.dvfs)


def evaluate_thermal_cell(task: ThermalCell) -> list[dict]:
    """One row per DVFS policy and ambient: the best schedule's report flattened, with what set its clock."""
    c = task.cell
    workload = build_scenario(c.model, c.phase, c.batch, c.input_len, c.output_len, c.precision,
                              origin="study scenario", assumptions=c.assumptions)
    chip_ambient_c = catalog.load("chips", c.chip).thermal.ambient_c
    rows = []
    for policy, ambient in ((p, a) for p in task.policies for a in task.ambients_c):
        named = assumptions.coolant_to_name(workload, chip_ambient_c, ambient)
        cooled = workload.with_cooling(named, task.max_temp_c)
        design = with_policy(common.point(c.chip, cooled, c.noc, c.stacked_layers, c.connected_layers), policy)
        base = {"dvfs": policy, "ambient_c": ambient, "chip": c.chip,
                "noc": design.network.name if design.network else "", "phase": c.phase, "batch": c.batch,
                "stacked_layers": c.stacked_layers,
                "connected_layers": c.connected_layers, "objective": c.objectives[0]}
        try:
            dev = design.device
        except UserInputError:
            rows.append({**base, "status": NO_PE, "pes_per_device": 0})
            continue
        report = best_report(design, c.objectives[0])
        if report is None:
            rows.append({**base, "status": NO_SCHEDULE, "pes_per_device": dev.pes,
                         **area_columns(dev.area.as_dict())})
            continue
        rows.append(_row(report, dev, base))
    return rows


def with_policy(design: DesignPoint, policy: str) -> DesignPoint:
    """``design`` with its chip's DVFS clock policy set to ``policy``."""
    thermal = design.chip.thermal
    if thermal.dvfs == policy:
        return design
    chip = design.chip.model_copy(update={"thermal": thermal.model_copy(update={"dvfs": policy})})
    return dataclasses.replace(design, chip=chip)


def policies_of(ctx: StudyContext) -> list[str]:
    """The recipe's ``dvfs`` policies (default: the paper's static rule alone)."""
    values = ctx.params.get("dvfs", [dvfs.STATIC])
    if not isinstance(values, list) or not values or any(v not in POLICIES for v in values):
        raise UserInputError(f"study {ctx.recipe.name}: parameters.dvfs: must be a non-empty list of "
                             f"{' / '.join(POLICIES)} (got {values!r})")
    return list(dict.fromkeys(values))


def _row(report: Report, dev, base: dict) -> dict:
    out = common.row(report, **base, status=EVALUATED)
    out.update(area_columns(report.hardware["area_per_device_mm2"]))
    m, b = report.metrics, report.breakdown
    out["max_temp_c"] = report.hardware["max_temp_c"]
    out["power_w_per_device"] = b["power_w_per_device"]
    out["clock_share"] = m["frequency_ghz"] / report.hardware["nominal_clock_ghz"]
    out["clock_limit"] = dvfs.clock_limit(dev, b["clock_scale"], b["power_w_per_device"], m["temperature_c"])
    out["above_limit"] = out["clock_limit"] == dvfs.ABOVE_LIMIT
    out["thermal_violation"] = any(v.startswith("thermal") for v in report.violations)
    return out


def ambients_of(ctx: StudyContext, chips: list[str], max_temp_c: float | None) -> list[float]:
    """The recipe's ``ambients_c`` (default: the chips' own), each below every chip's limit."""
    values = ctx.params.get("ambients_c", [catalog.load("chips", chips[0]).thermal.ambient_c])
    try:
        ambients = [float(v) for v in values]
    except (TypeError, ValueError):
        ambients = []
    for chip in chips:
        limit = catalog.load("chips", chip).thermal.target_c if max_temp_c is None else max_temp_c
        if not ambients or any(not (math.isfinite(a) and -50 <= a < limit) for a in ambients):
            raise UserInputError(f"study {ctx.recipe.name}: parameters.ambients_c: must be a non-empty list of "
                                 f"temperatures in -50..{limit:g} °C, below the limit of {chip} (got {values})")
    return sorted(set(ambients))


def _median(values: list[float]) -> float:
    return float(np.median(values)) if values else math.nan


def add_stps_ratios(rows: list[dict], coolest: float) -> None:
    """Give each evaluated row its STPS over the same design's (same DVFS policy) at the coolest ambient
    (``stps_vs_coolest``)."""
    base = {tuple(r[k] for k in DESIGN_KEYS): r["stps"] for r in evaluated_rows(rows) if r["ambient_c"] == coolest}
    for r in evaluated_rows(rows):
        reference = base.get(tuple(r[k] for k in DESIGN_KEYS))
        r["stps_vs_coolest"] = r["stps"] / reference if reference else math.nan


def regime_row(regime: list[dict], policy: str, ambient: float, phase: str, batch: int, hard_c: float) -> dict:
    """One DVFS policy × ambient × regime: designs, what set their clocks, temperatures and power densities."""
    done = evaluated_rows(regime)
    temps = [r["temperature_c"] for r in done]
    limits = {r["max_temp_c"] for r in done}
    limit = limits.pop() if len(limits) == 1 else math.nan
    clock = {kind: sum(1 for r in done if r["clock_limit"] == kind) for kind in
             (dvfs.NOMINAL, *THROTTLED, dvfs.ABOVE_LIMIT)}
    return {
        "dvfs": policy, "ambient_c": ambient, "max_temp_c": limit, "phase": phase, "batch": batch,
        "designs": len(regime),
        "evaluated": len(done), "no_schedule": sum(1 for r in regime if r["status"] == NO_SCHEDULE),
        "no_pe": sum(1 for r in regime if r["status"] == NO_PE),
        "feasible": sum(1 for r in done if r["feasible"]), "infeasible": sum(1 for r in done if not r["feasible"]),
        "thermal_violations": sum(1 for r in done if r["thermal_violation"]),
        "nominal": clock[dvfs.NOMINAL], "thermal_clock": clock[dvfs.THERMAL_CLOCK],
        "power_wall": clock[dvfs.POWER_WALL], "thermal_wall": clock[dvfs.THERMAL_WALL],
        "throttled": sum(clock[kind] for kind in THROTTLED),
        "above_limit": clock[dvfs.ABOVE_LIMIT],
        "share_above_limit": clock[dvfs.ABOVE_LIMIT] / len(done) if done else math.nan,
        "above_hard_limit": sum(1 for t in temps if t > hard_c),
        "min_temperature_c": min(temps, default=math.nan), "median_temperature_c": _median(temps),
        "max_temperature_c": max(temps, default=math.nan),
        "median_power_density_W_per_mm2": _median([r["power_density_W_per_mm2"] for r in done]),
        "max_power_density_W_per_mm2": max((r["power_density_W_per_mm2"] for r in done), default=math.nan),
        "median_clock_share": _median([r["clock_share"] for r in done]),
        "median_stps_vs_coolest": _median([r["stps_vs_coolest"] for r in done if not math.isnan(r["stps_vs_coolest"])]),
    }


def ambient_row(table: list[dict], policy: str, ambient: float) -> dict:
    """One DVFS policy and ambient over every regime: what the limit does, and the hottest regime (highest median
    temperature, then highest maximum)."""
    rows = [t for t in table if t["dvfs"] == policy and t["ambient_c"] == ambient and t["evaluated"]]
    hottest = max(rows, key=lambda t: (t["median_temperature_c"], t["max_temperature_c"]), default=None)
    total = {key: sum(t[key] for t in rows) for key in ("evaluated", "nominal", "thermal_clock", "power_wall",
                                                         "thermal_wall", "throttled", "above_limit")}
    return {"dvfs": policy, "ambient_c": ambient, **total,
            "hottest_regime": regime_label(hottest["phase"], hottest["batch"]) if hottest else "",
            "hottest_median_temperature_c": hottest["median_temperature_c"] if hottest else math.nan,
            "hottest_max_temperature_c": hottest["max_temperature_c"] if hottest else math.nan,
            "max_power_density_W_per_mm2": max((t["max_power_density_W_per_mm2"] for t in rows), default=math.nan)}


def _histogram(ctx: StudyContext, regime: list[dict], policies: list[str], ambients: list[float], phase: str,
               batch: int, hard_c: float) -> None:
    fig, ax = figure()
    done = evaluated_rows(regime)
    for policy, ambient in ((p, a) for p in policies for a in ambients):
        temps = [r["temperature_c"] for r in done if r["dvfs"] == policy and r["ambient_c"] == ambient]
        name = f"{policy}, " if len(policies) > 1 else ""
        if temps:
            ax.hist(temps, bins=30, histtype="step", lw=1.5, ls="-" if policy == policies[0] else "--",
                    label=f"{name}{ambient:g} °C ambient ({len(temps)})")
    for limit in sorted({r["max_temp_c"] for r in done}):
        ax.axvline(limit, color="k", ls="--", lw=1, label=f"{limit:g} °C limit")
    ax.axvline(hard_c, color="r", ls=":", lw=1, label=f"{hard_c:g} °C hard limit")
    ax.set_xlabel("junction temperature (°C)")
    ax.set_ylabel("designs")
    removed = sum(1 for r in done if r["above_limit"])
    ax.set_title(f"{ctx.param('model')} {regime_label(phase, batch)}: {removed} of {len(done)} above the limit")
    ax.legend(fontsize=8)
    ctx.save_png(f"temperature_{phase}_b{batch}.png", fig)


@runner("thermal_distribution")
def thermal_distribution(ctx: StudyContext) -> None:
    """Temperatures over chips × m × n × NoC (each with its best schedule) at each ambient, and what the limit
    removes (above it) or slows (DVFS)."""
    chips = require_3d(ctx, [ctx.path(c) for c in ctx.param("chips")])
    nocs = list(ctx.param("nocs", ["tms1"]))
    max_temp_c = ctx.params.get("max_temp_c")
    max_temp_c = None if max_temp_c is None else float(max_temp_c)
    ambients = ambients_of(ctx, chips, max_temp_c)
    policies = policies_of(ctx)
    hard_c = float(ctx.param("hard_limit_c", HARD_LIMIT_C))
    objective = ctx.param("objective", "stps")
    tasks = [ThermalCell(cell, tuple(ambients), max_temp_c, tuple(policies))
             for cell in cells_of(ctx, chips, nocs, stacking_grid(ctx, square=False), (objective,))]
    rows = [row for rows in executor.map_in_order(evaluate_thermal_cell, tasks, workers_of(ctx),
                                                  ctx.planned(len(tasks))) for row in rows]
    rows.sort(key=lambda r: (policies.index(r["dvfs"]), r["ambient_c"]))  # stable: the cells' order within
    add_stps_ratios(rows, ambients[0])
    ctx.write_csv("points.csv", rows)

    table = []
    for phase, batch in regimes_of(ctx):
        regime = [r for r in rows if r["phase"] == phase and r["batch"] == batch]
        table += [regime_row([r for r in regime if r["dvfs"] == p and r["ambient_c"] == a], p, a, phase, batch,
                             hard_c) for p in policies for a in ambients]
        _histogram(ctx, regime, policies, ambients, phase, batch, hard_c)
    table.sort(key=lambda t: (policies.index(t["dvfs"]), t["ambient_c"]))
    ctx.write_csv("share.csv", table)
    per_ambient = [ambient_row(table, p, a) for p in policies for a in ambients]
    limit = f"{max_temp_c:g} °C" if max_temp_c is not None else "each chip's (85 °C for the Table 2 chips)"
    ctx.write_summary(
        f"{ctx.param('model')}: chips {', '.join(chips)} × NoCs {', '.join(noc_name(ctx, n) for n in nocs)} "
        f"× every (m, n ≤ m) with m in {layer_values(ctx, 'm_values', range(1, 11))}, each with its best "
        f"schedule by {objective}, at ambients {', '.join(f'{a:g}' for a in ambients)} °C; limit {limit}. "
        + status_note(rows) + " T = T_amb + R(m)·P at the clock DVFS chose (§4.1.2). Under the paper's "
        "`static` policy DVFS first applies the thermal clock f_th (the clock at which a device drawing its TDP "
        "sits at the limit), then holds the device's power within its TDP (power wall) or what the package "
        "removes at the limit (thermal wall); under `boost` (as GPU Boost does) the clock starts at nominal and "
        "only those walls lower it. A design above the limit could not get below it at any clock and is "
        f"removed (infeasible). Policies: {', '.join(policies)}.\n\n"
        + _verdict(per_ambient) + "\n\n"
        + ctx.key_table("What the thermal limit does, per ambient (designs over all regimes)", per_ambient,
                        ["dvfs", "ambient_c", "evaluated", "above_limit", "throttled", "thermal_clock", "power_wall",
                         "thermal_wall", "nominal", "hottest_regime", "hottest_median_temperature_c",
                         "hottest_max_temperature_c", "max_power_density_W_per_mm2"])
        + "\nPer ambient and regime:\n\n"
        + ctx.key_table(f"Designs and temperatures per ambient and regime (hard limit {hard_c:g} °C)", table,
                        ["dvfs", "ambient_c", "phase", "batch", "evaluated", "above_limit", "throttled", "power_wall",
                         "thermal_wall", "above_hard_limit", "median_temperature_c", "max_temperature_c",
                         "max_power_density_W_per_mm2", "median_clock_share", "median_stps_vs_coolest"])
        + "\nPer chip at the coolest ambient, over all regimes and stackings:\n\n"
        + ctx.key_table("Per chip at the coolest ambient", _per_chip(rows, chips, policies[0], ambients[0]))
        + _findings(ctx, rows, table, chips)
    )


# R18: every thermally feasible design found runs below ≈ 0.8 W/mm² ("≈": within the Table 4 tolerance, 10 %)
R18_DENSITY_W_PER_MM2, R18_TOLERANCE = 0.8, 0.10


def _findings(ctx: StudyContext, rows: list[dict], table: list[dict], chips: list[str]) -> str:
    """R17 and R18 (paper §5.5) at the run's assumption set's own coolant (35 °C for ``paper``, the chips' own
    otherwise) under the paper's static DVFS rule; nothing when the run has not evaluated that ambient. R18 holds
    only where the thermal limit is what bounds the densities (some design above it): a run whose designs all
    stay cool says nothing about where the limit lies."""
    paper_set = ctx.param("assumptions", "default") == "paper"
    ambient = PAPER_AMBIENT_C if paper_set else catalog.load("chips", chips[0]).thermal.ambient_c
    regimes = [t for t in table if t["dvfs"] == dvfs.STATIC and t["ambient_c"] == ambient and t["evaluated"]]
    if not regimes:
        return ""
    hottest = max(regimes, key=lambda t: (t["median_temperature_c"], t["max_temperature_c"]))
    above = sum(t["above_limit"] for t in regimes)
    feasible = [r for r in evaluated_rows(rows) if r["dvfs"] == dvfs.STATIC and r["ambient_c"] == ambient
                and not r["above_limit"]]
    densest = max((r["power_density_W_per_mm2"] for r in feasible), default=math.nan)
    r17 = (hottest["phase"], hottest["batch"]) == ("decode", max(t["batch"] for t in regimes)) and above > 0
    r18 = above > 0 and densest <= R18_DENSITY_W_PER_MM2 * (1 + R18_TOLERANCE)
    at = f"at {ambient:g} °C, static DVFS"
    found = [{"finding": "R17", "what": f"the hottest regime; designs above the limit ({at})",
              "paper": "large-batch decode; many above 85 °C",
              "ours": f"{regime_label(hottest['phase'], hottest['batch'])} (median "
                      f"{hottest['median_temperature_c']:.1f} °C); {above} of {sum(t['evaluated'] for t in regimes)} "
                      "above the limit", "verdict": HOLDS if r17 else FAILS},
             {"finding": "R18", "what": f"the densest thermally feasible design ({at})", "paper": "≈ 0.8 W/mm²",
              "ours": f"{densest:.2f} W/mm² ({above} designs above the limit)", "verdict": HOLDS if r18 else FAILS}]
    return "\n\n" + common.findings_table(ctx, found)


def _verdict(per_ambient: list[dict]) -> str:
    """One sentence per DVFS policy and ambient: the hottest regime and what the limit removes and slows."""
    return " ".join(
        f"{a['dvfs'].capitalize()} DVFS at {a['ambient_c']:g} °C: the hottest regime is {a['hottest_regime']} "
        f"(median {a['hottest_median_temperature_c']:.1f} °C, max {a['hottest_max_temperature_c']:.1f} °C); the limit "
        f"removes {a['above_limit']} of {a['evaluated']} designs and slows {a['throttled']} (thermal clock "
        f"{a['thermal_clock']}, power wall {a['power_wall']}, thermal wall {a['thermal_wall']})."
        for a in per_ambient if a["evaluated"])


def _per_chip(rows: list[dict], chips: list[str], policy: str, ambient: float) -> list[dict]:
    out = []
    for chip in chips:
        done = [r for r in evaluated_rows(rows)
                if r["chip"] == chip and r["dvfs"] == policy and r["ambient_c"] == ambient]
        out.append({"chip": chip, "evaluated": len(done), "above_limit": sum(1 for r in done if r["above_limit"]),
                    "throttled": sum(1 for r in done if r["clock_limit"] in THROTTLED),
                    "max_temperature_c": max((r["temperature_c"] for r in done), default=math.nan),
                    "max_power_w_per_device": max((r["power_w_per_device"] for r in done), default=math.nan),
                    "max_power_density_W_per_mm2": max((r["power_density_W_per_mm2"] for r in done),
                                                       default=math.nan)})
    return out
