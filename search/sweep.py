"""Exhaustive and hierarchical sweeps (paper §4.2.3) on a local process pool.

* ``exhaustive``: every feasible hardware point of a (small) space × every schedule that fits it.
* ``hierarchical``: tier 1 evaluates every chip × NoC × stacking × SRAM point at nominal NoC latency and
  bandwidth, each with all its schedules; the best 5 % (by the first objective) go on to the hop-latency sweep,
  and the best 5 % of that tier to per-level bandwidth tuning. Every tier re-searches the schedules, because
  schedule and hardware are coupled (paper §5.6).

A sweep writes ``points.csv`` (every evaluation), ``pareto.csv``/``pareto.json`` (the non-dominated feasible
points) and ``summary.json`` to its output folder.
"""

from __future__ import annotations

import collections
import contextlib
import csv
import dataclasses
import gc
import hashlib
import itertools
import json
import math
import os
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.jsonutil import finite
from deepstack.models import memo, network, tune_gc
from deepstack.models.evaluate import evaluate, prepare_phases
from deepstack.models.parallel import feasible_strategies
from deepstack.models.schedule_search import OBJECTIVES
from deepstack.schema import DesignSpace, Scenario
from deepstack.search import pareto
from deepstack.search.space import (
    HardwarePoint,
    base_points,
    design_point,
    load_space,
    scaled_network,
    with_hop_latency,
    with_level_bw,
)

MODES = ("hierarchical", "exhaustive")
BACKENDS = ("local", "dask")
CHUNK_POINTS = 8  # at most this many hardware points per chunk: the unit of scheduling, progress and resumption
MIN_CHUNKS = 64  # a tier is cut into at least this many chunks (when it has the points) so workers stay balanced
IN_FLIGHT = 2  # chunks a local worker holds at once: it starts the next while the parent records the last
PROMOTED_SHARE = 0.05  # paper §4.2.3: the top 5 % of a tier advance to the next
METRIC_COLUMNS = ("stps", "utps", "tokens_per_joule", "ttft_s", "power_w", "temperature_c", "frequency_ghz",
                  "memory_gib")


@dataclass(frozen=True)
class SweepTask:
    space_ref: str
    scenario_json: str
    hardware: HardwarePoint
    with_ttft: bool


def _device(space: DesignSpace, hw: HardwarePoint):
    """The device a hardware point resolves to, or None when no PE fits the area budget (the area model
    decides, as in the CP-SAT tables)."""
    from deepstack.models.device import resolve_device

    sram = next(o for o in space.hardware.sram if o.name == hw.sram)
    chip = catalog.load("chips", hw.chip)
    try:
        return resolve_device(chip, hw.stacked_layers, hw.connected_layers,
                              scaled_network(hw.noc, hw.hop_latency_scale, hw.level_bw_scales),
                              None if sram.name == "base" and sram.l1_KiB is None and sram.l2_MiB is None
                              and sram.l1_bw_scale == 1.0 else sram)
    except UserInputError:
        return None


def _hardware_feasible(space: DesignSpace, hw: HardwarePoint) -> bool:
    return _device(space, hw) is not None


def _affinity_order(space: DesignSpace, points: list[HardwarePoint]) -> list[HardwarePoint]:
    """The points with those that time alike next to each other (same chip, stacking, SRAM and PE count: the
    NoC variants of a tier differ in area, which may or may not cost a PE), so a worker's block of chunks
    reuses one device's operator tables. A pure function of the points: a resumed sweep cuts the same chunks."""
    def key(hw: HardwarePoint) -> tuple:
        dev = _device(space, hw)
        return (hw.chip, hw.stacked_layers or 0, hw.connected_layers or 0, hw.sram, dev.pes if dev else 0)

    return sorted(points, key=key)


@memo.cached(maxsize=64)
def _scenario(text: str) -> Scenario:
    """One scenario object per worker (memo lookups keyed on it then match by identity)."""
    return Scenario.model_validate_json(text)


