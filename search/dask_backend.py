"""Dask backend for sweeps (the only module importing dask): a LocalCluster of K worker processes, or an
existing cluster at ``tcp://HOST:PORT``, opened once per sweep. Chunks are submitted at once and merged as they
finish (streaming); each finished chunk is handed to ``done`` right away, so progress is recorded as it happens."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from deepstack.errors import UserInputError


@contextlib.contextmanager
def session(scheduler: str | None, workers: int) -> Iterator[Callable]:
    """Connect (or start a LocalCluster) once; yields ``run(evaluate, chunks, done)``."""
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise UserInputError('--backend dask needs Dask: pip install "deepstack-dse[dask]"') from None

    cluster = None
    try:
        if scheduler:
            client = Client(scheduler, timeout="10s")
        else:
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                                   host="127.0.0.1")
            client = Client(cluster)
    except (OSError, TimeoutError, ValueError) as exc:
        raise UserInputError(f"--scheduler: cannot reach {scheduler or 'a local cluster'}: {exc}") from None

    def run(evaluate: Callable, chunks: list[tuple[int, list]], done: Callable[[int, tuple], None]) -> None:
        futures = {client.submit(evaluate, chunk, pure=False): index for index, chunk in chunks}
        for future in as_completed(futures):
            done(futures[future], future.result())

    try:
        yield run
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
