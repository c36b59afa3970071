"""How close an Optuna study gets to the exhaustive front (``deepstack compare``): hypervolume ratio against
the same reference point, and the evaluations and wall time each side spent."""

from __future__ import annotations

import numpy as np

from deepstack.errors import UserInputError
from deepstack.search import pareto
from deepstack.search.objectives import OBJECTIVES
from deepstack.search.optimize import study_points
from deepstack.search.sweep.output import read_sweep


def compare(*, study: str, storage: str, sweep_dir: str) -> dict:
    objectives, study_values, trials, study_wall = study_points(storage, study)
    summary, rows = read_sweep(sweep_dir)
    if summary.get("objectives") and list(summary["objectives"]) != list(objectives):
        objectives = [o for o in objectives if o in summary["objectives"]] or objectives
    keys = [OBJECTIVES[o][0] for o in objectives]
    try:
        sweep_values = np.array([[float(r[k]) for k in keys] for r in rows if r["feasible"] == "True"], dtype=float)
    except KeyError as exc:
        raise UserInputError(f"--sweep: the sweep has no column {exc.args[0]!r} for objective of the study") from None
    if not len(sweep_values):
        raise UserInputError(f"--sweep: {sweep_dir} has no feasible point")
    study_front = study_values[pareto.nondominated_mask(study_values, objectives)]
    sweep_front = sweep_values[pareto.nondominated_mask(sweep_values, objectives)]
    reference = pareto.reference_point(sweep_front, study_front, objectives=objectives)
    hv_study = pareto.hypervolume(study_front, objectives, reference)
    hv_sweep = pareto.hypervolume(sweep_front, objectives, reference)
    evaluations = int(summary.get("evaluations", len(rows)))
    return {
        "objectives": objectives,
        "reference_point": reference.tolist(),
        "study": {"name": study, "hypervolume": hv_study, "evaluations": trials, "wall_s": study_wall,
                  "front_size": len(study_front)},
        "sweep": {"folder": sweep_dir, "mode": summary.get("mode"), "hypervolume": hv_sweep,
                  "evaluations": evaluations, "wall_s": summary.get("wall_s"), "front_size": len(sweep_front)},
        "hypervolume_ratio": hv_study / hv_sweep if hv_sweep > 0 else float("nan"),
        "evaluation_share": trials / evaluations if evaluations else float("nan"),
    }