def evaluate_hardware(task: SweepTask) -> list[dict]:
    """Every schedule that fits one hardware point, evaluated (a unit of work for a pool worker)."""
    space = load_space(task.space_ref)
    scenario = _scenario(task.scenario_json)
    hw = task.hardware
    if not _hardware_feasible(space, hw):
        return []
    point = design_point(space, hw, scenario)
    if point.network is not None:
        network.prepare(point.network)  # every schedule's collectives are planned on it
    capacity = _capacity_B(hw)
    kept, _ = feasible_strategies(scenario, point.devices, capacity)
    points = [(strategy, dataclasses.replace(point, schedule=strategy.to_schedule())) for strategy in kept
              if strategy.fsdp in space.schedule.fsdp]
    prepare_phases(p for _, p in points)
    hardware = hw.as_dict()
    rows = []
    for strategy, candidate in points:
        report = evaluate(candidate, with_ttft=task.with_ttft, breakdown=False)
        metrics = report.metrics
        rows.append({**hardware, "schedule": strategy.label, "fsdp": strategy.fsdp,
                     "feasible": report.feasible, **{k: metrics[k] for k in METRIC_COLUMNS if k in metrics}})
    return rows


def _capacity_B(hw: HardwarePoint) -> float:
    dram = catalog.load("chips", hw.chip).device.dram
    if dram.technology == "3d-stacked":
        return dram.layer_capacity_GiB * 2**30 * hw.stacked_layers
    return dram.capacity_B


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


def evaluate_chunk(tasks: list[SweepTask]) -> tuple[list[dict], str]:
    """One chunk of hardware points (the unit a backend schedules, records and resumes): its rows, and the same
    rows as the JSON lines :class:`ChunkLog` records. Encoding them here puts that cost on the pool's workers
    instead of on the parent, which records every chunk while the workers share its cores."""
    tune_gc()  # also in workers that did not start from the CLI (Dask)
    rows = [row for task in tasks for row in evaluate_hardware(task)]
    return rows, "".join(json.dumps(row) + "\n" for row in rows)


class ChunkLog:
    """Finished chunks of a sweep, one JSON-lines file each in ``<out>/chunks/`` (written atomically), so a
    re-run resumes after the last finished chunk and never evaluates a finished one twice."""

    def __init__(self, out: Path, fingerprint: str):
        self.folder = out / "chunks"
        self.folder.mkdir(parents=True, exist_ok=True)
        stamp = out / "sweep.json"
        if stamp.exists():
            previous = json.loads(stamp.read_text()).get("fingerprint")
            if previous != fingerprint:
                raise UserInputError(f"--out: {out} holds another sweep (different space, scenario, mode or "
                                     "objectives); give a new --out folder")
        else:
            stamp.write_text(json.dumps({"fingerprint": fingerprint}))

    def path(self, tier: str, index: int) -> Path:
        return self.folder / f"{tier}-{index:05d}.jsonl"

    def load(self, tier: str, index: int) -> list[dict] | None:
        path = self.path(tier, index)
        if not path.exists():
            return None
        return [json.loads(line) for line in path.read_text().splitlines() if line]

    def save(self, tier: str, index: int, lines: str) -> None:
        """Record a finished chunk: its rows as JSON lines (see :func:`evaluate_chunk`)."""
        path = self.path(tier, index)
        partial = path.with_suffix(".partial")
        partial.write_text(lines)
        os.replace(partial, path)  # atomic: a killed sweep leaves either the whole chunk or none of it
        with open(self.folder / "evaluated.log", "a") as fh:
            fh.write(f"{tier}-{index:05d}\n")


def fork_context():
    """Fork where the platform has it (workers inherit the parent's warm caches), else the default."""
    import multiprocessing

    return multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None


def chunk_points(tasks: int) -> int:
    """Hardware points per chunk of a tier: a pure function of the tier's size (never of the worker count), so
    a resumed sweep cuts its tiers exactly as the interrupted one did."""
    return max(1, min(CHUNK_POINTS, math.ceil(tasks / MIN_CHUNKS)))


