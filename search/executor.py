"""Where the search layer's work runs: in this process, on a local process pool, or on Dask — one place for
every pool of the sweeps, the study runners and the Optuna workers.

* :func:`chunk_runner` — a sweep's ``run(evaluate, chunks, done)``: in-process (one worker), the tuned local pool
  (:func:`local_session`), or a Dask cluster (:mod:`deepstack.search.dask_backend`). ``evaluate(chunk)`` returns
  the chunk's result and ``done(index, result)`` records each chunk as it finishes.
* :func:`map_in_order` — ``map`` over independent tasks on forked workers (the study runners).
* :class:`Tally` — work finished of the work planned, for a progress bar.
* :func:`run_spawned` — processes that start from scratch (Optuna workers, each opening its own storage).

Local pools fork where the platform can (:func:`fork_context`): the workers inherit the parent's warm caches.
No local worker outlives its parent (:func:`die_with_parent`): a killed sweep, study or optimize run takes its
workers with it instead of leaving them computing (and holding their memory) with nobody to report to.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import gc
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

IN_FLIGHT = 2  # chunks a local worker holds at once: it starts the next while the parent records the last
POLL_S = 0.5  # how often run_spawned reports progress while its processes work
SIGNAL_CHECK_S = 0.2  # a local pool's parent acts on a signal within this long (see local_session)


PR_SET_PDEATHSIG = 1  # prctl(2) option: the signal the kernel sends this process when its parent dies (Linux)
WATCHDOG_S = 1.0  # where prctl is missing, a worker checks this often whether its parent is still alive


def die_with_parent(parent: int, signum: int = signal.SIGTERM) -> None:
    """Make this (worker) process end when the process ``parent`` ends, however it ends (SIGKILL included).

    On Linux the kernel does it: prctl(PR_SET_PDEATHSIG, ``signum``), SIGTERM by default, whose default action
    ends the process (given back first: a worker forked while its parent held search/interrupt.py's handler would
    only note the signal); SIGKILL for a worker that holds SIGTERM back at times (:func:`_pool_task`).
    Elsewhere a daemon thread polls ``os.getppid()``, which changes once the parent is gone. A parent that died
    before this call is caught by checking ``os.getppid()`` after setting the signal up."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    armed = False
    if sys.platform.startswith("linux"):
        try:
            armed = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent:
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent,), name="parent-watchdog", daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCHDOG_S)
    os._exit(1)


def _run_guarded(parent: int, target: Callable, *args) -> None:
    """A spawned process's entry point: :func:`die_with_parent`, then ``target(*args)``."""
    die_with_parent(parent)
    target(*args)


def worker_pool(workers: int, parent_handles_sigint: bool = False) -> ProcessPoolExecutor:
    """A local process pool (forked where possible) whose workers end with this process. With
    ``parent_handles_sigint`` its workers ignore SIGINT: a terminal's Ctrl-C reaches the whole process group, and
    the parent (search/interrupt.py) ends them itself, where a worker hit between two tasks would print a
    traceback."""
    initializer = _killed_with_parent_sigint_ignored if parent_handles_sigint else die_with_parent
    return ProcessPoolExecutor(workers, mp_context=fork_context(), initializer=initializer, initargs=(os.getpid(),))


def _killed_with_parent_sigint_ignored(parent: int) -> None:
    die_with_parent(parent, signal.SIGKILL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _pool_task(evaluate: Callable, chunk):
    """A local session's chunk on its worker: :func:`frozen_after`, with SIGTERM (the parent ending the pool,
    :func:`_end_now`) let in while the chunk computes and held back from the moment its result is ready until
    the next chunk starts. A worker ended halfway through sending its result would leave the pool's manager
    thread waiting for the rest of the message for good, and the parent's shutdown with it; a held-back SIGTERM
    lands when the next chunk starts, or the worker leaves on the shutdown's sentinel."""
    if not hasattr(signal, "pthread_sigmask"):  # not POSIX: no signal masks (nor SIGTERM delivery) to manage
        return frozen_after(evaluate, chunk)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    try:
        return frozen_after(evaluate, chunk)
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _end_now(pool: ProcessPoolExecutor) -> None:
    """End a pool's workers at once instead of waiting for the chunks they run (shutdown's way): an interrupted run
    throws those away. Python 3.14's ``terminate_workers()``; before it, the pool's own table of its processes."""
    if hasattr(pool, "terminate_workers"):
        pool.terminate_workers()
        return
    for process in list((pool._processes or {}).values()):
        process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


def fork_context():
    """Fork where the platform has it (workers inherit the parent's warm caches), else the default."""
    return multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None


def map_in_order(fn: Callable, tasks: list, workers: int, done: Callable[[], None] | None = None) -> list:
    """``[fn(task) for task in tasks]``, on up to ``workers`` forked processes when there are several of both
    (``fn`` and the tasks must pickle; results come back in the tasks' order); ``done()`` after each result."""
    if workers <= 1 or len(tasks) <= 1:
        return [_told(fn(task), done) for task in tasks]
    with worker_pool(min(workers, len(tasks))) as pool:
        return [_told(result, done) for result in pool.map(fn, tasks)]


def _told(result, done: Callable[[], None] | None):
    if done is not None:
        done()
    return result


class Tally:
    """Units of work finished of those planned so far, told to ``report(done, total)`` (a progress bar) whenever
    either changes. A run that plans later work from earlier results (a hierarchical sweep's next tier, a study's
    next stage) adds it once it knows it, so the total may grow; ``done`` never passes it."""

    def __init__(self, report: Callable[[int, int], None] | None = None):
        self.report, self.done, self.total = report, 0, 0

    def plan(self, units: int) -> None:
        self.total += units
        self._tell()

    def finish(self, units: int = 1) -> None:
        self.done = min(self.done + units, self.total)
        self._tell()

    def _tell(self) -> None:
        if self.report is not None:
            self.report(self.done, self.total)


def run_spawned(target: Callable, args: list[tuple], progress: Callable[[], None] | None = None) -> list[int]:
    """Run ``target(*a)`` for each ``a`` in its own freshly started (spawned) process, calling ``progress()``
    about every :data:`POLL_S` seconds until all have ended; returns their exit codes (0: success)."""
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_run_guarded, args=(os.getpid(), target, *a)) for a in args]
    for p in processes:
        p.start()
    while any(p.is_alive() for p in processes):
        if progress:
            progress()
        time.sleep(POLL_S)
    for p in processes:
        p.join()
    return [p.exitcode for p in processes]


