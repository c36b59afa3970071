"""Multi-objective search with Optuna (the only module importing optuna; docs/architecture.md §5).

A trial proposes a hardware point and a schedule; CP-SAT repairs it to the nearest feasible point (area,
stacking, memory, pruning rules), so every evaluated trial is feasible by construction; thermal limits, known
only after evaluating, go through Optuna's constraint API. Studies live in an RDB (SQLite by default) or a
journal file and resume: re-running the same command adds ``trials`` more, or finishes a run an interrupt cut
short (:mod:`.resume`). The sampler runs on an in-memory
mirror of the study (:class:`Mirror`) and each batch of finished trials is stored in one write, so a killed run loses
only the batch it was evaluating and never leaves a RUNNING trial (the batched loop: :mod:`.ask_tell`). Elsewhere: the
options and defaults (:mod:`.optimize_options`), the paths a storage URL names (:mod:`.storage_paths`), the problem
(:mod:`.problem`), and what a run hands back and writes beside the study (:mod:`.optimize_report`).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import importlib.util
import json
import sqlite3
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import optuna

from deepstack.errors import RunInterruptedError, UserInputError
from deepstack.schema import Scenario
from deepstack.search import ask_tell
from deepstack.search.files import check_output_folder
from deepstack.search.interrupt import Interrupts
from deepstack.search.objectives import OBJECTIVES, parse_objectives  # noqa: F401 (re-exported: api)
from deepstack.search.optimize_options import DEFAULT_BATCH, DEFAULT_SEED, DEFAULT_TRIALS, SAMPLERS, check_options
from deepstack.search.optimize_report import OptimizeResult, write_run_report
from deepstack.search.problem import Problem, any_proposal
from deepstack.search.resume import RUN_ATTR, RunRecord
from deepstack.search.space import load_space, scenarios
from deepstack.search.storage_paths import (
    check_front_owner,
    check_storage_folder,
    default_storage,
    front_folder,
    is_journal,
    storage_file,
    storage_identity,
)
from deepstack.search.study_record import StudyRecord, check_inputs_unchanged, check_same_problem

# heartbeats and fail_stale_trials are marked experimental in Optuna 5 but are the documented recovery path
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

HEARTBEAT_INTERVAL_S = 5  # a running trial refreshes its heartbeat this often (RDB storages only)
HEARTBEAT_GRACE_S = 20  # a trial silent this long belongs to a killed worker and is failed on resume
ZOMBIE_AGE_S = 600  # a trial evaluates in seconds; one RUNNING for 10 minutes belongs to a dead worker
SQLITE_TIMEOUT_S = 60  # wait this long for another process's write lock instead of failing


def open_storage(url: str, create_folder: bool = False):
    """An Optuna storage for ``url``: SQLite/PostgreSQL (RDB, with heartbeats) or ``journal:PATH``. The folder of
    a storage file must exist unless ``create_folder`` (the default storage's ``studies/``): a mistyped
    ``--storage`` path is refused before anything is created."""
    if url.startswith("postgres") and importlib.util.find_spec("psycopg") is None:
        raise UserInputError('--storage: a PostgreSQL URL needs psycopg: pip install "deepstack-dse[postgres]"')
    path = storage_file(url)
    if check_storage_folder(url, create_folder):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserInputError(f"--storage: cannot create the folder {path.parent}: {exc.strerror or exc}") from None
    try:
        if is_journal(url):
            return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
        if url.startswith("sqlite:///"):
            path = Path(url.removeprefix("sqlite:///"))
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


# The study's in-memory mirror (issue 20, acceptance 4). The persistent study (SQLite, PostgreSQL or a journal file)
# stays the record; the sampler runs on an Optuna InMemoryStorage study holding the same trials, loaded when the run
# starts and refreshed before each batch with the trials other processes added (only when the stored trial count
# has grown). Proposals are asked and told on the mirror; a batch's finished trials go to the persistent study in ONE
# write (parameters, values, user and system attributes, constraint), so the stored study never holds a RUNNING
# trial of this path: a SIGKILL loses only the batch being evaluated. Queued (WAITING) trials of the persistent study
# (enqueued with Optuna's API, or left by an older version's interrupted run) are mirrored as WAITING with their
# fixed parameters, so ``ask`` takes them first; when one completes, its completed copy is written (system attribute
# ``consumed_waiting``: the queued trial's number), then the queued trial is marked FAIL. A kill between those two
# writes leaves both: the next run sees the copy and fails the queued trial without evaluating it again.
CONSUMED = "consumed_waiting"  # system attribute of a trial that completed a queued trial: the queued trial's number
COMPLETE = optuna.trial.TrialState.COMPLETE
FINISHED = (COMPLETE, optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED)
WAITING = optuna.trial.TrialState.WAITING


class Mirror:
    """An in-memory copy of ``study`` (its finished and queued trials) that samples with ``sampler``."""

    def __init__(self, study: optuna.Study, sampler_name: str, seed: int | None, run: str | None = None) -> None:
        self.study, self.store, self.study_id = study, study._storage, study._study_id
        self.sampler_name, self.seed, self.run = sampler_name, seed, run
        sampler = _sampler(sampler_name, seed)
        backend = getattr(self.store, "_backend", self.store)  # Optuna wraps an RDB storage in a cache
        self.rdb = backend if isinstance(backend, optuna.storages.RDBStorage) else None
        self.memory = optuna.create_study(directions=[d.name.lower() for d in study.directions], sampler=sampler)
        self.known: set[int] = set()  # persistent trial numbers mirrored (or deliberately left out: RUNNING ones)
        self.queued: dict[int, optuna.trial.FrozenTrial] = {}  # mirror trial id → the persistent WAITING trial
        self.completed = 0  # COMPLETE trials of the persistent study, as far as this process knows
        self.finished = 0  # finished trials (COMPLETE, FAIL, PRUNED), as far as this process knows
        self.seen = 0
        # mirror trial id → the user attributes its persistent copy gets: kept off the mirror, which only samples,
        # because Optuna deep-copies a trial whole when it is told (milliseconds for a front of schedules)
        self.attrs: dict[int, dict] = {}
        self.refresh()

    def refresh(self) -> None:
        """Mirror the persistent study's trials not mirrored yet (one count query when nothing changed)."""
        count = _count(self.rdb, self.study_id) if self.rdb is not None else self.store.get_n_trials(self.study_id)
        if count == self.seen:
            return
        trials = self.store.get_all_trials(self.study_id, deepcopy=False)
        self.seen = len(trials)
        consumed = {t.system_attrs[CONSUMED] for t in trials if CONSUMED in t.system_attrs}
        for t in sorted(trials, key=lambda t: t.number):
            if t.number in self.known:
                continue
            self.known.add(t.number)
            if t.state in FINISHED:
                self.memory.add_trial(t)
                self.finished += 1
                self.completed += t.state == optuna.trial.TrialState.COMPLETE
            elif t.state == WAITING and t.number in consumed:  # completed by a run killed before marking it
                self._mark_consumed(t)
            elif t.state == WAITING:
                self.queued[self.memory._storage.create_new_trial(self.memory._study_id, template_trial=t)] = t
            # a RUNNING trial belongs to another process (or an older version's killed run): not sampled from

    def ask(self, size: int) -> list[optuna.trial.Trial]:
        return [self.memory.ask() for _ in range(size)]

    def resume_generation(self) -> None:
        """Give a genetic sampler (NSGA-II, NSGA-III) the parent population of a generation the study is in the
        middle of, as the run that began the generation holds it. Optuna computes a generation's parents at its
        first trial and caches them in the study's system attributes, which the mirror does not store: a run
        resumed mid-generation would compute them again at its first trial, and a computed population comes back
        in selection order where a cached one comes back in trial order, so that trial's parents (and from it
        the rest of the study) would differ from the uninterrupted run's. A run starting a new generation
        computes them at its first trial, as the uninterrupted one did."""
        sampler = self.memory.sampler
        if not isinstance(sampler, optuna.samplers.BaseGASampler):
            return
        key = sampler._get_generation_key()
        generations = [t.system_attrs[key] for t in self.memory.get_trials(deepcopy=False, states=(COMPLETE,))
                       if key in t.system_attrs]
        current = max(generations, default=0)
        if current >= 1 and generations.count(current) < sampler.population_size:
            sampler.get_parent_population(self.memory, current)  # computed and cached, as at its first trial

    def enqueue(self, params: dict, user_attrs: dict, skip_if_exists: bool = True) -> None:
        self.memory.enqueue_trial(params, user_attrs=user_attrs, skip_if_exists=skip_if_exists)

    def tell(self, trial: optuna.trial.Trial, values: list[float] | None, user_attrs: dict) -> None:
        """Tell the mirror a trial's values (``None``: it failed); ``user_attrs`` go to its persistent copy."""
        self.attrs[trial._trial_id] = user_attrs
        if values is None:
            self.memory.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            self.memory.tell(trial, values)

    def write(self, told: list[optuna.trial.Trial], study_attrs=None) -> list[int]:
        """Write a batch of told mirror trials to the persistent study (RDB: one transaction; a journal: one
        appended operation per trial); returns their persistent numbers. ``study_attrs(numbers)``, called once the
        numbers are known, returns study user attributes written with the batch (RDB: in its transaction)."""
        copies, sources = [], []
        for trial in told:
            frozen = self.memory._storage.get_trial(trial._trial_id)
            sources.append(self.queued.pop(trial._trial_id, None))
            system = {**frozen.system_attrs, **({CONSUMED: sources[-1].number} if sources[-1] else {}),
                      **({RUN_ATTR: self.run} if self.run else {})}
            copies.append(optuna.trial.FrozenTrial(
                number=0, state=frozen.state, value=None, values=frozen.values, datetime_start=frozen.datetime_start,
                datetime_complete=frozen.datetime_complete, params=frozen.params, distributions=frozen.distributions,
                user_attrs={**frozen.user_attrs, **self.attrs.pop(trial._trial_id, {})}, system_attrs=system,
                intermediate_values={}, trial_id=0))

        def stored(numbers: list[int]) -> dict:
            self.known.update(numbers)
            self.seen += len(numbers)
            self.finished += len(numbers)
            self.completed += sum(c.state == optuna.trial.TrialState.COMPLETE for c in copies)
            return study_attrs(numbers) if study_attrs else {}

        if self.rdb is not None:
            numbers = _insert(self.rdb, self.study_id, copies, stored)
        else:  # a journal file: one appended operation per trial and attribute
            numbers = [self.store.get_trial_number_from_id(self.store.create_new_trial(self.study_id, template_trial=c))
                       for c in copies]
            for key, value in stored(numbers).items():
                self.study.set_user_attr(key, value)
        for source in sources:
            if source is not None:
                self._mark_consumed(source)
        return numbers

    def _mark_consumed(self, queued: optuna.trial.FrozenTrial) -> None:
        with contextlib.suppress(Exception):  # another process may have completed or consumed it already
            self.store.set_trial_state_values(queued._trial_id, optuna.trial.TrialState.FAIL)

    def reseed(self) -> None:
        """Reseed the sampler from the run's seed and the study's finished-trial count, before each batch: the
        proposals of a batch then depend only on the seed and the trials before it, so a run resumed after an
        interrupt proposes exactly what the uninterrupted run would have (no seed: left random). The sampler's
        random states are reseeded in place, as a new sampler with that seed would hold them (NSGA-II keeps its
        generation cache, rebuilt over every trial by a new one); a sampler without them is made anew."""
        if self.seed is None:
            return
        derived = int(np.random.SeedSequence([self.seed, self.finished]).generate_state(1)[0])
        sampler = self.memory.sampler
        states = [getattr(sampler, "_rng", None), getattr(getattr(sampler, "_random_sampler", None), "_rng", None)]
        if all(hasattr(state, "rng") for state in states):  # Optuna's LazyRandomState, as its constructors seed it
            for state in states:
                state.rng.seed(derived)
        else:
            self.memory.sampler = _sampler(self.sampler_name, derived)


def _count(rdb, study_id: int) -> int:
    """The study's trials, counted by the database (Optuna's ``get_n_trials`` reads every trial)."""
    from optuna.storages._rdb import models
    from sqlalchemy import func

    with rdb.engine.connect() as connection:
        table = models.TrialModel.__table__
        query = table.select().with_only_columns(func.count()).where(table.c.study_id == study_id)
        return int(connection.execute(query).scalar())


def _insert(rdb, study_id: int, trials: list[optuna.trial.FrozenTrial], study_attrs) -> list[int]:
    """Write finished (or queued) trials whole, in one transaction, with Optuna's own tables and numbering (the
    study row locked, numbers counted from the trial ids, as ``RDBStorage.create_new_trial`` does), and the study
    user attributes ``study_attrs(numbers)`` returns; returns the numbers. SQLAlchemy Core statements, built once:
    Optuna's template path costs a query per parameter and attribute (about 50 ms a trial on SQLite), the ORM's
    unit of work a few ms a batch, and a transaction of its own for the attributes a commit more."""
    from optuna.distributions import distribution_to_json
    from optuna.storages._rdb.storage import _create_scoped_session

    sql = _statements()
    with _create_scoped_session(rdb.scoped_session) as session:
        connection = session.connection()
        if connection.execute(sql.lock_study, {"study": study_id}).first() is None:
            raise KeyError(f"no study with study_id {study_id}")  # as Optuna's find_or_raise_by_id
        ids = [connection.execute(sql.trial, {"study_id": study_id, "number": None, "state": t.state,
                                              "datetime_start": t.datetime_start,
                                              "datetime_complete": t.datetime_complete}).inserted_primary_key[0]
               for t in trials]
        # the study is locked: the batch's numbers follow on from the trials before its first
        first = connection.execute(sql.trials_before, {"study": study_id, "first": ids[0]}).scalar()
        numbers = [first + i for i in range(len(ids))]
        connection.execute(sql.number, [{"tid": tid, "new_number": n} for tid, n in zip(ids, numbers, strict=True)])
        values, params, user, system = [], [], [], []
        for tid, trial in zip(ids, trials, strict=True):
            for objective, value in enumerate(trial.values or ()):
                number, kind = sql.value_repr(value)
                values.append({"trial_id": tid, "objective": objective, "value": number, "value_type": kind})
            for name, value in trial.params.items():
                distribution = trial.distributions[name]
                params.append({"trial_id": tid, "param_name": name,
                               "param_value": distribution.to_internal_repr(value),
                               "distribution_json": distribution_to_json(distribution)})
            user += [{"trial_id": tid, "key": k, "value_json": json.dumps(v)} for k, v in trial.user_attrs.items()]
            system += [{"trial_id": tid, "key": k, "value_json": json.dumps(v)} for k, v in trial.system_attrs.items()]
        for statement, batch in ((sql.values, values), (sql.params, params), (sql.user_attrs, user),
                                 (sql.system_attrs, system)):  # one executemany per table
            if batch:
                connection.execute(statement, batch)
        attrs = study_attrs(numbers)
        stored = dict(connection.execute(sql.study_attr_ids, {"study": study_id, "keys": list(attrs)}).all())
        for key, value in attrs.items():
            if key in stored:
                connection.execute(sql.study_attr_update, {"attr": stored[key], "value_json": json.dumps(value)})
            else:
                connection.execute(sql.study_attr, {"study_id": study_id, "key": key, "value_json": json.dumps(value)})
        return numbers


@functools.cache
def _statements() -> SimpleNamespace:
    """The statements of :func:`_insert` on Optuna's tables (built once: SQLAlchemy caches their compiled form)."""
    import sqlalchemy
    from optuna.storages._rdb import models

    bind = sqlalchemy.bindparam
    studies, trials = models.StudyModel.__table__, models.TrialModel.__table__
    attrs = models.StudyUserAttributeModel.__table__
    return SimpleNamespace(
        lock_study=sqlalchemy.select(studies.c.study_id).where(studies.c.study_id == bind("study")).with_for_update(),
        trial=sqlalchemy.insert(trials),
        trials_before=sqlalchemy.select(sqlalchemy.func.count()).where(trials.c.study_id == bind("study"),
                                                                       trials.c.trial_id < bind("first")),
        number=trials.update().where(trials.c.trial_id == bind("tid")).values(number=bind("new_number")),
        value_repr=models.TrialValueModel.value_to_stored_repr,
        values=sqlalchemy.insert(models.TrialValueModel.__table__),
        params=sqlalchemy.insert(models.TrialParamModel.__table__),
        user_attrs=sqlalchemy.insert(models.TrialUserAttributeModel.__table__),
        system_attrs=sqlalchemy.insert(models.TrialSystemAttributeModel.__table__),
        study_attr_ids=sqlalchemy.select(attrs.c.key, attrs.c.study_user_attribute_id).where(
            attrs.c.study_id == bind("study"), attrs.c.key.in_(bind("keys", expanding=True))),
        study_attr_update=attrs.update().where(attrs.c.study_user_attribute_id == bind("attr")),
        study_attr=sqlalchemy.insert(attrs))


def optimize(*, objectives: list[str], space: str | None, scenario: Scenario | None, sampler: str = "nsga2",
             trials: int = DEFAULT_TRIALS, study: str = "deepstack", storage: str | None = None,
             seed: int | None = DEFAULT_SEED, workers: int = 1, out: str | None = None, batch: int = DEFAULT_BATCH,
             until_stall: int | None = None, inner: str = "screen", refine: int | None = None,
             progress: Callable[[int, int], None] | None = None,
             log: Callable[[str], None] | None = None) -> OptimizeResult:
    """Create or resume a study and add ``trials`` trials, the last ``refine`` of them local search around the
    front (fewer if ``until_stall`` trials pass without the hypervolume growing, or a SIGINT/SIGTERM ends the run:
    then ``run["interrupted"]`` names the signal and the next call with the same options finishes the run, as if
    never interrupted); write the Pareto front files and the hypervolume PNG."""
    refine = check_options(trials=trials, workers=workers, batch=batch, until_stall=until_stall, refine=refine,
                           inner=inner, seed=seed, study=study)
    _sampler(sampler, seed)  # validate the name before touching any storage
    started = time.perf_counter()
    design_space = load_space(space)
    if scenario is None:
        scenario = scenarios(design_space)[0]
    problem = Problem(design_space, scenario, tuple(objectives))
    problem.feasibility.repair(any_proposal(problem))  # fail fast (one line) if the space is infeasible
    storage_url = storage or default_storage(study)
    folder = front_folder(out, storage_url)
    check_storage_folder(storage_url, may_create=storage is None)
    # before any trial runs: the front is written there at the end (beside the storage file unless --out says)
    check_output_folder(folder, "--out" if out is not None else "--storage")
    check_front_owner(folder, study, storage_url)  # never replace another storage's front of the same name
    store = open_storage(storage_url, create_folder=storage is None)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        the_study = optuna.create_study(study_name=study, storage=store, directions=_directions(objectives),
                                        sampler=_sampler(sampler, seed), load_if_exists=True)
    except Exception as exc:
        raise UserInputError(f"--storage: cannot use study {study!r} at {storage_url!r}: "
                             f"{str(exc).splitlines()[0][:200]}") from None
    check_same_problem(the_study, problem)
    if isinstance(store, optuna.storages.RDBStorage):
        optuna.storages.fail_stale_trials(the_study)  # an older version's killed trial (heartbeats) becomes FAIL
    _fail_zombies(the_study)
    plan = {"trials": trials, "refine": refine, "batch": batch, "seed": seed, "sampler": sampler, "inner": inner,
            "until_stall": until_stall}
    # a run an interrupt cut short, with this plan, is finished first
    this_run = RunRecord(the_study, plan, the_study.get_trials(deepcopy=False, states=FINISHED))
    setup_s, running = time.perf_counter() - started, time.perf_counter()
    run = None
    with Interrupts() as stops:
        try:
            run = ask_tell.run(Mirror(the_study, sampler, seed, this_run.key), the_study, problem, trials, batch,
                               workers, until_stall, progress, log, stops, inner, refine, this_run.earlier)
        finally:
            if run is not None and not run["interrupted"]:
                this_run.finish()
            else:  # a signal or an error: the next run with this plan finishes it
                this_run.save(interrupted=True)
        wall = time.perf_counter() - running
        check_inputs_unchanged(the_study, load_space(space))  # the files as they are now
        # still under the handlers: a signal while the front files are written waits for the last of them
        front, files = write_run_report(the_study, list(objectives), folder, study, design_space, run, setup_s,
                                        storage_identity(storage_url))
    if stops.signal is not None and not run["interrupted"]:
        raise RunInterruptedError(f"interrupted by {stops.name} after the run's last trial: the study holds its "
                                  f"{_finished(the_study):,} trials and the front files in {folder}/ are complete "
                                  "(the run had finished: the same command again would add a new run's trials)")
    run.update({"seed": seed, "batch": batch})
    return OptimizeResult(study, storage_url, _finished(the_study), run["told"] - run["resumed_from"],
                          list(objectives), front, files, wall, run)


def _fail_zombies(study) -> None:
    """Fail RUNNING trials far older than any evaluation takes: an older version's worker killed before its first
    heartbeat left them (this version stores only finished or queued trials; a journal has no heartbeats)."""
    now = datetime.datetime.now()
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        if trial.datetime_start and (now - trial.datetime_start).total_seconds() > ZOMBIE_AGE_S:
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)