def _run(tier: str, tasks: list[SweepTask], log: ChunkLog, run_chunks) -> list[dict]:
    """Evaluate a tier chunk by chunk (resuming finished chunks) and merge the rows in chunk order."""
    size = chunk_points(len(tasks))
    chunks = [tasks[i:i + size] for i in range(0, len(tasks), size)]
    results: dict[int, list[dict]] = {}
    todo = []
    for index in range(len(chunks)):
        rows = log.load(tier, index)
        if rows is None:
            todo.append(index)
        else:
            results[index] = rows

    def done(index: int, chunk: tuple[list[dict], str]) -> None:
        rows, lines = chunk
        log.save(tier, index, lines)
        results[index] = rows

    if todo:
        run_chunks(evaluate_chunk, [(i, chunks[i]) for i in todo], done)
    return [row for index in range(len(chunks)) for row in results[index]]


def _frozen_after(evaluate, chunk):
    """``evaluate(chunk)``, then everything alive moves to the collector's permanent generation (``gc.freeze``).
    A sweep's memo tables only grow, and the collector would walk what each chunk added to them again and again
    before it reached the oldest generation: on a 284,520-evaluation sweep in one process, 12–13 s of 125–136 s
    went to the collector without this, 0.8 s with it, at the same peak memory (the evaluators make almost no
    reference cycles, the only garbage a frozen object can leave behind). Only in processes a sweep owns (its
    own, which it unfreezes when it returns, and its local workers, which end with it); not in Dask workers,
    which may serve other work."""
    result = evaluate(chunk)
    gc.freeze()
    return result


def _serial(evaluate, chunks: list[tuple[int, list]], done) -> None:
    for index, chunk in chunks:
        done(index, _frozen_after(evaluate, chunk))


@contextlib.contextmanager
def _local_session(workers: int):
    """``workers`` processes kept for the whole sweep, so each worker's caches (devices, operator tunings, stage
    plans, collectives) serve every tier; yields ``run(evaluate, chunks, done)``, where ``evaluate(chunk)``
    returns (rows, JSON lines) as :func:`evaluate_chunk` does.

    The workers fork after the parent has evaluated a chunk itself: each then starts with that point's routing
    plans and workloads, which every other point on the same network structure reuses. Each worker owns a
    contiguous block of a tier's chunks (a tier lists points that share a device next to each other, see
    :func:`_affinity_order`), so it builds a device's operator tables once instead of every worker building
    them; a worker that runs out takes chunks from the far end of the longest remaining block."""
    pools: list[ProcessPoolExecutor] = []

    def run(evaluate, chunks: list[tuple[int, list]], done) -> None:
        if not pools:
            # The parent warms what the workers inherit with the last chunk that yields rows: a tier lists its
            # largest stackings last, and their feasible schedules include the smaller stackings' ones.
            chunks = list(chunks)
            while chunks:
                index, chunk = chunks.pop()
                rows, lines = evaluate(chunk)
                done(index, (rows, lines))
                if rows:
                    break
            if not chunks:
                return
            gc.freeze()  # the inherited objects stay out of the workers' collections (no copy-on-write scans)
            pools.extend(ProcessPoolExecutor(max_workers=1, mp_context=fork_context()) for _ in range(workers))
        share = math.ceil(len(chunks) / workers)
        blocks = [collections.deque(chunks[i:i + share]) for i in range(0, len(chunks), share)]
        blocks += [collections.deque() for _ in range(workers - len(blocks))]
        running = {}

        def submit(worker: int) -> None:
            """Queue a chunk for the worker: from its own block, or stolen from the far end of the longest one
            when it has nothing to run. A chunk queued behind a running one (so the worker never waits for the
            parent to record the last) comes from its own block only, and never the block's last: that stays
            free for whichever worker runs out first."""
            busy = sum(w == worker for w, _ in running.values())
            own = blocks[worker]
            if not busy:
                block = own or max(blocks, key=len)
            elif busy < IN_FLIGHT and len(own) > 1:
                block = own
            else:
                return
            if block:
                index, chunk = block.popleft() if block is own else block.pop()
                running[pools[worker].submit(_frozen_after, evaluate, chunk)] = (worker, index)

        for _ in range(IN_FLIGHT):
            for worker in range(workers):
                submit(worker)
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                worker, index = running.pop(future)
                submit(worker)  # before recording this one
                done(index, future.result())

    try:
        yield run
    finally:
        for pool in pools:
            pool.shutdown(cancel_futures=True)
        if pools:
            gc.unfreeze()


