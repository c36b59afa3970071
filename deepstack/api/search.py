"""The design-space searches: an Optuna study, a sweep, and the comparison of the two (``deepstack optimize``,
``sweep``, ``compare``). The search modules are imported when a search runs, not with the API."""

from __future__ import annotations

import math
from typing import Any

from deepstack import catalog
from deepstack.api.flags import with_flags
from deepstack.schema import Scenario, build_scenario


def _check_cooling(space: str | None, scenario: Scenario) -> None:
    """Refuse, before a search starts, an ambient at or above a chip's limit (one line naming the flag)."""
    from deepstack.models.design import cooled
    from deepstack.search.space import load_space

    for chip in load_space(space).hardware.chips:
        cooled(catalog.load("chips", chip), scenario.ambient_c, scenario.max_temp_c)


def run_optimize(*, objective: str, model: str | None, phase: str | None, batch: int | None,
                 input_len: int | None, output_len: int | None, precision: str | None, space: str | None,
                 sampler: str, trials: int, study: str, storage: str | None, seed: int | None, workers: int,
                 out: str | None, progress=None, prefill_chunk_tokens: int | None = None,
                 ambient_c: float | None = None, max_temp_c: float | None = None, batch_size: int | None = None,
                 until_stall: int | None = None, log=None, inner: str = "screen",
                 refine: int | None = None, assumptions: str | None = None) -> dict[str, Any]:
    """Run (or resume) a study; the scenario comes from the flags, else from the space's first scenario.
    ``result["run"]`` says what this run did (counts, hypervolume, evaluations, ``interrupted``: the signal)."""
    from deepstack.search import optimize as opt

    objectives = opt.parse_objectives(objective)
    scenario = with_flags(_scenario_or_space(space, model, phase, batch, input_len, output_len, precision),
                          prefill_chunk_tokens=prefill_chunk_tokens, ambient_c=ambient_c, max_temp_c=max_temp_c,
                          assumptions=assumptions)
    _check_cooling(space, scenario)
    result = opt.optimize(objectives=objectives, space=space, scenario=scenario, sampler=sampler, trials=trials,
                          study=study, storage=storage, seed=seed, workers=workers, out=out, progress=progress,
                          batch=opt.DEFAULT_BATCH if batch_size is None else batch_size, until_stall=until_stall,
                          log=log, inner=inner, refine=refine)
    return {"study": result.study, "storage": result.storage, "trials": result.trials, "added": result.added,
            "run": result.run,
            "objectives": result.objectives, "wall_s": result.wall_s, "files": result.files,
            "scenario": {"model": scenario.model.name, "phase": scenario.phase, "batch": scenario.batch,
                         "input_len": scenario.input_len, "output_len": scenario.output_len,
                         "precision": str(scenario.precision), "ambient_c": scenario.ambient_c,
                         "max_temp_c": scenario.max_temp_c, "assumptions": scenario.assumptions},
            "pareto": result.pareto}


def space_size(space: str | None) -> dict[str, Any]:
    from deepstack.search.space import load_space, raw_size

    s = load_space(space)
    size = raw_size(s)
    return {"space": s.name, "raw_size": size, "log10": math.log10(size)}


def _scenario_or_space(space: str | None, model, phase, batch, input_len, output_len, precision) -> Scenario:
    from deepstack.search.space import load_space, scenarios

    first = scenarios(load_space(space))[0]

    def given(value, default):  # a flag set to 0 or "" is still set: the schema then refuses it
        return default if value is None else value

    return build_scenario(given(model, first.model.name), given(phase, first.phase), given(batch, first.batch),
                          given(input_len, first.input_len), given(output_len, first.output_len),
                          given(precision, str(first.precision) if model is None else None),
                          assumptions=first.assumptions).with_cooling(first.ambient_c, first.max_temp_c)


def run_sweep(*, mode: str, objective: str, model: str | None, phase: str | None, batch: int | None,
              input_len: int | None, output_len: int | None, precision: str | None, space: str | None,
              workers: int | None, out: str | None, backend: str = "local",
              scheduler: str | None = None, prefill_chunk_tokens: int | None = None, ambient_c: float | None = None,
              max_temp_c: float | None = None, assumptions: str | None = None, progress=None) -> dict[str, Any]:
    """Run (or resume) a sweep (``deepstack sweep``); ``progress(done, total)``, when given, is told the hardware
    points finished of those planned so far after each chunk (the total grows as a hierarchical sweep plans its
    next tier)."""
    from deepstack.search import optimize as opt
    from deepstack.search import sweep as sw

    objectives = opt.parse_objectives(objective)
    scenario = with_flags(_scenario_or_space(space, model, phase, batch, input_len, output_len, precision),
                          prefill_chunk_tokens=prefill_chunk_tokens, ambient_c=ambient_c, max_temp_c=max_temp_c,
                          assumptions=assumptions)
    _check_cooling(space, scenario)
    folder = out or f"studies/sweep-{mode}"
    result = sw.sweep(mode=mode, space=space, scenario=scenario, objectives=objectives, out=folder,
                      workers=workers, with_ttft="ttft" in objectives, backend=backend, scheduler=scheduler,
                      progress=progress)
    return {"mode": result.mode, "evaluations": result.evaluations, "hardware_points": result.hardware_points,
            "evaluated_now": result.evaluations - result.read_back, "read_back": result.read_back,
            "wall_s": result.wall_s, "run_s": result.run_s, "out": result.out, "objectives": result.objectives,
            "tiers": result.tiers, "pareto": result.pareto,
            "files": {"points": f"{folder}/points.csv", "pareto": f"{folder}/pareto.csv",
                      "summary": f"{folder}/summary.json"}}


def run_compare(*, study: str, storage: str | None, sweep_dir: str) -> dict[str, Any]:
    from deepstack.search.compare import compare

    return compare(study=study, storage=storage or f"sqlite:///studies/{study}.db", sweep_dir=sweep_dir)
