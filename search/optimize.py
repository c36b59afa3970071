"""Multi-objective search with Optuna (the only module importing optuna; docs/architecture.md §5).

A trial proposes a hardware point and a schedule; CP-SAT repairs it to the nearest feasible point (area,
stacking, memory, pruning rules), so every evaluated trial is feasible by construction; thermal limits, known
only after evaluating, go through Optuna's constraint API. Studies live in an RDB (SQLite by default) or a
journal file and resume: re-running the same command adds ``trials`` more; a killed run loses no completed
trial (each trial commits on completion, and heartbeats let a later run fail a killed worker's trial).
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import json
import math
import sqlite3
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna

from deepstack.errors import UserInputError
from deepstack.models import memo, tune_gc
from deepstack.models.evaluate import evaluate
from deepstack.models.parallel.strategies import Strategy, divisors
from deepstack.schema import DesignSpace, Scenario
from deepstack.search import executor
from deepstack.search.feasibility import DIMS, Proposal, feasibility_of
from deepstack.search.objectives import OBJECTIVES
from deepstack.search.space import HardwarePoint, design_point, load_space, scenarios
from deepstack.search.study_front import pareto_front, write_front

SAMPLERS = ("nsga2", "tpe")
# heartbeats and fail_stale_trials are marked experimental in Optuna 5 but are the documented recovery path
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

HEARTBEAT_INTERVAL_S = 5  # a running trial refreshes its heartbeat this often (RDB storages only)
HEARTBEAT_GRACE_S = 20  # a trial silent this long belongs to a killed worker and is failed on resume
ZOMBIE_AGE_S = 600  # a trial evaluates in seconds; one RUNNING for 10 minutes belongs to a dead worker
SQLITE_TIMEOUT_S = 60  # wait this long for another process's write lock instead of failing


def parse_objectives(text: str) -> list[str]:
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    if not names:
        raise UserInputError(f"--objective: give one or more of {', '.join(OBJECTIVES)}")
    for name in names:
        if name not in OBJECTIVES:
            raise UserInputError(f"--objective: unknown objective {name!r}; allowed: {', '.join(OBJECTIVES)}")
    if len(set(names)) != len(names):
        raise UserInputError("--objective: each objective may appear once")
    return names


def default_storage(study: str) -> str:
    return f"sqlite:///studies/{study}.db"


def open_storage(url: str):
    """An Optuna storage for ``url``: SQLite/PostgreSQL (RDB, with heartbeats) or ``journal:PATH``."""
    if url.startswith("postgres") and importlib.util.find_spec("psycopg") is None:
        raise UserInputError('--storage: a PostgreSQL URL needs psycopg: pip install "deepstack-dse[postgres]"')
    try:
        if url.startswith("journal:") or url.endswith((".log", ".journal")):
            path = url.removeprefix("journal:")
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(path))
        if url.startswith("sqlite:///"):
            path = Path(url.removeprefix("sqlite:///"))
            path.parent.mkdir(parents=True, exist_ok=True)
            # write-ahead logging (persistent in the file): readers never block the writer, and each trial's
            # commit is cheaper (~60 → ~36 ms per trial)
            with contextlib.closing(sqlite3.connect(path, timeout=SQLITE_TIMEOUT_S)) as connection:
                connection.execute("PRAGMA journal_mode=WAL")
            kwargs = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}
        else:
            kwargs = {}
        # a killed worker's trial goes stale after the grace period; it is then failed and re-run once with the
        # same parameters, so no proposal is lost (Optuna 5: RetryHeartbeatStaleTrialCallback)
        retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1)
        storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs, heartbeat_interval=HEARTBEAT_INTERVAL_S,
                                             grace_period=HEARTBEAT_GRACE_S, heartbeat_stale_trial_callback=retry)
        if url.startswith("sqlite:///"):
            _sync_normal(storage.engine)
        return storage
    except Exception as exc:  # SQLAlchemy raises many types; any of them means the URL is unusable
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserInputError(f"--storage: cannot open {url!r}: {first[:200]}") from None


def _sync_normal(engine) -> None:
    """``PRAGMA synchronous=NORMAL`` on every connection: in WAL mode a commit then appends to the log without
    waiting for the disk. A killed process loses nothing committed and the file is never corrupted; only a power
    cut can undo the last commits (sqlite.org/wal.html). Optuna commits once per suggested parameter, so the
    fsync of each commit was most of a trial's storage time."""
    from sqlalchemy import event

    def on_connect(connection, _record) -> None:
        connection.execute("PRAGMA synchronous=NORMAL")

    event.listen(engine, "connect", on_connect)
    engine.dispose()  # connections opened while the storage was set up are replaced by ones with the pragma


