"""A tier of a sweep cut into chunks (the unit of scheduling, progress and resumption), and the log of the
finished ones that lets a re-run resume."""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

from deepstack.errors import UserInputError
from deepstack.search.executor import Tally
from deepstack.search.files import write_text_atomically
from deepstack.search.sweep.points import SweepTask, evaluate_chunk

CHUNK_POINTS = 8  # at most this many hardware points per chunk: the unit of scheduling, progress and resumption
MIN_CHUNKS = 64  # a tier is cut into at least this many chunks (when it has the points) so workers stay balanced


def chunk_points(tasks: int) -> int:
    """Hardware points per chunk of a tier: a pure function of the tier's size (never of the worker count), so
    a resumed sweep cuts its tiers exactly as the interrupted one did."""
    return max(1, min(CHUNK_POINTS, math.ceil(tasks / MIN_CHUNKS)))


class ChunkLog:
    """Finished chunks of a sweep, one JSON-lines file each in ``<out>/chunks/`` (written atomically), so a
    re-run resumes after the last finished chunk and never evaluates a finished one twice."""

    def __init__(self, out: Path, fingerprint: str):
        self.started = time.perf_counter()
        # every chunk of the sweep in points.csv order: [tier, rows, seconds after the start when it finished, or
        # None when it was read back from an earlier run] (for ``compare``'s front at equal wall time)
        self.timeline: list[list] = []
        self.read_back = 0  # rows of chunks finished by an earlier run and read back, not evaluated by this one
        self.shelter: Callable = contextlib.nullcontext  # a span no signal cuts (Interrupts.deferred) for save
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
        """Record a finished chunk: its rows as JSON lines (see :func:`evaluate_chunk`). Atomic: a killed sweep
        leaves either the whole chunk or none of it; an interrupted one, the chunk and its line in the log."""
        with self.shelter():
            write_text_atomically(self.path(tier, index), lines)
            with open(self.folder / "evaluated.log", "a") as fh:
                fh.write(f"{tier}-{index:05d}\n")

    def finished(self) -> int:
        """Chunks finished so far, by this run or an earlier one."""
        return sum(1 for _ in self.folder.glob("*.jsonl"))


def run_tier(tier: str, tasks: list[SweepTask], log: ChunkLog, run_chunks: Callable,
             tally: Tally | None = None) -> list[dict]:
    """Evaluate a tier chunk by chunk with ``run_chunks`` (an executor's ``run(evaluate, chunks, done)``),
    resuming finished chunks, and merge the rows in chunk order. ``tally`` counts the tier's hardware points, each
    chunk's as it finishes (a read-back chunk at once)."""
    tally = tally or Tally()
    tally.plan(len(tasks))
    size = chunk_points(len(tasks))
    chunks = [tasks[i:i + size] for i in range(0, len(tasks), size)]
    results: dict[int, list[dict]] = {}
    finished: dict[int, float] = {}
    todo = []
    for index in range(len(chunks)):
        rows = log.load(tier, index)
        if rows is None:
            todo.append(index)
        else:
            results[index] = rows
            log.read_back += len(rows)
            tally.finish(len(chunks[index]))

    def done(index: int, chunk: tuple[list[dict], str]) -> None:
        rows, lines = chunk
        log.save(tier, index, lines)
        results[index] = rows
        finished[index] = time.perf_counter() - log.started
        tally.finish(len(chunks[index]))

    if todo:
        run_chunks(evaluate_chunk, [(i, chunks[i]) for i in todo], done)
    log.timeline += [[tier, len(results[index]), finished.get(index)] for index in range(len(chunks))]
    return [row for index in range(len(chunks)) for row in results[index]]
