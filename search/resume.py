"""Which run of ``deepstack optimize`` a process is doing: a new one, or one an interrupt cut short.

``--trials N`` adds exactly N trials to the study. A run records in the study (user attribute ``unfinished_runs``)
its plan (the options that decide what it proposes: trials, refine budget, batch, seed, sampler, inner solve,
stall rule) and how many trials it has told so far, after every batch. A run that ends normally removes its
record. One that a signal (or an error) ended marks it interrupted; one killed outright (SIGKILL) leaves it with
its process id, which is no longer alive. The next run with the same plan adopts such a record and adds only the
trials that run did not, so interrupt + resume leaves the study one uninterrupted run would have left (with the
sampler reseeded per batch from the study's trial count, :meth:`deepstack.search.optimize.Mirror.reseed`).

A record whose process still runs is another worker's live run, never adopted; one silent for ``STALE_S`` (a
worker on another machine that died) is.
"""

from __future__ import annotations

import os
import socket
import time
import uuid

KEY = "unfinished_runs"
STALE_S = 600  # a batch takes seconds; a record not updated for 10 minutes belongs to a dead worker


def _alive(record: dict) -> bool:
    if record.get("interrupted"):
        return False
    if record.get("host") == socket.gethostname():
        try:
            os.kill(int(record["pid"]), 0)
        except (ProcessLookupError, ValueError, KeyError):
            return False
        except PermissionError:  # a process of another user has that id
            return True
        return True
    return time.time() - float(record.get("updated", 0)) < STALE_S


class RunRecord:
    """This process's entry in the study's ``unfinished_runs``: adopted from a cut-short run with the same plan,
    or new. ``told`` is how many of the plan's trials are already in the study."""

    def __init__(self, study, plan: dict) -> None:
        self.study, self.plan = study, plan
        runs = study.user_attrs.get(KEY, {})
        adoptable = [key for key, record in runs.items() if record.get("plan") == plan and not _alive(record)]
        self.key = adoptable[0] if adoptable else uuid.uuid4().hex[:12]
        self.told = int(runs[self.key]["told"]) if adoptable else 0
        self.resumed = bool(adoptable)
        self.save(self.told)

    def _write(self, update: dict | None) -> None:
        runs = dict(self.study.user_attrs.get(KEY, {}))  # read just before writing: other workers' entries stay
        if update is None:
            runs.pop(self.key, None)
        else:
            runs[self.key] = update
        self.study.set_user_attr(KEY, runs)

    def save(self, told: int, interrupted: bool = False) -> None:
        """After each stored batch (and at the end of an interrupted run)."""
        self.told = told
        self._write({"plan": self.plan, "told": told, "host": socket.gethostname(), "pid": os.getpid(),
                     "updated": time.time(), **({"interrupted": True} if interrupted else {})})

    def finish(self) -> None:
        self._write(None)