def _finished(study) -> int:
    """The study's trials (complete, or failed: a proposal no schedule fits), what ``--trials`` counts."""
    return len(study.get_trials(deepcopy=False, states=FINISHED))


def study_points(storage: str, study: str) -> tuple[list[str], np.ndarray, int, float]:
    """(objectives, every kept thermally feasible point — designs × schedules —, design-point evaluations spent,
    wall seconds) of a study. A single-level trial counts one evaluation and keeps its own values."""
    store = open_storage(storage)
    try:
        the_study = optuna.load_study(study_name=study, storage=store)
    except KeyError:
        raise UserInputError(f"--study: no study named {study!r} in {storage}") from None
    problem = the_study.user_attrs.get("problem", {})
    objectives = problem.get("objectives")
    if not objectives:
        raise UserInputError(f"--study: {study!r} was not created by deepstack optimize")
    record = StudyRecord.load(the_study, objectives)
    trials = the_study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    starts = [t.datetime_start for t in trials if t.datetime_start]
    ends = [t.datetime_complete for t in trials if t.datetime_complete]
    wall = (max(ends) - min(starts)).total_seconds() if starts and ends else 0.0
    values = np.array([[row[o] for o in objectives] for _, row in record.rows], dtype=float)
    return objectives, values.reshape(-1, len(objectives)), record.evaluations, wall
