"""``deepstack study``: run a study recipe, and regenerate the results page. The sub-app is added to the main one
by deepstack/cli/__init__.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from deepstack import report
from deepstack.cli.common import AssumptionsOption, JsonFlag, _bar

study_app = typer.Typer(help="Run the paper's design-space studies (recipes in studies/*.toml).\n\n"
                        "Examples: deepstack study run studies/dram-layers.toml --quick; "
                        "deepstack study report --quick --to studies/out/RESULTS-quick.md",
                        no_args_is_help=True)


@study_app.command("run")
def study_run(
    recipe: Annotated[str, typer.Argument(help="A study recipe, e.g. studies/dram-layers.toml.")],
    out: Annotated[str | None, typer.Option(help="Output folder (default studies/out/<name>).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="A reduced version that runs in seconds.")] = False,
    assumptions: AssumptionsOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Run one study recipe: CSV of every point, PNG/HTML figures and summary.md. With --assumptions paper the
    run goes to studies/out/<name>-paper.

    Example: deepstack study run studies/parallelism-spread.toml --quick
    """
    from deepstack.search.studies import run_study

    with _bar(f"study {Path(recipe).stem}: tasks", json_out) as advance:
        result = run_study(recipe, out, quick, assumptions, progress=advance)
    if json_out:
        report.print_json(result)
        return
    report.console.print(f"study {result['study']} ({result['runner']}{', quick' if quick else ''}): "
                         f"{result['rows']} rows in {result['wall_s']:.1f} s → {result['out']}")
    for path in [*result["files"], result["record"]]:
        report.console.print(f"  {path}")
    if result["unread_parameters"]:
        names = ", ".join(f"parameters.{key}" for key in result["unread_parameters"])
        print(f"deepstack: warning: runner {result['runner']} never read {names} of {recipe}: a misspelt "
              "parameter leaves its default in force", file=sys.stderr)


@study_app.command("report")
def study_report(
    out_root: Annotated[str, typer.Option(help="Folder of the run folders <name> (or <name>-quick).")] = "studies/out",
    to: Annotated[str, typer.Option(help="The Markdown page to write.")] = "studies/RESULTS.md",
    quick: Annotated[bool, typer.Option("--quick", help="Report the quick runs (<name>-quick folders).")] = False,
    recipes: Annotated[str, typer.Option(help="Folder of the recipes <name>.toml and their README.md.")] = "studies",
    force: Annotated[bool, typer.Option("--force", help="Replace a page that reports more finished studies than "
                                                        "--out-root holds.")] = False,
    json_out: JsonFlag = False,
) -> None:
    """Regenerate the results page from every study's last finished run (its run.json): wall times, key tables
    and figure paths, no number typed by hand. A recipe without a finished run is listed as not run yet; a page
    that reports more finished studies than --out-root holds (a fresh clone's: run folders are not committed) is
    kept unless --force.

    Example: deepstack study report --quick --to studies/out/RESULTS-quick.md
    """
    from deepstack.search.studies.results import build_report

    result = build_report(recipes, out_root, to, quick, force)
    if json_out:
        report.print_json(result)
        return
    missing = [s["study"] for s in result["studies"] if s["status"] != "finished"]
    report.console.print(f"wrote {result['to']}: {result['finished']} of {len(result['studies'])} studies"
                         + (f"; not run yet: {', '.join(missing)}" if missing else ""))


@study_app.command("list")
def study_list(
    out_root: Annotated[str, typer.Option(help="Folder of the run folders <name> (or <name>-quick).")] = "studies/out",
    quick: Annotated[bool, typer.Option("--quick", help="List the quick runs (<name>-quick folders).")] = False,
    recipes: Annotated[str, typer.Option(help="Folder of the recipes <name>.toml and their README.md.")] = "studies",
    json_out: JsonFlag = False,
) -> None:
    """List every study and its last run: current (made by the code now running, from its recipe as it is now),
    stale (made by other code, or the recipe or a file it names changed since: its numbers may have moved) or not
    run yet; when it finished, how long it took, the command that runs it.

    Example: deepstack study list
    """
    from deepstack.search.studies.results import duration, list_runs

    rows = list_runs(recipes, out_root, quick)
    if json_out:
        report.print_json(rows)
        return
    shown = [{"study": r["study"], "status": r["status"] + (f": {r['why']}" if r["why"] else ""),
              "finished (UTC)": r["finished_at"] or "",
              "wall time": duration(r["wall_s"]) if r["wall_s"] is not None else "", "run it": r["command"]}
             for r in rows]
    report.table(f"{'quick runs' if quick else 'studies'} under {out_root}", shown)
    waiting = [r["study"] for r in rows if r["status"] in ("stale", "not run")]
    if waiting:
        report.console.print(f"{len(waiting)} of {len(rows)} need a run before their results describe this code: "
                             f"{', '.join(waiting)}")
