"""Accuracy of the GPU serving model against measured vLLM decode (``validation/vllm_b200.csv``, or any file of
the same columns given with ``deepstack accuracy serving --reference FILE``); a file's prefill columns are scored
by :mod:`.prefill` beside it.

Every row is one vLLM benchmark run (its GPUs, model, parallel sizes, input and output lengths, batch B, CUDA
graphs or eager). :func:`serving_accuracy` models it as ``deepstack evaluate --system S --model M --parallel P
--phase decode --batch B`` does, with ``cuda_graphs`` set as the row ran, and compares the system decode
throughput (``measured_system_decode_tps`` against the report's ``stps``).

* **System.** The ``hardware`` column ("8x NVIDIA B200") names the catalog's GPU system with that many of that
  GPU (:data:`GPU_SYSTEMS`); a ``system`` column, when present, names one directly.
* **Model and precision.** The ``model`` column names a catalog model by its words ("DeepSeek-V3", "Llama-3
  70B" → deepseek-v3, llama-3.3-70b; :func:`model_name`); a ``catalog_model`` column names one directly and a
  ``precision`` column (a16w8, …) overrides the model's default. DeepSeek-V3 runs its FP8 weights (its catalog
  default ``a16w8``: block-FP8 linears, BF16 activations and KV cache); Llama-3.3-70B runs BF16.
* **Parallelism** (:func:`vllm_schedule`). vLLM's ``tp``, ``dp``, ``pp`` and ``ep``: attention runs TP within
  each of the DP replicas; without ``--enable-expert-parallel`` (``ep`` 1) vLLM shards every expert's
  intermediate dimension over all tp × dp GPUs (fused MoE), with it (``ep`` = tp × dp) each GPU holds whole
  experts. The shipped rows are TP8 without EP: ``tp=8``.
* **KV length.** A decode step is timed at the mean context over the output, input + output / 2 = 1,536 keys
  (the evaluator's decode default): the throughput averages over steps whose context grows linearly from 1,024
  to 2,048, and the step time is linear in the context, so the mean context gives the mean step.
* **Concurrency.** vLLM runs at most ``max_num_seqs`` = 1,024 requests at once (its default on GPUs with ≥ 70 GiB;
  vllm/engine/arg_utils.py): a row with more requests is timed at 1,024 per step and, as the benchmark reports
  it, its system rate is B × the per-request rate.

The calibrated constants (``host_step_us``, ``eager_op_us`` of the system's ``gpu`` table) enter every step
additively or as a maximum, so :func:`calibrate` re-fits them cheaply from one evaluation per row with both at
zero; :func:`cross_validate` fits them on one model's rows and scores the other model's
(docs/calibration.md §GPU execution). A row is scored with its own system's shipped constants.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

import deepstack
from deepstack.accuracy.files import read_csv
from deepstack.catalog import load, names
from deepstack.errors import UserInputError
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate
from deepstack.models.gpu import uses_graphs
from deepstack.models.gpu.host import TRITON_LAUNCH_S
from deepstack.models.gpu.kernels import step_kernels
from deepstack.models.gpu.scheduler import VLLM_MAX_NUM_SEQS
from deepstack.schema import Scenario, Schedule

MAX_NUM_SEQS = VLLM_MAX_NUM_SEQS  # vLLM's default concurrency cap on GPUs with ≥ 70 GiB (vllm/engine/arg_utils.py)
# (GPU, how many) as a reference file's hardware column names them → the catalog system that is that machine
GPU_SYSTEMS = {("b200", 8): "dgx-b200", ("h100", 8): "dgx-h100", ("h200", 8): "dgx-h200",
               ("mi325x", 4): "mi325x-4", ("mi325x", 8): "mi325x-8"}
REQUIRED = ("model", "tp", "batch", "input_len", "output_len", "cuda_graphs", "measured_system_decode_tps")


@dataclass(frozen=True)
class Row:
    """One measured run and the parts of its prediction that do not depend on the calibrated constants."""

    model: str
    batch: int
    graphs: bool
    measured_tps: float
    steps_batch: int  # requests per step the model times (≤ MAX_NUM_SEQS)
    gpu_graph: bool  # whether the step replays a CUDA graph (graphs and batch ≤ the largest graph)
    base_s: float  # the step with both calibrated constants at zero
    host_ops: int  # PyTorch calls of an eager step (models/gpu/kernels.py)
    triton_kernels: int
    system: str
    parallel: str
    constants: tuple[float, float]  # the system's shipped (host_step_us, eager_op_us)

    def step_s(self, host_step_us: float, eager_op_us: float) -> float:
        """The modelled step time with these calibrated constants (what ``evaluate`` gives with them)."""
        host = self.host_step(host_step_us)
        if self.gpu_graph:
            return self.base_s + host
        launch_s = self.host_ops * eager_op_us * 1e-6 + self.triton_kernels * TRITON_LAUNCH_S
        return max(self.base_s, launch_s) + host

    @staticmethod
    def host_step(host_step_us: float) -> float:
        return host_step_us * 1e-6

    def predicted_tps(self, host_step_us: float, eager_op_us: float) -> float:
        return self.batch / self.step_s(host_step_us, eager_op_us)

    def error(self, constants: tuple[float, float] | None = None) -> float:
        """Signed relative error of the throughput, (model − measured) / measured; ``constants`` None scores the
        row with its own system's shipped constants."""
        return self.predicted_tps(*(constants or self.constants)) / self.measured_tps - 1


