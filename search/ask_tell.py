"""The batched ask/tell loop of ``deepstack optimize`` (without Optuna: the study and its in-memory mirror are
:class:`deepstack.search.optimize.Mirror`'s, the one module importing Optuna).

Per batch: mirror the trials other processes added, ask a batch of proposals on the mirror (no storage round
trip), repair them with CP-SAT, solve their hardware points on the worker pool, tell the mirror and write the
batch's trials to the persistent study in one call (one transaction on an RDB), with the hypervolume after the batch
and the study's user attributes. A SIGINT/SIGTERM during the evaluation drops the batch: the next run of the same
command proposes it again (:mod:`.resume`).
"""

from __future__ import annotations

import time

from deepstack.jsonutil import finite
from deepstack.models.parallel.strategies import Strategy
from deepstack.search import bilevel, executor
from deepstack.search.feasibility import Proposal
from deepstack.search.space import HardwarePoint
from deepstack.search.study_record import StudyRecord, trial_counts
from deepstack.wording import counted

QUEUED_EXACT = ("warm_start", "retry_of", "requeued")  # queued trials solved exactly (their user attributes)
REFINE_BATCH = 32  # trials per batch of the local search (no sampler waits on them)
# where a run's time goes (run["timing_s"]): per batch, the sampler (on the in-memory mirror), CP-SAT repair, the
# inner solves, the storage (reading other processes' trials, one write per batch, the study's attributes) and the
# hypervolume; once, the study's set-up and the front files
PHASES = ("ask", "repair", "evaluate", "store", "bookkeeping", "setup", "front")


def run(mirror, the_study, problem, trials: int, batch: int, workers: int, until_stall: int | None, progress, log,
        stops, inner: str, refine: int = 0, earlier: tuple = ()) -> dict:
    """Tell ``trials`` trials (``earlier`` of them already in the study: a cut-short run being finished), unless the
    hypervolume stalls or a signal comes. The last ``refine`` of them are local search around the front
    (:func:`_refine`); trials it does not need go back to the sampler. Per batch: ask on the mirror (reseeded from
    the study's trial count, so a resumed run proposes what the uninterrupted one would), solve the hardware
    points (in the pool), tell the mirror and write the batch to the persistent study in one call (each trial
    carrying the run's key: what a run has told is counted from the study, :mod:`.resume`)."""
    objectives = list(problem.objectives)
    tick = time.perf_counter()
    record = StudyRecord.load(the_study, objectives)
    # the counts are the run's, its cut-short part's trials included (as "told" is)
    run = {"told": len(earlier), "planned": trials, "resumed_from": len(earlier), "refined": 0, "interrupted": None,
           "stalled": False, **trial_counts(list(earlier))}
    clock = run["timing_s"] = {phase: 0.0 for phase in PHASES}
    tick = _lap(clock, "setup", tick)  # once per run: reading what the study holds
    mirror.refresh()
    mirror.resume_generation()  # a run resumed mid-generation proposes as the uninterrupted one would
    for params in bilevel.warm_start(problem):  # the catalog's named designs first (on the mirror only)
        if not record.has_params(params):
            mirror.enqueue(params, {"warm_start": True})
    with executor.chunk_runner("local", workers, shelter=stops.deferred) as run_chunks:

        def one_batch(size: int, announce: bool = True) -> bool:
            """Ask, solve, tell and store one batch (``announce``: log the hypervolume after it); False when a
            signal interrupted it (its proposals are not stored: the next run proposes them again)."""
            tick = time.perf_counter()
            mirror.refresh()
            tick = _lap(clock, "store", tick)
            mirror.reseed()
            asked = mirror.ask(size)
            proposals = [_suggest(trial, problem) for trial in asked]
            tick = _lap(clock, "ask", tick)
            tasks = []
            for trial, proposal in zip(asked, proposals, strict=True):
                hardware = problem.feasibility.repair(proposal).hardware
                queued = trial._trial_id in mirror.queued or "requeued" in trial.user_attrs
                exact = inner == "exact" or not record.elite or queued or any(
                    k in trial.user_attrs for k in QUEUED_EXACT) or trial.user_attrs.get("refine") == "exact"
                tasks.append(bilevel.InnerTask(problem, hardware, None if exact else record.elite))
            tick = _lap(clock, "repair", tick)
            try:
                with stops.evaluating():
                    results = _solve(run_chunks, tasks, workers)
                tick = _lap(clock, "evaluate", tick)
            except BaseException as exc:
                if not stops.ended(exc):
                    raise
                run["interrupted"] = stops.name or "SIGINT"
                return False
            told = [_tell(mirror, *job, record, run) for job in zip(asked, proposals, tasks, results, strict=True)]

            def account(numbers: list[int]) -> dict:
                """Count the batch under its trials' numbers, and the hypervolume after it: the study attributes
                written with the batch."""
                for number, (result, task), solved in zip(numbers, told, tasks, strict=True):
                    record.count(result, number, task, solved)
                since = time.perf_counter()
                record.progress.record(mirror.completed, record.evaluations)
                spent = time.perf_counter() - since
                clock["bookkeeping"] += spent
                clock["store"] -= spent  # the lap below counts it too
                return record.attributes()

            mirror.write(asked, account)  # one write: the batch and the study's attributes
            hv = record.progress.history[-1][2]
            tick = _lap(clock, "store", tick)
            if progress:
                progress(run["told"], trials)
            if log and announce:
                log(f"trials {mirror.completed}: hypervolume {hv:.6g}, {record.evaluations} evaluations, "
                    f"front {counted(len(record.front_rows()), 'design × schedule row')}")
            return True

        def sample(until: int) -> None:
            while run["told"] < until and not stops.stopped and not run["stalled"]:
                if not one_batch(min(batch, until - run["told"])):
                    return
                if until_stall and record.progress.stalled(until_stall):
                    run["stalled"] = True

        sampled = trials - min(refine, trials)  # the sampler's share; the local search has the rest
        sample(sampled)
        if refine > 0 and not run["interrupted"]:
            run["refined"] = max(0, run["told"] - sampled)  # a resumed run's earlier ones
            _refine(problem, record, run, batch, stops, one_batch, log, mirror,
                    until=trials if not run["stalled"] else min(trials, run["told"] + refine))
            sample(trials)  # the trials the local search did not need
    if stops.stopped and not run["interrupted"]:
        run["interrupted"] = stops.name
    return run


