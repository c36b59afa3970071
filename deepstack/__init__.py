"""DeepStack: design-space exploration for distributed 3D-DRAM-stacked AI accelerators serving LLMs.

The curated public API (``__all__``). Internals (``deepstack.models``, ``deepstack.search``) may move between
releases. The evaluator and the searches are imported on first use, so ``import deepstack`` stays fast.

Example::

    import deepstack
    report = deepstack.evaluate(model="llama-3.2-1b", chip="standard", phase="decode", batch=1)
    print(report.metrics.stps, report.metrics.power_w)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deepstack.catalog import load as load_preset
from deepstack.errors import DeepStackError, InfeasibleError, UserInputError
from deepstack.schema import (
    LLM,
    ChipArchitecture,
    DesignSpace,
    Network,
    Precision,
    Scenario,
    Schedule,
    StudyRecipe,
    System,
    load_file,
)

if TYPE_CHECKING:
    from deepstack.models.design import DesignPoint
    from deepstack.models.results import Report

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "ChipArchitecture",
    "DeepStackError",
    "DesignPoint",
    "DesignSpace",
    "InfeasibleError",
    "Network",
    "Precision",
    "Report",
    "Scenario",
    "Schedule",
    "StudyRecipe",
    "System",
    "UserInputError",
    "__version__",
    "best_schedules",
    "collective_time",
    "evaluate",
    "load_file",
    "load_preset",
    "optimize",
    "sweep",
]

_LAZY = {  # public name → module that defines it (imported on first access)
    "DesignPoint": "deepstack.models.design",
    "Report": "deepstack.models.results",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'deepstack' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def evaluate(point: DesignPoint | None = None, /, *, model: str | None = None, phase: str = "decode",
             batch: int = 1, input_len: int = 1024, output_len: int = 1024, precision: str | None = None,
             chip: str | None = None, noc: str | None = None, system: str | None = None,
             stacked_layers: int | None = None, connected_layers: int | None = None, parallel: str | None = None,
             objective: str = "stps", with_ttft: bool = True, breakdown: bool = True,
             overlap: bool = True, prefill_chunk_tokens: int | None = None, ambient_c: float | None = None,
             max_temp_c: float | None = None, assumptions: str | None = None, cuda_graphs: bool | None = None,
             steady_state: bool | None = None, pes: int | None = None, l1_kib: float | None = None,
             l1_bw_B_per_cycle: float | None = None, hop_latency_scale: float = 1.0,
             level_bw_scale: str | None = None) -> Report:
    """Evaluate one design point and return its typed, immutable :class:`Report`.

    Either pass a :class:`DesignPoint`, or describe the point with keywords as the ``deepstack evaluate``
    command does: ``model`` (an LLM preset name or file), ``chip`` and ``noc`` presets or a ``system`` preset,
    the scenario (``phase`` "prefill"/"decode", ``batch`` requests, ``input_len``/``output_len`` tokens,
    ``precision``), the DRAM stack (``stacked_layers`` m, ``connected_layers`` n) and ``parallel``, a schedule
    such as ``"tp=4,ep=32,pp=2"``. Without ``parallel`` on a multi-device network, every feasible schedule is
    evaluated and the best by ``objective`` ("stps", "utps", "tokens_per_joule", "ttft") is returned with the
    search's summary in ``report.search``.

    ``with_ttft`` also times the prefill of a decode scenario (``metrics.ttft_s``; NaN otherwise),
    ``breakdown=False`` leaves out the per-operator breakdown (``report.breakdown`` is None), and
    ``overlap=False`` serialises every collective with its GEMM (no eq. 5 overlap, no FSDP prefetch).
    ``prefill_chunk_tokens`` is the prefill token budget per step (default: chunked prefill as vLLM runs it),
    ``ambient_c`` the coolant temperature and ``max_temp_c`` the junction limit (default: the chip's). The
    command's other flags are keywords too, by the same names: ``assumptions`` ("default" or "paper"),
    ``cuda_graphs`` and ``steady_state`` (GPU serving), and the hardware overrides ``pes``, ``l1_kib``,
    ``l1_bw_B_per_cycle``, ``hop_latency_scale`` and ``level_bw_scale`` (e.g. "1.9,0.4,1.7").

    Units are in the field names: ``report.metrics.ttft_s`` (s), ``.stps`` (tokens/s, the whole system),
    ``.power_w`` (W), ``.temperature_c`` (°C), ``.frequency_ghz`` (GHz). Every part is also a read-only
    mapping of its JSON keys (``report.metrics["stps"]``) and ``report.as_dict()`` is the CLI's JSON.

    Raises:
        UserInputError: bad input (naming the field), or (keyword form) a point whose memory cannot fit.
    """
    if point is not None:
        from deepstack.models.evaluate import evaluate as evaluate_point

        return evaluate_point(point, with_ttft=with_ttft, breakdown=breakdown, overlap=overlap)
    if model is None:
        raise UserInputError("evaluate: give a DesignPoint or model=...")
    from deepstack import api

    return api.evaluate(model=model, phase=phase, batch=batch, input_len=input_len, output_len=output_len,
                        precision=precision, chip=chip, noc=noc, system=system, stacked_layers=stacked_layers,
                        connected_layers=connected_layers, parallel=parallel, objective=objective,
                        with_ttft=with_ttft, breakdown=breakdown, overlap=overlap,
                        prefill_chunk_tokens=prefill_chunk_tokens, ambient_c=ambient_c, max_temp_c=max_temp_c,
                        assumptions=assumptions, cuda_graphs=cuda_graphs, steady_state=steady_state, pes=pes,
                        l1_kib=l1_kib, l1_bw_B_per_cycle=l1_bw_B_per_cycle, hop_latency_scale=hop_latency_scale,
                        level_bw_scale=level_bw_scale)


def best_schedules(point: DesignPoint, objective: str = "stps"):
    """Evaluate every schedule of a hardware point that survives the pruning rules and the memory check.

    ``point.schedule`` only contributes its collective algorithms. Returns the search result: ``.best`` (the
    best :class:`Report`, thermally feasible ones first, by ``objective`` — "stps", "utps",
    "tokens_per_joule" or "ttft"), ``.ranking_all`` (every schedule's text, feasibility and objective value,
    best first) and ``.summary()``. Raises :class:`InfeasibleError` if no schedule fits in memory.
    """
    from deepstack.search.schedules import best_schedule

    return best_schedule(point, objective)


def collective_time(op: str, bytes_per_rank: float, groups, topology, algorithm: str = "auto"):
    """Time one collective run by every group of ranks at once on a network topology (paper §3.3.3, eq. 4).

    ``op`` is "all_reduce", "all_gather", "reduce_scatter", "all_to_all" or "send_recv"; ``bytes_per_rank`` the
    per-rank input in bytes; ``groups`` the device ids taking part (one tuple, or a tuple of equal-size
    tuples); ``topology`` a network topology (e.g. built from a :class:`Network` preset); ``algorithm`` one
    algorithm name or "auto" (the fastest). Returns the collective's result: ``time_s`` (s), ``latency_s``,
    ``congestion_s``, the algorithm chosen and the load on each network level.
    """
    from deepstack.models import collectives

    return collectives.collective_time(op, bytes_per_rank, groups, topology, algorithm)


def sweep(*, scenario: Scenario, space: str | None = None, objectives: list[str] | tuple[str, ...] = ("stps",),
          mode: str = "hierarchical", out: str = "studies/sweep", workers: int | None = None,
          with_ttft: bool = False, backend: str = "local", scheduler: str | None = None, progress=None):
    """Sweep a design space (a preset name or file; the default space when None) for ``scenario``.

    ``mode`` "hierarchical" (paper §4.2.3: the top 5 % of each tier advance) or "exhaustive"; ``objectives``
    the metrics of the Pareto front; results are written under ``out`` (points.csv, pareto.csv,
    summary.json). ``backend`` "local" (a process pool of ``workers``) or "dask" (``scheduler`` address; needs
    the ``[dask]`` extra); ``progress(done, total)``, when given, is told the hardware points finished after each
    chunk. Returns the sweep result (evaluations, Pareto front, wall time, files).
    """
    from deepstack.search.sweep import sweep as run

    return run(mode=mode, space=space, scenario=scenario, objectives=list(objectives), out=out, workers=workers,
               with_ttft=with_ttft, backend=backend, scheduler=scheduler, progress=progress)


def optimize(*, objectives: list[str] | tuple[str, ...] = ("stps", "tokens_per_joule"),
             scenario: Scenario | None = None, space: str | None = None, sampler: str = "nsga2", trials: int = 1000,
             study: str = "deepstack", storage: str | None = None, seed: int | None = 0, workers: int = 1,
             out: str | None = None, batch: int = 4, until_stall: int | None = None, inner: str = "screen",
             refine: int | None = None):
    """Create or resume an Optuna study over a design space and add ``trials`` trials (fewer with
    ``until_stall``), ``refine`` of them (default 60 %) local search around the front; the defaults are
    ``deepstack optimize``'s (the same seed gives the same front; after an interrupt, the same call finishes the
    run).

    ``scenario`` defaults to the space's first; ``storage`` an Optuna storage URL (SQLite by default;
    PostgreSQL needs the ``[postgres]`` extra). Returns the study result (trials, Pareto front, files written).
    """
    from deepstack.search.optimize import optimize as run

    return run(objectives=list(objectives), space=space, scenario=scenario, sampler=sampler, trials=trials,
               study=study, storage=storage, seed=seed, workers=workers, out=out, batch=batch,
               until_stall=until_stall, inner=inner, refine=refine)
