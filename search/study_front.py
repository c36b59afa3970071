"""The Pareto front of an Optuna study (see :mod:`deepstack.search.optimize`): its thermally feasible,
non-dominated trials, and the files written for them (CSV, JSON, a self-contained HTML plot). It reads the study
through its methods only, so Optuna stays imported by :mod:`~deepstack.search.optimize` alone."""

from __future__ import annotations

import contextlib
import csv
import io
import json
from pathlib import Path

import numpy as np

from deepstack.errors import UserInputError
from deepstack.jsonutil import finite
from deepstack.schema import Scenario
from deepstack.search import pareto
from deepstack.search.files import save_figure, write_text_atomically
from deepstack.search.front_design import UNITS, enrich, header, named_nocs
from deepstack.search.objectives import OBJECTIVES
from deepstack.search.space import load_space


def completed_trials(study) -> list:
    """The study's completed trials (``TrialState.COMPLETE``), in trial order."""
    return [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]


def pareto_front(study, objectives: list[str]) -> list[dict]:
    """Thermally feasible, completed trials that no other dominates (each with its design and metrics)."""
    rows = []
    for t in completed_trials(study):
        if any(c > 0 for c in (t.constraints or {}).values()) or t.values is None:
            continue
        rows.append(t)
    if not rows:
        return []
    values = np.array([t.values for t in rows], dtype=float)
    mask = pareto.nondominated_mask(values, objectives)
    front = []
    seen = set()
    for t, keep in zip(rows, mask, strict=True):
        design = t.user_attrs.get("design", {})
        key = json.dumps(design, sort_keys=True)
        if not keep or key in seen:
            continue
        seen.add(key)
        front.append({**{o: v for o, v in zip(objectives, t.values, strict=True)}, "trial": t.number, **design})
    return sorted(front, key=lambda r: r[objectives[0]], reverse=OBJECTIVES[objectives[0]][1])


SAME_DESIGN = ("id", "command", "trial", "equivalent")  # what an equivalent design's entry never repeats


def one_per_objective_vector(rows: list[dict], objectives: list[str]) -> list[dict]:
    """One front row per objective vector: designs that reach exactly the same objectives (e.g. differing only
    in a link level their schedule never uses) are listed under the first one's ``equivalent``, each as its id,
    trial (a study's) and the fields where it differs from that row (``evaluate --design`` takes their ids too)."""
    out: list[dict] = []
    first: dict[tuple, dict] = {}
    for row in rows:
        key = tuple(row[o] for o in objectives)
        if key not in first:
            first[key] = row
            out.append(row)
            continue
        shown = first[key]
        differs = {k: v for k, v in row.items() if k not in SAME_DESIGN and shown.get(k) != v}
        trial = {"trial": row["trial"]} if "trial" in row else {}  # a sweep's rows come from no trial
        shown.setdefault("equivalent", []).append({"id": row.get("id"), **trial, **differs})
    return out


def _context(study, space) -> tuple[Scenario | None, dict]:
    """The study's scenario and its space's SRAM options (to rebuild a row's design point), when known."""
    problem = study.user_attrs.get("problem") or {}
    try:
        scenario = Scenario.model_validate(problem["scenario"]) if "scenario" in problem else None
    except ValueError:
        scenario = None
    if space is None and problem.get("space"):
        try:
            space = load_space(problem["space"])
        except UserInputError:  # a space file known by its name only: rows on its base SRAM still rebuild
            space = None
    options = {o.name: o.model_dump(mode="json") for o in space.hardware.sram} if space is not None else {}
    return scenario, options


