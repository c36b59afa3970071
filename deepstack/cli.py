"""Command line: parse → deepstack.api → render. User errors become one line on stderr and exit status 2."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from deepstack import api, report
from deepstack.errors import RunInterruptedError, UserInputError
from deepstack.registry import ALGORITHMS, TOPOLOGIES, DeepStackPluginError, load_plugins

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

_CATALOG_COLUMNS = {
    "llms": ["name", "architecture", "attention", "layers", "hidden", "parameters_B", "published_params_B",
             "active_parameters_B", "precision"],
    "chips": ["name", "pes_per_device", "device_area_mm2", "dram", "wgmma", "noc_bw_scale", "description"],
    "nocs": ["name", "devices", "L1", "L2", "L3"],
    "systems": ["name", "devices", "fp16_tflops_per_device", "dram_GiB_per_device", "dram_TBps_per_device",
                "network"],
}


@app.command()
def catalog(
    what: Annotated[str, typer.Argument(help="llms, chips, nocs, systems, 'show' or 'template'.")] = "all",
    name: Annotated[str | None, typer.Argument(
        help="With 'show': the preset name. With 'template': chip, noc, llm, system, space or a preset name.")
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """List presets, show one, or print a template file to start your own from (the shipped TOML of a preset,
    with its comments and sources; --json gives the same as a JSON file): deepstack validate accepts either.

    Examples: deepstack catalog chips; deepstack catalog show deepseek-v3 --json;
    deepstack catalog template chip > my-chip.toml
    """
    if what == "template":
        if not name:
            raise UserInputError("catalog template: KIND is required: chip, noc, llm, system, space or a preset name, "
                                 "e.g. deepstack catalog template chip > my-chip.toml")
        found = api.template(name)
        if json_out:
            report.print_json(found["content"])
        else:
            print(found["toml"], end="" if found["toml"].endswith("\n") else "\n")
        return
    if what == "show":
        if not name:
            raise UserInputError("catalog show: NAME is required, e.g. deepstack catalog show tms1")
        kind, data = api.show_preset(name)
        if json_out:
            report.print_json(data)
        else:
            report.key_values(f"{data['kind']} preset {name}", data["preset"])
        return
    if name is not None:
        raise UserInputError(f"catalog: unexpected argument {name!r}; use 'deepstack catalog show NAME'")
    kinds = list(_CATALOG_COLUMNS) if what == "all" else [what]
    if what != "all" and what not in _CATALOG_COLUMNS:
        raise UserInputError(f"catalog: must be one of llms, chips, nocs, systems, show, template (got {what!r})")
    rows = {kind: api.catalog_rows(kind) for kind in kinds}
    if json_out:
        report.print_json(rows if what == "all" else rows[what])
        return
    for kind in kinds:
        report.table(kind, rows[kind], _CATALOG_COLUMNS[kind])


@app.command()
def validate(
    file: Annotated[str, typer.Argument(help="A schema file (.toml, .yaml, .json) with a 'kind' key.")],
    json_out: JsonFlag = False,
) -> None:
    """Check any schema file (llm, chip, noc, system, scenario, schedule, space, study).

    Example: deepstack validate my-chip.toml
    """
    result = api.validate_file(file)
    if json_out:
        report.print_json(result)
    else:
        named = f" ({result['name']})" if result["name"] else ""
        report.console.print(f"ok: {file} is a valid {result['kind']}{named}", markup=False, highlight=False)


@app.command()
def evaluate(
    model: Annotated[str, typer.Option(help="LLM preset or file, e.g. deepseek-v3.")] = "llama-3.2-1b",
    chip: Annotated[str | None, typer.Option(help="Chip preset or file (Table 2), e.g. standard.")] = None,
    noc: Annotated[str | None, typer.Option(help="NoC preset or file (Table 3), e.g. tms1.")] = None,
    system: Annotated[str | None, typer.Option(help="A complete system preset, e.g. dgx-h100.")] = None,
    phase: Annotated[str, typer.Option(help="prefill or decode.")] = "decode",
    batch: Annotated[int, typer.Option(help="Requests served together.")] = 1,
    input_len: Annotated[int, typer.Option(help="Prompt tokens per request.")] = 1024,
    output_len: Annotated[int, typer.Option(help="Generated tokens per request.")] = 1024,
    precision: Annotated[str | None, typer.Option(help="a16w16, a16w8, ... (default: the model's).")] = None,
    stacked_layers: Annotated[int | None, typer.Option(help="m: DRAM layers stacked on each device.")] = None,
    connected_layers: Annotated[int | None, typer.Option(help="n ≤ m: layers with their own TSVs.")] = None,
    parallel: Annotated[str | None, typer.Option(
        help='Schedule, e.g. "tp=8,pp=4,dp=8" or "attn:tp=4,dp=64;moe:ep=32,tp=8".')] = None,
    prefill_chunk_tokens: PrefillChunkTokens = None,
    ambient_c: AmbientC = None,
    max_temp_c: MaxTempC = None,
    cuda_graphs: Annotated[bool, typer.Option(
        "--cuda-graphs/--eager", help="GPU systems only: decode replays CUDA graphs (vLLM's default) or launches "
                                      "every kernel from the host; other devices ignore it.")] = True,
    design: Annotated[str | None, typer.Option(
        help="A row of a study's front by its id (the id column of <study>.pareto.csv/json), with --front.")] = None,
    front: Annotated[str | None, typer.Option(
        help="The front file the --design id comes from: studies/<study>.pareto.csv (or .json).")] = None,
    assumptions: AssumptionsOption = None,
    pes: Annotated[int | None, typer.Option(help="PEs (SMs) per device instead of the area model's count.")] = None,
    l1_kib: Annotated[float | None, typer.Option("--l1-kib", help="L1 / shared memory per PE, KiB.")] = None,
    l1_bw_B_per_cycle: Annotated[float | None, typer.Option(
        "--l1-bw-B-per-cycle", help="L1 bandwidth per PE, B/cycle.")] = None,
    hop_latency_scale: Annotated[float, typer.Option(help="Multiplies every hop latency of --noc.")] = 1.0,
    level_bw_scale: Annotated[str | None, typer.Option(
        help="Link bandwidth multipliers of --noc per level, innermost first, e.g. 1.9,0.4,1.7.")] = None,
    overlap: Annotated[bool, typer.Option(
        "--overlap/--no-overlap", help="Overlap each collective with its GEMM (eq. 5), or run them serially.")] = True,
    json_out: JsonFlag = False,
) -> None:
    """Evaluate one design point: throughput, latency, energy, power, temperature, area, breakdown.

    A row of an optimize front is reproduced with its id: --design ID --front FILE evaluates that row's hardware
    point (chip, NoC, m, n, SRAM option, hop-latency and per-level bandwidth multipliers), schedule and the study's
    scenario, and prints the row's numbers (each row's "command" column spells it out).

    Examples: deepstack evaluate --model llama-3.2-1b --chip standard --phase decode --batch 1;
    deepstack evaluate --design d3f2a9c41b7 --front studies/deepstack.pareto.csv
    """
    if design is not None or front is not None:
        if design is None or front is None:
            raise UserInputError("--design and --front go together: the row's id and the front file it is in")
        result = api.evaluate_front_design(design=design, front=front).as_dict()
        if json_out:
            report.print_json(result)
        else:
            report.evaluation(result)
            _thermal_line(result)
        return
    result = api.evaluate(model=model, chip=chip, noc=noc, system=system, phase=phase, batch=batch,
                          input_len=input_len, output_len=output_len, precision=precision,
                          stacked_layers=stacked_layers, connected_layers=connected_layers,
                          parallel=parallel, prefill_chunk_tokens=prefill_chunk_tokens, ambient_c=ambient_c,
                          max_temp_c=max_temp_c, cuda_graphs=cuda_graphs, assumptions=assumptions, pes=pes,
                          l1_kib=l1_kib, l1_bw_B_per_cycle=l1_bw_B_per_cycle, hop_latency_scale=hop_latency_scale,
                          level_bw_scale=level_bw_scale, overlap=overlap).as_dict()
    if json_out:
        report.print_json(result)
    else:
        report.evaluation(result)
        _thermal_line(result)
        _prefill_line(result, prefill_chunk_tokens)
        _search_line(result)


def _search_line(result: dict) -> None:
    """How the schedule was chosen, when it was searched (the same summary --json gives under "search")."""
    search = result.get("search")
    if not search:
        return
    pruned = search.get("pruned") or {}
    rules = ", ".join(f"{rule} {count:,}" for rule, count in pruned.items())
    top = search.get("top") or []
    metric = next((k for k in (top[0] if top else {}) if k not in ("schedule", "feasible")), None)
    ranked = "; ".join(f"{r['schedule']} ({report.fmt(r[metric])} {metric})" for r in top[:3]) if metric else ""
    report.console.print(
        f"schedule search: {search['evaluated']:,} of {search['strategies']:,} strategies evaluated"
        + (f" ({sum(pruned.values()):,} pruned: {rules})" if pruned else "")
        + f", {search['feasible_after_evaluation']:,} feasible" + (f"; best {ranked}" if ranked else ""),
        markup=False, highlight=False)


def _prefill_line(result: dict, given: int | None) -> None:
    """The prefill token budget the schedule ran with (in a decode report: that of the prefill timed for TTFT)."""
    sc = result["scenario"]
    if sc["prefill_chunk_tokens"] is None:
        return
    how = "--prefill-chunk-tokens" if given is not None else "auto: vLLM's 8,192 halved until the schedule fits"
    what = "prefill" if sc["phase"] == "prefill" else "prefill for TTFT"
    report.console.print(f"{what}: {sc['prefill_chunk_tokens']:,} tokens per step of each data replica ({how})",
                         markup=False, highlight=False)


def _thermal_line(result: dict) -> None:
    """Temperature against the limit, power density and the clock DVFS chose (and, below nominal, why), in one
    line."""
    m, hw = result["metrics"], result["hardware"]
    report.console.print(
        f"thermal: {m['temperature_c']:.1f} °C junction (limit {hw['max_temp_c']:g} °C, ambient "
        f"{hw['ambient_c']:g} °C), {m['power_density_W_per_mm2']:.3f} W/mm², clock {m['frequency_ghz']:.3f} of "
        f"{hw['nominal_clock_ghz']:.3f} GHz{_clock_reason(result)}", markup=False, highlight=False)


def _clock_reason(result: dict) -> str:
    """Why the clock is below nominal, from what DVFS reported as its limit (models/dvfs.py)."""
    hw, limit = result["hardware"], (result.get("breakdown") or {}).get("clock_limit")
    layers = f"m = {hw['stacked_layers']} layers" if hw.get("stacked_layers") else "its package"
    reasons = {
        "thermal clock": f"static DVFS rule: the sustainable clock f_th of {layers} at {hw['max_temp_c']:g} °C",
        "power wall": f"power wall: the {hw['tdp_w_per_device']:g} W TDP",
        "thermal wall": f"thermal wall: below the {hw['tdp_w_per_device']:g} W TDP the package holds "
                        f"{hw['max_temp_c']:g} °C",
        "above limit": f"the lowest clock, still above {hw['max_temp_c']:g} °C",
    }
    return f" (set by the {reasons[limit]})" if limit in reasons else ""


@app.command()
def strategies(
    devices: Annotated[int, typer.Option(help="Number of devices N (TP·EP·SP·CP·DP·PP = N).")] = 256,
    model: Annotated[str | None, typer.Option(help="Apply the pruning rules for this LLM.")] = None,
    phase: Annotated[str, typer.Option(help="prefill or decode (with --model).")] = "decode",
    batch: Annotated[int, typer.Option(help="Requests (with --model).")] = 1,
    input_len: Annotated[int, typer.Option(help="Prompt tokens per request.")] = 1024,
    output_len: Annotated[int, typer.Option(help="Generated tokens per request.")] = 1024,
    precision: Annotated[str | None, typer.Option(help="a16w16, a16w8, ... (default: the model's).")] = None,
    chip: Annotated[str | None, typer.Option(help="Also check that weights + KV + activations fit.")] = None,
    stacked_layers: Annotated[int | None, typer.Option(help="m for the memory check (3D chips).")] = None,
    prefill_chunk_tokens: PrefillChunkTokens = None,
    count: Annotated[bool, typer.Option("--count", help="Print only the number of strategies.")] = False,
    json_out: JsonFlag = False,
) -> None:
    """Enumerate parallel strategies (ordered factorizations of N, FSDP on/off) and apply the pruning rules.

    Example: deepstack strategies --devices 256 --model deepseek-v3 --phase decode --batch 1024 --count
    """
    result = api.strategies(devices=devices, model=model, phase=phase, batch=batch, input_len=input_len,
                            output_len=output_len, precision=precision, chip=chip, stacked_layers=stacked_layers,
                            prefill_chunk_tokens=prefill_chunk_tokens)
    if count:
        report.print_json(result["count"]) if json_out else print(result["count"])
    elif json_out:
        report.print_json(result)
    else:
        shown = result["strategies"][:TABLE_ROWS]
        more = f" (first {TABLE_ROWS} shown; --json lists all)" if len(result["strategies"]) > TABLE_ROWS else ""
        report.table(f"{result['count']} of {result['total']} strategies for {devices} devices{more}", shown,
                     ["tp", "ep", "sp", "cp", "dp", "pp", "fsdp"])
        if result["pruned"]:
            report.table("pruned", [{"rule": k, "strategies": v} for k, v in result["pruned"].items()])


@app.command()
def collective(
    op: Annotated[str, typer.Option(help="all_reduce, all_gather, reduce_scatter, all_to_all or send_recv.")],
    bytes_per_rank: Annotated[float, typer.Option("--bytes", help="Per-rank input size in bytes.")],
    topology: Annotated[str | None, typer.Option(
        help=f"Per level, innermost first: {', '.join(_registered(TOPOLOGIES))}.")] = None,
    dims: Annotated[str | None, typer.Option(help="Per level: 8 or 4x4, comma-separated.")] = None,
    link_bw_GBps: Annotated[str | None, typer.Option("--link-bw-GBps", help="Per level, GB/s per link.")] = None,
    hop_latency_ns: Annotated[str | None, typer.Option("--hop-latency-ns", help="Per level, ns per hop.")] = None,
    algorithm: Annotated[str, typer.Option(help=", ".join(("auto", *_registered(ALGORITHMS))))] = "auto",
    packet_bytes: Annotated[str | None, typer.Option(help="Payload bytes per packet, per level.")] = None,
    header_bytes: Annotated[str | None, typer.Option(help="Header bytes per packet, per level.")] = None,
    ports: Annotated[str | None, typer.Option(
        help="Per level, who owns its links: per_device (rail-optimised, the default) or shared_uplink (one "
        "uplink per group of inner devices, e.g. a leaf switch's).")] = None,
    completion: Annotated[str, typer.Option(
        help="When a step may start: delivery (of the last byte) or acknowledged (two path latencies per step, "
        "as RDMA completions and ASTRA-sim's NS-3 backend report it).")] = "delivery",
    noc: Annotated[str | None, typer.Option(help="A catalog NoC instead of the topology flags.")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Time one collective over every device of a topology (eq. 4 on routed traffic matrices).

    Example: deepstack collective --op all_reduce --bytes 1048576 --topology ring --dims 8 --link-bw-GBps 100
    --hop-latency-ns 100 --algorithm ring
    """
    result = api.collective(op=op, bytes_per_rank=bytes_per_rank, topology=topology, dims=dims,
                            link_bw_GBps=link_bw_GBps, hop_latency_ns=hop_latency_ns, algorithm=algorithm,
                            packet_bytes=packet_bytes, header_bytes=header_bytes, ports=ports,
                            completion=completion, noc=noc)
    if json_out:
        report.print_json(result)
        return
    # the headline names the level that limits the collective (the busiest link in time, not in bytes: an L1 link
    # may carry the most bytes while a slower L3 link is the bottleneck)
    neck = max(result["levels"], key=lambda level: level["max_busy_fraction"], default=None)
    where = (f"bottleneck {neck['label'] or neck['level']}: busiest link {neck['max_busy_fraction']:.0%} busy, "
             f"{neck['max_link_bytes']:,.0f} B" if neck else f"busiest link {result['max_link_bytes']:,.0f} B")
    report.console.print(f"{op} of {bytes_per_rank:,.0f} B per rank on {result['devices']} devices: "
                         f"[bold]{result['time_s'] * 1e6:,.3f} µs[/bold] with {result['algorithm']} "
                         f"(latency {result['latency_s'] * 1e6:,.3f} µs; {where})")
    report.table("steps", [{**s, "time_us": s["time_s"] * 1e6} for s in result["steps"]],
                 ["phase", "count", "time_us", "max_link_bytes"])
    report.table("links per level", result["levels"],
                 ["level", "label", "links", "total_bytes", "max_link_bytes", "max_busy_fraction"])
    report.table("algorithms considered", [{"algorithm": c["algorithm"], "time_us": c["time_s"] * 1e6}
                                           for c in result["candidates"]])


