"""A tier of a sweep cut into chunks (the unit of scheduling, progress and resumption), and the log of the
finished ones that lets a re-run resume."""

from __future__ import annotations

import contextlib
import csv
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from deepstack.errors import UserInputError
from deepstack.models import tune_gc
from deepstack.search.executor import Tally
from deepstack.search.files import recorded, write_text_atomically
from deepstack.search.sweep.output import csv_text
from deepstack.search.sweep.points import SweepTask, evaluate_hardware, points_columns
from deepstack.search.sweep.survivors import ChunkSummary, summarise

CHUNK_POINTS = 8  # at most this many hardware points per chunk: the unit of scheduling, progress and resumption
MIN_CHUNKS = 64  # a tier is cut into at least this many chunks (when it has the points) so workers stay balanced


def chunk_points(tasks: int) -> int:
    """Hardware points per chunk of a tier: a pure function of the tier's size (never of the worker count), so
    a resumed sweep cuts its tiers exactly as the interrupted one did."""
    return max(1, min(CHUNK_POINTS, math.ceil(tasks / MIN_CHUNKS)))


@dataclass(frozen=True)
class ChunkResult:
    """A finished chunk as a worker hands it back: everything the parent needs, so it never holds the rows."""

    rows: int  # evaluations
    summary: ChunkSummary  # what the sweep keeps of them (:func:`~.survivors.summarise`)
    lines: str  # the rows as JSON lines, for the chunk log (a re-run reads them back)
    cells: str  # the rows as points.csv lines

    def __bool__(self) -> bool:  # whether the chunk yielded any row (the executor asks)
        return self.rows > 0


def evaluate_chunk(objectives: tuple[str, ...], tasks: list[SweepTask]) -> ChunkResult:
    """One chunk of hardware points (the unit a backend schedules, records and resumes), evaluated, summarised
    and encoded twice (:class:`ChunkResult`). Doing all of it here puts the cost on the pool's workers instead
    of on the parent, which records every chunk while the workers share its cores."""
    tune_gc()  # also in workers that did not start from the CLI (Dask)
    rows = [row for task in tasks for row in evaluate_hardware(task)]
    return ChunkResult(len(rows), summarise(rows, list(objectives)), "".join(json.dumps(row) + "\n" for row in rows),
                       csv_text(rows, points_columns(tasks[0].with_ttft)))


class PointsFile:
    """points.csv as the sweep goes: its header, then each chunk's lines in points.csv order whatever order the
    workers finish them in. A chunk finished before those ahead of it waits in a file of its own (each worker
    runs its own block of a tier, so half a tier may wait: held in memory, a large sweep's would be gigabytes);
    a chunk read back from an earlier run is encoded when its turn comes. Written inside the chunk folder and
    moved into place only when the sweep has finished: an interrupted sweep leaves no points.csv of part of its
    points."""

    def __init__(self, folder: Path, with_ttft: bool):
        self.folder = folder
        self.discard()  # what an interrupted run left, should it have been killed before it could
        self.path = folder / "points.csv.partial"
        with open(self.path, "w", newline="") as fh:
            csv.writer(fh).writerow(points_columns(with_ttft))
        self._tier = ""
        self._waiting: dict[int, Path | Callable[[], str]] = {}
        self._next = 0

    def start_tier(self, tier: str) -> None:
        self.finish()
        self._tier, self._next = tier, 0

    def finish(self) -> None:
        """Check that no chunk still waits for one before it (a points.csv with a gap is never published)."""
        if self._waiting:
            raise RuntimeError(f"points.csv: tier {self._tier} ended with chunks {sorted(self._waiting)} still "
                               f"waiting for chunk {self._next}")

    def discard(self) -> None:
        """Remove what an interrupted sweep wrote here (a re-run writes every line again from the chunk log)."""
        for written in self.folder.glob("*.csv.partial"):
            written.unlink()

    def put(self, index: int, cells: str | Callable[[], str]) -> None:
        """The lines of the tier's chunk ``index``: as text, or a function that gives them (a read-back chunk)."""
        if index != self._next:
            if isinstance(cells, str):
                waiting = self.folder / f"{self._tier}-{index:05d}.csv.partial"
                waiting.write_text(cells, newline="")  # as csv wrote them (\r\n)
                cells = waiting
            self._waiting[index] = cells
            return
        with open(self.path, "a", newline="") as fh:
            fh.write(cells if isinstance(cells, str) else cells())
            self._next += 1
            while self._next in self._waiting:
                cells = self._waiting.pop(self._next)
                if isinstance(cells, Path):
                    with open(cells, newline="") as spilled:
                        fh.write(spilled.read())
                    cells.unlink()
                else:
                    fh.write(cells())
                self._next += 1


