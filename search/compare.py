"""How close an Optuna study gets to a sweep's front (``deepstack compare``).

The sweep alone sets the yardstick: its feasible points give an ideal and a nadir per objective (their best and
worst values); every objective is normalised by that range (ideal → 1, nadir → 0) and the nadir is the
hypervolume reference (:func:`deepstack.search.pareto.normalised_hypervolume`). Nothing the study found can move
it, so a study whose points sit next to the sweep's front scores close to 1. The study and the sweep must be of
the same space and scenario (refused otherwise); a study that does not exist is never created. Besides the ratio
at each side's full budget, the ratio at equal evaluations (every design-point evaluation counted, a trial's inner
schedule evaluations included) and at equal wall time (the study's trial timestamps against the sweep's chunk
finishing times) is reported.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from deepstack.errors import UserInputError
from deepstack.search import pareto
from deepstack.search.objectives import OBJECTIVES
from deepstack.search.study_record import code_of, trial_solve
from deepstack.search.sweep.output import HARDWARE_COLUMNS, read_sweep, sweep_points

DESIGN_KEYS = (*HARDWARE_COLUMNS, "schedule", "fsdp")


@dataclass
class Side:
    """One side's evaluated points in the order they were found: objective values (feasible points), each point's
    cumulative evaluation count and seconds since the side started, its design key and hardware key (a sweep's
    side reads the keys of its front's points only: the others are empty)."""

    values: np.ndarray
    evaluations: np.ndarray
    seconds: np.ndarray
    designs: list[str]
    hardware: list[str]
    total_evaluations: int
    wall_s: float
    runs: int = 0  # trials (study) or hardware points' rows (sweep: its rows)

    def upto(self, *, evaluations: float | None = None, seconds: float | None = None) -> np.ndarray:
        keep = np.ones(len(self.values), dtype=bool)
        if evaluations is not None:
            keep &= self.evaluations <= evaluations
        if seconds is not None:
            keep &= self.seconds <= seconds + 1e-9
        return self.values[keep]


def _key(design: dict, keys) -> str:
    return json.dumps([_plain(design.get(k)) for k in keys])


def _plain(value):
    """A design cell as one canonical JSON value (CSV cells are strings; study attributes are typed)."""
    if isinstance(value, str):
        try:
            value = json.loads(value.lower() if value in ("True", "False") else value)
        except json.JSONDecodeError:
            return Path(value).stem if value.endswith(".toml") else value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# --- the study side (read through the storage's methods: Optuna stays imported by search/optimize.py alone) ---

def _existing(storage: str) -> None:
    """Refuse a storage file that does not exist: opening it would create an empty database."""
    path = None
    if storage.startswith("sqlite:///"):
        path = storage.removeprefix("sqlite:///")
    elif storage.startswith("journal:") or storage.endswith((".log", ".journal")):
        path = storage.removeprefix("journal:")
    if path is not None and path != ":memory:" and not Path(path).is_file():
        raise UserInputError(f"--storage: no study database at {path} (compare reads an existing study and "
                             "creates nothing; give --storage of the study that optimize wrote)")


def read_study(storage: str, study: str) -> tuple[dict, list]:
    """The study's problem signature (objectives, scenario, space) and its trials, without creating anything."""
    from deepstack.search.optimize import open_storage

    _existing(storage)
    store = open_storage(storage)
    try:
        study_id = store.get_study_id_from_name(study)
    except KeyError:
        raise UserInputError(f"--study: no study named {study!r} in {storage}") from None
    problem = store.get_study_user_attrs(study_id).get("problem") or {}
    if not problem.get("objectives"):
        raise UserInputError(f"--study: {study!r} was not created by deepstack optimize")
    return problem, store.get_all_trials(study_id, deepcopy=False)


def study_side(trials: list, objectives: list[str]) -> Side:
    """The completed trials in completion order; a trial's points are its values and, when the trial kept a
    Pareto set of schedules (user attribute ``pareto_schedules``: rows keyed by objective name), those too.
    A trial counts the design-point evaluations it records (``solve``'s ``evaluations``, default 1)."""
    done = [t for t in trials if t.state.name == "COMPLETE" and t.values is not None]
    done.sort(key=lambda t: (t.datetime_complete is None, t.datetime_complete or 0, t.number))
    starts = [t.datetime_start for t in done if t.datetime_start]
    origin = min(starts) if starts else None
    values, evaluations, seconds, designs, hardware = [], [], [], [], []
    seen: set[str] = set()
    spent = 0
    for t in done:
        spent += int(trial_solve(t).get("evaluations", 1))
        if any(c > 0 for c in (t.constraints or {}).values()):
            continue
        elapsed = (t.datetime_complete - origin).total_seconds() if origin and t.datetime_complete else 0.0
        design = t.user_attrs.get("design", {})
        points = [list(t.values)] + [[row[o] for o in objectives] for row in t.user_attrs.get("pareto_schedules", [])
                                     if all(row.get(o) is not None for o in objectives)]
        for i, point in enumerate(points):
            row_design = design if i == 0 else {**design, **t.user_attrs["pareto_schedules"][i - 1]}
            key = _key(row_design, DESIGN_KEYS)
            if key in seen:  # a trial's own values repeat its best kept schedule; a design met again adds nothing
                continue
            seen.add(key)
            values.append(point)
            evaluations.append(spent)
            seconds.append(elapsed)
            designs.append(key)
            hardware.append(_key(row_design, HARDWARE_COLUMNS))
    ends = [t.datetime_complete for t in done if t.datetime_complete]
    wall = (max(ends) - origin).total_seconds() if origin and ends else 0.0
    return Side(np.array(values, dtype=float).reshape(-1, len(objectives)), np.array(evaluations, dtype=float),
                np.array(seconds, dtype=float), designs, hardware, spent, wall, len(done))


# --- the sweep side ----------------------------------------------------------------------------------------

def _row_seconds(summary: dict, rows: int) -> tuple[np.ndarray, bool]:
    """Seconds of the sweep's evaluation at which each row of points.csv was evaluated (its chunk's finishing
    time, on a clock a resumed sweep's runs share), and whether they were measured; a sweep without chunk times
    (or resumed from a run that recorded none) is assumed to have evaluated its rows at an even rate in file
    order."""
    chunks = summary.get("chunks") or []
    if chunks and sum(c[1] for c in chunks) == rows and all(c[2] is not None for c in chunks):
        return np.repeat([float(c[2]) for c in chunks], [int(c[1]) for c in chunks]), True
    wall = float(summary.get("wall_s") or 0.0)
    return wall * np.arange(1, rows + 1) / max(rows, 1), False


def sweep_side(summary: dict, folder: str, objectives: list[str]) -> tuple[Side, bool]:
    """The sweep's feasible points in the order they were evaluated, read from points.csv in two passes (the
    objective values of every row, then the design keys of the front's rows only), so a sweep of millions of
    evaluations is compared without holding its rows."""
    keys = [OBJECTIVES[o][0] for o in objectives]
    values, feasible, rows = [], [], 0
    for i, row in enumerate(sweep_points(folder)):
        rows = i + 1
        if row["feasible"] != "True":
            continue
        try:
            values.append([float(row[k]) for k in keys])
        except KeyError as exc:
            raise UserInputError(f"--sweep: the sweep has no column {exc.args[0]!r} for an objective of the study "
                                 "(sweep again with that objective)") from None
        feasible.append(i)
    seconds, measured = _row_seconds(summary, rows)
    rank = np.empty(rows, dtype=np.int64)
    rank[np.argsort(seconds, kind="stable")] = np.arange(1, rows + 1)  # each row's place in evaluation order
    index = np.array(feasible, dtype=np.int64)
    by_rank = np.argsort(rank[index], kind="stable")
    index, values = index[by_rank], np.array(values, dtype=float).reshape(-1, len(objectives))[by_rank]
    on_front = set(index[pareto.nondominated_mask(values, objectives)].tolist()) if len(values) else set()
    found: dict[int, tuple[str, str]] = {}
    if on_front:
        for i, row in enumerate(sweep_points(folder)):
            if i in on_front:
                found[i] = (_key(row, DESIGN_KEYS), _key(row, HARDWARE_COLUMNS))
    designs = [found[i][0] if i in found else "" for i in index.tolist()]  # only the front's are ever read
    hardware = [found[i][1] if i in found else "" for i in index.tolist()]
    side = Side(values, rank[index].astype(float), seconds[index], designs, hardware, rows,
                float(summary.get("wall_s") or 0.0))
    return side, measured


# --- same problem? -----------------------------------------------------------------------------------------

def _scenario_of_study(problem: dict) -> dict:
    scenario = dict(problem.get("scenario") or {})
    if isinstance(scenario.get("model"), dict):
        scenario["model"] = scenario["model"].get("name")
    return scenario


def check_same_problem(problem: dict, summary: dict, trials: list, study: str, sweep_dir: str) -> None:
    """Refuse (one line) a study and a sweep of different spaces or scenarios."""
    if problem.get("space") != summary.get("space"):
        raise UserInputError(f"--sweep: {sweep_dir} sweeps space {summary.get('space')!r} but study {study!r} "
                             f"searched space {problem.get('space')!r}; compare a study and a sweep of one space")
    if problem.get("code") != summary.get("code"):  # one side's figures would be ones the other's code never gives
        raise UserInputError(f"--sweep: {sweep_dir} was evaluated by {code_of(summary)} and study {study!r} by "
                             f"{code_of(problem)}; compare a study and a sweep of the same code (run the older one "
                             "again, into a new folder or study)")
    mine, theirs = _scenario_of_study(problem), summary.get("scenario") or {}
    differ = sorted(k for k in set(mine) | set(theirs) if _plain(mine.get(k)) != _plain(theirs.get(k)))
    if differ:
        shown = ", ".join(f"{k} {theirs.get(k)!r} vs {mine.get(k)!r}" for k in differ[:3])
        raise UserInputError(f"--sweep: {sweep_dir} and study {study!r} have different scenarios ({shown}; sweep "
                             "vs study); compare a study and a sweep of one scenario")
    definition = (summary.get("space_definition") or {}).get("hardware")
    if not definition:
        return
    axes = {"chip": set(definition["chips"]), "noc": {Path(n).stem for n in definition["nocs"]},
            "stacked_layers": {float(v) for v in definition["stacked_layers"]},
            "sram": {s["name"] for s in definition["sram"]},
            "hop_latency_scale": {float(v) for v in definition["hop_latency_scale"]}}
    for t in trials:
        design = t.user_attrs.get("design") or {}
        for axis, allowed in axes.items():
            if axis in design and _plain(design[axis]) not in allowed:
                raise UserInputError(f"--sweep: study {study!r} trial {t.number} has {axis} {design[axis]!r}, "
                                     f"outside the space {summary.get('space')!r} that {sweep_dir} swept; compare "
                                     "a study and a sweep of one space")


# --- the comparison ----------------------------------------------------------------------------------------

def _front(values: np.ndarray, objectives: list[str]) -> np.ndarray:
    return values[pareto.nondominated_mask(values, objectives)] if len(values) else values


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def _extremes(side: Side, objectives: list[str]) -> list[dict]:
    """For each objective, the front point best in it (all its objective values)."""
    if not len(side.values):
        return []
    rows = []
    for j, o in enumerate(objectives):
        column = side.values[:, j]
        best = int(np.argmax(column) if OBJECTIVES[o][1] else np.argmin(column))
        rows.append({"best_in": o, **{p: float(side.values[best, k]) for k, p in enumerate(objectives)}})
    return rows


def _unique(side: Side, objectives: list[str]) -> tuple[int, int, int]:
    """(front points, distinct designs on the front, distinct hardware points on the front)."""
    if not len(side.values):
        return 0, 0, 0
    mask = pareto.nondominated_mask(side.values, objectives)
    designs = {d for d, keep in zip(side.designs, mask, strict=True) if keep}
    hardware = {h for h, keep in zip(side.hardware, mask, strict=True) if keep}
    return int(mask.sum()), len(designs), len(hardware)


def compare(*, study: str, storage: str, sweep_dir: str) -> dict:
    summary = read_sweep(sweep_dir)
    problem, trials = read_study(storage, study)
    check_same_problem(problem, summary, trials, study, sweep_dir)
    objectives = list(problem["objectives"])
    mine = study_side(trials, objectives)
    theirs, measured = sweep_side(summary, sweep_dir, objectives)
    if not len(theirs.values):
        raise UserInputError(f"--sweep: {sweep_dir} has no feasible point")
    ideal, nadir = pareto.bounds(theirs.values, objectives)
    reference = pareto.raw_reference(ideal, nadir)

    def hv(values: np.ndarray) -> float:
        return pareto.normalised_hypervolume(values, ideal, nadir)

    hv_study, hv_sweep = hv(mine.values), hv(theirs.values)
    equal_evaluations = min(mine.total_evaluations, theirs.total_evaluations)
    equal_seconds = min(mine.wall_s, theirs.wall_s)
    sides = {}
    for name, side, hv_norm, extra in (("study", mine, hv_study, {"name": study, "trials": mine.runs}),
                                       ("sweep", theirs, hv_sweep, {"folder": sweep_dir, "mode": summary.get("mode"),
                                                                    "chunk_times_measured": measured})):
        front = _front(side.values, objectives)
        points, designs, hardware = _unique(side, objectives)
        sides[name] = {**extra, "hypervolume": pareto.hypervolume(front, objectives, reference),
                       "hypervolume_normalised": hv_norm, "evaluations": side.total_evaluations,
                       "wall_s": side.wall_s, "front_size": points, "unique_designs": designs,
                       "unique_hardware_points": hardware, "extremes": _extremes(side, objectives)}
    return {
        "objectives": objectives,
        "reference_point": reference.tolist(),
        "reference": "the nadir of the sweep's feasible points (their worst value of each objective); objectives "
                     "normalised by the sweep's ranges (ideal → 1, nadir → 0): the study cannot move it",
        "ideal_point": ideal.tolist(),
        "nadir_point": nadir.tolist(),
        "study": sides["study"],
        "sweep": sides["sweep"],
        "hypervolume_ratio": _ratio(hv_study, hv_sweep),
        "evaluation_share": mine.total_evaluations / theirs.total_evaluations if theirs.total_evaluations else None,
        "at_equal_evaluations": {"evaluations": equal_evaluations, "hypervolume_ratio": _ratio(
            hv(mine.upto(evaluations=equal_evaluations)), hv(theirs.upto(evaluations=equal_evaluations)))},
        "at_equal_wall_time": {"wall_s": equal_seconds, "sweep_times": "measured" if measured else "assumed even",
                               "hypervolume_ratio": _ratio(hv(mine.upto(seconds=equal_seconds)),
                                                           hv(theirs.upto(seconds=equal_seconds)))},
    }