@app.command()
def kernel(
    kind: Annotated[str, typer.Option(help="ag-gemm, gemm-rs, moe-gemm-ar, ep-dispatch or ulysses.")],
    system: Annotated[str, typer.Option(help="A catalog system (deepstack catalog systems).")] = "dgx-h100",
    m: Annotated[int | None, typer.Option(help="ag-gemm: rows gathered (global); gemm-rs: rows.")] = None,
    n: Annotated[int | None, typer.Option(help="ag-gemm/gemm-rs: columns (per GPU for ag-gemm).")] = None,
    k: Annotated[int | None, typer.Option(help="ag-gemm: full K; gemm-rs: K per GPU.")] = None,
    tokens: Annotated[int | None, typer.Option(help="moe-gemm-ar: tokens; ep-dispatch: tokens per GPU.")] = None,
    hidden: Annotated[int | None, typer.Option(help="moe-gemm-ar/ep-dispatch: hidden size.")] = None,
    intermediate: Annotated[int | None, typer.Option(help="moe-gemm-ar: expert intermediate size (all GPUs).")
                            ] = None,
    experts: Annotated[int | None, typer.Option(help="moe-gemm-ar/ep-dispatch: routed experts.")] = None,
    topk: Annotated[int | None, typer.Option(help="moe-gemm-ar/ep-dispatch: experts per token.")] = None,
    batch: Annotated[int | None, typer.Option(help="ulysses: batch.")] = None,
    seq: Annotated[int | None, typer.Option(help="ulysses: sequence length (all GPUs).")] = None,
    heads: Annotated[int | None, typer.Option(help="ulysses: attention heads.")] = None,
    head_dim: Annotated[int | None, typer.Option(help="ulysses: head dimension.")] = None,
    out_features: Annotated[int | None, typer.Option(help="ulysses: output-projection features.")] = None,
    sp: Annotated[int | None, typer.Option(help="ulysses: sequence-parallel GPUs.")] = None,
    tile: Annotated[str | None, typer.Option(help="GEMM tile MxNxK, e.g. 128x256x64 (default: tuned).")] = None,
    stages: Annotated[int | None, typer.Option(help="Software-pipeline stages with --tile (default 3).")] = None,
    dtype: Annotated[str, typer.Option(help="fp16, bf16 or fp8.")] = "fp16",
    comm_sms: Annotated[int | None, typer.Option(
        help="SMs taken from compute by communication (default: 0 for copy-engine kinds, 16 for ulysses).")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Time one distributed kernel (GEMM + collective overlapped, MoE, EP dispatch, Ulysses) on a GPU system.

    Example: deepstack kernel --system dgx-h100 --kind ag-gemm --m 8192 --n 1376 --k 4096 --tile 128x256x64
    """
    shape = {"m": m, "n": n, "k": k, "tokens": tokens, "hidden": hidden, "intermediate": intermediate,
             "experts": experts, "topk": topk, "batch": batch, "seq": seq, "heads": heads, "head_dim": head_dim,
             "out_features": out_features, "sp": sp}
    result = api.kernel(system=system, kind=kind, shape=shape, tile=tile, stages=stages, dtype=dtype,
                        comm_sms=comm_sms)
    if json_out:
        report.print_json(result)
        return
    report.console.print(f"{kind} on {system} ({result['ranks']} GPUs, {dtype}): "
                         f"[bold]{result['time_s'] * 1e3:,.4f} ms[/bold]; sends {result['comm_B']:,.0f} B per GPU"
                         + (f"; GEMM {result['gemm']}" if result["gemm"] else ""))
    report.table("what the time is made of (ref: a term alone, overlapped in the eq. 5 row)",
                 [{"part": name, "ms": seconds * 1e3} for name, seconds in result["parts"].items()], ["part", "ms"])


@app.command()
def optimize(
    objective: Annotated[str, typer.Option(help="Comma-separated: stps, tokens_per_joule, utps, ttft.")] = (
        "stps,tokens_per_joule"),
    model: SpaceModel = None,
    phase: SpacePhase = None,
    batch: SpaceBatch = None,
    input_len: SpaceInputLen = None,
    output_len: SpaceOutputLen = None,
    precision: SpacePrecision = None,
    prefill_chunk_tokens: PrefillChunkTokens = None,
    ambient_c: AmbientC = None,
    max_temp_c: MaxTempC = None,
    assumptions: AssumptionsOption = None,
    space: Annotated[str | None, typer.Option(help="Design space: default, small, paper, or a TOML file.")] = None,
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
        result = api.run_optimize(objective=objective, model=model, phase=phase, batch=batch, input_len=input_len,
                                  output_len=output_len, precision=precision, space=space, sampler=sampler,
                                  trials=trials, study=study, storage=storage, seed=seed, workers=workers, out=out,
                                  progress=advance, prefill_chunk_tokens=prefill_chunk_tokens,
                                  ambient_c=ambient_c, max_temp_c=max_temp_c, batch_size=trials_per_batch,
                                  until_stall=until_stall, log=None if json_out else _optimize_log, inner=inner,
                                  refine=refine, assumptions=assumptions)
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
    print(f"this run: {run['told']} trials told{earlier}{refined}, {run['repaired']} proposals repaired, "
          f"{run['infeasible']} infeasible, {run['over_thermal_limit']} over the thermal limit; hypervolume "
          f"{run['hypervolume']:.6g} (seed {run['seed']}); {run['evaluations']} design-point evaluations in the study")
    if run.get("stalled"):
        print("stopped: the hypervolume did not grow for the --until-stall trials")
    if run.get("interrupted"):
        print(f"interrupted by {run['interrupted']}: {result['trials']} trials kept in {result['storage']}; the "
              f"batch being evaluated was not stored. Re-run the same command to finish this run ({run['told']} of "
              f"its {run['planned']} trials are done): it proposes that batch again and ends as an uninterrupted "
              "run would")


@app.command()
def sweep(
    mode: Annotated[str, typer.Option(help="hierarchical (paper §4.2.3) or exhaustive (small spaces).")] = (
        "hierarchical"),
    objective: Annotated[str, typer.Option(help="Objectives of the front; the first ranks the tiers.")] = (
        "stps,tokens_per_joule"),
    model: SpaceModel = None,
    phase: SpacePhase = None,
    batch: SpaceBatch = None,
    input_len: SpaceInputLen = None,
    output_len: SpaceOutputLen = None,
    precision: SpacePrecision = None,
    prefill_chunk_tokens: PrefillChunkTokens = None,
    ambient_c: AmbientC = None,
    max_temp_c: MaxTempC = None,
    assumptions: AssumptionsOption = None,
    space: Annotated[str | None, typer.Option(help="Design space: default, small, paper, or a TOML file.")] = None,
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
        result = api.run_sweep(mode=mode, objective=objective, model=model, phase=phase, batch=batch,
                               input_len=input_len, output_len=output_len, precision=precision, space=space,
                               workers=workers, out=out, backend=backend, scheduler=scheduler,
                               prefill_chunk_tokens=prefill_chunk_tokens, ambient_c=ambient_c,
                               max_temp_c=max_temp_c, assumptions=assumptions, progress=advance)
    if json_out:
        report.print_json(result)
        return
    resumed = (f" ({result['read_back']:,} more read back from an earlier run's finished chunks, not evaluated "
               f"again: {result['evaluations']:,} points in all)" if result.get("read_back") else "")
    report.table(f"{result['mode']} sweep: {result.get('evaluated_now', result['evaluations']):,} evaluations"
                 f"{resumed} of {result['hardware_points']:,} hardware points in {result['wall_s']:.1f} s",
                 result["tiers"])
    report.pareto(result)


@app.command()
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


@app.command()
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


study_app = typer.Typer(help="Run the paper's design-space studies (recipes in studies/*.toml).\n\n"
                        "Examples: deepstack study run studies/dram-layers.toml --quick; "
                        "deepstack study report --quick --to studies/out/RESULTS-quick.md",
                        no_args_is_help=True)
app.add_typer(study_app, name="study")


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


@study_app.command("report")
def study_report(
    out_root: Annotated[str, typer.Option(help="Folder of the run folders <name> (or <name>-quick).")] = "studies/out",
    to: Annotated[str, typer.Option(help="The Markdown page to write.")] = "studies/RESULTS.md",
    quick: Annotated[bool, typer.Option("--quick", help="Report the quick runs (<name>-quick folders).")] = False,
    recipes: Annotated[str, typer.Option(help="Folder of the recipes <name>.toml and their README.md.")] = "studies",
    json_out: JsonFlag = False,
) -> None:
    """Regenerate the results page from every study's last finished run (its run.json): wall times, key tables
    and figure paths, no number typed by hand. A recipe without a finished run is listed as not run yet.

    Example: deepstack study report --quick --to studies/out/RESULTS-quick.md
    """
    from deepstack.search.studies.results import build_report

    result = build_report(recipes, out_root, to, quick)
    if json_out:
        report.print_json(result)
        return
    missing = [s["study"] for s in result["studies"] if s["status"] != "finished"]
    report.console.print(f"wrote {result['to']}: {result['finished']} of {len(result['studies'])} studies"
                         + (f"; not run yet: {', '.join(missing)}" if missing else ""))


accuracy_app = typer.Typer(help="Check the models against measured or simulated reference data (validation/).",
                           invoke_without_command=True)
app.add_typer(accuracy_app, name="accuracy")


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
    with _bar("accuracy network: reference rows", json_out) as advance:
        result = api.network_accuracy(plot=plot, reference=reference, progress=advance)
    if json_out:
        report.print_json(result)
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
    with _bar("accuracy: checks", json_out) as advance:
        rows = api.accuracy_summary(progress=advance)
    if json_out:
        report.print_json(rows)
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
    with _bar("accuracy paper: parts", json_out) as advance:
        result = api.paper_accuracy(progress=advance, studies=studies)
    if json_out:
        report.print_json(result)
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
    report.table("findings", result["findings"], ["finding", "what", "paper", "paper_set", "default_set", "verdict"])
    sources = dict.fromkeys(f["source"] for f in result["findings"] if f.get("source") and f["verdict"] in
                            ("holds", "fails"))
    if sources:
        report.console.print("findings read from the study runs " + "; ".join(sources), markup=False,
                             highlight=False)
    report.table("each paper assumption put back to the default alone: Table 4 then", result["assumption_effects"],
                 ["assumption back at default", "table4_mape_pct", "b4_total", "b1024_total", "flips"])


@accuracy_app.command("serving")
def accuracy_serving(
    plot: Annotated[str | None, typer.Option(help="Write a PNG of predicted vs measured throughput here.")] = None,
    reference: ReferenceOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Compare the GPU serving model with measured vLLM decode and prefill on 8×B200 (validation/vllm_b200.csv):
    MAPE of the system decode throughput per model and mode (CUDA graphs, eager), and of the system prefill
    throughput where the file has it. A report: exits 0 whatever the errors.

    Example: deepstack accuracy serving --plot serving-accuracy.png
    """
    with _bar("accuracy serving: reference rows", json_out) as advance:
        result = api.serving_accuracy(plot=plot, reference=reference, progress=advance)
    if json_out:
        report.print_json(result)
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
    with _bar("accuracy power: reference rows", json_out) as advance:
        result = api.power_accuracy(reference=reference, progress=advance)
    if json_out:
        report.print_json(result)
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
    json_out: JsonFlag = False,
) -> None:
    """Compare the distributed-kernel model with measured Triton-distributed kernels on 8×H100
    (validation/h100_kernels.csv): weighted error and MAPE per kernel kind and overall. A report: exits 0 whatever
    the errors.

    Example: deepstack accuracy kernels --plot kernels-accuracy.png
    """
    with _bar("accuracy kernels: reference rows", json_out) as advance:
        result = api.kernels_accuracy(plot=plot, reference=reference, progress=advance)
    if json_out:
        report.print_json(result)
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
    with _bar("accuracy cross-validate: checks", json_out) as advance:
        rows = api.cross_validation(progress=advance)
    if json_out:
        report.print_json(rows)
        return
    report.table("cross-validation: calibrated on one part, scored on the held-out part (MAPE %)", rows)


def _fail(message: str) -> int:
    print(f"deepstack: error: {' '.join(message.split())}", file=sys.stderr)
    return 2


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return the exit status (2 for any user error, with one line on stderr)."""
    from deepstack.models import tune_gc

    tune_gc()  # every command may evaluate many design points; forked workers inherit the setting
    command = typer.main.get_command(app)
    try:
        load_plugins()  # a broken plugin: one line naming it, exit 2
        result = command.main(args=argv, prog_name="deepstack", standalone_mode=False)
    except UserInputError as exc:
        return _fail(str(exc))
    except RunInterruptedError as exc:
        print(f"deepstack: {exc}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        # Typer ships its own copy of click in recent releases, so match click's exceptions by shape.
        name = type(exc).__name__
        if name == "Exit":
            return exc.exit_code
        if name == "Abort":
            return 130
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            return _fail(exc.format_message())
        raise
    return result if isinstance(result, int) else 0


def main() -> None:
    sys.exit(run())
