"""Accuracy of the distributed-kernel model against measurements on 8×H100 (``validation/h100_kernels.csv``).

Every row is one Triton-distributed kernel measured on a DGX H100 (``validation/README.md``). :func:`kernel_accuracy`
turns each row into a call of :func:`deepstack.models.gpu.overlapped.kernel_time` on the ``dgx-h100`` system, compares
the predicted time with the measured one and summarises the errors per kernel kind and overall: the paper's
weighted error Σ|model − ref| / Σ ref and the MAPE (mean of |model − ref| / ref). The metric functions are those
of :mod:`deepstack.accuracy.network`.

A row becomes a model call as follows: the ``kernel`` column's first word names the kind (:data:`KINDS`); the
shape comes from the columns the kind reads (``M``, ``N``, ``K``; ``tokens``, ``hidden``, ``intermediate``,
``routed_experts``, ``activated_experts`` (the top-k); ``bs``, ``seqlen``, ``num_heads``, ``head_dim``,
``out_features``, ``sp_size``), per GPU as ``shape_notes`` says; the tile and pipeline depth from
``tiling_tb_mnk`` and ``stages``; the SMs taken by communication from ``num_comm_sm`` (empty: the kind's default).

:func:`calibrate` sets the one calibrated constant of :class:`~deepstack.models.gpu.overlapped.KernelConstants`
(``mma_fraction``; the others are public measurements) on a set of rows by minimising the weighted error; the
shipped value is its calibration on the AG-GEMM and GEMM-RS rows (:func:`calibration_rows`);
:func:`kernels_cross_validate` re-sets it on every kind but one and scores the kind left out.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import deepstack
from deepstack import catalog
from deepstack.accuracy.files import each, read_csv
from deepstack.accuracy.network import weighted_error_pct
from deepstack.errors import UserInputError
from deepstack.models.gpu.overlapped import DEFAULT_CONSTANTS, KernelConstants, kernel_time, parse_tile

SYSTEM = "dgx-h100"
KINDS = {"all_gather_gemm": "ag-gemm", "reduce_scatter_gemm": "gemm-rs", "all_reduce_gemm": "moe-gemm-ar",
         "moe_ep_all_to_all": "ep-dispatch", "ulysses_attention": "ulysses"}
COLUMNS = {  # model shape field → file column
    "ag-gemm": {"m": "M", "n": "N", "k": "K"},
    "gemm-rs": {"m": "M", "n": "N", "k": "K"},
    "moe-gemm-ar": {"tokens": "tokens", "hidden": "hidden", "intermediate": "intermediate",
                    "experts": "routed_experts", "topk": "activated_experts"},
    "ep-dispatch": {"tokens": "tokens", "hidden": "hidden", "experts": "routed_experts", "topk": "activated_experts"},
    "ulysses": {"batch": "bs", "seq": "seqlen", "heads": "num_heads", "head_dim": "head_dim",
                "out_features": "out_features", "sp": "sp_size"},
}
# the grid the one calibrated constant is searched on; the other KernelConstants are public measurements
GRIDS = {"mma_fraction": [round(0.40 + 0.01 * i, 2) for i in range(61)]}
# which kinds inform each calibrated constant: one no calibration row's kind uses keeps its start value
USED_BY = {"mma_fraction": {"ag-gemm", "gemm-rs", "moe-gemm-ar", "ulysses"}}
# the rows the shipped constants are calibrated on (docs/calibration.md, "Distributed kernels")
CALIBRATION_KINDS = ("ag-gemm", "gemm-rs")


@dataclass(frozen=True)
class Score:
    """Errors of a set of rows, in %: the paper's weighted error and the MAPE."""

    weighted_pct: float
    mape_pct: float
    rows: int


@dataclass(frozen=True)
class RowResult:
    """One measured kernel and the model's prediction; ``error`` is signed, (model − ref) / ref."""

    kind: str
    point_index: int
    shape: str
    ref_ms: float
    model_ms: float | None
    error: float | None


@dataclass(frozen=True)
class KernelAccuracy:
    """The comparison: every row, the scores per kind and overall, the failed rows."""

    reference: str
    rows: tuple[RowResult, ...]
    kinds: dict[str, Score]
    overall: Score
    failures: tuple[tuple[RowResult, str], ...]
    constants: KernelConstants

    def as_dict(self) -> dict[str, Any]:
        return {"reference": self.reference, "system": SYSTEM, "rows_total": len(self.rows),
                "overall": asdict(self.overall), "kinds": {kind: asdict(s) for kind, s in self.kinds.items()},
                "constants": asdict(self.constants), "rows": [asdict(row) for row in self.rows],
                "failures": [{"kind": row.kind, "point_index": row.point_index, "error": message}
                             for row, message in self.failures]}


