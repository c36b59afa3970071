"""Accuracy of the GPU prefill model against measured vLLM prefill rates: the ``measured_system_prefill_tps``
(and, when present, ``measured_user_prefill_tps``) columns of the serving reference (``validation/vllm_b200.csv``
or a file given with ``deepstack accuracy serving --reference FILE``), scored beside decode.

What the benchmark measured (docs/calibration.md §GPU prefill, "What the prefill columns measure"): each row is
one run of B requests of ``input_len`` tokens sent at once. Its "System Prefill TPS" is the run's input tokens
over the time from the start to the last request's first token, B · input_len / TTFT of the last request; its
"User Prefill Speed" the mean over requests of input_len / TTFT. Each row is modelled as ``deepstack evaluate
--system S --model M --parallel P --phase prefill --batch B`` does (the same system, model, schedule and CUDA-graph
mode as the decode check, :mod:`.serving`), with its system's shipped constants: the report's ``stps`` is B ·
input_len over the last request's TTFT of the modelled vLLM wave and its ``utps`` the mean input_len / TTFT, the
same two quantities. Nothing is fitted to these columns.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from deepstack.accuracy.files import read_csv
from deepstack.catalog import load
from deepstack.errors import UserInputError
from deepstack.models.evaluate import evaluate

SYSTEM_COLUMN = "measured_system_prefill_tps"
USER_COLUMN = "measured_user_prefill_tps"


@dataclass(frozen=True)
class PrefillRow:
    """One measured run's prefill rates and the model's."""

    model: str
    system: str
    parallel: str
    batch: int
    input_len: int
    graphs: bool
    measured_tps: float  # System Prefill TPS
    measured_user_tps: float  # User Prefill Speed (NaN when the file has none)
    model_tps: float
    model_user_tps: float
    ttft_s: float  # the modelled TTFT of the last request

    def error(self) -> float:
        """Signed relative error of the system prefill rate, (model − measured) / measured."""
        return self.model_tps / self.measured_tps - 1

    def user_error(self) -> float:
        return self.model_user_tps / self.measured_user_tps - 1


def has_prefill(path) -> bool:
    rows = read_csv(path)
    return bool(rows) and SYSTEM_COLUMN in rows[0]


def modelled_rows(path, failures: list[dict[str, Any]], progress=None, model: str | None = None,
                  constants: tuple[float, float] | None = None) -> list[PrefillRow]:
    """The rows of ``path`` with a system prefill rate (only ``model``'s when given), each modelled with its
    system's shipped constants or with ``constants`` (host_step_us, eager_op_us); infeasible runs go to
    ``failures``."""
    from deepstack.accuracy import serving

    raws = read_csv(path)
    out = []
    for number, raw in enumerate(raws, start=2):
        text = serving._cell(raw, SYSTEM_COLUMN)
        if text and (model is None or serving.row_model(raw) == model):
            try:
                row, violations = _modelled_row(raw, float(text), constants)
            except (KeyError, ValueError) as exc:
                raise UserInputError(f"reference file: line {number}: {exc}") from None
            if violations:
                failures.append({"line": number, "problem": f"prefill of {row.model} on {row.system}, batch "
                                                            f"{row.batch}: infeasible: {violations}"})
            else:
                out.append(row)
        if progress is not None:
            progress(number - 1, len(raws))
    return out


def _modelled_row(raw: dict[str, str], measured: float,
                  constants: tuple[float, float] | None = None) -> tuple[PrefillRow, str]:
    from deepstack.accuracy import serving

    if not measured > 0:
        raise ValueError(f"{SYSTEM_COLUMN} is {measured!r}; it must be a positive throughput (tokens/s)")
    system_id = serving.system_name(raw)
    system = load("systems", system_id)
    chip = system.architecture
    if constants is not None:
        gpu = chip.gpu.model_copy(update={"host_step_us": constants[0], "eager_op_us": constants[1]})
        chip = chip.model_copy(update={"gpu": gpu})
    batch = int(serving._cell(raw, "batch"))
    point, parallel = serving.reference_point(raw, system, chip, "prefill", batch)
    scenario, graphs, model = point.scenario, point.scenario.cuda_graphs, serving.row_model(raw)
    report = evaluate(point, with_ttft=False, breakdown=False)
    user = serving._cell(raw, USER_COLUMN)
    m = report.metrics
    row = PrefillRow(model, system_id, parallel, batch, scenario.input_len, graphs, measured,
                     float(user) if user else math.nan, m.stps, m.utps, m.ttft_s)
    return row, "; ".join(report.violations)


def mape_pct(errors: list[float]) -> float:
    errors = [e for e in errors if not math.isnan(e)]
    return 100 * sum(abs(e) for e in errors) / len(errors) if errors else float("nan")


def scores(rows: list[PrefillRow], label) -> dict[str, dict[str, float]]:
    """MAPE (%) of the system prefill rate (and of the user rate) per model and mode, per model, per mode and
    overall, with row counts; ``label(row)`` names a row's model (with its system when there are several)."""
    groups: dict[str, list[PrefillRow]] = {"all": rows}
    for r in rows:
        mode = "graphs" if r.graphs else "eager"
        for key in (f"{label(r)} {mode}", label(r), mode):
            groups.setdefault(key, []).append(r)
    return {key: {"mape_pct": mape_pct([r.error() for r in group]),
                  "user_mape_pct": mape_pct([r.user_error() for r in group]), "rows": len(group)}
            for key, group in groups.items()}


def prefill_accuracy(path, progress=None) -> dict[str, Any]:
    """The prefill rows of ``path`` against the model and their scores (plain data for JSON)."""
    failures: list[dict[str, Any]] = []
    rows = modelled_rows(path, failures, progress)
    several = len({r.system for r in rows}) > 1

    def label(r: PrefillRow) -> str:
        return f"{r.system} {r.model}" if several else r.model

    return {"scores": scores(rows, label), "failures": failures,
            "rows": [{**asdict(r), "label": label(r), "mode": "graphs" if r.graphs else "eager",
                      "model_ttft_ms": 1e3 * r.ttft_s, "measured_ttft_ms": 1e3 * r.batch * r.input_len / r.measured_tps,
                      "error_pct": 100 * r.error(), "user_error_pct": 100 * r.user_error()} for r in rows]}