@contextlib.contextmanager
def chunk_runner(backend: str, workers: int, scheduler: str | None = None,
                 shelter: Callable = contextlib.nullcontext) -> Iterator[Callable]:
    """A sweep's ``run(evaluate, chunks, done)`` for the whole sweep: Dask (``backend == "dask"``), the local
    pool (several workers) or this process. What a local run froze (see :func:`frozen_after`) is collectable
    again when the context ends. ``shelter``: the run's span where a signal waits (see :func:`local_session`)."""
    if backend == "dask":
        from deepstack.search.dask_backend import session

        with session(scheduler, workers) as run:
            yield run
    elif workers > 1:
        with local_session(workers, shelter) as run:
            yield run
    else:
        try:
            yield serial
        finally:
            gc.unfreeze()


def frozen_after(evaluate: Callable, chunk):
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


def serial(evaluate: Callable, chunks: list[tuple[int, list]], done: Callable) -> None:
    """Every chunk in this process, in order."""
    for index, chunk in chunks:
        done(index, frozen_after(evaluate, chunk))


@contextlib.contextmanager
def local_session(workers: int, shelter: Callable = contextlib.nullcontext) -> Iterator[Callable]:
    """``workers`` processes kept for the whole sweep, so each worker's caches (devices, operator tunings, stage
    plans, collectives) serve every tier; yields ``run(evaluate, chunks, done)``, where ``evaluate(chunk)``
    returns a result that is true when the chunk yielded anything (the sweep's ``evaluate_chunk``: any rows).

    The workers fork after the parent has evaluated a chunk itself: each then starts with that point's routing
    plans and workloads, which every other point on the same network structure reuses. Each worker owns a
    contiguous block of a tier's chunks (a tier lists points that share a device next to each other), so it
    builds a device's operator tables once instead of every worker building them; a worker that runs out takes
    chunks from the far end of the longest remaining block.

    Once the pools exist the parent only hands out chunks and waits, inside ``shelter()`` (Interrupts.deferred):
    a signal is acted on when the span ends, between two bounded waits, never inside concurrent.futures' own
    code — a KeyboardInterrupt raised there can leave a future's lock held, and the pool's manager thread, which
    needs it, then hangs the shutdown for good."""
    pools: list[ProcessPoolExecutor] = []

    def run(evaluate: Callable, chunks: list[tuple[int, list]], done: Callable) -> None:
        if not pools:
            # The parent warms what the workers inherit with the last chunk that yields rows: a tier lists its
            # largest stackings last, and their feasible schedules include the smaller stackings' ones.
            chunks = list(chunks)
            while chunks:
                index, chunk = chunks.pop()
                result = evaluate(chunk)
                done(index, result)
                if result:  # the chunk yielded something
                    break
            if not chunks:
                return
            with shelter():
                gc.freeze()  # the inherited objects stay out of the workers' collections (no copy-on-write scans)
                pools.extend(worker_pool(1, parent_handles_sigint=True) for _ in range(workers))
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
                running[pools[worker].submit(_pool_task, evaluate, chunk)] = (worker, index)

        try:
            with shelter():
                for _ in range(IN_FLIGHT):
                    for worker in range(workers):
                        submit(worker)
            while running:
                with shelter():
                    finished, _ = wait(running, timeout=SIGNAL_CHECK_S, return_when=FIRST_COMPLETED)
                    for future in finished:
                        worker, index = running.pop(future)
                        submit(worker)  # before recording this one
                        done(index, future.result())
        except BaseException:  # interrupted (or a chunk failed): the session ends, its workers at once
            for pool in pools:
                _end_now(pool)
            raise

    try:
        yield run
    finally:
        for pool in pools:
            pool.shutdown(cancel_futures=True)
        if pools:
            gc.unfreeze()
