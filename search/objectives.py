"""The objectives a search ranks design points by: each names a report metric and whether larger is better.

Shared by the best-schedule search (:mod:`deepstack.search.schedules`), the sweeps, Optuna studies, Pareto
fronts and the study runners, so an objective's metric and direction are written once.
"""

from __future__ import annotations

OBJECTIVES = {  # name → (metric key in a report's metrics, larger is better)
    "stps": ("stps", True),
    "utps": ("utps", True),
    "tokens_per_joule": ("tokens_per_joule", True),
    "ttft": ("ttft_s", False),
}


def score(metrics, objective: str) -> float:
    """The objective's value in ``metrics`` (a report's metrics), negated when smaller is better, so that a
    larger score is always better."""
    key, larger = OBJECTIVES[objective]
    value = metrics[key]
    return value if larger else -value


def parse_objectives(text: str) -> list[str]:
    """``--objective`` text (comma-separated names) as a list; one line naming the field on bad input."""
    from deepstack.errors import UserInputError

    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    if not names:
        raise UserInputError(f"--objective: give one or more of {', '.join(OBJECTIVES)}")
    for name in names:
        if name not in OBJECTIVES:
            raise UserInputError(f"--objective: unknown objective {name!r}; allowed: {', '.join(OBJECTIVES)}")
    if len(set(names)) != len(names):
        raise UserInputError("--objective: each objective may appear once")
    return names