def score(pairs: Sequence[tuple[float, float]]) -> Score:
    """Weighted error and MAPE (%) of (ref, model) pairs."""
    mape = 100 * sum(abs(m - r) / r for r, m in pairs) / len(pairs) if pairs else math.nan
    return Score(weighted_error_pct(pairs), mape, len(pairs))


def reference_path() -> Path:
    """The repository's ``validation/h100_kernels.csv``."""
    path = Path(deepstack.__file__).resolve().parents[1] / "validation" / "h100_kernels.csv"
    if not path.is_file():
        raise UserInputError(f"reference file: {path} is missing; it ships with the repository (validation/)")
    return path


def read_reference(path: Path | None = None) -> list[dict[str, str]]:
    """The rows of the reference file, as strings, each checked to name a known kernel kind."""
    path = path or reference_path()
    rows = read_csv(path)
    missing = [column for column in ("kernel", "point_index", "measured_time_ms") if rows and column not in rows[0]]
    if missing:
        raise UserInputError(f"reference file: {path} has no column {', '.join(missing)} (a kernel reference has the "
                             "columns of validation/h100_kernels.csv)")
    for line, row in enumerate(rows, start=2):
        if (row.get("kernel") or "").split(" ")[0] not in KINDS:
            raise UserInputError(f"reference file: {path} line {line}: kernel must start with one of "
                                 f"{', '.join(KINDS)}")
        needed = ("point_index", "measured_time_ms", *COLUMNS[row_kind(row)].values())
        try:
            [float(row[column]) for column in needed]
        except (KeyError, TypeError, ValueError):
            raise UserInputError(f"reference file: {path} line {line}: a {row_kind(row)} row needs numbers in "
                                 f"{', '.join(needed)}") from None
    return rows


def row_kind(row: dict[str, str]) -> str:
    return KINDS[row["kernel"].split(" ")[0]]


def row_call(row: dict[str, str]) -> tuple[str, dict[str, int], dict[str, Any]]:
    """(kind, shape, keyword options) of :func:`kernel_time` for a row."""
    kind = row_kind(row)
    shape = {field: int(float(row[column])) for field, column in COLUMNS[kind].items()}
    tile = parse_tile(row["tiling_tb_mnk"], int(row["stages"])) if row["tiling_tb_mnk"].strip() else None
    sms = int(row["num_comm_sm"]) if row["num_comm_sm"].strip() else None
    return kind, shape, {"tile": tile, "comm_sms": sms}


def _system():
    return catalog.load("systems", SYSTEM)


def _model_ms(row: dict[str, str], constants: KernelConstants, system=None) -> float:
    system = system or _system()
    kind, shape, options = row_call(row)
    return kernel_time(kind, shape, system.architecture, system.network, constants=constants, **options).time_s * 1e3


def _evaluate(row: dict[str, str], constants: KernelConstants) -> tuple[RowResult, str | None]:
    ref = float(row["measured_time_ms"])
    model, failure = None, None
    try:
        model = _model_ms(row, constants)
    except Exception as exc:  # a report, not a crash: every failing row is listed with its error
        failure = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    kind = row_kind(row)
    shape = " ".join(f"{field}={int(float(row[column]))}" for field, column in COLUMNS[kind].items())
    return RowResult(kind, int(float(row["point_index"])), shape, ref, model,
                     None if model is None else (model - ref) / ref), failure


def kernel_accuracy(constants: KernelConstants = DEFAULT_CONSTANTS, rows: list[dict[str, str]] | None = None,
                    path: Path | None = None, progress=None) -> KernelAccuracy:
    """Compare the kernel model (with ``constants``) with every row of the reference file (``path``, default the
    shipped one; or ``rows``); ``progress(done, total)`` after each row."""
    rows = read_reference(path) if rows is None else rows
    evaluated = each(lambda row: _evaluate(row, constants), rows, progress)
    results = tuple(result for result, _ in evaluated)
    compared = [r for r in results if r.error is not None]
    kinds: dict[str, list[tuple[float, float]]] = {}
    for r in compared:
        kinds.setdefault(r.kind, []).append((r.ref_ms, r.model_ms))
    return KernelAccuracy(str(path or reference_path()), results, {k: score(p) for k, p in kinds.items()},
                          score([(r.ref_ms, r.model_ms) for r in compared]),
                          tuple((r, f) for r, f in evaluated if f is not None), constants)


