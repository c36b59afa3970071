"""The sweep's local worker pool (search/executor.py) and the order it hands points to workers
(search/sweep/points.py)."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import time
import traceback

import pytest

from deepstack.search import executor
from deepstack.search.interrupt import Interrupts
from deepstack.search.space import base_points, load_space, with_level_bw
from deepstack.search.sweep.points import affinity_order, device_of


def _pid_and_square(chunk: list[int]) -> list[tuple[int, int]]:
    """A chunk's evaluation for the pool tests: which process ran it, and a result to check. Chunks of the first
    block (values < 6) are slow, so the other worker runs out first and must take some of them."""
    if chunk[0] < 6:
        time.sleep(0.05)
    return [(os.getpid(), x * x) for x in chunk]


def test_local_pool_runs_every_chunk_once_and_keeps_its_workers_across_tiers():
    tiers: list[dict[int, list]] = []
    with executor.local_session(2) as run:
        for _ in range(2):  # two tiers through the same pool
            finished: dict[int, list] = {}

            def done(index: int, result: tuple, finished=finished) -> None:
                assert index not in finished, f"chunk {index} evaluated twice"
                finished[index] = result

            run(_pid_and_square, [(index, [index, index + 100]) for index in range(12)], done)
            assert sorted(finished) == list(range(12))
            assert all([x for _, x in finished[i]] == [i * i, (i + 100) ** 2] for i in range(12))
            tiers.append(finished)

    def pids(finished: dict[int, list], indices) -> set[int]:
        return {pid for i in indices for pid, _ in finished[i]}

    parent = os.getpid()
    assert pids(tiers[0], [11]) == {parent}  # the parent evaluates the last chunk, then the workers fork
    workers = pids(tiers[0], range(11))
    assert len(workers) == 2 and parent not in workers
    assert pids(tiers[1], range(12)) == workers, "the second tier ran on other processes"
    # the slow first block is more than its worker can finish alone: the other takes chunks from its far end
    assert pids(tiers[1], range(6)) == workers


def _pid_and_cube(x: int) -> tuple[int, int]:
    return os.getpid(), x**3


def test_map_in_order_keeps_the_tasks_order_on_worker_processes_and_runs_in_process_for_one_worker():
    tasks = list(range(20))
    pooled = executor.map_in_order(_pid_and_cube, tasks, workers=2)
    assert [cube for _, cube in pooled] == [x**3 for x in tasks]
    assert os.getpid() not in {pid for pid, _ in pooled}
    alone = executor.map_in_order(_pid_and_cube, tasks, workers=1)
    assert alone == [(os.getpid(), x**3) for x in tasks]


def test_affinity_order_puts_points_that_time_alike_next_to_each_other():
    space = load_space("paper")
    base = next(p for p in base_points(space) if p.chip == "standard" and p.noc == "tms1"
                and p.stacked_layers == 6 and p.connected_layers == 2)
    variants = [with_level_bw(base, scales)
                for scales in itertools.product(space.hardware.level_bw_scale, repeat=3)]
    ordered = affinity_order(space, variants)
    assert sorted(ordered, key=repr) == sorted(variants, key=repr)
    pes = [device_of(space, p).pes for p in ordered]
    assert len(set(pes)) > 1, "every variant has the same PE count: the ordering would prove nothing"
    assert pes == sorted(pes)  # one contiguous run per device
    # within a device the tier's own order stays (a resumed sweep lists a tier's points in the same order)
    for count in set(pes):
        assert [p for p in ordered if device_of(space, p).pes == count] == [
            p for p in variants if device_of(space, p).pes == count]


def test_a_points_sram_option_resolves_alike_in_the_sweep_and_in_evaluate():
    """The paper space's SRAM options as the evaluator takes them: "base" (no override) is the chip's own SRAM
    (None), the others apply per PE; the sweep's device and the design point `evaluate` builds are the same device."""
    from deepstack.models.hardware.device import resolve_device
    from deepstack.schema import Scenario
    from deepstack.search.space import base_points, design_point, load_space, sram_option

    space = load_space("paper")
    points = {p.sram: p for p in base_points(space) if p.chip == "standard" and p.noc == "tms1"
              and p.stacked_layers == 4 and p.connected_layers == 4}
    assert set(points) == {"base", "l1-512KiB", "l1-bw-2x"}
    assert sram_option(space, points["base"]) is None
    assert sram_option(space, points["l1-512KiB"]).l1_KiB == 512
    assert sram_option(space, points["l1-bw-2x"]).l1_bw_scale == 2.0
    scenario = Scenario(model="deepseek-v3", phase="decode", batch=4)
    l1 = {}
    for name, hw in points.items():
        dp = design_point(space, hw, scenario)
        dev = device_of(space, hw)
        assert dev == resolve_device(dp.chip, dp.stacked_layers, dp.connected_layers, dp.network, dp.sram)
        l1[name] = (dev.l1_B, dev.l1_bw_Bps / dev.pes)  # per PE: a larger or faster L1 may cost PEs
    base_l1_B, base_bw = l1["base"]
    assert l1["l1-512KiB"] == (512 * 1024, base_bw) and base_l1_B < 512 * 1024
    assert l1["l1-bw-2x"] == (base_l1_B, 2 * base_bw)


