"""Rendering for humans (rich tables) and machines (JSON). The only module besides the CLI that prints."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from deepstack.jsonutil import finite

BAR_REDRAW_S = 0.05  # a progress bar is redrawn on an update at most this often (rich's own timer: 0.1 s)

BROKEN_PIPE_EXIT = 128 + signal.SIGPIPE  # the status a shell shows for a program its reader stopped (`| head`)


def end_on_broken_pipe() -> int:
    """The reader of stdout went away (``deepstack … | head -1``): send what is left to /dev/null, so that
    Python's flush at exit raises nothing more, and give the exit status of a program SIGPIPE ended."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return BROKEN_PIPE_EXIT


class _Console(Console):
    def on_broken_pipe(self) -> None:  # rich's own ends with status 1, as if the command had failed
        raise SystemExit(end_on_broken_pipe())


# Wide when piped (logs, CI), the terminal's width otherwise.
console = _Console(width=None if sys.stdout.isatty() else 180)


def print_json(data: Any) -> None:
    """Machine-readable output on stdout (plain, never wrapped or coloured; NaN/inf become null)."""
    text = json.dumps(finite(data), indent=2, default=_jsonable, allow_nan=False)
    try:
        print(text)
    except BrokenPipeError:  # raised here, click would end with status 1, as if the command had failed
        raise SystemExit(end_on_broken_pipe()) from None


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value == 0 or math.isnan(value):
            return f"{value:g}"
        return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:.3e}"
    if value is None:
        return "—"
    return str(value)


# what a column's JSON key means, for the header a person reads (--json keeps the keys)
HEADERS = {
    "weighted_pct": "weighted error %",
    "median_pct": "median error %",
    "mape_pct": "MAPE %",
    "worst_pct": "worst error %",
    "error_pct": "error %",
    "failures": "model failures",
    "power_mape_pct": "W/GPU MAPE %",
    "power_max_abs_pct": "W/GPU worst %",
    "tokens_per_J_mape_pct": "tokens/J MAPE %",
}


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def distinct(values: list[float], digits: int = 4, most: int = 15) -> list[str]:
    """``values`` with as few significant digits as keep different values different (at least ``digits``, and
    every integer digit: never an exponent below 10¹⁵), thousands separated: a front whose rows differ in the
    fifth digit shows that digit."""
    def shown(value: float, d: int) -> str:
        if not math.isfinite(value):
            return fmt(value)
        whole = len(str(int(abs(value)))) if abs(value) >= 1 else 0
        return f"{value:,.{max(d, whole)}g}"

    unique = set(values)
    for d in range(digits, most + 1):
        if len({shown(v, d) for v in unique}) == len(unique):
            break
    return [shown(v, d) for v in values]


def table(title: str, rows: list[dict[str, Any]], columns: list[str] | None = None,
          right: tuple[str, ...] = ()) -> None:
    """A rich table of dict rows (columns default to the first row's keys; headers from :data:`HEADERS`; numbers,
    and the ``right`` columns, right-aligned)."""
    if not rows:
        console.print(f"[bold]{title}[/bold]: (none)")
        return
    columns = columns or list(rows[0])
    out = Table(title=title, title_justify="left", header_style="bold")
    for column in columns:
        given = [row.get(column) for row in rows if row.get(column) is not None]
        numeric = column in right or (bool(given) and all(_numeric(value) for value in given))
        out.add_column(HEADERS.get(column, column), justify="right" if numeric else "left", overflow="fold")
    for row in rows:
        out.add_row(*(fmt(row.get(column)) for column in columns))
    console.print(out)


def key_values(title: str, data: dict[str, Any]) -> None:
    out = Table(title=title, title_justify="left", show_header=False)
    out.add_column("key", style="bold")
    out.add_column("value", overflow="fold")
    for key, value in data.items():
        out.add_row(key, fmt(value) if not isinstance(value, dict | list) else json.dumps(value))
    console.print(out)


_METRIC_LABELS = {
    "ttft_s": ("TTFT", "s"),
    "utps": ("UTPS (per user)", "tokens/s"),
    "stps": ("STPS (system)", "tokens/s"),
    "tokens_per_joule": ("energy efficiency", "tokens/J"),
    "power_w": ("power (all devices)", "W"),
    "temperature_c": ("junction temperature", "°C"),
    "frequency_ghz": ("clock after DVFS", "GHz"),
    "area_mm2": ("silicon area", "mm²"),
    "memory_gib": ("DRAM used per device", "GiB"),
}