def reference_path() -> Path:
    path = Path(deepstack.__file__).resolve().parents[1] / "validation" / "vllm_b200.csv"
    if not path.is_file():
        raise UserInputError(f"reference file: {path} is missing; it ships with the repository (validation/)")
    return path


def read_rows(path: Path | None = None) -> list[dict[str, str]]:
    path = path or reference_path()
    rows = read_csv(path)
    if not rows or any(column not in rows[0] for column in REQUIRED):
        raise UserInputError(f"reference file: {path} needs the columns {', '.join(REQUIRED)}")
    return rows


def _cell(raw: dict[str, str | None], column: str) -> str:
    """A row's value in ``column``, stripped; "" when the file has no such column or the row stops short."""
    return (raw.get(column) or "").strip()


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def model_name(text: str) -> str:
    """The catalog model a reference file's model column names: the one catalog name whose words contain every
    word of the column (its "(display: …)" part dropped), e.g. "Llama-3 70B" → llama-3.3-70b; of several, the one
    with no other words ("DeepSeek-V3" → deepseek-v3, not deepseek-v3.2)."""
    wanted = _words(text.split("(display:")[0])
    matches = [name for name in names("llms") if wanted and all(
        _words(name).count(word) >= wanted.count(word) for word in set(wanted))]
    exact = [name for name in matches if sorted(_words(name)) == sorted(wanted)]
    if len(matches) > 1 and len(exact) == 1:  # "DeepSeek-V3" is deepseek-v3, not also deepseek-v3.2
        matches = exact
    if len(matches) != 1:
        found = f"it matches {', '.join(matches)}" if matches else "no catalog model has all its words"
        raise UserInputError(f"reference file: model {text!r}: {found}; name one of {', '.join(names('llms'))} "
                             "(or add a catalog_model column)")
    return matches[0]


def system_name(raw: dict[str, str]) -> str:
    """The catalog system a row ran on: its ``system`` column, else its ``hardware`` column ("8x NVIDIA B200")
    looked up in :data:`GPU_SYSTEMS`."""
    if _cell(raw, "system"):
        return _cell(raw, "system")
    hardware = _cell(raw, "hardware")
    count = re.match(r"\s*(\d+)\s*[x×]", hardware)
    words = "".join(_words(hardware))
    for (gpu, gpus), system in GPU_SYSTEMS.items():
        if count and int(count.group(1)) == gpus and gpu in words:
            return system
    known = ", ".join(f"{gpus}x {gpu.upper()} → {system}" for (gpu, gpus), system in GPU_SYSTEMS.items())
    raise UserInputError(f"reference file: hardware {hardware!r} is none of the catalog's GPU systems ({known}); "
                         f"add a system column naming one of {', '.join(names('systems'))}")


