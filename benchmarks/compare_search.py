"""The main job against brute force (issue 20, acceptance 2 and 3) and on the paper's space (issue 32, item 4):
``python benchmarks/compare_search.py [--space small|default|paper] [--slice NAME] [--seeds 5] [--workers 2]``.

* ``--space small`` (acceptance 3): the exhaustive sweep of the shipped small space, then ``optimize`` studies
  (seeds 0..4) cut at 2 % of the sweep's evaluations, counting every design-point evaluation (a trial's inner
  schedule evaluations included); for each the hypervolume ratio to the sweep's front. Both inner solvers are run:
  ``screen`` (the default) and ``exact`` (every schedule of every proposed point: plain bi-level).
* ``--space default`` (acceptance 2): the hierarchical sweep of the default space and the README's first command
  (defaults: 1,000 trials, seed 0, 60 % of them local search around the front), on the same machine with the same
  number of workers; both wall times, their ratio and the hypervolume ratio. ``--slice NAME`` runs both on a
  named slice of the default space instead (``SLICES``: when the full sweep would take more than an hour) and
  prints the full sweep's estimated time from the slice's evaluations/s and the full space's tier-1 hardware
  points.

* ``--space paper``: the paper's space (2.5·10¹⁴ points) has no sweep that finishes here, so the reference is the
  best front any method here has found: the main job (1,000 trials, seed 0) and ``--seeds`` longer studies
  (``--reference-trials`` each, seeds 1, 2, …), their fronts merged. It prints the main job's wall time, its
  hypervolume against that best front, and the wall time at which its front (trial by trial, as the study stored
  them) first reached 0.98 of it.

The hypervolume reference comes from the sweep's feasible points alone: objectives normalised by the sweep's
range (ideal → 1, nadir → 0), the reference at the nadir (``deepstack.search.pareto.normalised_hypervolume``,
the rule ``deepstack compare`` uses), so nothing a study finds moves it. Everything goes to a temporary folder.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from deepstack.search import bilevel, pareto
from deepstack.search import optimize as opt
from deepstack.search.space import load_space, scenarios
from deepstack.search.study_record import trial_solve
from deepstack.search.sweep import sweep
from deepstack.search.sweep.output import read_sweep, sweep_points

OBJECTIVES = ["stps", "tokens_per_joule"]
GOAL_RATIO = 0.98
SMALL_SHARE = 0.02  # acceptance 3: ≤ 2 % of the exhaustive evaluations
DEFAULT_WALL_SHARE = 0.05  # acceptance 2: ≤ 5 % of the sweep's wall time


def _sweep_values(folder: str) -> np.ndarray:
    read_sweep(folder)  # a finished sweep folder, or one line saying why not
    return np.array([[float(r[o]) for o in OBJECTIVES] for r in sweep_points(folder) if r["feasible"] == "True"],
                    dtype=float)


def ratio(points: np.ndarray, swept: np.ndarray) -> float:
    ideal, nadir = pareto.bounds(swept, OBJECTIVES)
    whole = pareto.normalised_hypervolume(swept, ideal, nadir)
    return pareto.normalised_hypervolume(points, ideal, nadir) / whole if len(points) else 0.0


def _points_within(study_trials, budget: float) -> tuple[np.ndarray, int]:
    """The kept points of the trials (in order) whose cumulative evaluations stay within ``budget``."""
    spent, points = 0, []
    for t in sorted(study_trials, key=lambda t: t.number):
        cost = int(trial_solve(t).get("evaluations", 0))
        if spent + cost > budget:
            break
        spent += cost
        if t.state.name == "COMPLETE" and all(c <= 0 for c in (t.constraints or {}).values()):
            points += [[r[o] for o in OBJECTIVES] for r in t.user_attrs.get("pareto_schedules", [])]
    return np.array(points, dtype=float).reshape(-1, len(OBJECTIVES)), spent


def small(seeds: int, workers: int, root: Path) -> None:
    scenario = scenarios(load_space("small"))[0]
    started = time.perf_counter()
    swept = sweep(mode="exhaustive", space="small", scenario=scenario, objectives=OBJECTIVES,
                  out=str(root / "sweep"), workers=workers)
    print(f"exhaustive sweep of 'small': {swept.evaluations} evaluations of {swept.hardware_points} hardware points, "
          f"{time.perf_counter() - started:.1f} s on {workers} workers")
    values = _sweep_values(str(root / "sweep"))
    budget = SMALL_SHARE * swept.evaluations
    storage = f"sqlite:///{root / 'studies.db'}"
    for inner, trials in (("screen", 150), ("exact", 12)):
        ratios, spent_all, walls = [], [], []
        for seed in range(seeds):
            bilevel.ROWS.clear()  # a fresh process's memo: nothing reused from another study
            name = f"{inner}-{seed}"
            result = opt.optimize(objectives=OBJECTIVES, space="small", scenario=scenario, trials=trials,
                                  study=name, storage=storage, seed=seed, out=str(root / "fronts"), inner=inner,
                                  workers=1)
            import optuna

            points, spent = _points_within(optuna.load_study(study_name=name, storage=storage).get_trials(), budget)
            ratios.append(ratio(points, values))
            spent_all.append(spent)
            walls.append(result.wall_s)
        reached = sum(r >= GOAL_RATIO for r in ratios)
        print(f"inner={inner:6s} seeds 0..{seeds - 1}: hypervolume ratio median {statistics.median(ratios):.4f} "
              f"(min {min(ratios):.4f}, max {max(ratios):.4f}, {reached}/{seeds} ≥ {GOAL_RATIO}) with ≤ "
              f"{budget:.0f} evaluations ({SMALL_SHARE:.0%}; spent median {statistics.median(spent_all):.0f}, "
              f"{statistics.median(spent_all) / swept.evaluations:.2%}); study wall median "
              f"{statistics.median(walls):.1f} s; per seed {[round(r, 4) for r in ratios]}")


# Named slices of the default space for --slice, in case its full hierarchical sweep takes more than an hour on
# the machine (acceptance 2 then names the slice and gives the full sweep's estimated time): (what, axes replaced)
SLICES = {
    "tms1": ("every chip and stacking on TMS1 (1 of the 8 NoCs)", {"nocs": ("tms1",)}),
    "three-chips": ("standard, less-sm and strong-l2 (the README's example and the old one-design front) on every "
                    "NoC", {"chips": ("standard", "less-sm", "strong-l2")}),
    "even-m": ("every chip and NoC at m = 2, 4, 6, 8, 10", {"stacked_layers": (2, 4, 6, 8, 10)}),
}


def _space(slice_name: str | None, root: Path) -> tuple[str, str]:
    """(the space argument, its label): the default space, or one of its SLICES written to a file."""
    if slice_name is None:
        return "default", "'default'"
    what, axes = SLICES[slice_name]
    full = load_space("default")
    sliced = full.model_copy(update={"hardware": full.hardware.model_copy(update=axes),
                                     "name": f"default-{slice_name}"})
    path = root / f"default-{slice_name}.json"
    path.write_text(sliced.model_dump_json())
    return str(path), f"the default space's slice {slice_name!r} ({what})"


def default(workers: int, root: Path, slice_name: str | None = None, trials: int = opt.DEFAULT_TRIALS) -> None:
    from deepstack.search.space import base_points

    space, label = _space(slice_name, root)
    scenario = scenarios(load_space(space))[0]
    started = time.perf_counter()
    job = opt.optimize(objectives=OBJECTIVES, space=space, scenario=scenario, trials=trials, study="readme",
                       storage=f"sqlite:///{root / 'readme.db'}", out=str(root / "fronts"), workers=workers)
    job_wall = time.perf_counter() - started
    print(f"main job on {label} (the README's first command: {trials} trials, seed 0, "
          f"{job.run['refined']} of them local search around the front; {workers} workers): {job_wall:.1f} s, "
          f"{job.run['evaluations']} design-point evaluations, front of {len(job.pareto)}", flush=True)
    started = time.perf_counter()
    swept = sweep(mode="hierarchical", space=space, scenario=scenario, objectives=OBJECTIVES,
                  out=str(root / "sweep"), workers=workers)
    sweep_wall = time.perf_counter() - started
    print(f"hierarchical sweep of {label}: {swept.evaluations} evaluations of {swept.hardware_points} hardware "
          f"points, {sweep_wall:.1f} s on {workers} workers ({swept.evaluations / sweep_wall:.0f} evaluations/s)")
    if slice_name is not None:
        # the later tiers take a fixed share of tier 1, so evaluations scale with the tier-1 hardware points
        full_points, slice_points = len(base_points(load_space("default"))), len(base_points(load_space(space)))
        estimate = swept.evaluations * full_points / slice_points
        print(f"full default space (estimate from this slice): {full_points} tier-1 hardware points "
              f"({full_points / slice_points:.1f} × the slice's {slice_points}), ~{estimate:.3g} evaluations, "
              f"~{estimate / (swept.evaluations / sweep_wall) / 60:.0f} min on {workers} workers")
    values = _sweep_values(str(root / "sweep"))
    front = np.array([[r[o] for o in OBJECTIVES] for r in job.pareto], dtype=float)
    share = job_wall / sweep_wall
    r = ratio(front, values)
    print(f"hypervolume ratio (main job / sweep) {r:.4f} (goal ≥ {GOAL_RATIO}); wall time ratio {share:.2%} "
          f"(goal ≤ {DEFAULT_WALL_SHARE:.0%}); evaluations ratio {job.run['evaluations'] / swept.evaluations:.2%}")


def _front_points(study_name: str, storage: str) -> list[tuple[float, np.ndarray]]:
    """(seconds since the study's first trial started, that trial's kept points) of every feasible completed trial,
    in completion order."""
    import optuna

    trials = [t for t in optuna.load_study(study_name=study_name, storage=storage).get_trials()
              if t.state.name == "COMPLETE" and t.datetime_complete is not None]
    start = min(t.datetime_start for t in trials)
    out = []
    for t in sorted(trials, key=lambda t: t.datetime_complete):
        if all(c <= 0 for c in (t.constraints or {}).values()):
            points = np.array([[r[o] for o in OBJECTIVES] for r in t.user_attrs.get("pareto_schedules", [])],
                              dtype=float).reshape(-1, len(OBJECTIVES))
            out.append(((t.datetime_complete - start).total_seconds(), points))
    return out


def paper(workers: int, root: Path, seeds: int, reference_trials: int, trials: int = opt.DEFAULT_TRIALS) -> None:
    scenario = scenarios(load_space("paper"))[0]
    storage = f"sqlite:///{root / 'paper.db'}"
    started = time.perf_counter()
    job = opt.optimize(objectives=OBJECTIVES, space="paper", scenario=scenario, trials=trials, study="main",
                       storage=storage, out=str(root / "fronts"), workers=workers)
    job_wall = time.perf_counter() - started
    print(f"main job on 'paper' (the README's first command with --space paper: {trials} trials, seed 0, "
          f"{job.run['refined']} of them local search; {workers} workers): {job_wall:.1f} s, "
          f"{job.run['evaluations']} design-point evaluations, front of {len(job.pareto)}", flush=True)
    names = ["main"]
    for seed in range(1, seeds + 1):
        started = time.perf_counter()
        other = opt.optimize(objectives=OBJECTIVES, space="paper", scenario=scenario, trials=reference_trials,
                             study=f"reference-{seed}", storage=storage, seed=seed, out=str(root / "fronts"),
                             workers=workers)
        names.append(f"reference-{seed}")
        print(f"reference study seed {seed}: {reference_trials} trials, {time.perf_counter() - started:.1f} s, "
              f"front of {len(other.pareto)}", flush=True)
    # every feasible point any study evaluated stands in for the sweep's: its range normalises the objectives and
    # its front is the best one found
    histories = {name: _front_points(name, storage) for name in names}
    found = np.vstack([points for history in histories.values() for _, points in history])
    print("hypervolume of each study's front against the best front found: "
          + ", ".join(f"{name} {ratio(np.vstack([p for _, p in history]), found):.4f}"
                      for name, history in histories.items()))
    main_history = histories["main"]
    reached = None
    for i in range(len(main_history)):
        if ratio(np.vstack([p for _, p in main_history[: i + 1]]), found) >= GOAL_RATIO:
            reached = main_history[i][0]
            break
    when = f"{reached:.1f} s" if reached is not None else "not reached"
    print(f"hypervolume ratio (main job / best front found by it and {seeds} reference studies of "
          f"{reference_trials} trials) {ratio(np.vstack([p for _, p in main_history]), found):.4f}; time to "
          f"{GOAL_RATIO} of the best front: {when} (main job wall {job_wall:.1f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--space", choices=("small", "default", "paper"), default="small")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--slice", choices=sorted(SLICES), default=None,
                        help="--space default only: run the sweep and the main job on this named slice of the "
                             "default space and print the full sweep's estimated time; "
                             + "; ".join(f"{k}: {v[0]}" for k, v in SLICES.items()))
    parser.add_argument("--trials", type=int, default=opt.DEFAULT_TRIALS,
                        help="--space default or paper: the main job's trials")
    parser.add_argument("--reference-trials", type=int, default=4000,
                        help="--space paper: trials of each longer reference study (--seeds of them)")
    args = parser.parse_args()
    if args.slice and args.space != "default":
        parser.error("--slice goes with --space default")
    with tempfile.TemporaryDirectory(prefix="deepstack-compare-") as tmp:
        if args.space == "small":
            small(args.seeds, args.workers, Path(tmp))
        elif args.space == "paper":
            paper(args.workers, Path(tmp), args.seeds, args.reference_trials, args.trials)
        else:
            default(args.workers, Path(tmp), args.slice, args.trials)


if __name__ == "__main__":
    main()
