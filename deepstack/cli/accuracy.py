"""``deepstack accuracy``: the models against the reference data in validation/, one command per check. The
sub-app is added to the main one by deepstack/cli/__init__.py."""

from __future__ import annotations

from typing import Annotated

import typer

from deepstack import api, report
from deepstack.cli.common import JsonFlag, _bar

accuracy_app = typer.Typer(help="Check the models against measured or simulated reference data (validation/).",
                           invoke_without_command=True)


@accuracy_app.callback()
def accuracy_group(
    ctx: typer.Context,
    cross_validate: Annotated[bool, typer.Option("--cross-validate", help="Print the generalisation table "
                                                 "(the same as `deepstack accuracy cross-validate`).")] = False,
) -> None:
    """Check the models against measured or simulated reference data (validation/).

    Example: deepstack accuracy --cross-validate
    """
    if ctx.invoked_subcommand is not None:
        return
    if cross_validate:
        accuracy_cross_validate()
        return
    typer.echo(ctx.get_help())


ReferenceOption = Annotated[str | None, typer.Option(
    "--reference", help="A CSV in the shipped file's format (validation/README.md) to check instead of it.")]
CrossValidateFlag = Annotated[bool, typer.Option(
    "--cross-validate", help="Print this check's generalisation table instead (its rows of `deepstack accuracy "
    "cross-validate`: constants set on part of the shipped rows, scored on the held-out part).")]


def _run_check(label: str, json_out: bool, check, **options):
    """Run an accuracy check (an api function that takes ``progress``) under the progress bar. With --json, print
    its result and return None; else return it for the command's text report."""
    with _bar(label, json_out) as advance:
        result = check(**options, progress=advance)
    if json_out:
        report.print_json(result)
        return None
    return result


