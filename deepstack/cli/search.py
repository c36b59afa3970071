"""The design-space searches: ``deepstack optimize``, ``sweep``, ``compare`` and ``dashboard``.
Registered on the app by deepstack/cli/__init__.py, in the order --help lists them."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from deepstack import api, report
from deepstack.cli.common import JsonFlag, SpaceOption, _bar, with_space_scenario
from deepstack.wording import counted


@with_space_scenario
def optimize(
    objective: Annotated[str, typer.Option(help="Comma-separated: stps, tokens_per_joule, utps, ttft.")] = (
        "stps,tokens_per_joule"),
    scenario: dict | None = None,  # the scenario flags (with_space_scenario)
    space: SpaceOption = None,
    size: Annotated[bool, typer.Option("--size", help="Print the space's raw size and exit.")] = False,
    sampler: Annotated[str, typer.Option(help="nsga2 (default) or tpe.")] = "nsga2",
    trials: Annotated[int, typer.Option(
        help="Trials this run adds to the study, local search included (after an interrupt, the same command "
             "adds only what the cut-short run did not).")] = 1000,
    study: Annotated[str, typer.Option(help="Study name (re-running continues it).")] = "deepstack",
    storage: Annotated[str | None, typer.Option(
        help="sqlite:///PATH.db (default studies/<study>.db), postgresql://…, or journal:PATH (a file's folder "
             "must exist).")] = None,
    seed: Annotated[int, typer.Option(help="Sampler seed (the same seed gives the same front).")] = 0,
    workers: Annotated[int, typer.Option(help="Processes solving each batch's hardware points.")] = 1,
    trials_per_batch: Annotated[int | None, typer.Option(
        help="Trials asked, solved and told together (default 4).")] = None,
    until_stall: Annotated[int | None, typer.Option(
        help="Stop early when the hypervolume has not grown for this many trials.")] = None,
    inner: Annotated[str, typer.Option(help="screen (default: a sampled point tries the elite schedules) or exact "
                                            "(every schedule that fits).")] = "screen",
    refine: Annotated[int | None, typer.Option(
        help="How many of the --trials are local search around the front (default 60 %): every design within two "
             "moves (chip, NoC, SRAM, one step of m, n, hop latency or a level's bandwidth) of a front design is "
             "screened and front designs are solved exactly; what it does not need goes back to the sampler "
             "(0: none).")] = None,
    out: Annotated[str | None, typer.Option(
        help="Folder for <study>.pareto.csv/json/html/png and <study>.hypervolume.png (default: the folder of the "
             "--storage file, studies/ for the default storage or a database server).")] = None,
    json_out: JsonFlag = False,
) -> int | None:
    """Search the design space for the Pareto front of the objectives: Optuna proposes hardware points (CP-SAT
    repairs them), each trial solves the point's schedules with the schedule engine and keeps its Pareto set of
    schedules; the catalog's named designs are tried first. Prints the hypervolume after every batch; Ctrl-C
    (SIGINT) or SIGTERM keeps every finished trial and exits with status 130: the same command then finishes the
    run, and the study ends as an uninterrupted run would have left it.

    Example: deepstack optimize --objective stps,tokens_per_joule --trials 40
    """
    if size:
        result = api.space_size(space)
        report.print_json(result) if json_out else print(f"{result['raw_size']:.3e}")
        return
    # the bar only on a terminal: a transient bar on a pipe leaves a blank line before any error
    with report.progress_bar(f"study {study}", trials, enabled=not json_out and sys.stderr.isatty()) as advance:
        result = api.run_optimize(objective=objective, **scenario, space=space, sampler=sampler, trials=trials,
                                  study=study, storage=storage, seed=seed, workers=workers, out=out,
                                  progress=advance, batch_size=trials_per_batch, until_stall=until_stall,
                                  log=None if json_out else _optimize_log, inner=inner, refine=refine)
    if json_out:
        report.print_json(result)
    else:
        report.pareto(result)
        _optimize_summary(result)
    return 130 if result["run"].get("interrupted") else None


def _optimize_log(line: str) -> None:
    print(line, flush=True)


def _optimize_summary(result: dict) -> None:
    """What the run did: counts, hypervolume, evaluations, and why it stopped."""
    run = result["run"]
    refined = f" ({run['refined']} of them refining the front)" if run.get("refined") else ""
    earlier = (f" ({run['resumed_from']} of them by the interrupted run this one finished)" if run.get("resumed_from")
               else "")
    print(f"this run: {counted(run['told'], 'trial')} told{earlier}{refined}, {counted(run['repaired'], 'proposal')} "
          f"repaired, {run['infeasible']} infeasible, {run['over_thermal_limit']} over the thermal limit; hypervolume "
          f"{run['hypervolume']:.6g} (seed {run['seed']}); {run['evaluations']} design-point evaluations in the study")
    if run.get("stalled"):
        left = run["planned"] - run["told"]
        if left > 0:
            print(f"stopped {left} trial{'s' * (left != 1)} early: the hypervolume did not grow for the --until-stall "
                  "trials")
        elif run.get("refined"):  # the stall ended the sampler's share; the local search ran the rest
            print("the sampler stopped early (the hypervolume did not grow for the --until-stall trials); the local "
                  "search ran the remaining trials")
        else:  # the stall came with the last batch: nothing was cut
            print("the hypervolume did not grow over the last --until-stall trials (every planned trial ran)")
    if run.get("interrupted"):
        # on stderr, as every other interrupt notice
        print(f"deepstack: interrupted by {run['interrupted']}: {result['trials']} trials kept in "
              f"{result['storage']}; the batch being evaluated was not stored. Re-run the same command to finish this "
              f"run ({run['told']} of its {run['planned']} trials are done): it proposes that batch again and ends as "
              "an uninterrupted run would", file=sys.stderr)


@with_space_scenario
def sweep(
    mode: Annotated[str, typer.Option(help="hierarchical (paper §4.2.3) or exhaustive (small spaces).")] = (
        "hierarchical"),
    objective: Annotated[str, typer.Option(help="Objectives of the front; the first ranks the tiers.")] = (
        "stps,tokens_per_joule"),
    scenario: dict | None = None,  # the scenario flags (with_space_scenario)
    space: SpaceOption = None,
    workers: Annotated[int | None, typer.Option(help="Processes (local pool or LocalCluster; default up to 2).")] = (
        None),
    backend: Annotated[str, typer.Option(help="local (process pool) or dask.")] = "local",
    scheduler: Annotated[str | None, typer.Option(help="Existing Dask scheduler, e.g. tcp://10.0.0.5:8786.")] = None,
    out: Annotated[str | None, typer.Option(help="Output folder (default studies/sweep-<mode>).")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Evaluate a space exhaustively or hierarchically; write every point and the Pareto front. Progress is kept
    in the output folder: re-running the same command resumes after the last finished chunk. Ctrl-C (SIGINT) or
    SIGTERM stops the sweep, says what it kept and exits with status 130.

    Example: deepstack sweep --mode exhaustive --space small --out studies/small-sweep
    """
    with _bar(f"{mode} sweep: hardware points", json_out) as advance:
        result = api.run_sweep(mode=mode, objective=objective, **scenario, space=space, workers=workers, out=out,
                               backend=backend, scheduler=scheduler, progress=advance)
    if json_out:
        report.print_json(result)
        return
    resumed = (f" ({result['read_back']:,} more read back from an earlier run's finished chunks, not evaluated "
               f"again: {result['evaluations']:,} points in all)" if result.get("read_back") else "")
    report.table(f"{result['mode']} sweep: {result.get('evaluated_now', result['evaluations']):,} evaluations"
                 f"{resumed} of {result['hardware_points']:,} hardware points in {result['run_s']:.1f} s",
                 result["tiers"])
    report.pareto(result)