def _schedule_text(schedule: dict[str, Any]) -> str:
    """The schedule as evaluated: its degrees, with a pipeline's microbatch count and any collective's algorithm
    that is not chosen automatically (what tells two runs of one schedule apart)."""
    parts = [schedule["text"]]
    if schedule["pp"] > 1 and "microbatches=" not in schedule["text"]:  # a tuned count (a chosen one is in the text)
        parts.append(f"{schedule['microbatches']} microbatch{'es' * (schedule['microbatches'] != 1)}")
    parts += [f"{name}={algorithm}" for name, algorithm in sorted(schedule["collectives"].items())]
    return "; ".join(parts)


def evaluation(result: dict[str, Any]) -> None:
    """Readable summary of an evaluation report: verdict, metrics, hardware, and the operator breakdown."""
    sc, hw = result["scenario"], result["hardware"]
    verdict = "[green]feasible[/green]" if result["feasible"] else "[red]infeasible[/red]"
    console.print(
        f"[bold]{sc['model']}[/bold] {sc['phase']}, batch {sc['batch']}, {sc['input_len']}→{sc['output_len']} "
        f"tokens, {sc['precision']} on {hw['devices']}× [bold]{hw['chip']}[/bold]"
        + (f" over {hw['noc']}" if hw.get("noc") else "")
        + (" (*: its hop latency or link bandwidths scaled)" if (hw.get("noc") or "").endswith("*") else "")
        + f" ({_schedule_text(result['schedule'])}): {verdict}"
    )
    for violation in result["violations"]:
        console.print(f"  [red]✗[/red] {violation}")
    running = sc.get("running_batch")
    if running is not None and sc["phase"] == "prefill":
        console.print(f"  [yellow]![/yellow] KV cache: {running:,} of the {sc['batch']:,} requests fit at once; vLLM "
                      f"prefills the other {sc['batch'] - running:,} as places free up (the metrics cover the whole "
                      "batch)")
    elif running is not None:
        console.print(f"  [yellow]![/yellow] KV cache: {running:,} of the {sc['batch']:,} requests fit; vLLM runs "
                      f"{running:,} at a time and the other {sc['batch'] - running:,} wait (the metrics are those "
                      "of the running requests)")
    metrics = [{"metric": label, "value": result["metrics"][key], "unit": unit}
               for key, (label, unit) in _METRIC_LABELS.items() if key in result["metrics"]]
    table("metrics", metrics)
    keys = ["pes_per_device", "stacked_layers", "connected_layers", "dram_bw_TBps", "dram_effective_bw_TBps",
            "dram_capacity_GiB", "fp16_tflops_per_device"]
    table("device", [{key: hw.get(key) for key in keys}])
    b = result["breakdown"]
    util = ", ".join(f"{k} {v:.0%}" for k, v in b["utilization"].items())
    steps = b.get("engine_steps")
    span = f"over {steps:,} vLLM engine steps" if steps is not None else "per forward pass"
    pp = result["schedule"]["pp"]
    stage = ""
    if steps is None and pp > 1 and b["stage_time_s"] > 0:  # the busiest stage runs once per pass of the pipeline
        passes = round(b["phase_time_s"] / b["stage_time_s"])
        stage = (f" (pipeline stage {b['bottleneck_stage'] + 1} of {pp}: {b['stage_time_s'] * 1e3:.3f} ms a pass × "
                 f"{passes} passes, the operators' times below included)")
    console.print(f"busiest device: {b['phase_time_s'] * 1e3:.3f} ms {span}{stage}; utilization {util}")
    rows = sorted(b["operators"], key=lambda r: -r["time_s"])
    table(f"operators ({span}, slowest first)", [
        {"layer": r["layer"], "operator": r["name"], "×": r["count"], "time_ms": r["time_s"] * 1e3,
         "share": f"{r['share']:.1%}", "bound": r["bound"], "compute": f"{r['compute_utilization']:.0%}",
         "dram": f"{r['dram_utilization']:.0%}", "tiling": r["config"]}
        for r in rows
    ])


@contextlib.contextmanager
def progress_bar(label: str, total: int | None, enabled: bool = True):
    """A rich progress bar on stderr, gone when it ends; yields ``advance(done, total)``. Silent when disabled
    (e.g. --json). ``total`` None: not known until the first ``advance``; each ``advance`` may raise it (a run
    that plans its later work from its earlier results)."""
    if not enabled or (total is not None and total <= 0):
        yield lambda done, total: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        drawn = [0.0]

        def advance(done: int, total: int | None) -> None:
            # drawn now (at most every BAR_REDRAW_S): a line printed above the bar redraws the bar as last drawn,
            # and the timed redraw may wait for a busy interpreter, so the bar lagged a batch behind the log
            now = time.monotonic()
            redraw = now - drawn[0] >= BAR_REDRAW_S
            bar.update(task, total=total, completed=min(done, total), refresh=redraw)
            if redraw:
                drawn[0] = now

        yield advance