def _sampler(name: str, seed: int | None):
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True)
    raise UserInputError(f"--sampler: must be one of {', '.join(SAMPLERS)} (got {name!r})")


def _directions(objectives: list[str]) -> list[str]:
    return ["maximize" if OBJECTIVES[o][1] else "minimize" for o in objectives]


@dataclass(frozen=True)
class Problem:
    """What a study optimises: a space, one scenario, the objectives."""

    space: DesignSpace
    scenario: Scenario
    objectives: tuple[str, ...]

    @property
    def feasibility(self):
        return feasibility_of(self.space, self.scenario)


def _suggest(trial: optuna.trial.Trial, problem: Problem) -> Proposal:
    f = problem.feasibility
    hw = problem.space.hardware
    chip = trial.suggest_categorical("chip", f.chips)
    noc = trial.suggest_categorical("noc", f.nocs)
    m = trial.suggest_categorical("stacked_layers", [str(v) for v in f.stacked])
    n = trial.suggest_int("connected_layers", 1, max(f.stacked))
    sram = trial.suggest_categorical("sram", f.srams)
    hop = trial.suggest_categorical("hop_latency_scale", [f"{v:g}" for v in hw.hop_latency_scale])
    bws = tuple(float(trial.suggest_categorical(f"bw_scale_L{i + 1}", [f"{v:g}" for v in hw.level_bw_scale]))
                for i in range(f.levels))
    divs = [str(d) for d in divisors(f.n)]
    degrees = {d: int(trial.suggest_categorical(d, divs)) for d in DIMS if d != "dp"}
    rest = f.n // math.prod(degrees.values()) if f.n % math.prod(degrees.values()) == 0 else 1
    fsdp = trial.suggest_categorical("fsdp", [str(v).lower() for v in f.fsdp]) == "true"
    levels = _noc_levels(noc)
    point = HardwarePoint(chip, noc, int(m), n, sram, float(hop), bws[:levels])
    return Proposal(point, Strategy(degrees["tp"], degrees["ep"], degrees["sp"], degrees["cp"], max(rest, 1),
                                    degrees["pp"], fsdp))


def _noc_levels(noc: str) -> int:
    from deepstack import catalog

    return len(catalog.load("nocs", noc).levels)


REPORTS = memo.Table("search.optimize.reports", maxsize=4096, lru=True)  # (problem, repaired point) → report
"""Reports of the points this process evaluated: NSGA-II revisits points, and repair maps many proposals to one."""


def evaluate_proposal(problem: Problem, proposal: Proposal) -> tuple[Proposal, dict]:
    """Repair (CP-SAT) then evaluate; returns the evaluated point and its report."""
    repaired = problem.feasibility.repair(proposal)
    key = (problem, repaired)
    report = REPORTS.lookup(key)
    if report is None:
        point = design_point(problem.space, repaired.hardware, problem.scenario, repaired.strategy.to_schedule())
        report = evaluate(point, with_ttft="ttft" in problem.objectives).as_dict()
        REPORTS.put(key, report)
    return repaired, report


def _objective(problem: Problem):
    def run(trial: optuna.trial.Trial) -> list[float]:
        proposal = _suggest(trial, problem)
        started = time.perf_counter()
        repaired, report = evaluate_proposal(problem, proposal)
        trial.set_user_attr("evaluation_s", time.perf_counter() - started)  # repair + evaluation, for overheads
        metrics = report["metrics"]
        trial.set_user_attr("design", {**repaired.hardware.as_dict(), "schedule": repaired.strategy.label,
                                       "fsdp": repaired.strategy.fsdp})
        trial.set_user_attr("repaired", repaired != proposal)
        trial.set_user_attr("report", _jsonable(report))
        # the limit the evaluation held (the chip's, or the scenario's --max-temp-c)
        temperature, limit = metrics["temperature_c"], report["hardware"]["max_temp_c"]
        trial.set_constraint("thermal_c_over_limit", temperature - limit)
        return [metrics[OBJECTIVES[o][0]] for o in problem.objectives]

    return run


