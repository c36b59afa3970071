"""Exhaustive and hierarchical sweeps (paper §4.2.3) on a local process pool or Dask.

* ``exhaustive``: every feasible hardware point of a (small) space × every schedule that fits it.
* ``hierarchical``: tier 1 evaluates every chip × NoC × stacking × SRAM point at nominal NoC latency and
  bandwidth, each with all its schedules; the best 5 % (by the first objective) go on to the hop-latency sweep,
  and the best 5 % of that tier to per-level bandwidth tuning. Every tier re-searches the schedules, because
  schedule and hardware are coupled (paper §5.6).

A sweep writes ``points.csv`` (every evaluation), ``pareto.csv``/``pareto.json`` (the non-dominated feasible
points) and ``summary.json`` to its output folder (:mod:`.output`). Each hardware point is evaluated by
:mod:`.points`, tiers are cut into resumable chunks by :mod:`.chunks`, and chunks run on an executor
(:mod:`deepstack.search.executor`).
"""

from __future__ import annotations

import itertools
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deepstack import catalog
from deepstack.errors import RunInterruptedError, UserInputError
from deepstack.schema import DesignSpace, Scenario
from deepstack.search import executor
from deepstack.search.files import check_output_folder
from deepstack.search.interrupt import Interrupts
from deepstack.search.space import (
    HardwarePoint,
    base_points,
    load_space,
    with_hop_latency,
    with_level_bw,
)
from deepstack.search.studies.provenance import code_digest, json_digest, presets_digest
from deepstack.search.sweep import output
from deepstack.search.sweep.chunks import CHUNK_POINTS, MIN_CHUNKS, ChunkLog, PointsFile, run_tier
from deepstack.search.sweep.points import SweepTask, affinity_order
from deepstack.search.sweep.survivors import Survivors

MODES = ("hierarchical", "exhaustive")
BACKENDS = ("local", "dask")
PROMOTED_SHARE = 0.05  # paper §4.2.3: the top 5 % of a tier advance to the next


@dataclass
class SweepResult:
    mode: str
    evaluations: int
    hardware_points: int
    wall_s: float
    out: str
    objectives: list[str]
    pareto: list[dict]
    tiers: list[dict]
    read_back: int = 0  # of ``evaluations``, rows an earlier (interrupted) run evaluated and this one read back
    timeline: list | None = None  # chunks in points.csv order: [tier, rows, finished_s on the sweep's clock]
    with_ttft: bool = True  # False: ttft_s was not computed (no ttft objective) and is left out of the files
    run_s: float | None = None  # this run's own wall time (``wall_s``: the sweep's, its runs together)


def _hop_points(space: DesignSpace, points: list[HardwarePoint]) -> list[HardwarePoint]:
    return [with_hop_latency(p, s) for p in points for s in space.hardware.hop_latency_scale if s != 1.0]


def _bw_points(space: DesignSpace, points: list[HardwarePoint]) -> list[HardwarePoint]:
    out = []
    for p in points:
        levels = len(catalog.load("nocs", p.noc).levels)
        for scales in itertools.product(space.hardware.level_bw_scale, repeat=levels):
            if any(s != 1.0 for s in scales):
                out.append(with_level_bw(p, scales))
    return out


def all_points(space: DesignSpace) -> list[HardwarePoint]:
    """The whole hardware grid: base points × hop latencies × per-level bandwidths."""
    out = []
    for p in base_points(space):
        for hop in space.hardware.hop_latency_scale:
            levels = len(catalog.load("nocs", p.noc).levels)
            for scales in itertools.product(space.hardware.level_bw_scale, repeat=levels):
                out.append(with_level_bw(with_hop_latency(p, hop), scales))
    return out


def _promote(survivors: Survivors, share: float = PROMOTED_SHARE) -> list[HardwarePoint]:
    best = survivors.ranked_best()
    keep = best[: max(1, math.ceil(len(best) * share))] if best else []
    return [HardwarePoint(r["chip"], r["noc"], r["stacked_layers"], r["connected_layers"], r["sram"],
                          r["hop_latency_scale"], tuple(r["level_bw_scales"])) for r in keep]


def _fingerprint(design_space: DesignSpace, scenario: Scenario, mode: str, objectives, with_ttft: bool) -> dict:
    """What a sweep's finished chunks depend on, in parts a refusal can name: the sweep itself (space, scenario,
    mode, objectives, chunking), the chip and NoC files the space names (their content, which the space holds
    only by name or path), and the code that evaluated them."""
    sweep = {"chunking": [CHUNK_POINTS, MIN_CHUNKS, "affinity"], "mode": mode,
             "space": design_space.model_dump(mode="json"), "scenario": scenario.model_dump(mode="json"),
             "objectives": objectives, "ttft": with_ttft}
    return {"sweep": json_digest(sweep),
            "presets": presets_digest(design_space), "code": code_digest()}