@accuracy_app.command("network")
def accuracy_network(
    plot: Annotated[str | None, typer.Option(help="Write a PNG of every panel (log-log time vs bytes) here.")] = None,
    reference: ReferenceOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Compare the collective model with ASTRA-sim NS-3 simulations (validation/ns3_collectives.csv): weighted and
    median error per topology family, per panel and per payload size. A report: exits 0 whatever the errors.

    Example: deepstack accuracy network --plot network-accuracy.png
    """
    result = _run_check("accuracy network: reference rows", json_out, api.network_accuracy, plot=plot,
                        reference=reference)
    if result is None:  # --json: printed
        return
    no_reference = result["no_reference"]
    report.console.print(f"reference {result['reference']}: {result['rows_total']} rows, "
                         f"{result['rows_with_reference']} with a simulated time", markup=False, highlight=False)
    report.console.print("weighted = Σ|model − ref| / Σ ref over the rows (the paper's metric); "
                         "median = the median row's |model − ref| / ref", markup=False, highlight=False)
    report.table("error per topology family (%)",
                 [{"family": family, **score} for family, score in result["families"].items()],
                 ["family", "weighted_pct", "median_pct", "rows"])
    report.table("error per panel", result["panels"],
                 ["topology", "dims", "collective", "algorithm", "weighted_pct", "median_pct", "rows"])
    report.table("error per payload size (per row, %)", result["sizes"],
                 ["family", "size", "payload", "rows", "median_pct", "worst_pct"])
    if no_reference:
        report.table("no reference (evaluated, not scored)", no_reference)
    _failures_and_plot(result, plot)


def _failures_and_plot(result: dict, plot: str | None) -> None:
    """The tail of an accuracy report: the rows the model raised on, and where the plot went."""
    if result["failures"]:
        report.table(f"failures: the model raised on {len(result['failures'])} rows", result["failures"])
    if plot is not None:
        report.console.print(f"plot: {result['plot']}", markup=False, highlight=False)


@accuracy_app.command("all")
def accuracy_all(json_out: JsonFlag = False) -> None:
    """Every accuracy check's headline figures (network, serving, GPU power, kernels, paper), one row per family.
    A report: exits 0 whatever the errors; the per-check commands give the detail.

    Example: deepstack accuracy all --json
    """
    rows = _run_check("accuracy: checks", json_out, api.accuracy_summary)
    if rows is None:  # --json: printed
        return
    report.console.print("weighted error = Σ|model − ref| / Σ ref over a family's rows (the paper's metric); median "
                         "error = the median row's |model − ref| / ref; MAPE = the mean of |model − ref| / ref; "
                         "— = not computed by that check", markup=False, highlight=False)
    report.table("accuracy against the reference data (validation/)", rows,
                 ["check", "family", "weighted_pct", "median_pct", "mape_pct", "rows", "failures"])


@accuracy_app.command("paper")
def accuracy_paper(
    studies: Annotated[str, typer.Option(help="Folder of study runs the findings that need a search are read "
                                              "from (each study's current, full run).")] = "studies/out",
    json_out: JsonFlag = False,
) -> None:
    """The paper's own 3D results: every Table 4 configuration (validation/paper_table4.csv) and its findings,
    with the paper's value, ours under the paper assumption set and under the default one, and a verdict (Table 4
    within 10 %, speed-ups within 15 %). Findings that need a search come from the study that answers each, if
    its last full run was made by this code; otherwise they name the command to run. A report: exits 0 whatever
    the verdicts.

    Example: deepstack accuracy paper
    """
    result = _run_check("accuracy paper: parts", json_out, api.paper_accuracy, studies=studies)
    if result is None:  # --json: printed
        return
    summary = result["summary"]
    report.console.print(f"reference {result['reference']}: DeepSeek-V3 decode on 256 devices; "
                         f"{summary['table4_within_10pct']} of {summary['table4_rows']} Table 4 rows within 10 % "
                         f"under the paper set, MAPE {summary['table4_mape_pct']:.1f} % (default set "
                         f"{summary['table4_default_set_mape_pct']:.1f} %)", markup=False,
                         highlight=False)
    report.table("Table 4, STPS: the paper's and ours under each assumption set", result["table4"],
                 ["row", "design", "schedule", "overlap", "area_model_pes", "paper_stps", "paper_set_stps",
                  "default_set_stps", "ratio", "verdict"])
    beyond = summary["table4_beyond_limits_paper_set"]
    report.console.print(f"Table 4 rows beyond a limit under the paper set (the paper's are all within): {len(beyond)}"
                         + "".join(f"\n  {row}: {why}" for row, why in beyond.items()), markup=False, highlight=False)
    report.table("findings", result["findings"], ["finding", "what", "paper", "paper_set", "default_set", "verdict"])
    sources = dict.fromkeys(f["source"] for f in result["findings"] if f.get("source") and f["verdict"] in
                            ("holds", "fails"))
    if sources:
        report.console.print("findings read from the study runs " + "; ".join(sources), markup=False,
                             highlight=False)
    report.table("each paper assumption put back to the default alone: Table 4 then", result["assumption_effects"],
                 ["assumption back at default", "table4_mape_pct", "b4_total", "b1024_total", "flips"])
    effects_3d = result.get("assumption_effects_3d_vs_2p5d")
    if effects_3d and effects_3d["rows"]:
        report.table("each paper assumption put back to the default alone: 3D against 2.5D then (decode, the "
                     "paper set's 3D designs)", effects_3d["rows"])
    if effects_3d:
        report.console.print(f"3D against 2.5D by assumption: {effects_3d['source']}", markup=False,
                             highlight=False)


@accuracy_app.command("serving")
def accuracy_serving(
    plot: Annotated[str | None, typer.Option(help="Write a PNG of predicted vs measured throughput here.")] = None,
    reference: ReferenceOption = None,
    cross_validate: CrossValidateFlag = False,
    json_out: JsonFlag = False,
) -> None:
    """Compare the GPU serving model with measured vLLM decode and prefill on 8×B200 (validation/vllm_b200.csv):
    MAPE of the system decode throughput per model and mode (CUDA graphs, eager), and of the system prefill
    throughput where the file has it. A report: exits 0 whatever the errors.

    Example: deepstack accuracy serving --plot serving-accuracy.png
    """
    result = _run_or_cross_validate("serving", cross_validate, json_out, api.serving_accuracy, plot=plot,
                                    reference=reference)
    if result is None:  # --json or --cross-validate: printed
        return
    constants = "; ".join(f"{system}: host_step_us {c['host_step_us']:g}, eager_op_us {c['eager_op_us']:g}"
                          for system, c in result["constants"].items())
    report.console.print(f"reference {result['reference']}: {len(result['rows'])} rows on {result['system']} "
                         f"({result['parallel']}); calibrated constants {constants}", markup=False, highlight=False)
    report.table("MAPE of the system decode throughput (%)",
                 [{"group": key, **score} for key, score in result["scores"].items()], ["group", "mape_pct", "rows"])
    report.table("rows", result["rows"], ["label", "parallel", "mode", "batch", "measured_tps", "model_tps",
                                          "measured_step_ms", "model_step_ms", "error_pct"])
    if "prefill" in result:
        prefill = result["prefill"]
        report.table("MAPE of the system prefill throughput (%; user: of the mean per-request prefill speed)",
                     [{"group": key, **score} for key, score in prefill["scores"].items()],
                     ["group", "mape_pct", "user_mape_pct", "rows"])
        report.table("prefill rows", prefill["rows"], ["label", "mode", "batch", "measured_tps", "model_tps",
                                                       "measured_ttft_ms", "model_ttft_ms", "error_pct",
                                                       "user_error_pct"])
        if prefill["failures"]:
            report.table(f"prefill failures: {len(prefill['failures'])} rows", prefill["failures"])
    _failures_and_plot(result, plot)


@accuracy_app.command("power")
def accuracy_power(
    reference: ReferenceOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Compare the GPU power model with measured vLLM serving power (validation/mlenergy_power.csv, ML.ENERGY
    Leaderboard v3.0: Llama-3.x-70B on 4×H100 and 2×B200, Llama-3.1-405B-FP8 on 8×H100): MAPE of the W per GPU
    and of the tokens per joule per GPU and model, over the rows held out from the one anchor the waiting-SM share
    was set on. A report: exits 0 whatever the errors.

    Example: deepstack accuracy power
    """
    result = _run_check("accuracy power: reference rows", json_out, api.power_accuracy, reference=reference)
    if result is None:  # --json: printed
        return
    scores = result["scores"]
    held = scores.get("held out")
    summary = (f"held out {held['rows']} rows: W per GPU MAPE {held['power_mape_pct']:.1f} % (worst "
               f"{held['power_max_abs_pct']:.1f} %), tokens/J MAPE {held['tokens_per_J_mape_pct']:.1f} %"
               if held else "no held-out rows")
    anchors = [r for r in result["rows"] if r["anchor"]]
    anchor = "; ".join(f"anchor {r['model'].replace('meta-llama/', '')}, max_num_seqs {r['max_num_seqs']}, "
                       f"{r['gpus']}×{r['gpu']} (sets SM_CLOCK_SHARE; not in the held-out score)" for r in anchors)
    report.console.print(f"reference {result['reference']}: {len(result['rows'])} rows; {summary}"
                         + (f"; {anchor}" if anchor else ""), markup=False, highlight=False)
    report.table("MAPE per GPU and model (%; every group but the anchor's is held out)",
                 [{"group": key.replace("meta-llama/", ""), **score} for key, score in scores.items()],
                 ["group", "rows", "power_mape_pct", "power_max_abs_pct", "tokens_per_J_mape_pct"])
    shown = [{**r, "model": r["model"].replace("meta-llama/", ""), "W_per_gpu": r["measured_W_per_gpu"],
              "model_W": r["model_W_per_gpu"], "W_error_pct": r["power_error_pct"],
              "tokens_per_J": r["measured_tokens_per_J"], "model_tokens_per_J": r["model_tokens_per_J"],
              "tokens_per_J_error_pct": r["tokens_per_J_error_pct"]} for r in result["rows"]]
    report.table("rows (measured and modelled)", shown,
                 ["model", "gpu", "tp", "batch", "anchor", "W_per_gpu", "model_W", "W_error_pct", "tokens_per_J",
                  "model_tokens_per_J", "tokens_per_J_error_pct"])


