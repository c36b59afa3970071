"""A sweep's files: ``points.csv`` (every evaluation), ``pareto.csv``/``pareto.json`` (the non-dominated
feasible points, one row per objective vector) and ``summary.json``, and reading a finished sweep folder back (for
``compare``)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from deepstack.errors import UserInputError
from deepstack.jsonutil import finite
from deepstack.schema import DesignSpace, Scenario
from deepstack.search.front_design import enrich, named_nocs
from deepstack.search.objectives import OBJECTIVES
from deepstack.search.studies.provenance import code_digest
from deepstack.search.study_front import one_per_objective_vector
from deepstack.search.sweep.chunks import rows_of
from deepstack.search.sweep.points import HARDWARE_COLUMNS, METRIC_COLUMNS
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


def write(result, chunk_files: list[Path], scenario: Scenario, space: DesignSpace) -> None:
    """Write a finished sweep's files into ``result.out`` (a :class:`~deepstack.search.sweep.SweepResult`);
    points.csv from the rows of ``chunk_files`` (in order), read one file at a time."""
    out = Path(result.out)
    out.mkdir(parents=True, exist_ok=True)
    # ttft_s is computed only when an objective needs it (a decode sweep would otherwise time a prefill per
    # schedule): without it the column is left out rather than filled with NaN
    metrics = [c for c in METRIC_COLUMNS if c != "ttft_s" or getattr(result, "with_ttft", True)]
    columns = [*HARDWARE_COLUMNS, "schedule", "fsdp", "feasible", *metrics]
    # each front row with its id and the command that reproduces it (evaluate --design ID --front pareto.csv), its
    # NoC by name, and one row per objective vector (the designs that reach it too under "equivalent"), as an
    # optimize front's rows
    sram_options = {o.name: o.model_dump(mode="json") for o in space.hardware.sram}
    front, noc_definitions = named_nocs(enrich(result.pareto, scenario, sram_options, str(out / "pareto.csv")))
    result.pareto[:] = one_per_objective_vector(front, result.objectives)
    every_row = (row for path in chunk_files for row in rows_of(path))
    for name, data in (("points.csv", every_row), ("pareto.csv", result.pareto)):
        names = columns + ([o for o in result.objectives if o not in columns] if name == "pareto.csv" else [])
        if name == "pareto.csv":
            names = ["id", *names, "pes_per_device", "command",
                     *(["equivalent"] if any(r.get("equivalent") for r in result.pareto) else [])]
        with open(out / name, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(names)
            writer.writerows(_csv_cells(data, names))
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