def _best_per_hardware(rows: list[dict], objective: str) -> dict[str, dict]:
    key, larger = OBJECTIVES[objective]
    best: dict[str, dict] = {}
    for row in rows:
        if not row["feasible"]:
            continue
        label = _label(row)
        value = row[key] if larger else -row[key]
        if label not in best or value > best[label]["_score"]:
            best[label] = {**row, "_score": value}
    return best


def _label(row: dict) -> str:
    return json.dumps([row[k] for k in ("chip", "noc", "stacked_layers", "connected_layers", "sram",
                                        "hop_latency_scale", "level_bw_scales")])


def _promote(rows: list[dict], objective: str, share: float = PROMOTED_SHARE) -> list[HardwarePoint]:
    best = sorted(_best_per_hardware(rows, objective).values(), key=lambda r: -r["_score"])
    keep = best[: max(1, math.ceil(len(best) * share))] if best else []
    return [HardwarePoint(r["chip"], r["noc"], r["stacked_layers"], r["connected_layers"], r["sram"],
                          r["hop_latency_scale"], tuple(r["level_bw_scales"])) for r in keep]


def sweep(*, mode: str, space: str | None, scenario: Scenario, objectives: list[str], out: str,
          workers: int | None = None, with_ttft: bool = False, backend: str = "local",
          scheduler: str | None = None) -> SweepResult:
    if mode not in MODES:
        raise UserInputError(f"--mode: must be one of {', '.join(MODES)} (got {mode!r})")
    if backend not in BACKENDS:
        raise UserInputError(f"--backend: must be one of {', '.join(BACKENDS)} (got {backend!r})")
    if scheduler and backend != "dask":
        raise UserInputError("--scheduler: only with --backend dask")
    workers = workers or min(os.cpu_count() or 1, 2)
    if not 1 <= workers <= 256:
        raise UserInputError(f"--workers: must be in 1..256 (got {workers})")
    design_space = load_space(space)
    space_ref = space or "default"
    fingerprint = json.dumps({"chunking": [CHUNK_POINTS, MIN_CHUNKS, "affinity"], "mode": mode,
                              "space": design_space.model_dump(mode="json"),
                              "scenario": scenario.model_dump(mode="json"), "objectives": objectives,
                              "ttft": with_ttft}, sort_keys=True)
    log = ChunkLog(Path(out), hashlib.sha256(fingerprint.encode()).hexdigest())
    started = time.perf_counter()

    with contextlib.ExitStack() as stack:
        if backend == "dask":
            from deepstack.search.dask_backend import session

            run_chunks = stack.enter_context(session(scheduler, workers))
        elif workers > 1:
            run_chunks = stack.enter_context(_local_session(workers))
        else:
            run_chunks = _serial
            stack.callback(gc.unfreeze)  # what _serial froze is collectable again once the sweep returns
        return _sweep_tiers(mode, design_space, space_ref, scenario, objectives, out, with_ttft, log, run_chunks,
                            started)


