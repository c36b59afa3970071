"""SIGINT / SIGTERM during a search: end the run cleanly instead of wherever the signal lands.

:class:`Interrupts` replaces both handlers while a run lasts. A signal that arrives while the run evaluates (inside
:meth:`Interrupts.evaluating`) stops the evaluation at once (``KeyboardInterrupt`` there, which the run turns into
"the batch was interrupted"); one that arrives while the run talks to its storage only sets :attr:`signal`, so a
commit is never cut in half, and the run stops at its next check (or, inside :meth:`Interrupts.deferred`, as soon
as the write is done). The previous handlers come back afterwards.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import BrokenExecutor

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_STATUS = 130  # the shell's status for a run ended by Ctrl-C (128 + SIGINT)


class Interrupts:
    def __init__(self) -> None:
        self.signal: int | None = None
        self._evaluating = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, _frame) -> None:
        first = self.signal is None
        self.signal = signum
        if self._evaluating and first:
            self._evaluating = False
            raise KeyboardInterrupt

    @property
    def stopped(self) -> bool:
        return self.signal is not None

    def ended(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised out of a run, is the run's interruption: a KeyboardInterrupt, or a broken worker
        pool once a signal has arrived. A SIGTERM sent to the whole process group (``timeout``, ``kill -TERM
        -PGID``, a job scheduler) reaches the pool's workers too, and a worker it ends breaks its pool before the
        parent's own signal stops the run. Any other error stays what it is."""
        return isinstance(exc, KeyboardInterrupt) or (self.signal is not None and isinstance(exc, BrokenExecutor))

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """A span a signal may cut short (raises KeyboardInterrupt inside it, once)."""
        if self.signal is not None:
            raise KeyboardInterrupt
        self._evaluating = True
        try:
            yield
        finally:
            self._evaluating = False

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Inside :meth:`evaluating`, a span a signal never cuts (a finished result being written): a signal that
        arrives in it raises KeyboardInterrupt once the span has ended."""
        outer, self._evaluating = self._evaluating, False
        try:
            yield
        finally:
            self._evaluating = outer
        if outer and self.signal is not None:
            self._evaluating = False
            raise KeyboardInterrupt

    @property
    def name(self) -> str:
        return signal.Signals(self.signal).name if self.signal else ""
