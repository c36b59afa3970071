"""Accuracy of the GPU power model against measured vLLM serving power (``validation/mlenergy_power.csv``, or any
file of its columns given with ``deepstack accuracy power --reference FILE``).

Every row is one ML.ENERGY Leaderboard v3.0 run (vLLM 0.11.1, the LM Arena chat task): a model served by vLLM
on ``gpus`` GPUs of one kind at tensor parallelism ``tp`` with ``max_num_seqs`` concurrent requests, its GPU
power measured over the steady state (all requests running) and its tokens per joule (output tokens / GPU
energy). :func:`power_accuracy` models it as ``deepstack evaluate --steady-state`` does a decode on the catalog's
8-GPU server of that GPU (``GPU_SYSTEMS``): the measured engine's ``gpus`` GPUs are one TP group, so the server
holds 8 / tp copies of it (``--parallel tp=T,dp=8/T``), each keeping the run's mean running batch (``avg_batch``)
going at the task's mean prompt and the run's mean output length — every finished request replaced, its
successor's prompt prefilled in the decode steps (docs/model.md §GPU power). Both figures are per GPU, so the
copies do not change them: W per GPU (the busiest device's power) and tokens per joule (system output rate /
system power).

Not modelled: the run's variation of prompt and output lengths (each run is timed at its means); the GPU power
excludes the host, as the measurement does.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import deepstack
from deepstack.accuracy.files import each, read_csv
from deepstack.catalog import load
from deepstack.errors import UserInputError
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate
from deepstack.schema import Scenario, Schedule

SERVER_GPUS = 8  # the catalog's GPU servers hold 8 GPUs
GPU_SYSTEMS = {"H100": "dgx-h100", "H200": "dgx-h200", "B200": "dgx-b200"}
REQUIRED = ("catalog_model", "gpu", "tp", "avg_batch", "input_len", "output_len", "measured_power_W_per_gpu",
            "measured_tokens_per_J")
# the one row the GPU's waiting-SM share was set on (models/gpu/power.py SM_CLOCK_SHARE): every other is held out
ANCHOR = {"model_id": "meta-llama/Llama-3.3-70B-Instruct", "gpu": "H100", "max_num_seqs": "8"}


def reference_path() -> Path:
    path = Path(deepstack.__file__).resolve().parents[1] / "validation" / "mlenergy_power.csv"
    if not path.is_file():
        raise UserInputError(f"reference file: {path} is missing; it ships with the repository (validation/)")
    return path


def is_anchor(raw: dict[str, str]) -> bool:
    return all((raw.get(key) or "").strip() == value for key, value in ANCHOR.items())


def row_point(raw: dict[str, str]) -> tuple[DesignPoint, str]:
    """A measured run as the model evaluates it on the catalog's 8-GPU server: 8 / tp copies of its TP group,
    each serving the run's mean running batch; and the schedule's text."""
    gpu = raw["gpu"].strip().upper()
    if gpu not in GPU_SYSTEMS:
        raise UserInputError(f"gpu: {raw['gpu']!r} has no 8-GPU catalog server; known: {', '.join(GPU_SYSTEMS)}")
    tp = int(raw["tp"])
    if tp < 1 or SERVER_GPUS % tp:
        raise UserInputError(f"tp: {tp} must divide the server's {SERVER_GPUS} GPUs")
    copies = SERVER_GPUS // tp
    system = load("systems", GPU_SYSTEMS[gpu])
    batch = max(1, round(float(raw["avg_batch"])))
    scenario = Scenario(model=raw["catalog_model"].strip(), phase="decode", batch=batch * copies,
                        input_len=int(raw["input_len"]), output_len=int(raw["output_len"]),
                        precision=(raw.get("precision") or "").strip() or None, steady_state=True)
    parallel = f"tp={tp}" + (f",dp={copies}" if copies > 1 else "")
    return DesignPoint(chip=system.architecture, scenario=scenario, schedule=Schedule.parse(parallel),
                       network=system.network), parallel


def _modelled(raw: dict[str, str]) -> dict[str, Any]:
    point, parallel = row_point(raw)
    report = evaluate(point, with_ttft=False)
    watts = report.breakdown.power_w_per_device
    measured_w, measured_tpj = float(raw["measured_power_W_per_gpu"]), float(raw["measured_tokens_per_J"])
    return {"model": raw.get("model_id") or raw["catalog_model"], "gpu": raw["gpu"].strip().upper(),
            "gpus": int(raw.get("gpus") or raw["tp"]), "tp": int(raw["tp"]),
            "max_num_seqs": int(raw["max_num_seqs"]) if raw.get("max_num_seqs") else None,
            "batch": float(raw["avg_batch"]),
            "system": GPU_SYSTEMS[raw["gpu"].strip().upper()], "parallel": parallel, "anchor": is_anchor(raw),
            "measured_W_per_gpu": measured_w, "model_W_per_gpu": watts,
            "power_error_pct": 100 * (watts / measured_w - 1),
            "measured_tokens_per_J": measured_tpj, "model_tokens_per_J": report.metrics.tokens_per_joule,
            "tokens_per_J_error_pct": 100 * (report.metrics.tokens_per_joule / measured_tpj - 1),
            "model_step_ms": 1e3 / report.metrics.utps,
            "measured_itl_ms": float(raw.get("measured_median_itl_ms") or "nan")}


def _score(rows: list[dict[str, Any]]) -> dict[str, Any]:
    power = [abs(r["power_error_pct"]) for r in rows]
    tpj = [abs(r["tokens_per_J_error_pct"]) for r in rows]
    return {"rows": len(rows), "power_mape_pct": statistics.fmean(power),
            "power_max_abs_pct": max(power), "tokens_per_J_mape_pct": statistics.fmean(tpj)}


def power_accuracy(path: Path | None = None, progress=None) -> dict[str, Any]:
    """Every row modelled and scored: MAPE of W per GPU and of tokens per joule per GPU and model, over the
    held-out rows (the anchor excluded) and the anchor alone."""
    path = path or reference_path()
    raws = read_csv(path)
    if not raws or any(column not in raws[0] for column in REQUIRED):
        raise UserInputError(f"reference file: {path} needs the columns {', '.join(REQUIRED)}")
    rows = each(_modelled, raws, progress)
    held = [r for r in rows if not r["anchor"]]
    families: dict[str, list[dict[str, Any]]] = {}
    for r in held:
        families.setdefault(f"{r['gpu']} {r['model']}", []).append(r)
    scores = {key: _score(group) for key, group in families.items()}
    if held:
        scores["held out"] = _score(held)
    anchors = [r for r in rows if r["anchor"]]
    if anchors:
        scores["anchor"] = _score(anchors)
    return {"reference": str(path), "scores": scores, "rows": rows}