def _refine(problem, record: StudyRecord, run: dict, batch: int, stops, one_batch, log, mirror, until: int) -> None:
    """Pareto local search around the front until ``until`` trials are told or it finds nothing new: every point within
    two moves of a front design (:func:`deepstack.search.bilevel.neighbours`: another chip, NoC or SRAM option, one
    step of m, n or the hop latency, or any other bandwidth of one level) not tried yet is screened, nearest first,
    and a front design found by a screen is solved exactly. Each batch takes the next points around the front as it
    stands (so a resumed run continues exactly where the interrupted one stopped). The sampler finds the region;
    this finds its corner, which often needs two moves at once (a chip whose NoC is cheaper at a lower link
    bandwidth fits one more PE per device)."""
    size = max(batch, REFINE_BATCH)  # the points are known up front: bigger batches, fewer writes
    while not stops.stopped and run["told"] < until:
        jobs = _refine_jobs(problem, record, min(size, until - run["told"]))
        if not jobs:
            return
        for hardware, how in jobs:
            mirror.enqueue(bilevel.trial_params(problem, hardware), {"refine": how}, skip_if_exists=False)
        if not one_batch(len(jobs), announce=False):
            return
        run["refined"] += len(jobs)
        if log:
            log(f"refine: {len(jobs)} points around {len(record.front_hardware())} front designs, {run['refined']} "
                f"refining trials so far: hypervolume {record.progress.history[-1][2]:.6g}, "
                f"{record.evaluations} evaluations, front {len(record.front_rows())} designs × schedules")


def _refine_jobs(problem, record: StudyRecord, limit: int) -> list[tuple]:
    """The next ``limit`` points of the local search, as (hardware point, "exact" or "screen"): front designs not
    solved exactly yet, then untried points one move from a front design, then two moves."""
    feasibility = problem.feasibility
    todo: dict = {}  # hardware point → "exact" or "screen", in the order they are tried
    fronts = record.front_hardware()
    for hardware in fronts:
        if hardware not in record.solved_exactly:
            todo[hardware] = "exact"
    for ring in range(2):
        for hardware in fronts:
            near = bilevel.neighbours(problem, hardware)
            if ring:
                near = [far for point in near for far in bilevel.neighbours(problem, point)]
            for point in near:
                if len(todo) >= limit:
                    return list(todo.items())[:limit]  # front designs alone may already be more than the limit
                repaired = feasibility.repair(Proposal(point, Strategy(dp=feasibility.n))).hardware
                if repaired not in record.tried and repaired not in todo:
                    todo[repaired] = "screen"
    return list(todo.items())[:limit]


def _tell(mirror, trial, proposal, task, result, record: StudyRecord, run: dict) -> tuple:
    """Tell the mirror a trial's values, with its attributes (its design, the point's Pareto set of schedules, what
    it cost) for its persistent copy; returns (result, task or None: what ``record.count`` keeps once the trial is
    stored)."""
    repaired = task.hardware != proposal.hardware
    solve = {"inner": "exact" if task.only is None else "screen", "evaluations": result.evaluations,
             "evaluation_s": result.evaluation_s, "repaired": repaired, "hardware": task.hardware.as_dict()}
    run["repaired"] += repaired
    run["told"] += 1
    if result.representative is None:  # no PE or no schedule fits: nothing to tell but the failure
        run["infeasible"] += 1
        mirror.tell(trial, None, {"solve": {**solve, "infeasible": True}})
        return result, None
    best = result.representative
    trial.set_constraint("thermal_c_over_limit", result.over_limit_c)
    run["over_thermal_limit"] += result.over_limit_c > 0
    mirror.tell(trial, bilevel.values(best, record.objectives), {
        "solve": solve,
        "design": {**task.hardware.as_dict(), "schedule": best["schedule"], "fsdp": best["fsdp"]},
        "pareto_schedules": [bilevel.front_row(r, record.objectives) for r in result.front],
        "report": finite(result.report)})
    return result, task


def _suggest(trial, problem) -> Proposal:
    """The hardware point a trial proposes (the schedule is solved inside the trial, :mod:`.bilevel`)."""
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
    point = HardwarePoint(chip, noc, int(m), n, sram, float(hop), bws[:_noc_levels(noc)])
    return Proposal(point, Strategy(dp=f.n))


def _noc_levels(noc: str) -> int:
    from deepstack import catalog

    return len(catalog.load("nocs", noc).levels)


def _lap(clock: dict, phase: str, since: float) -> float:
    now = time.perf_counter()
    clock[phase] += now - since
    return now


def _solve(run_chunks, tasks: list, workers: int) -> list:
    """The batch's inner problems, on the pool (one chunk per worker) or here."""
    share = -(-len(tasks) // max(1, workers))
    chunks = [(i, tasks[i * share:(i + 1) * share]) for i in range(-(-len(tasks) // share))]
    out: dict[int, list] = {}
    run_chunks(bilevel.solve_chunk, chunks, lambda index, results: out.__setitem__(index, results))
    return [result for index in sorted(out) for result in out[index]]

