"""Accuracy of the GPU serving model against measured vLLM decode on 8×B200 (``validation/vllm_b200.csv``).

Every row is one vLLM benchmark run (TP8, input 1,024 and output 1,024 tokens, batch B, CUDA graphs or eager).
:func:`serving_accuracy` models it as ``deepstack evaluate --system dgx-b200 --model M --parallel tp=8 --phase
decode --batch B`` does, with ``cuda_graphs`` set as the row ran, and compares the system decode throughput
(``measured_system_decode_tps`` against the report's ``stps``).

* **Model and precision.** DeepSeek-V3 with its FP8 weights (its catalog default ``a16w8``: block-FP8 linears,
  BF16 activations and KV cache); Llama-3.3-70B in BF16.
* **Parallelism.** ``tp=8`` for attention and FFN: vLLM's TP8 without ``--enable-expert-parallel`` shards every
  expert's intermediate dimension over the 8 ranks (fused MoE), which is what the evaluator's ``tp=8`` runs.
* **KV length.** A decode step is timed at the mean context over the output, input + output / 2 = 1,536 keys
  (the evaluator's decode default): the throughput averages over steps whose context grows linearly from 1,024
  to 2,048, and the step time is linear in the context, so the mean context gives the mean step.
* **Concurrency.** vLLM runs at most ``max_num_seqs`` = 1,024 requests at once (its default on GPUs with ≥ 70 GiB;
  vllm/engine/arg_utils.py): a row with more requests is timed at 1,024 per step and, as the benchmark reports
  it, its system rate is B × the per-request rate.

The calibrated constants (``host_step_us``, ``eager_op_us`` of the system's ``gpu`` table) enter every step
additively or as a maximum, so :func:`calibrate` re-fits them cheaply from one evaluation per row with both at
zero; :func:`cross_validate` fits them on one model's rows and scores the other model's
(docs/calibration.md §GPU execution).
"""

from __future__ import annotations

import csv
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import deepstack
from deepstack.catalog import load
from deepstack.errors import UserInputError
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate
from deepstack.models.gpu import uses_graphs
from deepstack.models.gpu.host import TRITON_LAUNCH_S
from deepstack.models.gpu.kernels import step_kernels
from deepstack.schema import Scenario, Schedule

SYSTEM = "dgx-b200"
PARALLEL = "tp=8"
MAX_NUM_SEQS = 1024  # vLLM's default concurrency cap on GPUs with ≥ 70 GiB (vllm/engine/arg_utils.py)
MODELS = {"DeepSeek-V3": "deepseek-v3", "Llama-3 70B": "llama-3.3-70b"}
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

    def error(self, constants: tuple[float, float]) -> float:
        """Signed relative error of the throughput, (model − measured) / measured."""
        return self.predicted_tps(*constants) / self.measured_tps - 1


def reference_path() -> Path:
    path = Path(deepstack.__file__).resolve().parents[1] / "validation" / "vllm_b200.csv"
    if not path.is_file():
        raise UserInputError(f"reference file: {path} is missing; it ships with the repository (validation/)")
    return path


def read_rows(path: Path | None = None) -> list[dict[str, str]]:
    path = path or reference_path()
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows or any(column not in rows[0] for column in REQUIRED):
        raise UserInputError(f"reference file: {path} needs the columns {', '.join(REQUIRED)}")
    return rows


def model_name(text: str) -> str:
    for prefix, name in MODELS.items():
        if text.startswith(prefix):
            return name
    raise UserInputError(f"reference file: model {text!r} is not one of {', '.join(MODELS)}")


def shipped_constants() -> tuple[float, float]:
    """(host_step_us, eager_op_us) of the catalog's dgx-b200."""
    gpu = load("systems", SYSTEM).architecture.gpu
    return gpu.host_step_us, gpu.eager_op_us