def _signal_the_parent(chunk: list[int]) -> list[int]:
    """Chunk ``[index, parent pid]``: a worker (never the parent, which evaluates the last chunk itself) running
    chunk 0 sends the parent SIGINT, which lands while the parent waits on its pool."""
    index, parent = chunk
    if index == 0 and os.getpid() != parent:
        os.kill(parent, signal.SIGINT)
    return [index]


def test_a_signal_reaches_a_pools_parent_between_waits_never_inside_concurrent_futures():
    """A KeyboardInterrupt raised inside concurrent.futures' own code (taking a future's lock, forking a worker)
    can leave a lock held that the pool's manager thread needs, and the interrupted run then never ends. The
    parent of a local pool waits inside the run's shelter (Interrupts.deferred): the signal surfaces where the
    span ends, the workers are ended, and no child is left."""
    parent = os.getpid()
    chunks = [(index, [index, parent]) for index in range(12)]
    with (Interrupts() as stops, pytest.raises(KeyboardInterrupt) as caught, stops.evaluating(),
          executor.local_session(2, stops.deferred) as run):
        run(_signal_the_parent, chunks, lambda *_: None)
    assert stops.name == "SIGINT"
    frames = traceback.extract_tb(caught.value.__traceback__)
    # raised where a shelter span ended, or by the handler in the instant between two spans (the parent's own loop
    # or the span's entry), never by the handler while concurrent.futures' code waits
    last, caller = frames[-1], frames[-2]
    assert last.name == "deferred" or (
        last.name == "_handle" and caller.filename.endswith(("executor.py", "interrupt.py", "contextlib.py"))), frames
    assert not [f for f in frames if "concurrent" in f.filename or f.filename.endswith("threading.py")], frames
    assert not multiprocessing.active_children()


def _sigterm_blocked(_chunk: list) -> list[bool]:
    return [signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])]


def _worker_ended_while_its_result_is_out(conn) -> None:
    """A pool worker's life in a forked process: a chunk, SIGTERM sent while its result would be on its way to
    the parent, then the next chunk."""
    computing = executor._pool_task(_sigterm_blocked, [])
    held = signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    os.kill(os.getpid(), signal.SIGTERM)  # the parent ending the pool (executor._end_now)
    conn.send((computing[0], held))  # still alive: the signal waits
    executor._pool_task(_sigterm_blocked, [])  # the next chunk lets it in: the worker ends here
    conn.send("outlived the signal")


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")
def test_a_pool_worker_is_never_ended_halfway_through_sending_a_result():
    """A worker ended while its result is half sent leaves the pool's manager thread waiting for the rest for
    good, and the interrupted sweep's shutdown with it. SIGTERM reaches a worker while it computes a chunk; once
    the result is ready it waits until the next chunk starts."""
    parent_end, child_end = multiprocessing.Pipe()
    worker = multiprocessing.get_context("fork").Process(target=_worker_ended_while_its_result_is_out,
                                                         args=(child_end,))
    worker.start()
    assert parent_end.poll(60), "the worker died before it could report"
    assert parent_end.recv() == (False, True)  # SIGTERM let in while computing, held back once the result is out
    worker.join(60)
    assert worker.exitcode == -signal.SIGTERM
    assert not parent_end.poll()
