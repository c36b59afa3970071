"""A sweep's files: ``points.csv`` (every evaluation), ``pareto.csv``/``pareto.json`` (the non-dominated
feasible points, one row per objective vector) and ``summary.json``, and reading a finished sweep folder back (for
``compare``)."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from deepstack.errors import UserInputError
from deepstack.jsonutil import finite
from deepstack.schema import DesignSpace, Scenario
from deepstack.search.front_design import enrich, named_nocs
from deepstack.search.objectives import OBJECTIVES
from deepstack.search.studies.provenance import code_digest
from deepstack.search.study_front import one_per_objective_vector
from deepstack.search.sweep.points import HARDWARE_COLUMNS, points_columns
from deepstack.search.sweep.survivors import nondominated

__all__ = ["HARDWARE_COLUMNS", "front", "read_sweep", "sweep_points", "write"]


def front(rows: list[dict], objectives: list[str]) -> list[dict]:
    """The feasible rows no other feasible row dominates, best first by the first objective."""
    kept = [{**{o: r[OBJECTIVES[o][0]] for o in objectives}, **{k: v for k, v in r.items() if k != "_score"}}
            for r in nondominated([r for r in rows if r["feasible"]], objectives)]
    return sorted(kept, key=lambda r: r[objectives[0]], reverse=OBJECTIVES[objectives[0]][1])


def _csv_cells(rows: Iterable[dict], names: list[str]):
    """Each row's cells in column order: lists as JSON (encoded once per distinct list), missing keys empty."""
    encoded: dict[tuple, str] = {}
    for row in rows:
        cells = []
        for name in names:
            value = row.get(name, "")
            if name == "equivalent" and value:  # a list of tables (the designs of the same objectives)
                value = json.dumps(value)
            elif isinstance(value, (list, tuple)):
                key = tuple(value)
                if key not in encoded:
                    encoded[key] = json.dumps(list(value))
                value = encoded[key]
            cells.append(value)
        yield cells


def csv_text(rows: Iterable[dict], names: list[str]) -> str:
    """``rows`` as lines of a CSV file with the columns ``names`` (no header)."""
    text = io.StringIO(newline="")
    csv.writer(text).writerows(_csv_cells(rows, names))
    return text.getvalue()


def write(result, points: Path, scenario: Scenario, space: DesignSpace) -> None:
    """Write a finished sweep's files into ``result.out`` (a :class:`~deepstack.search.sweep.SweepResult`);
    points.csv is the file ``points`` the sweep wrote chunk by chunk (:class:`~.chunks.PointsFile`), moved into
    place."""
    out = Path(result.out)
    out.mkdir(parents=True, exist_ok=True)
    columns = points_columns(getattr(result, "with_ttft", True))
    # each front row with its id and the command that reproduces it (evaluate --design ID --front pareto.csv), its
    # NoC by name, and one row per objective vector (the designs that reach it too under "equivalent"), as an
    # optimize front's rows
    sram_options = {o.name: o.model_dump(mode="json") for o in space.hardware.sram}
    front, noc_definitions = named_nocs(enrich(result.pareto, scenario, sram_options, str(out / "pareto.csv")))
    result.pareto[:] = one_per_objective_vector(front, result.objectives)
    os.replace(points, out / "points.csv")
    names = ["id", *columns, *(o for o in result.objectives if o not in columns), "pes_per_device", "command",
             *(["equivalent"] if any(r.get("equivalent") for r in result.pareto) else [])]
    with open(out / "pareto.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(names)
        writer.writerows(_csv_cells(result.pareto, names))
    summary = {"mode": result.mode, "evaluations": result.evaluations, "hardware_points": result.hardware_points,
               "wall_s": result.wall_s, "run_s": result.run_s, "objectives": result.objectives,
               "tiers": result.tiers, "code": code_digest(),
               "space": space.name, "scenario": json.loads(scenario.model_dump_json(exclude={"model"})) | {
                   "model": scenario.model.name}}
    read_back = getattr(result, "read_back", 0)
    summary |= {"evaluated_now": result.evaluations - read_back, "read_back": read_back,
                "space_definition": space.model_dump(mode="json"), "chunks": getattr(result, "timeline", None)}
    if not getattr(result, "with_ttft", True):
        summary["not_computed"] = {"ttft_s": "no ttft objective: add ttft to --objective to time each prefill"}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    front_data = {"objectives": result.objectives, "scenario": scenario.model_dump(mode="json"),
                  "sram_options": sram_options, "nocs": noc_definitions, "pareto": result.pareto}
    (out / "pareto.json").write_text(json.dumps(finite(front_data), indent=2, default=str, allow_nan=False))


def read_sweep(folder: str) -> dict:
    """summary.json of a finished sweep folder (for ``compare``), refused (one line) when the folder is not one."""
    path = Path(folder)
    try:
        summary = json.loads((path / "summary.json").read_text())
        with open(path / "points.csv", newline="") as fh:
            fh.readline()
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8 or not JSON
        raise UserInputError(f"--sweep: {folder} is not a finished sweep folder ({exc.__class__.__name__})") from None
    return summary


def sweep_points(folder: str) -> Iterator[dict]:
    """The rows of a finished sweep's points.csv (cells as text), one at a time: a sweep of millions of
    evaluations is read without holding them."""
    try:
        with open(Path(folder) / "points.csv", newline="") as fh:
            yield from csv.DictReader(fh)
    except (OSError, ValueError) as exc:
        raise UserInputError(f"--sweep: {folder}/points.csv cannot be read ({exc.__class__.__name__})") from None