def modelled_rows(path: Path | None = None) -> list[Row]:
    """Every reference row with its constant-free step (one evaluation per distinct configuration)."""
    system = load("systems", SYSTEM)
    gpu = system.architecture.gpu.model_copy(update={"host_step_us": 0.0, "eager_op_us": 0.0})
    chip = system.architecture.model_copy(update={"gpu": gpu})
    schedule = Schedule.parse(PARALLEL)
    out = []
    for raw in read_rows(path):
        model = model_name(raw["model"])
        batch, graphs = int(raw["batch"]), raw["cuda_graphs"].strip() == "True"
        steps_batch = min(batch, MAX_NUM_SEQS)
        scenario = Scenario(model=model, phase="decode", batch=steps_batch, input_len=int(raw["input_len"]),
                            output_len=int(raw["output_len"]), cuda_graphs=graphs)
        point = DesignPoint(chip=chip, scenario=scenario, schedule=schedule, network=system.network)
        report = evaluate(point, with_ttft=False, breakdown=False)
        layers = _layers(scenario)
        kernels = step_kernels(scenario.model, layers, scenario.precision.weight_bits == 8)
        out.append(Row(model, batch, graphs, float(raw["measured_system_decode_tps"]), steps_batch,
                       uses_graphs(gpu, scenario, schedule), 1.0 / report.metrics.utps, kernels.host_ops,
                       kernels.triton))
    return out


def _layers(scenario: Scenario) -> dict[str, int]:
    m = scenario.model
    dense = m.dense_layers if m.moe is not None else m.layers
    return {"dense": dense, "moe": m.layers - dense}


# ---------------------------------------------------------------------------------------------- scores


def mape_pct(rows: list[Row], constants: tuple[float, float]) -> float:
    return 100 * sum(abs(r.error(constants)) for r in rows) / len(rows) if rows else float("nan")


def scores(rows: list[Row], constants: tuple[float, float]) -> dict[str, dict[str, float]]:
    """MAPE (%) per model and mode, per model, per mode and overall, with row counts."""
    groups: dict[str, list[Row]] = {"all": rows}
    for r in rows:
        mode = "graphs" if r.graphs else "eager"
        for key in (f"{r.model} {mode}", r.model, mode):
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


def cross_validate(rows: list[Row]) -> list[dict[str, Any]]:
    """Leave one model out: the constants calibrated on one model's rows, scored on the other's."""
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
    return out


def serving_accuracy(path: Path | None = None) -> dict[str, Any]:
    """Every row against the model with the shipped constants, and the scores (plain data for JSON)."""
    rows = modelled_rows(path)
    constants = shipped_constants()
    return {
        "reference": str(path or reference_path()), "system": SYSTEM, "parallel": PARALLEL,
        "host_step_us": constants[0], "eager_op_us": constants[1],
        "scores": scores(rows, constants),
        "rows": [{**dataclasses.asdict(r), "mode": "graphs" if r.graphs else "eager",
                  "measured_step_ms": 1e3 * r.batch / r.measured_tps,
                  "model_step_ms": 1e3 * r.batch / r.predicted_tps(*constants),
                  "model_tps": r.predicted_tps(*constants), "error_pct": 100 * r.error(constants)} for r in rows],
    }


def plot(result: dict[str, Any], path: str | Path) -> Path:
    """A PNG per model: measured and modelled system decode throughput against batch, graphs and eager."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted({r["model"] for r in result["rows"]})
    fig, axes = plt.subplots(1, len(models), squeeze=False, figsize=(5.5 * len(models), 4))
    for ax, model in zip(axes[0], models, strict=True):
        for mode, colour in (("graphs", "C0"), ("eager", "C1")):
            rows = sorted((r for r in result["rows"] if r["model"] == model and r["mode"] == mode),
                          key=lambda r: r["batch"])
            ax.plot([r["batch"] for r in rows], [r["measured_tps"] for r in rows], "o", color=colour,
                    label=f"vLLM {mode}")
            ax.plot([r["batch"] for r in rows], [r["model_tps"] for r in rows], "-", color=colour,
                    label=f"model {mode}")
        score = result["scores"]
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.minorticks_off()
        ax.set_xlabel("batch")
        ax.set_ylabel("system decode tokens/s")
        ax.set_title(f"{model} on 8×B200 TP8: MAPE graphs {score[f'{model} graphs']['mape_pct']:.1f} %, "
                     f"eager {score[f'{model} eager']['mape_pct']:.1f} %", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=90)
    plt.close(fig)
    return Path(path)