def _sweep_tiers(mode, design_space, space_ref, scenario, objectives, out, with_ttft, log, run_chunks,
                 started) -> SweepResult:
    def _tier(name: str, points: list[HardwarePoint]) -> list[dict]:
        return _run(name, tasks(points), log, run_chunks)

    def tasks(points: list[HardwarePoint]) -> list[SweepTask]:
        return [SweepTask(space_ref, scenario.model_dump_json(), p, with_ttft)
                for p in _affinity_order(design_space, points)]

    tiers = []
    if mode == "exhaustive":
        points = all_points(design_space)
        rows = _tier("all", points)
        tiers.append({"tier": "all", "hardware_points": len(points), "evaluations": len(rows)})
    else:
        tier1 = base_points(design_space)
        rows = _tier("tier1", tier1)
        tiers.append({"tier": "1: chip × NoC × stacking × SRAM", "hardware_points": len(tier1),
                      "evaluations": len(rows)})
        promoted = _promote(rows, objectives[0])
        tier2 = _hop_points(design_space, promoted)
        rows2 = _tier("tier2", tier2)
        tiers.append({"tier": "2: hop latency", "hardware_points": len(tier2), "evaluations": len(rows2)})
        rows += rows2
        promoted = _promote(rows, objectives[0])
        tier3 = _bw_points(design_space, promoted)
        rows3 = _tier("tier3", tier3)
        tiers.append({"tier": "3: per-level bandwidth", "hardware_points": len(tier3), "evaluations": len(rows3)})
        rows += rows3
    wall = time.perf_counter() - started
    front = _front(rows, objectives)
    result = SweepResult(mode, len(rows), sum(t["hardware_points"] for t in tiers), wall, out, objectives, front,
                         tiers)
    _write(result, rows, scenario, design_space)
    return result


def _front(rows: list[dict], objectives: list[str]) -> list[dict]:
    feasible = [r for r in rows if r["feasible"]]
    if not feasible:
        return []
    values = np.array([[r[OBJECTIVES[o][0]] for o in objectives] for r in feasible], dtype=float)
    mask = pareto.nondominated_mask(values, objectives)
    front = [{**{o: r[OBJECTIVES[o][0]] for o in objectives}, **{k: v for k, v in r.items() if k != "_score"}}
             for r, keep in zip(feasible, mask, strict=True) if keep]
    return sorted(front, key=lambda r: r[objectives[0]], reverse=OBJECTIVES[objectives[0]][1])


def _csv_cells(rows: list[dict], names: list[str]):
    """Each row's cells in column order: lists as JSON (encoded once per distinct list), missing keys empty."""
    encoded: dict[tuple, str] = {}
    for row in rows:
        cells = []
        for name in names:
            value = row.get(name, "")
            if isinstance(value, (list, tuple)):
                key = tuple(value)
                if key not in encoded:
                    encoded[key] = json.dumps(list(value))
                value = encoded[key]
            cells.append(value)
        yield cells


def _write(result: SweepResult, rows: list[dict], scenario: Scenario, space: DesignSpace) -> None:
    out = Path(result.out)
    out.mkdir(parents=True, exist_ok=True)
    columns = ["chip", "noc", "stacked_layers", "connected_layers", "sram", "hop_latency_scale", "level_bw_scales",
               "schedule", "fsdp", "feasible", *METRIC_COLUMNS]
    for name, data in (("points.csv", rows), ("pareto.csv", result.pareto)):
        names = columns + ([o for o in result.objectives if o not in columns] if name == "pareto.csv" else [])
        with open(out / name, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(names)
            writer.writerows(_csv_cells(data, names))
    summary = {"mode": result.mode, "evaluations": result.evaluations, "hardware_points": result.hardware_points,
               "wall_s": result.wall_s, "objectives": result.objectives, "tiers": result.tiers,
               "space": space.name, "scenario": json.loads(scenario.model_dump_json(exclude={"model"})) | {
                   "model": scenario.model.name}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "pareto.json").write_text(json.dumps(finite({"objectives": result.objectives, "pareto": result.pareto}),
                                                indent=2, default=str, allow_nan=False))


def read_sweep(folder: str) -> tuple[dict, list[dict]]:
    """summary.json and the evaluated points of a sweep folder (for ``compare``)."""
    path = Path(folder)
    try:
        summary = json.loads((path / "summary.json").read_text())
        with open(path / "points.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, json.JSONDecodeError) as exc:
        raise UserInputError(f"--sweep: {folder} is not a finished sweep folder ({exc.__class__.__name__})") from None
    return summary, rows