def compare(
    study: Annotated[str, typer.Option(help="The Optuna study (it must exist: compare never creates one).")],
    sweep_dir: Annotated[str, typer.Option("--sweep", help="Folder of a finished sweep of the same space and "
                                                           "scenario (refused otherwise).")],
    storage: Annotated[str | None, typer.Option(help="Study storage (default sqlite:///studies/<study>.db).")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Hypervolume of a study's front relative to a sweep's, and what each spent.

    The reference is set by the sweep alone: the nadir of its feasible points (their worst value of each
    objective), with each objective normalised by the sweep's range (best → 1, worst → 0), so nothing the study
    finds can move it. The ratio is given at each side's full budget, at equal evaluations and
    at equal wall time. A study and a sweep of different spaces or scenarios are refused.

    Example: deepstack compare --study small --sweep studies/small-sweep
    """
    result = api.run_compare(study=study, storage=storage, sweep_dir=sweep_dir)
    if json_out:
        report.print_json(result)
    else:
        report.comparison(result)


def dashboard(
    storage: Annotated[str | None, typer.Option(help="Study storage URL (default sqlite:///studies/deepstack.db).")] = (
        None),
    study: Annotated[str, typer.Option(help="Used for the default storage path.")] = "deepstack",
    host: Annotated[str, typer.Option(help="Address to bind; 127.0.0.1 keeps it local.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
) -> None:
    """Serve optuna-dashboard on the study storage (local only unless --host says otherwise).

    Example: deepstack dashboard --storage sqlite:///studies/deepstack.db --port 8080
    """
    from deepstack.search import dashboard as dash

    url = storage or f"sqlite:///studies/{study}.db"
    server = dash.make(url, host, port)  # storage and port are checked before anything is printed
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"deepstack: warning: serving the dashboard on {host}: anyone who can reach it sees the studies",
              file=sys.stderr)
    print(f"optuna-dashboard on http://{host}:{server.server_port}/ for {url} (Ctrl-C stops)", file=sys.stderr)
    dash.serve_forever(server)