def vllm_schedule(tp: int, ep: int, dp: int, pp: int, moe: bool) -> str:
    """vLLM's parallel sizes as a DeepStack schedule: attention TP within each DP replica; the experts sharded
    by TP over all tp × dp GPUs, or held whole by each GPU with ``--enable-expert-parallel`` (ep = tp × dp)."""
    if ep not in (1, tp * dp):
        raise UserInputError(f"reference file: ep={ep} with tp={tp}, dp={dp}; vLLM's expert parallelism spans all "
                             f"tp × dp = {tp * dp} GPUs, so ep must be 1 or {tp * dp}")
    attention = f"tp={tp}" + (f",dp={dp}" if dp > 1 else "")
    stages = f";pp={pp}" if pp > 1 else ""
    if not moe or (ep == 1 and dp == 1):
        return attention + stages
    experts = f"ep={ep}" if ep > 1 else f"tp={tp * dp}"
    return f"attn:{attention};moe:{experts}{stages}"


def shipped_constants(system: str = "dgx-b200") -> tuple[float, float]:
    """(host_step_us, eager_op_us) of a catalog GPU system (default: the dgx-b200 they were calibrated on)."""
    gpu = load("systems", system).architecture.gpu
    if gpu is None:
        raise UserInputError(f"reference file: system {system!r} is not a GPU system (it has no gpu table)")
    return gpu.host_step_us, gpu.eager_op_us


def modelled_rows(path: Path | None = None, failures: list[dict[str, Any]] | None = None,
                  progress=None) -> list[Row]:
    """Every reference row with its constant-free step (one evaluation per row; ``progress(done, total)`` after
    each). A run the model finds infeasible (it does not fit the GPUs' memory, say) is listed in ``failures`` and
    left out, or, without a ``failures`` list, is an error."""
    out = []
    raws = read_rows(path)
    for number, raw in enumerate(raws, start=2):  # line 1 is the header
        try:
            row, violations = _modelled_row(raw)
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(part) for part in error["loc"])
            raise UserInputError(f"reference file: line {number}: {field}: {error['msg']}") from None
        except (KeyError, ValueError) as exc:
            raise UserInputError(f"reference file: line {number}: {exc}; every column of "
                                 f"{', '.join(REQUIRED)} needs a value (integers for sizes, True/False for "
                                 "cuda_graphs)") from None
        except UserInputError as exc:
            raise UserInputError(f"reference file: line {number}: {str(exc).removeprefix('reference file: ')}") \
                from None
        if progress is not None:
            progress(number - 1, len(raws))
        if violations:
            problem = f"{row.model} on {row.system} ({row.parallel}), batch {row.batch}: infeasible: {violations}"
            if failures is None:
                raise UserInputError(f"reference file: line {number}: {problem}")
            failures.append({"line": number, "problem": problem})
            continue
        out.append(row)
    return out


def _modelled_row(raw: dict[str, str]) -> tuple[Row, str]:
    """The row's constant-free step, and what makes it infeasible (empty when it runs)."""
    system_id = system_name(raw)
    system = load("systems", system_id)
    constants = shipped_constants(system_id)
    gpu = system.architecture.gpu.model_copy(update={"host_step_us": 0.0, "eager_op_us": 0.0})
    chip = system.architecture.model_copy(update={"gpu": gpu})
    text = _cell(raw, "measured_system_decode_tps")
    measured = float(text)
    if not measured > 0:
        raise UserInputError(f"measured_system_decode_tps is {text!r}; it must be a positive throughput (tokens/s)")
    batch = int(_cell(raw, "batch"))
    steps_batch = min(batch, MAX_NUM_SEQS)
    point, parallel = reference_point(raw, system, chip, "decode", steps_batch)
    scenario, schedule, graphs, model = point.scenario, point.schedule, point.scenario.cuda_graphs, row_model(raw)
    report = evaluate(point, with_ttft=False, breakdown=False)
    kernels = step_kernels(scenario.model, _layers(scenario), scenario.precision.weight_bits == 8)
    row = Row(model, batch, graphs, measured, steps_batch,
              uses_graphs(gpu, scenario, schedule), 1.0 / report.metrics.utps, kernels.host_ops, kernels.triton,
              system_id, parallel, constants)
    return row, "; ".join(report.violations)