def sweep(*, mode: str, space: str | None, scenario: Scenario, objectives: list[str], out: str,
          workers: int | None = None, with_ttft: bool = False, backend: str = "local",
          scheduler: str | None = None, progress: Callable[[int, int], None] | None = None) -> SweepResult:
    """Run (or resume) a sweep of ``space`` for ``scenario`` and write its files to ``out``. ``progress(done,
    total)`` is told the hardware points finished (read back or evaluated) of those planned so far, after each
    chunk: a hierarchical sweep plans a tier once the tier before it has ranked its points, so the total grows."""
    if mode not in MODES:
        raise UserInputError(f"--mode: must be one of {', '.join(MODES)} (got {mode!r})")
    if backend not in BACKENDS:
        raise UserInputError(f"--backend: must be one of {', '.join(BACKENDS)} (got {backend!r})")
    if scheduler and backend != "dask":
        raise UserInputError("--scheduler: only with --backend dask")
    workers = min(os.cpu_count() or 1, 2) if workers is None else workers
    if not 1 <= workers <= 256:
        raise UserInputError(f"--workers: must be in 1..256 (got {workers})")
    check_output_folder(out)  # before any point is evaluated: every chunk is written there
    design_space = load_space(space)
    space_ref = space or "default"

    log = ChunkLog(Path(out), _fingerprint(design_space, scenario, mode, objectives, with_ttft))
    started = log.started = time.perf_counter()
    tally = executor.Tally(progress)
    # SIGINT / SIGTERM stop the chunks being evaluated at once (never a chunk being written) and end the workers;
    # every finished chunk stays in <out>/chunks/ for the re-run to read back
    points_file = None
    with Interrupts() as stops:
        log.shelter = stops.deferred
        try:
            runner = executor.chunk_runner(backend, workers, scheduler, shelter=stops.deferred)
            with stops.evaluating(), runner as run_chunks:
                points_file = PointsFile(log.folder, with_ttft)
                result = _sweep_tiers(mode, design_space, space_ref, scenario, objectives, out, with_ttft, log,
                                      run_chunks, started, tally, points_file)
                # the files as they are now
                log.check_unchanged(_fingerprint(load_space(space), scenario, mode, objectives, with_ttft))
                points_file.finish()
                with log.shelter():  # a signal while the files are written waits for the last of them
                    output.write(result, points_file.path, scenario, design_space)
                return result
        except BaseException as exc:
            if not stops.ended(exc):
                raise
            if points_file is not None:
                points_file.discard()
            chunks = log.finished()
            raise RunInterruptedError(
                f"interrupted by {stops.name or 'SIGINT'}: {chunks:,} finished chunk{'s' * (chunks != 1)} "
                f"({tally.done:,} hardware points) kept in {log.folder}/; re-run the same command to resume after "
                f"{'them' if chunks != 1 else 'it'}") from None


def _sweep_tiers(mode, design_space, space_ref, scenario, objectives, out, with_ttft, log, run_chunks,
                 started, tally, points_file) -> SweepResult:
    survivors = Survivors(objectives)

    def _tier(name: str, label: str, points: list[HardwarePoint]) -> None:
        before = log.read_back
        tasks = [SweepTask(space_ref, scenario.model_dump_json(), p, with_ttft)
                 for p in affinity_order(design_space, points)]
        summaries = run_tier(name, tasks, log, run_chunks, objectives, points_file, tally)
        for summary in summaries:
            survivors.merge(summary)
        tiers.append({"tier": label, "hardware_points": len(points), "evaluations": sum(s.rows for s in summaries),
                      "read_back": log.read_back - before})

    tiers = []
    if mode == "exhaustive":
        _tier("all", "all", all_points(design_space))
    else:
        _tier("tier1", "1: chip × NoC × stacking × SRAM", base_points(design_space))
        _tier("tier2", "2: hop latency", _hop_points(design_space, _promote(survivors)))
        _tier("tier3", "3: per-level bandwidth", _bw_points(design_space, _promote(survivors)))
    run_s = time.perf_counter() - started
    evaluations = sum(t["evaluations"] for t in tiers)
    front = output.front(survivors.candidates, objectives)
    wall_s = log.sweep_wall_s(evaluated=log.read_back < evaluations)
    log.record_wall_s(wall_s)
    return SweepResult(mode, evaluations, sum(t["hardware_points"] for t in tiers),
                       wall_s, out, objectives, front, tiers,
                       log.read_back, log.timeline, with_ttft, run_s)
