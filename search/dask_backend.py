"""Dask backend for sweeps (the only module importing dask): a LocalCluster of K worker processes, or an
existing cluster at ``tcp://HOST:PORT``. Chunks are submitted at once and merged as they finish (streaming);
each finished chunk is handed to ``done`` right away, so progress is recorded as it happens."""

from __future__ import annotations

from collections.abc import Callable

from deepstack.errors import UserInputError


def run_chunks(evaluate: Callable, chunks: list[tuple[int, list]], done: Callable[[int, list], None],
               scheduler: str | None, workers: int) -> None:
    from dask.distributed import Client, LocalCluster, as_completed

    cluster = None
    try:
        if scheduler:
            client = Client(scheduler, timeout="10s")
        else:
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                                   host="127.0.0.1")
            client = Client(cluster)
    except (OSError, TimeoutError) as exc:
        raise UserInputError(f"--scheduler: cannot reach {scheduler or 'a local cluster'}: {exc}") from None
    try:
        futures = {client.submit(evaluate, chunk, pure=False): index for index, chunk in chunks}
        for future in as_completed(futures):
            done(futures[future], future.result())
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
