"""Which run of ``deepstack optimize`` a process is doing: a new one, or one an interrupt cut short.

``--trials N`` adds exactly N trials to the study. A run records in the study (user attribute ``unfinished_runs``,
written when it starts and when it ends) its plan — the options that decide what it proposes: trials, refine
budget, batch, seed, sampler, inner solve, stall rule — and every trial it tells carries the run's key (system
attribute ``run``), so what a run has done is counted from the trials themselves, in the same write. A run that
ends normally removes its record. One that a signal (or an error) ended marks it interrupted; one killed outright
(SIGKILL) leaves it with its process id, which is no longer alive. The next run with the same plan adopts such a
record and adds only the trials that run did not, so interrupt + resume leaves the study one uninterrupted run
would have left (with the sampler reseeded per batch from the study's trial count,
:meth:`deepstack.search.optimize.Mirror.reseed`, and a genetic sampler given the parents of the generation it
resumes in as they were cached, :meth:`~deepstack.search.optimize.Mirror.resume_generation`).

A record whose process still runs is another worker's live run, never adopted; one on another machine whose last
trial (or start) is older than ``STALE_S`` belongs to a dead worker and is.
"""

from __future__ import annotations

import os
import socket
import time
import uuid

KEY = "unfinished_runs"
RUN_ATTR = "run"  # system attribute of every trial a run tells: the run's key
STALE_S = 600  # a batch takes seconds; a run silent for 10 minutes on another machine is dead


def _alive(record: dict, last_trial_s: float) -> bool:
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
    return time.time() - max(float(record.get("updated", 0)), last_trial_s) < STALE_S


class RunRecord:
    """This process's entry in the study's ``unfinished_runs``: adopted from a cut-short run with the same plan,
    or new. ``earlier``: the plan's trials already in the study, which its cut-short part told (``trials``: the
    study's)."""

    def __init__(self, study, plan: dict, trials: list) -> None:
        self.study, self.plan = study, plan
        last: dict[str, float] = {}
        for t in trials:
            key = t.system_attrs.get(RUN_ATTR)
            if key is not None and t.datetime_complete is not None:
                last[key] = max(last.get(key, 0.0), t.datetime_complete.timestamp())
        runs = study.user_attrs.get(KEY, {})
        adoptable = [key for key, record in runs.items()
                     if record.get("plan") == plan and not _alive(record, last.get(key, 0.0))]
        self.key = adoptable[0] if adoptable else uuid.uuid4().hex[:12]
        self.earlier = [t for t in trials if t.system_attrs.get(RUN_ATTR) == self.key]
        self.resumed = bool(adoptable)
        self.save()

    @property
    def told(self) -> int:
        """How many of the plan's trials are already in the study."""
        return len(self.earlier)

    def _write(self, update: dict | None) -> None:
        runs = dict(self.study.user_attrs.get(KEY, {}))  # read just before writing: other workers' entries stay
        if update is None:
            runs.pop(self.key, None)
        else:
            runs[self.key] = update
        self.study.set_user_attr(KEY, runs)

    def save(self, interrupted: bool = False) -> None:
        """When the run starts (and when an interrupt ends it)."""
        self._write({"plan": self.plan, "host": socket.gethostname(), "pid": os.getpid(), "updated": time.time(),
                     **({"interrupted": True} if interrupted else {})})

    def finish(self) -> None:
        self._write(None)