def row_model(raw: dict[str, str]) -> str:
    """The catalog model a reference row measured."""
    return _cell(raw, "catalog_model") or model_name(_cell(raw, "model"))


def reference_point(raw: dict[str, str], system, chip, phase: str, batch: int) -> tuple[DesignPoint, str]:
    """A reference row as the model evaluates it: ``phase`` at ``batch`` on ``chip`` over the system's network,
    with the row's model, lengths, precision, CUDA-graph mode and vLLM schedule; and that schedule's text."""
    scenario = Scenario(model=row_model(raw), phase=phase, batch=batch, input_len=int(_cell(raw, "input_len")),
                        output_len=int(_cell(raw, "output_len")),
                        cuda_graphs=_cell(raw, "cuda_graphs").lower() == "true",
                        precision=_cell(raw, "precision") or None)
    sizes = {key: int(_cell(raw, key) or 1) for key in ("tp", "ep", "dp", "pp")}
    parallel = vllm_schedule(**sizes, moe=scenario.model.moe is not None)
    return DesignPoint(chip=chip, scenario=scenario, schedule=Schedule.parse(parallel),
                       network=system.network), parallel


def _layers(scenario: Scenario) -> dict[str, int]:
    m = scenario.model
    dense = m.dense_layers if m.moe is not None else m.layers
    return {"dense": dense, "moe": m.layers - dense}


# ---------------------------------------------------------------------------------------------- scores


def mape_pct(rows: list[Row], constants: tuple[float, float] | None = None) -> float:
    """MAPE (%) of ``rows`` with ``constants`` (None: each row's own system's shipped constants)."""
    return 100 * sum(abs(r.error(constants)) for r in rows) / len(rows) if rows else float("nan")


def label(row: Row, rows: list[Row]) -> str:
    """A row's model, prefixed by its system when the rows span several systems."""
    return row.model if len({r.system for r in rows}) == 1 else f"{row.system} {row.model}"


def scores(rows: list[Row], constants: tuple[float, float] | None = None) -> dict[str, dict[str, float]]:
    """MAPE (%) per model and mode, per model, per mode and overall (per system too when there are several),
    with row counts."""
    groups: dict[str, list[Row]] = {"all": rows}
    several = len({r.system for r in rows}) > 1
    for r in rows:
        mode = "graphs" if r.graphs else "eager"
        name = label(r, rows)
        for key in (f"{name} {mode}", name, mode, *((r.system,) if several else ())):
            groups.setdefault(key, []).append(r)
    return {key: {"mape_pct": mape_pct(group, constants), "rows": len(group)} for key, group in groups.items()}


# ---------------------------------------------------------------------------------------------- calibration


def calibrate(rows: list[Row]) -> tuple[float, float]:
    """The calibrated constants that minimise the MAPE on ``rows``: ``host_step_us`` on their CUDA-graph rows,
    then ``eager_op_us`` on their eager rows (a grid of 10 µs and 0.1 µs)."""
    graph_rows = [r for r in rows if r.graphs]
    host = min((h * 10.0 for h in range(501)), key=lambda h: mape_pct(graph_rows, (h, 0.0)))
    eager_rows = [r for r in rows if not r.graphs]
    op = min((o / 10 for o in range(1001)), key=lambda o: mape_pct(eager_rows, (host, o)))
    return host, op


def cross_validate(rows: list[Row], path: Path | None = None) -> list[dict[str, Any]]:
    """Leave one model out: the constants calibrated on one model's decode rows, scored on the other's decode
    rows and, where the file has prefill rates, on its prefill rows (the prefill is re-modelled with those
    constants: they enter each prefill step too; :mod:`.prefill`)."""
    from deepstack.accuracy import prefill

    file = path or reference_path()
    with_prefill = prefill.has_prefill(file)
    out = []
    for held_out in sorted({r.model for r in rows}):
        train = [r for r in rows if r.model != held_out]
        test = [r for r in rows if r.model == held_out]
        constants = calibrate(train)
        out.append({"check": "serving", "calibrated_on": ", ".join(sorted({r.model for r in train})),
                    "predicted": held_out, "host_step_us": constants[0], "eager_op_us": constants[1],
                    "mape_pct": mape_pct(test, constants),
                    "graphs_mape_pct": mape_pct([r for r in test if r.graphs], constants),
                    "eager_mape_pct": mape_pct([r for r in test if not r.graphs], constants), "rows": len(test)})
        if with_prefill:
            held = prefill.modelled_rows(file, [], model=held_out, constants=constants)
            out[-1]["prefill_mape_pct"] = prefill.mape_pct([r.error() for r in held])
    return out