@accuracy_app.command("kernels")
def accuracy_kernels(
    plot: Annotated[str | None, typer.Option(help="Write a PNG of predicted vs measured kernel time here.")] = None,
    reference: ReferenceOption = None,
    cross_validate: CrossValidateFlag = False,
    json_out: JsonFlag = False,
) -> None:
    """Compare the distributed-kernel model with measured Triton-distributed kernels on 8×H100
    (validation/h100_kernels.csv): weighted error and MAPE per kernel kind and overall. A report: exits 0 whatever
    the errors.

    Example: deepstack accuracy kernels --plot kernels-accuracy.png
    """
    result = _run_or_cross_validate("kernels", cross_validate, json_out, api.kernels_accuracy, plot=plot,
                                    reference=reference)
    if result is None:  # --json or --cross-validate: printed
        return
    report.console.print(f"reference {result['reference']}: {result['rows_total']} rows on {result['system']}; "
                         "weighted = Σ|model − ref| / Σ ref, MAPE = mean |model − ref| / ref",
                         markup=False, highlight=False)
    scores = [{"kind": kind, **score} for kind, score in result["kinds"].items()]
    report.table("error per kernel kind (%)", [*scores, {"kind": "all", **result["overall"]}],
                 ["kind", "weighted_pct", "mape_pct", "rows"])
    report.table("rows", [{**row, "error_pct": None if row["error"] is None else 100 * row["error"]}
                          for row in result["rows"]], ["kind", "point_index", "shape", "ref_ms", "model_ms",
                                                       "error_pct"])
    _failures_and_plot(result, plot)


@accuracy_app.command("cross-validate")
def accuracy_cross_validate(json_out: JsonFlag = False) -> None:
    """Generalisation: every registered check calibrated on part of its data and scored on the rest (serving:
    leave one model out). A report: exits 0 whatever the errors.

    Example: deepstack accuracy cross-validate
    """
    _cross_validation_table(None, json_out)


def _run_or_cross_validate(family: str, cross_validate: bool, json_out: bool, check, **options):
    """The check's result for its command's text report; None once printed (--json, or with --cross-validate the
    family's generalisation table instead of the check)."""
    if cross_validate:
        _cross_validation_table(family, json_out)
        return None
    return _run_check(f"accuracy {family}: reference rows", json_out, check, **options)


def _cross_validation_table(family: str | None, json_out: bool) -> None:
    """The generalisation rows of every check, or of one family (``serving``, ``kernels``), as a table or JSON."""
    label = f"accuracy {family} --cross-validate" if family else "accuracy cross-validate"
    rows = _run_check(f"{label}: checks", json_out, api.cross_validation, family=family)
    if rows is None:  # --json: printed
        return
    report.table("cross-validation: calibrated on one part, scored on the held-out part (MAPE %)", rows)
