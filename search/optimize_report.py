"""What an ``optimize`` run hands back (:class:`OptimizeResult`) and leaves beside its study: the Pareto front
files (:func:`deepstack.search.study_front.write_front`), the hypervolume PNG, and the run's summary (hypervolume,
evaluations, the study's trial counts, the time the front took). It reads the study through its methods only, so
Optuna stays imported by :mod:`deepstack.search.optimize` alone."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from deepstack.schema import DesignSpace
from deepstack.search.study_front import write_front
from deepstack.search.study_record import StudyRecord, study_counts


@dataclass
class OptimizeResult:
    study: str
    storage: str
    trials: int
    added: int
    objectives: list[str]
    pareto: list[dict]
    files: dict[str, str]
    wall_s: float
    run: dict = field(default_factory=dict)  # counts, hypervolume, evaluations, stop reason of this run


def write_run_report(the_study, objectives: list[str], folder: Path, study: str, space: DesignSpace, run: dict,
                     setup_s: float, storage: str | None = None) -> tuple[list[dict], dict[str, str]]:
    """Write the study's front files and its hypervolume PNG into ``folder`` and add to ``run`` its timing (the
    study's set-up, ``setup_s``, and the front), hypervolume, evaluations and the study's trial counts; returns the
    front rows and the files written. ``storage``: which storage the study is in, as the front JSON records it."""
    tick = time.perf_counter()
    record = StudyRecord.load(the_study, objectives)
    front = record.front_rows()
    files = write_front(front, the_study, objectives, folder, study, space=space, storage=storage)
    png = record.progress.plot(str(folder / f"{study}.hypervolume.png"), f"{study}: hypervolume after each batch")
    if png:
        files["hypervolume_png"] = png
    history = record.progress.history
    run["timing_s"].update(setup=setup_s + run["timing_s"]["setup"], front=time.perf_counter() - tick)
    run.update({"hypervolume": history[-1][2] if history else 0.0, "evaluations": record.evaluations,
                "study_counts": study_counts(the_study)})
    return front, files
