"""What a bi-level study has found, rebuilt from its trials: every kept design × schedule, the elite schedules,
the evaluations spent and the hypervolume history (:mod:`deepstack.search.optimize` runs the trials; this module
reads and writes the study only through its methods, so Optuna stays imported there alone)."""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field

import numpy as np

from deepstack.errors import UserInputError
from deepstack.search import pareto
from deepstack.search.bilevel import values
from deepstack.search.hypervolume import Progress
from deepstack.search.objectives import OBJECTIVES
from deepstack.search.studies.provenance import code_digest, space_inputs_digest

ELITE_SIZE = 8  # schedules a screened trial tries: the most frequent on the exactly solved points' Pareto sets


@dataclass
class StudyRecord:
    objectives: list[str]
    progress: Progress
    rows: list[tuple[int, dict]] = field(default_factory=list)  # (trial, kept row with its design)
    labels: collections.Counter = field(default_factory=collections.Counter)
    evaluations: int = 0
    params: set = field(default_factory=set)
    solved_exactly: set = field(default_factory=set)  # hardware points whose every fitting schedule was evaluated
    tried: set = field(default_factory=set)  # hardware points solved (exactly or screened)

    @classmethod
    def load(cls, study, objectives: list[str]) -> StudyRecord:
        stored = study.user_attrs.get("hypervolume") or {}
        record = cls(objectives, Progress(objectives, stored.get("reference"), list(stored.get("history", []))))
        for t in study.get_trials(deepcopy=False):
            record.params.add(_key(t.params))
            if t.state.name not in ("COMPLETE", "FAIL"):
                continue
            solve = trial_solve(t)
            record.evaluations += int(solve.get("evaluations", 1 if t.state.name == "COMPLETE" else 0))
            if "hardware" in solve:
                record.tried.add(hardware_point(solve["hardware"]))
                if solve.get("inner") == "exact":
                    record.solved_exactly.add(hardware_point(solve["hardware"]))
            feasible = not any(c > 0 for c in (t.constraints or {}).values())
            if t.state.name != "COMPLETE" or not feasible:
                continue
            design = t.user_attrs.get("design", {})
            kept = t.user_attrs.get("pareto_schedules")
            if kept is None:  # a trial of an older, single-level study: its own values only
                kept = [{**{o: v for o, v in zip(objectives, t.values, strict=True)}, **design}]
            record._add(t.number, design, kept, solve.get("inner") == "exact")
        return record

    def _add(self, number: int, design: dict, kept: list[dict], exact: bool) -> None:
        hardware = {k: v for k, v in design.items() if k not in ("schedule", "fsdp")}
        for row in kept:
            self.rows.append((number, {**hardware, **row}))
        self.progress.add([[row[o] for o in self.objectives] for row in kept])
        if exact:
            self.labels.update(row["schedule"] for row in kept)

    def has_params(self, params: dict) -> bool:
        return _key(params) in self.params

    def count(self, result, number: int, task, solved) -> None:
        """Add a told trial: its evaluations, and its kept schedules (with the hardware point's design);
        ``solved`` is the trial's inner task (``task`` is None when the point had no feasible schedule)."""
        self.evaluations += result.evaluations
        self.tried.add(solved.hardware)
        if solved.only is None:
            self.solved_exactly.add(solved.hardware)
        if task is None or not result.front or result.over_limit_c > 0:
            return
        from deepstack.search.bilevel import front_row

        kept = [front_row(r, self.objectives) for r in result.front]
        self._add(number, task.hardware.as_dict(), kept, task.only is None)

    @property
    def elite(self) -> tuple[str, ...]:
        ranked = sorted(self.labels.items(), key=lambda item: (-item[1], item[0]))
        return tuple(label for label, _ in ranked[:ELITE_SIZE])

    def front_rows(self) -> list[dict]:
        """The study's front over designs × schedules: kept rows no other dominates, one per design."""
        if not self.rows:
            return []
        v = np.array([[row[o] for o in self.objectives] for _, row in self.rows], dtype=float)
        mask = pareto.nondominated_mask(v, self.objectives)
        front, seen = [], set()
        for (number, row), keep in zip(self.rows, mask, strict=True):
            key = json.dumps(row, sort_keys=True, default=str)
            if keep and key not in seen:
                seen.add(key)
                front.append({**{o: row[o] for o in self.objectives}, "trial": number,
                              **{k: v for k, v in row.items() if k not in self.objectives}})
        first = self.objectives[0]
        return sorted(front, key=lambda r: r[first], reverse=OBJECTIVES[first][1])

    def front_hardware(self) -> list:
        """The distinct hardware points of the front (one per objective vector), best first by the first objective."""
        out, seen = [], set()
        for row in self.front_rows():
            if "level_bw_scales" not in row:  # a single-level trial of an older study: no stored design
                continue
            point, key = hardware_point(row), tuple(row[o] for o in self.objectives)
            if point not in out and key not in seen:  # designs that differ only where nothing changes count once
                seen.add(key)
                out.append(point)
        return out

    def on_front(self, number: int) -> bool:
        return any(row["trial"] == number for row in self.front_rows())

    def attributes(self) -> dict:
        """The hypervolume history and the evaluations spent: the study user attributes it is saved as (the
        dashboard shows them)."""
        return {"hypervolume": {"reference": self.progress.reference, "history": self.progress.history,
                                "note": "[completed trials, design-point evaluations, hypervolume]"},
                "evaluations": self.evaluations}