def _what_differs(stored, fingerprint: dict[str, str]) -> str:
    """The refusal's reason: which part of a stored sweep's fingerprint differs from this one's."""
    if not isinstance(stored, dict):  # a stamp written before the fingerprint had parts
        return "a sweep recorded by an earlier version"
    if stored.get("sweep") != fingerprint["sweep"]:
        return "another sweep (different space, scenario, mode or objectives)"
    if stored.get("presets") != fingerprint["presets"]:
        return "this sweep, but a chip or NoC file it names has changed since"
    return "this sweep, but evaluated by other code (DeepStack's model or search files have changed since)"


def rows_of(path: Path) -> Iterator[dict]:
    """The rows of a chunk file, in order."""
    with open(path) as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


class ChunkLog:
    """Finished chunks of a sweep, one JSON-lines file each in ``<out>/chunks/`` (written atomically), so a
    re-run resumes after the last finished chunk and never evaluates a finished one twice."""

    def __init__(self, out: Path, fingerprint: dict[str, str]):
        self.started = time.perf_counter()
        # every chunk of the sweep in points.csv order: [tier, rows, seconds of the sweep's evaluation when it
        # finished (None: read back from a run that did not record it)] (for ``compare``'s front at equal wall time)
        self.timeline: list[list] = []
        self.read_back = 0  # rows of chunks finished by an earlier run and read back, not evaluated by this one
        self.shelter: Callable = contextlib.nullcontext  # a span no signal cuts (Interrupts.deferred) for save
        self.folder = out / "chunks"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.stamp = out / "sweep.json"
        self.fingerprint = fingerprint
        previous = recorded(self.stamp, lambda stamp: (stamp["fingerprint"], stamp.get("wall_s")))
        if previous is None and self.stamp.exists():
            # the stamp is what lets the chunks beside it be read back: one that cannot be read vouches for none
            raise UserInputError(f"--out: {self.stamp} cannot be read, so the chunks in {self.folder} cannot be "
                                 "told from another sweep's; give a new --out folder, or remove that one first")
        if previous is not None and previous[0] != fingerprint:
            raise UserInputError(f"--out: {out} holds {_what_differs(previous[0], fingerprint)}, so its chunks "
                                 "would mix two sweeps' results; give a new --out folder")
        # the sweep's wall time as its last finished run recorded it
        self.total_s = previous[1] if previous is not None else None
        if previous is None:
            write_text_atomically(self.stamp, json.dumps({"fingerprint": fingerprint}))
        # when each finished chunk finished, on the sweep's own clock: an earlier run's chunks keep their times, and
        # this run's clock goes on from the last of them (a resumed sweep's wall time is its runs' together)
        self.finished_s = self._recorded()
        self.offset_s = max((t for t in self.finished_s.values() if t is not None), default=0.0)

    def check_unchanged(self, fingerprint: dict[str, str]) -> None:
        """Refuse to write a sweep's results when the files it read (the space, a chip or NoC file it names)
        changed while it ran: its workers read them as they found them, so its rows may mix two versions."""
        changed = [what for part, what in (("sweep", "the space file"), ("presets", "a chip or NoC file it names"))
                   if fingerprint[part] != self.fingerprint[part]]
        if changed:
            raise UserInputError(f"--space: {' and '.join(changed)} changed while the sweep ran, so its rows may "
                                 f"mix two versions; no points.csv was written (its chunks stay in {self.folder}/): "
                                 "sweep again into a new --out folder")

    def _recorded(self) -> dict[str, float | None]:
        """Chunk → its finishing second, from ``evaluated.log`` (lines ``<tier>-<index> <seconds>``; an older
        sweep's lines hold the chunk's name alone)."""
        try:
            lines = (self.folder / "evaluated.log").read_text().splitlines()
        except OSError:
            return {}
        out = {}
        for line in lines:
            name, _, seconds = line.partition(" ")
            with contextlib.suppress(ValueError):
                out[name] = float(seconds) if seconds else None
        return out

    def sweep_wall_s(self, evaluated: bool) -> float:
        """The sweep's wall time, all its runs together: its earlier runs' (to their last chunk) and this one's; a
        run that evaluated nothing (every chunk read back) keeps what the last finished run recorded, so re-running
        a finished sweep does not report the read-back as its time."""
        return self.total_s if not evaluated and self.total_s is not None else self.elapsed_s()

    def record_wall_s(self, wall_s: float) -> None:
        """Write the sweep's wall time into the stamp, for the next run of the same sweep to report."""
        write_text_atomically(self.stamp, json.dumps({"fingerprint": self.fingerprint, "wall_s": wall_s}))

    def elapsed_s(self) -> float:
        """Seconds of evaluation on the sweep's clock: earlier runs' (to their last chunk) and this one's."""
        return self.offset_s + time.perf_counter() - self.started

    def path(self, tier: str, index: int) -> Path:
        return self.folder / f"{tier}-{index:05d}.jsonl"

    def load(self, tier: str, index: int) -> list[dict] | None:
        path = self.path(tier, index)
        if not path.exists():
            return None
        return list(rows_of(path))

    def save(self, tier: str, index: int, lines: str) -> float:
        """Record a finished chunk: its rows as JSON lines (see :func:`evaluate_chunk`) and when it finished on the
        sweep's clock (returned). Atomic: a killed sweep leaves either the whole chunk or none of it; an
        interrupted one, the chunk and its line in the log."""
        seconds = self.elapsed_s()
        with self.shelter():
            write_text_atomically(self.path(tier, index), lines)
            with open(self.folder / "evaluated.log", "a") as fh:
                fh.write(f"{tier}-{index:05d} {seconds!r}\n")  # repr: read back to the last bit
        return seconds

    def finished(self) -> int:
        """Chunks finished so far, by this run or an earlier one."""
        return sum(1 for _ in self.folder.glob("*.jsonl"))