def _jsonable(data):
    return json.loads(json.dumps(data, default=str, allow_nan=True).replace("NaN", "null"))


def _worker(args: tuple) -> None:
    """One worker process: load the study and run its share of trials (spawned, so nothing is inherited)."""
    storage_url, study_name, space_name, scenario_json, objectives, sampler, seed, trials = args
    tune_gc()
    problem = Problem(load_space(space_name), Scenario.model_validate_json(scenario_json), tuple(objectives))
    storage = open_storage(storage_url)
    study = optuna.load_study(study_name=study_name, storage=storage, sampler=_sampler(sampler, seed))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study.optimize(_objective(problem), n_trials=trials, gc_after_trial=False)


@dataclass
class OptimizeResult:
    study: str
    storage: str
    trials: int
    added: int
    objectives: list[str]
    pareto: list[dict]
    files: dict[str, str]
    wall_s: float


def optimize(*, objectives: list[str], space: str | None, scenario: Scenario | None, sampler: str = "nsga2",
             trials: int = 40, study: str = "deepstack", storage: str | None = None, seed: int | None = None,
             workers: int = 1, out: str | None = None,
             progress: Callable[[int, int], None] | None = None) -> OptimizeResult:
    """Create or resume a study and add ``trials`` trials; write the Pareto front files."""
    if trials < 0 or trials > 1_000_000:
        raise UserInputError(f"--trials: must be in 0..1000000 (got {trials})")
    if not 1 <= workers <= 64:
        raise UserInputError(f"--workers: must be in 1..64 (got {workers})")
    _sampler(sampler, seed)  # validate the name before touching any storage
    design_space = load_space(space)
    if scenario is None:
        scenario = scenarios(design_space)[0]
    problem = Problem(design_space, scenario, tuple(objectives))
    problem.feasibility.repair(_any_proposal(problem))  # fail fast (one line) if the space is infeasible
    storage_url = storage or default_storage(study)
    store = open_storage(storage_url)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        the_study = optuna.create_study(study_name=study, storage=store, directions=_directions(objectives),
                                        sampler=_sampler(sampler, seed), load_if_exists=True)
    except Exception as exc:
        raise UserInputError(f"--storage: cannot use study {study!r} at {storage_url!r}: "
                             f"{str(exc).splitlines()[0][:200]}") from None
    _check_same_problem(the_study, problem, space)
    if isinstance(store, optuna.storages.RDBStorage):
        optuna.storages.fail_stale_trials(the_study)  # a killed worker's RUNNING trial becomes FAIL
        _fail_unbeaten(the_study, store)
    _fail_zombies(the_study)
    before = _completed(the_study)
    started = time.perf_counter()
    if workers == 1:
        callbacks = [lambda s, t: progress(_completed(s) - before, trials)] if progress else []
        the_study.optimize(_objective(problem), n_trials=trials, callbacks=callbacks, gc_after_trial=False)
    else:
        _run_workers(problem, storage_url, study, space, sampler, seed, trials, workers, the_study, before, progress)
    wall = time.perf_counter() - started
    front = pareto_front(the_study, list(objectives))
    files = write_front(front, the_study, list(objectives), Path(out or "studies"), study)
    return OptimizeResult(study, storage_url, _completed(the_study), _completed(the_study) - before,
                          list(objectives), front, files, wall)