def serving_accuracy(path: Path | None = None, progress=None) -> dict[str, Any]:
    """Every row against the model with its system's shipped constants, and the scores (plain data for JSON);
    ``progress(done, total)`` after each row."""
    from deepstack.accuracy import prefill

    failures: list[dict[str, Any]] = []
    file = path or reference_path()
    with_prefill = prefill.has_prefill(file)
    passes = 2 if with_prefill else 1  # decode rows, then prefill rows
    rows = modelled_rows(path, failures, progress and (lambda done, total: progress(done, passes * total)))
    if not rows:
        raise UserInputError(f"reference file: no row of {path or reference_path()} is feasible on its system: "
                             f"{failures[0]['problem'] if failures else 'the file has no rows'}")
    systems = sorted({r.system for r in rows})
    single = rows[0].constants if len(systems) == 1 else (None, None)
    return {
        "reference": str(path or reference_path()), "system": ", ".join(systems),
        "parallel": ", ".join(sorted({r.parallel for r in rows})),
        "host_step_us": single[0], "eager_op_us": single[1],
        "constants": {r.system: {"host_step_us": r.constants[0], "eager_op_us": r.constants[1]} for r in rows},
        "scores": scores(rows), "failures": failures,
        "rows": [{**dataclasses.asdict(r), "label": label(r, rows), "mode": "graphs" if r.graphs else "eager",
                  "measured_step_ms": 1e3 * r.batch / r.measured_tps,
                  "model_step_ms": 1e3 * r.batch / r.predicted_tps(*r.constants),
                  "model_tps": r.predicted_tps(*r.constants), "error_pct": 100 * r.error()} for r in rows],
        **({"prefill": prefill.prefill_accuracy(file, progress and (
            lambda done, total: progress(total + done, 2 * total)))} if with_prefill else {}),
    }


def plot(result: dict[str, Any], path: str | Path) -> Path:
    """A PNG panel per model (per system and model when several): measured and modelled system decode
    throughput against batch, graphs and eager; below it the same for the system prefill rate when the file has
    one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted({r["label"] for r in result["rows"]})
    panels = [("decode", result["rows"], result["scores"])]
    if "prefill" in result:
        panels.append(("prefill", result["prefill"]["rows"], result["prefill"]["scores"]))
    fig, axes = plt.subplots(len(panels), len(models), squeeze=False, figsize=(5.5 * len(models), 4 * len(panels)))
    for line, (phase, rows_of, score) in zip(axes, panels, strict=True):
        for ax, model in zip(line, models, strict=True):
            for mode, colour in (("graphs", "C0"), ("eager", "C1")):
                rows = sorted((r for r in rows_of if r["label"] == model and r["mode"] == mode),
                              key=lambda r: r["batch"])
                ax.plot([r["batch"] for r in rows], [r["measured_tps"] for r in rows], "o", color=colour,
                        label=f"vLLM {mode}")
                ax.plot([r["batch"] for r in rows], [r["model_tps"] for r in rows], "-", color=colour,
                        label=f"model {mode}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.minorticks_off()
            ax.set_xlabel("batch")
            ax.set_ylabel(f"system {phase} tokens/s")
            mapes = ", ".join(f"{mode} {score[f'{model} {mode}']['mape_pct']:.1f} %" for mode in ("graphs", "eager")
                              if f"{model} {mode}" in score)
            ax.set_title(f"{model} {phase} on {result['system']} ({result['parallel']}): MAPE {mapes}", fontsize=9)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=90)
    plt.close(fig)
    return Path(path)