def hardware_point(row: dict):
    """The :class:`~deepstack.search.space.HardwarePoint` of a stored design (``HardwarePoint.as_dict`` keys)."""
    from deepstack.search.space import HardwarePoint

    return HardwarePoint(row["chip"], row["noc"], row["stacked_layers"], row["connected_layers"], row["sram"],
                         float(row["hop_latency_scale"]), tuple(float(b) for b in row["level_bw_scales"]))


def _key(params: dict) -> str:
    return json.dumps(params, sort_keys=True, default=str)


SOLVE_KEYS = ("inner", "evaluations", "evaluation_s", "repaired", "infeasible", "hardware")


def trial_solve(trial) -> dict:
    """How a trial was solved (user attribute ``solve``: ``inner`` exact or screen, ``evaluations`` design points
    evaluated, ``evaluation_s``, ``repaired``, ``infeasible``); a trial of an earlier version kept them as separate
    attributes, and a single-level trial has none."""
    attrs = trial.user_attrs
    return attrs["solve"] if "solve" in attrs else {k: attrs[k] for k in SOLVE_KEYS if k in attrs}


def study_counts(study) -> dict[str, int]:
    """The study's repaired and infeasible proposals and its completed trials over the thermal limit."""
    return trial_counts(study.get_trials(deepcopy=False))


def trial_counts(trials: list) -> dict[str, int]:
    """Of ``trials``: the repaired and infeasible proposals and the completed trials over the thermal limit."""
    solves = [trial_solve(t) for t in trials]
    return {"repaired": sum(bool(s.get("repaired")) for s in solves),
            "infeasible": sum(bool(s.get("infeasible")) for s in solves),
            "over_thermal_limit": sum(t.state.name == "COMPLETE" and any(c > 0 for c in (t.constraints or {}).values())
                                      for t in trials)}


def check_same_problem(study, problem) -> None:
    """A study keeps one problem: resuming it with other objectives or another scenario is refused, and so is
    resuming it with other code or after its space, or a chip or NoC file the space names, was edited (its
    trials were scored by what they were then)."""
    signature = {"objectives": list(problem.objectives), "scenario": problem.scenario.model_dump(mode="json"),
                 "space": problem.space.name, "code": code_digest(), "inputs": space_inputs_digest(problem.space)}
    stored = study.user_attrs.get("problem")
    if stored is None:
        study.set_user_attr("problem", signature)
        return
    if stored == signature:
        return
    core = ("objectives", "scenario", "space")
    if all(stored.get(k) == signature[k] for k in core):
        # the same problem, but its trials were scored by other laws or files: new trials would be ranked
        # against results that no longer hold
        if stored.get("code") != signature["code"]:
            raise UserInputError(f"--study {study.study_name}: this study's trials were evaluated by other code "
                                 f"({code_of(stored)}, now {signature['code']}: DeepStack's model or search "
                                 "files have changed since), so new trials would share a front with results the "
                                 "code no longer gives; use a new --study name")
        raise UserInputError(f"--study {study.study_name}: its space {problem.space.name!r}, or a chip or NoC file "
                             "the space names, has changed since this study's trials were evaluated, so new "
                             "trials would share a front with results those files no longer give; use a new "
                             "--study name")
    theirs, ours = stored.get("scenario") or {}, signature["scenario"]
    fields = ", ".join(f"{k} {_shown(theirs.get(k))} (asked: {_shown(ours.get(k))})"
                       for k in dict.fromkeys([*theirs, *ours]) if theirs.get(k) != ours.get(k))
    what = {"objectives": f"objectives {stored.get('objectives')} (asked: {list(problem.objectives)})",
            "space": f"space {stored.get('space')!r} (asked: {problem.space.name!r})",
            "scenario": f"another scenario: {fields}"}
    differs = [text for key, text in what.items() if stored.get(key) != signature[key]]
    raise UserInputError(f"--study {study.study_name}: this study was created for {'; '.join(differs)}; "
                         "use a new --study name or the study's own settings")


CHANGED_DURING_A_RUN = "changed while a run evaluated its trials"


def check_inputs_unchanged(study, space_now) -> None:
    """Refuse to write a study's front when its space, or a chip or NoC file the space names, changed while the
    run evaluated trials (each trial reads them as it finds them, so the study may mix two versions). The study
    keeps its trials but is marked, so resuming it is refused too."""
    stored = dict(study.user_attrs.get("problem") or {})
    if stored.get("inputs") in (None, space_inputs_digest(space_now)):
        return
    stored["inputs"] = CHANGED_DURING_A_RUN
    study.set_user_attr("problem", stored)
    raise UserInputError(f"--space: the space file, or a chip or NoC file it names, changed while the run "
                         f"evaluated trials, so study {study.study_name!r} may mix two versions; no front was "
                         "written (its trials stay stored): use a new --study name")


def code_of(stored: dict) -> str:
    return f"code {stored['code']}" if stored.get("code") else "a version that did not record its code"


def _shown(value) -> str:
    """A scenario field as the refusal shows it: a model by its name."""
    if isinstance(value, dict) and "name" in value:
        return repr(value["name"])
    return repr(value)


__all__ = ["StudyRecord", "check_inputs_unchanged", "check_same_problem", "study_counts", "trial_counts",
           "trial_solve", "values"]