def run_tier(tier: str, tasks: list[SweepTask], log: ChunkLog, run_chunks: Callable, objectives: list[str],
             points: PointsFile, tally: Tally | None = None) -> list[ChunkSummary]:
    """Evaluate a tier chunk by chunk with ``run_chunks`` (an executor's ``run(evaluate, chunks, done)``),
    resuming finished chunks. Returns each chunk's summary, in chunk order; the rows themselves go to the chunk
    files (``log.path(tier, index)``) and to ``points``. ``tally`` counts the tier's hardware points, each
    chunk's as it finishes (a read-back chunk at once)."""
    tally = tally or Tally()
    tally.plan(len(tasks))
    size = chunk_points(len(tasks))
    chunks = [tasks[i:i + size] for i in range(0, len(tasks), size)]
    kept: dict[int, ChunkResult] = {}
    finished: dict[int, float | None] = {}
    todo = []
    points.start_tier(tier)
    columns = points_columns(tasks[0].with_ttft) if tasks else []

    for index in range(len(chunks)):
        rows = log.load(tier, index)
        if rows is None:
            todo.append(index)
        else:  # a chunk an earlier run finished: summarised here as a worker does, encoded when its turn comes
            finished[index] = log.finished_s.get(f"{tier}-{index:05d}")
            log.read_back += len(rows)
            kept[index] = ChunkResult(len(rows), summarise(rows, objectives), "", "")
            points.put(index, partial(lambda i: csv_text(log.load(tier, i), columns), index))
            tally.finish(len(chunks[index]))

    def done(index: int, result: ChunkResult) -> None:
        finished[index] = log.save(tier, index, result.lines)
        kept[index] = replace(result, lines="", cells="")
        points.put(index, result.cells)
        tally.finish(len(chunks[index]))

    if todo:
        run_chunks(partial(evaluate_chunk, tuple(objectives)), [(i, chunks[i]) for i in todo], done)
    log.timeline += [[tier, kept[index].rows, finished.get(index)] for index in range(len(chunks))]
    return [kept[index].summary for index in range(len(chunks))]