def write_front(front: list[dict], study, objectives: list[str], out: Path, name: str, space=None,
                storage: str | None = None) -> dict[str, str]:
    """The front as CSV (units in the headers), JSON (with the scenario, SRAM options and units, so each row
    reproduces with ``deepstack evaluate --design ID --front FILE``, and the ``storage`` the study is in), an HTML
    plot and a static PNG. ``space`` is the study's design space (its SRAM options); without it the space is
    loaded by the study's space name."""
    out.mkdir(parents=True, exist_ok=True)
    base = out / f"{name}.pareto"
    files = {"csv": str(base) + ".csv", "json": str(base) + ".json", "html": str(base) + ".html"}
    scenario, options = _context(study, space)
    named, nocs = named_nocs(enrich(front, scenario, options, files["csv"]))  # NoC files by name, kept whole
    rows = one_per_objective_vector(named, objectives)
    front[:] = rows  # the caller's rows (optimize's result and --json) carry the same ids
    columns = list(dict.fromkeys(k for row in rows for k in row)) if rows else objectives
    data = {"study": name, **({"storage": storage} if storage else {}), "objectives": objectives,
            "units": {c: UNITS[c] for c in columns if c in UNITS},
            "scenario": scenario.model_dump(mode="json") if scenario else None, "sram_options": options,
            "nocs": nocs, "pareto": rows}
    write_text_atomically(Path(files["json"]), json.dumps(finite(data), indent=2, default=str, allow_nan=False))
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([header(c) for c in columns])
    for row in rows:
        writer.writerow([json.dumps(v) if isinstance(v, list | dict) else v for v in (row.get(c, "") for c in columns)])
    write_text_atomically(Path(files["csv"]), buffer.getvalue())
    _plot(study, rows, objectives, files["html"])
    png = _png(study, rows, objectives, str(base) + ".png")
    if png:
        files["png"] = png
    return files


def _png(study, front: list[dict], objectives: list[str], path: str) -> str | None:
    """A static picture of the front over every trial (for reports and for readers without a browser)."""
    if len(objectives) < 2:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_name, y_name = objectives[:2]
    trials = [t for t in completed_trials(study) if t.values is not None]
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.scatter([t.values[0] for t in trials], [t.values[1] for t in trials], s=10, c="lightgray", label="trials")
    ordered = sorted(front, key=lambda r: r[x_name])
    ax.plot([r[x_name] for r in ordered], [r[y_name] for r in ordered], "o-", c="tab:blue", label="Pareto front")
    ax.set_xlabel(header(x_name).replace("[", "(").replace("]", ")"))
    ax.set_ylabel(header(y_name).replace("[", "(").replace("]", ")"))
    ax.set_title(f"{study.study_name}: Pareto front ({len(front)} designs)")
    ax.legend()
    fig.tight_layout()  # the final layout before the labels are measured
    placed = label_apart(ax, [(r[x_name], r[y_name]) for r in ordered], [r.get("id", "") for r in ordered])
    if placed < len(ordered):
        ax.text(0.99, 0.01, f"{len(ordered) - placed} ids left out where they would overlap (see the CSV)",
                transform=ax.transAxes, ha="right", va="bottom", fontsize=6, color="gray")
    return save_figure(fig, path, dpi=120)


def label_apart(ax, points: list[tuple[float, float]], labels: list[str], fontsize: float = 6) -> int:
    """Label each point beside it, inside the axes, leaving out a label that would overlap one already drawn (a
    dense front printed ids over each other); returns how many were drawn."""
    figure = ax.figure
    figure.canvas.draw()  # the axes' final limits: the labels' extents are measured in pixels
    renderer = figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    drawn = []
    for (x, y), label in zip(points, labels, strict=True):
        if not label:
            continue
        for offset in ((3, 3), (3, -9), (-3, 3), (-3, -9)):  # right of the point first, inside the axes
            text = ax.annotate(label, (x, y), fontsize=fontsize, xytext=offset, textcoords="offset points",
                               ha="left" if offset[0] > 0 else "right")
            box = text.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not any(box.overlaps(other) for other in drawn):
                drawn.append(box)
                break
            text.remove()
    return len(drawn)


def _plot(study, front: list[dict], objectives: list[str], path: str) -> None:
    import plotly.graph_objects as go

    trials = completed_trials(study)
    x_name, y_name = objectives[0], objectives[1] if len(objectives) > 1 else objectives[0]
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=[t.values[0] for t in trials], y=[t.values[1 if len(objectives) > 1 else 0] for t in trials],
        mode="markers", name="trials", marker={"color": "lightgray"},
        text=[json.dumps(t.user_attrs.get("design", {})) for t in trials]))
    fig.add_trace(go.Scatter(
        x=[r[x_name] for r in front], y=[r[y_name] for r in front], mode="markers+lines", name="Pareto front",
        text=[f"{r.get('id')}: {r.get('chip')}/{r.get('noc')} m{r.get('stacked_layers')}n{r.get('connected_layers')} "
              f"{r.get('schedule')}" for r in front]))
    fig.update_layout(title=f"{study.study_name}: {x_name} vs {y_name}", xaxis_title=header(x_name),
                      yaxis_title=header(y_name))
    with contextlib.suppress(OSError):
        fig.write_html(path, include_plotlyjs=True)  # self-contained: readable offline
