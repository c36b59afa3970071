"""What every command shares: the typer app and its --version, the progress bar, a registry's names for a flag's
help, and the option types several commands take (and the search commands' scenario flags as one group)."""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Annotated

import typer

from deepstack import report
from deepstack.registry import DeepStackPluginError

app = typer.Typer(
    name="deepstack",
    help="Design-space exploration for distributed 3D-DRAM-stacked AI accelerators serving LLMs.\n\n"
    "Example: deepstack catalog llms",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        import deepstack

        print(f"deepstack {deepstack.__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Design-space exploration for distributed 3D-DRAM-stacked AI accelerators serving LLMs.

    Example: deepstack catalog llms
    """


def _bar(label: str, json_out: bool):
    """A long command's progress bar, as optimize's: on stderr, gone when done, only on a terminal (a transient
    bar on a pipe leaves a blank line before any error) and never with --json. Yields ``advance(done, total)``
    (the total is the command's to tell)."""
    return report.progress_bar(label, None, enabled=not json_out and sys.stderr.isatty())


def _registered(registry) -> tuple[str, ...]:
    """A registry's names for a flag's help (only the built-ins while a broken plugin stops the rest: run() then
    reports it)."""
    try:
        return registry.names()
    except DeepStackPluginError:
        return registry.declared()


TABLE_ROWS = 100  # longer listings go to --json: a terminal table of thousands of rows helps nobody
JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
# scenario flags of the search commands: each defaults to the design space's first scenario
SpaceModel = Annotated[str | None, typer.Option(help="LLM (default: the space's scenario).")]
SpacePhase = Annotated[str | None, typer.Option(help="prefill or decode.")]
SpaceBatch = Annotated[int | None, typer.Option(help="Requests served together.")]
SpaceInputLen = Annotated[int | None, typer.Option(help="Prompt tokens per request.")]
SpaceOutputLen = Annotated[int | None, typer.Option(help="Generated tokens per request.")]
SpacePrecision = Annotated[str | None, typer.Option(help="a16w16, a16w8, ...")]
PrefillChunkTokens = Annotated[int | None, typer.Option(
    help="Prefill tokens per step of each data replica (vLLM's max_num_batched_tokens; default: vLLM's 8192, "
         "halved per schedule until it fits in memory, down to 64).")]
# the cooling environment (Scenario.ambient_c, max_temp_c): each defaults to the chip's thermal table
AmbientC = Annotated[float | None, typer.Option(
    help="°C of the coolant the heat sink sees, T = T_amb + R·P (default: the chip's, 25 °C).")]
MaxTempC = Annotated[float | None, typer.Option(
    help="Junction limit °C that DVFS holds and feasibility checks (default: the chip's, 85 °C).")]
AssumptionsOption = Annotated[str | None, typer.Option(
    help="Assumption set: default, or paper (the DeepStack paper's and its artifact's choices: 35 °C coolant, "
         "decode averaged over four KV lengths, pp micro-batches, ...; docs/model.md §17).")]
SpaceOption = Annotated[str | None, typer.Option(help="Design space: default, small, paper, or a TOML file.")]
# the scenario flags of the search commands (optimize, sweep), in --help's order: each is None unless given (then the
# design space's first scenario decides), and each is a keyword argument of api.run_optimize and api.run_sweep
SPACE_SCENARIO_OPTIONS = {"model": SpaceModel, "phase": SpacePhase, "batch": SpaceBatch, "input_len": SpaceInputLen,
                          "output_len": SpaceOutputLen, "precision": SpacePrecision,
                          "prefill_chunk_tokens": PrefillChunkTokens, "ambient_c": AmbientC, "max_temp_c": MaxTempC,
                          "assumptions": AssumptionsOption}


def with_space_scenario(command):
    """``command`` with the options of SPACE_SCENARIO_OPTIONS in place of its parameter ``scenario`` (same place in
    --help), which receives them as one dict of those keyword arguments."""
    signature = inspect.signature(command, eval_str=True)  # typer reads annotations, not their strings
    params = []
    for param in signature.parameters.values():
        if param.name != "scenario":
            params.append(param)
            continue
        params += [inspect.Parameter(name, param.kind, default=None, annotation=option)
                   for name, option in SPACE_SCENARIO_OPTIONS.items()]

    @functools.wraps(command)
    def with_options(**kwargs):
        scenario = {name: kwargs.pop(name, None) for name in SPACE_SCENARIO_OPTIONS}
        return command(scenario=scenario, **kwargs)

    with_options.__signature__ = signature.replace(parameters=params)
    with_options.__annotations__ = {p.name: p.annotation for p in params}
    return with_options
