"""The hardware study runners' unit of work (paper §5.5, §4.1.2): one hardware point × one regime, evaluated
with its best schedule per objective, and the recipe parameters that list them.

Every runner reports what the model computes; nothing here is tuned. Hardware points that the model cannot build
(no PE fits the area budget) or serve (no schedule fits memory) are kept in the CSV with their ``status``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.models.design import DesignPoint
from deepstack.models.results import Report
from deepstack.schema import build_scenario
from deepstack.schema.hardware import MAX_STACKED_LAYERS
from deepstack.search import executor
from deepstack.search.studies import StudyContext, common

AREA_PARTS = ("pes_mm2", "l2_mm2", "dram_interface_mm2", "noc_mm2", "overhead_mm2")  # AreaBreakdown, summed
EVALUATED, NO_PE, NO_SCHEDULE = "evaluated", "no PE fits", "no schedule fits"
MAX_WORKERS = 256


def layer_values(ctx: StudyContext, key: str, default: Sequence[int]) -> list[int]:
    values = [int(v) for v in ctx.params.get(key, default)]
    if not values or any(not 1 <= v <= MAX_STACKED_LAYERS for v in values):
        raise UserInputError(f"study {ctx.recipe.name}: parameters.{key}: must be a non-empty list of layer "
                             f"counts in 1..{MAX_STACKED_LAYERS} (got {values})")
    return sorted(set(values))


def stacking_grid(ctx: StudyContext, square: bool) -> list[tuple[int, int]]:
    """(m, n) pairs: m = n when ``square``, else every n ≤ m (restricted to ``n_values`` when given)."""
    ms = layer_values(ctx, "m_values", range(1, 11))
    if square:
        return [(m, m) for m in ms]
    ns = layer_values(ctx, "n_values", range(1, max(ms) + 1))
    return [(m, n) for m in ms for n in ns if n <= m]


def regimes_of(ctx: StudyContext) -> list[tuple[str, int]]:
    phases = list(ctx.param("phases", list(common.PHASES)))
    batches = [int(b) for b in ctx.param("batches", [4, 1024])]
    bad = [p for p in phases if p not in common.PHASES]
    if bad or not phases or not batches or any(b < 1 for b in batches):
        raise UserInputError(f"study {ctx.recipe.name}: parameters.phases must be from {', '.join(common.PHASES)} "
                             f"and parameters.batches positive integers (got {phases}, {batches})")
    return [(phase, batch) for phase in phases for batch in batches]


def workers_of(ctx: StudyContext) -> int:
    workers = int(ctx.param("workers", 1))
    if not 1 <= workers <= MAX_WORKERS:
        raise UserInputError(f"study {ctx.recipe.name}: parameters.workers: must be in 1..{MAX_WORKERS} "
                             f"(got {workers})")
    return workers


def noc_name(ctx: StudyContext, noc: str) -> str:
    return catalog.load("nocs", ctx.path(noc)).name


def require_3d(ctx: StudyContext, chips: Sequence[str]) -> list[str]:
    flat = [c for c in chips if not catalog.load("chips", c).is_3d]
    if flat:
        raise UserInputError(f"study {ctx.recipe.name}: parameters.chip(s): must be 3D-stacked chips; "
                             f"{', '.join(flat)} use HBM beside the die (no m, n)")
    return list(chips)


def regime_label(phase: str, batch: int) -> str:
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
    assumptions: str = "default"


def cells_of(ctx: StudyContext, chips: Sequence[str], nocs: Sequence[str], stackings: Sequence[tuple[int, int]],
           objectives: tuple[str, ...]) -> list[Cell]:
    model = ctx.param("model")
    lengths = int(ctx.param("input_len", 1024)), int(ctx.param("output_len", 1024))
    precision = ctx.params.get("precision")
    return [Cell(chip, ctx.path(noc), model, phase, batch, *lengths, precision, m, n, objectives,
                 ctx.param("assumptions", "default"))
            for phase, batch in regimes_of(ctx) for chip in chips for noc in nocs for m, n in stackings]


def best_report(design: DesignPoint, objective: str) -> Report | None:
    """``common.best``, bypassing its cache when the design point cannot be hashed (a Schedule carries a dict)."""
    try:
        hash(design)
    except TypeError:
        return common.best.__wrapped__(design, objective)
    return common.best(design, objective)


def area_columns(area: dict) -> dict:
    out = {f"area_{part}": area[part] for part in AREA_PARTS}
    out["area_total_mm2"] = area["total_mm2"]
    return out


def evaluate_cell(cell: Cell) -> list[dict]:
    """One CSV row per objective: the best schedule's report flattened, with area and power density."""
    sc = build_scenario(cell.model, cell.phase, cell.batch, cell.input_len, cell.output_len, cell.precision,
                        origin="study scenario", assumptions=cell.assumptions)
    design = common.point(cell.chip, sc, cell.noc, cell.stacked_layers, cell.connected_layers)
    base = {"chip": cell.chip, "noc": design.network.name if design.network else "", "phase": cell.phase,
            "batch": cell.batch, "stacked_layers": cell.stacked_layers, "connected_layers": cell.connected_layers}
    try:
        dev = design.device
    except UserInputError:
        return [{**base, "objective": objective, "status": NO_PE, "pes_per_device": 0}
                for objective in cell.objectives]
    rows = []
    for objective in cell.objectives:
        report = best_report(design, objective)
        if report is None:
            rows.append({**base, "objective": objective, "status": NO_SCHEDULE, "pes_per_device": dev.pes,
                         **area_columns(dev.area.as_dict())})
            continue
        out = common.row(report, **base, objective=objective, status=EVALUATED)
        out.update(area_columns(report.hardware["area_per_device_mm2"]))
        out["power_w_per_device"] = report.breakdown["power_w_per_device"]
        out["w_per_mm2"] = report.metrics["power_w"] / report.metrics["area_mm2"]
        out["thermal_violation"] = any(v.startswith("thermal") for v in report.violations)
        rows.append(out)
    return rows


def evaluate_all(cells: list[Cell], workers: int, done=None) -> list[dict]:
    """Every cell's rows, in order (on forked processes when ``workers`` > 1); ``done()`` after each cell
    (StudyContext.planned)."""
    return [row for rows in executor.map_in_order(evaluate_cell, cells, workers, done) for row in rows]


def evaluate_stacking_grid(ctx: StudyContext, square: bool, objectives: tuple[str, ...]
                           ) -> tuple[str, str, list[tuple[int, int]], list[dict]]:
    """One 3D chip and one NoC (parameters ``chip``, ``noc``) over the recipe's stacking grid (:func:`stacking_grid`),
    every cell × regime with its best schedule per objective, evaluated on ``workers`` processes and written to
    points.csv; returns the chip, the NoC, the grid's (m, n) pairs and the rows."""
    chip, noc = ctx.path(ctx.param("chip", "standard")), ctx.param("noc", "tms1")
    stackings = stacking_grid(ctx, square=square)
    cells = cells_of(ctx, require_3d(ctx, [chip]), [noc], stackings, objectives)
    rows = evaluate_all(cells, workers_of(ctx), ctx.planned(len(cells)))
    ctx.write_csv("points.csv", rows)
    return chip, noc, stackings, rows


def evaluated_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["status"] == EVALUATED]


def status_note(rows: list[dict]) -> str:
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in (EVALUATED, NO_SCHEDULE, NO_PE)}
    return (f"{len(rows)} rows: {counts[EVALUATED]} evaluated, {counts[NO_SCHEDULE]} where no schedule fits "
            f"(memory, L1), {counts[NO_PE]} where no PE fits the area budget.")

