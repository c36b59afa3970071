"""The Pareto front of an Optuna study (see :mod:`deepstack.search.optimize`): its thermally feasible,
non-dominated trials, and the files written for them (CSV, JSON, a self-contained HTML plot). It reads the study
through its methods only, so Optuna stays imported by :mod:`~deepstack.search.optimize` alone."""

from __future__ import annotations

import contextlib
import csv
import json
from pathlib import Path

import numpy as np

from deepstack.search import pareto
from deepstack.search.objectives import OBJECTIVES


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


def write_front(front: list[dict], study, objectives: list[str], out: Path, name: str) -> dict[str, str]:
    out.mkdir(parents=True, exist_ok=True)
    base = out / f"{name}.pareto"
    files = {"csv": str(base) + ".csv", "json": str(base) + ".json", "html": str(base) + ".html"}
    with open(files["json"], "w") as fh:
        json.dump({"study": name, "objectives": objectives, "pareto": front}, fh, indent=2, default=str)
    columns = list(front[0]) if front else objectives
    with open(files["csv"], "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        for row in front:
            writer.writerow({k: (json.dumps(v) if isinstance(v, list | dict) else v) for k, v in row.items()})
    _plot(study, front, objectives, files["html"])
    return files


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
        text=[f"{r.get('chip')}/{r.get('noc')} m{r.get('stacked_layers')}n{r.get('connected_layers')} "
              f"{r.get('schedule')}" for r in front]))
    fig.update_layout(title=f"{study.study_name}: {x_name} vs {y_name}", xaxis_title=x_name, yaxis_title=y_name)
    with contextlib.suppress(OSError):
        fig.write_html(path, include_plotlyjs=True)  # self-contained: readable offline