def pareto(result: dict[str, Any]) -> None:
    """The Pareto table of an optimize (or sweep) result, and where the files went."""
    objectives = result["objectives"]
    units = {"stps": "tokens/s", "utps": "tokens/s", "tokens_per_joule": "tokens/J", "ttft": "s"}
    front = result["pareto"]
    # as many digits as keep two different rows apart (the files keep every digit)
    shown = {o: distinct([float(r[o]) for r in front]) for o in objectives}
    headers = [f"{o} ({units[o]})" for o in objectives]
    rows = [{**({"id": r["id"]} if "id" in r else {}), **{h: shown[o][i] for h, o in zip(headers, objectives,
                                                                                        strict=True)},
             "chip": r.get("chip"), "noc": str(r.get("noc")).rsplit("/", 1)[-1].removesuffix(".toml"),
             "m": r.get("stacked_layers"), "n": r.get("connected_layers"), "PEs/device": r.get("pes_per_device"),
             "sram": r.get("sram"), "hop×": r.get("hop_latency_scale"), "bw×": r.get("level_bw_scales"),
             "schedule": r.get("schedule"), "W/mm²": r.get("power_density_W_per_mm2"), "°C": r.get("temperature_c"),
             **({"same objectives": " ".join(str(e.get("id")) for e in r.get("equivalent", ())) or None}
                if any(x.get("equivalent") for x in front) else {})}
            for i, r in enumerate(front)]
    title = f"Pareto front ({len(rows)} design{'s' * (len(rows) != 1)}, one per objective vector)"
    if "study" in result:
        title += f" of study {result['study']}: {result['trials']} trials ({result.get('added', 0)} added)"
    table(title, rows, right=tuple(headers))
    if any(r.get("equivalent") for r in front):
        console.print("same objectives: other designs that reach exactly that row's objectives (listed in the "
                      "files under 'equivalent'; evaluate --design takes their ids too)", markup=False,
                      highlight=False)
    for kind, path in result.get("files", {}).items():
        console.print(f"{kind}: {path}")


def comparison(result: dict[str, Any]) -> None:
    """``deepstack compare`` for humans: the fixed reference, the ratios, each side's spend, front and extremes."""
    objectives = result["objectives"]
    units = {key: unit for key, (_, unit) in _METRIC_LABELS.items()} | {"ttft": "s"}

    def point(values: list[float]) -> str:
        return ", ".join(f"{o} {fmt(v)} {units.get(o, '')}".rstrip() for o, v in zip(objectives, values, strict=True))

    def ratio(value: float | None) -> str:
        return "—" if value is None else f"{value:.4f}"

    e, w = result["at_equal_evaluations"], result["at_equal_wall_time"]
    console.print(f"reference point {point(result['reference_point'])}: the nadir of the sweep's feasible points "
                  f"(ideal {point(result['ideal_point'])}); set by the sweep alone", markup=False, highlight=False)
    console.print(f"hypervolume ratio study/sweep {ratio(result['hypervolume_ratio'])} with "
                  f"{result['evaluation_share']:.2%} of the evaluations; at equal evaluations ({e['evaluations']:,}) "
                  f"{ratio(e['hypervolume_ratio'])}; at equal wall time ({w['wall_s']:.1f} s, sweep times "
                  f"{w['sweep_times']}) {ratio(w['hypervolume_ratio'])} (each against the front of the sweep's first "
                  "points of that count or time: above 1, the study's front covers more)", markup=False,
                  highlight=False)
    s, sw = result["study"], result["sweep"]
    table("sides", [{"side": label, "hypervolume (normalised)": side["hypervolume_normalised"],
                     "evaluations": side["evaluations"], "wall_s": side["wall_s"], "front points": side["front_size"],
                     "unique designs": side["unique_designs"], "unique hardware": side["unique_hardware_points"]}
                    for label, side in ((f"study {s['name']}", s), (f"sweep {sw['folder']} ({sw['mode']})", sw))])
    table("extremes of each front", [{"side": label, **row} for label, side in (("study", s), ("sweep", sw))
                                     for row in side["extremes"]])