def _fail_unbeaten(study, store) -> None:
    """Fail (and retry) RUNNING trials that never recorded a heartbeat although they started more than the grace
    period ago: their worker died between ``ask()`` and the heartbeat thread's first beat, a window Optuna's
    ``fail_stale_trials`` does not cover (it only judges trials that have a heartbeat row)."""
    import sqlalchemy

    cutoff = datetime.datetime.now() - datetime.timedelta(seconds=HEARTBEAT_GRACE_S)
    query = sqlalchemy.text(
        "SELECT t.number FROM trials t JOIN studies s ON s.study_id = t.study_id "
        "LEFT JOIN trial_heartbeats h ON h.trial_id = t.trial_id "
        "WHERE s.study_name = :name AND t.state = 'RUNNING' AND h.trial_id IS NULL AND t.datetime_start < :cutoff")
    with store.engine.connect() as connection:
        numbers = [row[0] for row in connection.execute(query, {"name": study.study_name, "cutoff": cutoff})]
    retry = store.get_heartbeat_stale_trial_callback()
    for number in numbers:
        study.tell(number, state=optuna.trial.TrialState.FAIL)
        if retry is not None:
            failed = next(t for t in study.get_trials(deepcopy=True) if t.number == number)
            retry(study, failed)


def _fail_zombies(study) -> None:
    """Fail RUNNING trials far older than any evaluation takes: a worker killed before its first heartbeat leaves
    one that heartbeats cannot detect (and a journal storage has no heartbeats at all)."""
    now = datetime.datetime.now()
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        if trial.datetime_start and (now - trial.datetime_start).total_seconds() > ZOMBIE_AGE_S:
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)


def _any_proposal(problem: Problem) -> Proposal:
    f = problem.feasibility
    hw = problem.space.hardware
    return Proposal(HardwarePoint(f.chips[0], f.nocs[0], f.stacked[0], 1, f.srams[0], hw.hop_latency_scale[0],
                                  (hw.level_bw_scale[0],) * _noc_levels(f.nocs[0])), Strategy(dp=f.n))


def _check_same_problem(study, problem: Problem, space: str | None) -> None:
    """A study keeps one problem: resuming it with other objectives or another scenario is refused."""
    signature = {"objectives": list(problem.objectives), "scenario": problem.scenario.model_dump(mode="json"),
                 "space": problem.space.name}
    stored = study.user_attrs.get("problem")
    if stored is None:
        study.set_user_attr("problem", signature)
    elif stored != signature:
        raise UserInputError(
            f"--study {study.study_name}: this study was created for {stored['objectives']} on space "
            f"{stored['space']!r} with another scenario; use a new --study name"
        )


def _completed(study) -> int:
    return sum(1 for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


def _run_workers(problem, storage_url, study, space, sampler, seed, trials, workers, the_study, before, progress):
    shares = [trials // workers + (1 if i < trials % workers else 0) for i in range(workers)]
    args = [((storage_url, study, space, problem.scenario.model_dump_json(), list(problem.objectives), sampler,
              None if seed is None else seed + i, share),) for i, share in enumerate(shares) if share]
    report = (lambda: progress(_completed(the_study) - before, trials)) if progress else None
    failed = [code for code in executor.run_spawned(_worker, args, report) if code]
    if failed:
        raise UserInputError(f"--workers: {len(failed)} worker(s) failed (exit codes {failed}); completed trials "
                             "are kept in the study, re-run to finish")


def study_points(storage: str, study: str) -> tuple[list[str], np.ndarray, int, float]:
    """(objectives, values of thermally feasible completed trials, completed trials, wall seconds) of a study."""
    store = open_storage(storage)
    try:
        the_study = optuna.load_study(study_name=study, storage=store)
    except KeyError:
        raise UserInputError(f"--study: no study named {study!r} in {storage}") from None
    problem = the_study.user_attrs.get("problem", {})
    objectives = problem.get("objectives")
    if not objectives:
        raise UserInputError(f"--study: {study!r} was not created by deepstack optimize")
    trials = the_study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    feasible = [t.values for t in trials if not any(c > 0 for c in (t.constraints or {}).values())]
    starts = [t.datetime_start for t in trials if t.datetime_start]
    ends = [t.datetime_complete for t in trials if t.datetime_complete]
    wall = (max(ends) - min(starts)).total_seconds() if starts and ends else 0.0
    return objectives, np.array(feasible, dtype=float).reshape(-1, len(objectives)), len(trials), wall
