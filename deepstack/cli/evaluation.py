"""One design point and its parts: ``deepstack evaluate``, ``strategies``, ``collective`` and ``kernel``.
Registered on the app by deepstack/cli/__init__.py, in the order --help lists them."""

from __future__ import annotations

from typing import Annotated

import typer

from deepstack import api, report
from deepstack.cli.common import (
    TABLE_ROWS,
    AmbientC,
    AssumptionsOption,
    JsonFlag,
    MaxTempC,
    PrefillChunkTokens,
    _registered,
)
from deepstack.errors import UserInputError
from deepstack.registry import ALGORITHMS, TOPOLOGIES
from deepstack.wording import per_rule


def evaluate(
    ctx: typer.Context,
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
    steady_state: Annotated[bool, typer.Option(
        "--steady-state", help="GPU systems, decode: the batch as a server keeps it running, each finished request "
                               "replaced at once (its successor's prompt prefilled in the decode steps); default: "
                               "the batch arrives together and decodes alone. Other devices ignore it.")] = False,
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
        _only_with_design(ctx)
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
                          max_temp_c=max_temp_c, cuda_graphs=cuda_graphs, assumptions=assumptions,
                          steady_state=steady_state or None, pes=pes,
                          l1_kib=l1_kib, l1_bw_B_per_cycle=l1_bw_B_per_cycle, hop_latency_scale=hop_latency_scale,
                          level_bw_scale=level_bw_scale, overlap=overlap).as_dict()
    if json_out:
        report.print_json(result)
    else:
        report.evaluation(result)
        _thermal_line(result)
        _prefill_line(result, prefill_chunk_tokens)
        _steady_line(result)
        _search_line(result)


def _search_line(result: dict) -> None:
    """How the schedule was chosen, when it was searched (the same summary --json gives under "search")."""
    search = result.get("search")
    if not search:
        return
    if "search_would_skip" in search:  # a schedule given with --parallel that a pruning rule drops
        report.console.print(f"note: the schedule search skips this schedule ({search['search_would_skip']}); it "
                             "was evaluated as given", markup=False, highlight=False)
        return
    pruned = search.get("pruned") or {}
    rules = per_rule(pruned)
    top = search.get("top") or []
    metric = next((k for k in (top[0] if top else {}) if k not in ("schedule", "feasible")), None)
    ranked = "; ".join(f"{r['schedule']} ({report.fmt(r[metric])} {metric})" for r in top[:3]) if metric else ""
    report.console.print(
        f"schedule search: {search['evaluated']:,} of {search['strategies']:,} strategies evaluated"
        + (f" ({sum(pruned.values()):,} pruned: {rules})" if pruned else "")
        + (f", and {search['moe_tp_folded']:,} with the MoE's TP folded into EP (vLLM's form)"
           if search.get("moe_tp_folded") else "")
        + f"; {search['feasible_after_evaluation']:,} feasible" + (f"; best {ranked}" if ranked else ""),
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


def _steady_line(result: dict) -> None:
    """What a GPU's steady-state decode covers (other devices ignore the flag: one forward pass)."""
    sc, steps = result["scenario"], result["breakdown"].get("engine_steps")
    if sc["phase"] != "decode" or steps is None:
        return
    cycle_s, output_len = result["breakdown"]["phase_time_s"], sc["output_len"]
    tokens = result["metrics"]["utps"] * cycle_s  # each running request's tokens over the cycle
    if abs(tokens - output_len) > 1e-6 * output_len:  # a busy server's mean cycle: not one request's life
        covers = (f"steady state, busy (the newcomers' prompts share the steps' budget, queueing for it): the "
                  f"breakdown covers {steps:,} engine steps; a request lives {steps * output_len / tokens:,.1f} "
                  f"steps for its {output_len:,} tokens")
    else:
        covers = (f"steady state: the breakdown covers {steps:,} engine steps (a request's life, its successor's "
                  f"prompt included), {output_len:,} tokens per request")
    report.console.print(f"{covers}; mean step {cycle_s * 1e3 / steps:.2f} ms", markup=False, highlight=False)


def _only_with_design(ctx: typer.Context) -> None:
    """Refuse the options a front row fixes (all but --json): given with --design, they would be ignored."""
    flags = {p.name: p.opts[0] for p in ctx.command.params}
    given = [flags[name] for name in ctx.params if name not in ("design", "front", "json_out")
             and getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"]  # typer's own click
    if given:
        raise UserInputError(f"--design: the front row sets the whole design point and scenario, so "
                             f"{', '.join(given)} would be ignored; drop {'it' if len(given) == 1 else 'them'}, or "
                             "evaluate without --design")


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
        "thermal clock": f"the static DVFS rule: the sustainable clock f_th of {layers} at {hw['max_temp_c']:g} °C",
        "power wall": f"the power wall: the {hw['tdp_w_per_device']:g} W TDP",
        "thermal wall": f"the thermal wall: below the {hw['tdp_w_per_device']:g} W TDP the package holds "
                        f"{hw['max_temp_c']:g} °C",
        "above limit": f"the lowest clock, still above {hw['max_temp_c']:g} °C",
    }
    return f" (set by {reasons[limit]})" if limit in reasons else ""


def strategies(
    devices: Annotated[int, typer.Option(help="Number of devices N (TP·EP·SP·CP·DP·PP = N).")] = 256,
    model: Annotated[str | None, typer.Option(help="Apply the pruning rules for this LLM.")] = None,
    phase: Annotated[str | None, typer.Option(help="prefill or decode (with --model; default decode).")] = None,
    batch: Annotated[int | None, typer.Option(help="Requests (with --model; default 1).")] = None,
    input_len: Annotated[int | None, typer.Option(help="Prompt tokens per request (with --model; default 1024).")] = (
        None),
    output_len: Annotated[int | None, typer.Option(
        help="Generated tokens per request (with --model; default 1024).")] = None,
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