def _weighted(rows: list[dict[str, str]], constants: KernelConstants, system) -> float:
    pairs = []
    for row in rows:
        try:
            pairs.append((float(row["measured_time_ms"]), _model_ms(row, constants, system)))
        except Exception:  # a constant that makes a row fail is never the best one
            return math.inf
    return weighted_error_pct(pairs)


def calibration_rows(rows: list[dict[str, str]] | None = None) -> list[dict[str, str]]:
    """The rows the shipped constants are set on: those of :data:`CALIBRATION_KINDS`."""
    return [row for row in (read_reference() if rows is None else rows) if row_kind(row) in CALIBRATION_KINDS]


def calibrate(rows: list[dict[str, str]], start: KernelConstants = DEFAULT_CONSTANTS,
              passes: int = 3) -> KernelConstants:
    """The calibrated constants (:data:`GRIDS`) that minimise the weighted error on ``rows``: coordinate descent,
    one constant at a time, ``passes`` times; the sourced constants keep ``start``'s values. A calibrated
    constant no row's kind uses (:data:`USED_BY`) keeps ``start``'s."""
    kinds = {row_kind(row) for row in rows}
    free = [name for name in GRIDS if USED_BY[name] & kinds]
    system = _system()
    best = start
    best_error = _weighted(rows, best, system)
    for _ in range(passes):
        improved = False
        for name in free:
            for value in GRIDS[name]:
                trial = dataclasses.replace(best, **{name: value})
                error = _weighted(rows, trial, system)
                if error < best_error - 1e-9:
                    best, best_error, improved = trial, error, True
        if not improved:
            break
    return best


def kernels_cross_validate() -> dict[str, Any]:
    """Leave-one-kind-out: for each kind, the calibrated constant (``mma_fraction``) re-set on the other kinds'
    rows, the sourced ones unchanged, and the left-out kind's scores with them."""
    rows = read_reference()
    prior = DEFAULT_CONSTANTS
    out = {}
    for kind in dict.fromkeys(row_kind(row) for row in rows):
        train = [row for row in rows if row_kind(row) != kind]
        held = [row for row in rows if row_kind(row) == kind]
        constants = calibrate(train, prior)
        result = kernel_accuracy(constants, held)
        out[kind] = {"held_out": asdict(result.overall), "constants": asdict(constants),
                     "calibrated_on_rows": len(train)}
    return {"check": "kernels", "method": "leave-one-kind-out", "folds": out}


def plot(accuracy: KernelAccuracy, path: str | Path) -> Path:
    """A PNG of predicted vs measured time (log-log), one marker style per kind, the y = x line and ±10 %."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5))
    compared = [r for r in accuracy.rows if r.model_ms is not None]
    for kind, marker in zip(dict.fromkeys(r.kind for r in compared), "osD^v", strict=False):
        rows = [r for r in compared if r.kind == kind]
        s = accuracy.kinds[kind]
        ax.plot([r.ref_ms for r in rows], [r.model_ms for r in rows], marker, linestyle="none",
                label=f"{kind} (w {s.weighted_pct:.1f} %, MAPE {s.mape_pct:.1f} %)")
    lo = min(min(r.ref_ms, r.model_ms) for r in compared) * 0.8
    hi = max(max(r.ref_ms, r.model_ms) for r in compared) * 1.2
    ax.plot([lo, hi], [lo, hi], "k-", linewidth=0.8)
    for f in (0.9, 1.1):
        ax.plot([lo, hi], [lo * f, hi * f], "k:", linewidth=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.minorticks_off()
    ax.set_xlabel("measured, ms")
    ax.set_ylabel("model, ms")
    o = accuracy.overall
    ax.set_title(f"distributed kernels on 8×H100: weighted {o.weighted_pct:.1f} %, MAPE {o.mape_pct:.1f} %",
                 fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=90)
    plt.close(fig)
    return Path(path)


def cross_validation_rows() -> list[dict[str, Any]]:
    """:func:`kernels_cross_validate` as rows of the ``deepstack accuracy cross-validate`` table (``check``,
    ``calibrated_on``, ``predicted``, ``mape_pct``, plus the weighted error and the held-out rows)."""
    folds = kernels_cross_validate()["folds"]
    return [{"check": "kernels: leave one kind out", "calibrated_on": f"the other kinds ({fold['calibrated_on_rows']}"
             " rows)", "predicted": kind, "mape_pct": fold["held_out"]["mape_pct"],
             "weighted_pct": fold["held_out"]["weighted_pct"], "rows": fold["held_out"]["rows"]}
            for kind, fold in folds.items()]
