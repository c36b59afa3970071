"""Memoisation never changes a result: reports are identical to the last digit with and without caches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deepstack import catalog
from deepstack.models import clear_caches
from deepstack.models.evaluate import DesignPoint, evaluate
from deepstack.schema import Scenario, Schedule

SAMPLE = [
    ("llama-3.2-1b", "decode", 64, "standard", "mini8", "tp=8"),
    ("llama-3.2-1b", "prefill", 4, "strong-l2", "mini8", "tp=4,dp=2"),
    ("qwen3-30b-a3b", "decode", 16, "standard", "mini8", "ep=8"),
    ("qwen3-30b-a3b", "decode", 16, "large-vector", "mini8", "attn:tp=2,dp=4;moe:ep=8"),
    ("llama-3.2-1b", "decode", 8, "weak-noc", None, "dp=2"),
]


NOCS = Path(__file__).resolve().parent.parent / "search" / "spaces" / "nocs"


def _point(model, phase, batch, chip, noc, parallel) -> DesignPoint:
    network = catalog.load("nocs", str(NOCS / f"{noc}.toml")) if noc else None
    return DesignPoint(chip=catalog.load("chips", chip), scenario=Scenario(model=model, phase=phase, batch=batch),
                       schedule=Schedule.parse(parallel), network=network)


@pytest.mark.parametrize("case", SAMPLE, ids=[f"{c[0]}-{c[1]}-{c[3]}-{c[5]}" for c in SAMPLE])
def test_memoised_and_cold_reports_are_identical(case):
    point = _point(*case)
    clear_caches()
    cold = json.dumps(evaluate(point).as_dict(), sort_keys=True)
    warm = json.dumps(evaluate(point).as_dict(), sort_keys=True)  # every stage now comes from a cache
    assert warm == cold
    # and after evaluating other points in between (caches shared across design points)
    for other in SAMPLE:
        evaluate(_point(*other))
    assert json.dumps(evaluate(point).as_dict(), sort_keys=True) == cold


@pytest.mark.parametrize("case", SAMPLE[:3], ids=[f"{c[0]}-{c[1]}-{c[3]}-{c[5]}" for c in SAMPLE[:3]])
def test_a_search_evaluation_without_breakdown_has_the_same_metrics(case):
    """Sweeps and the schedule search skip the per-operator breakdown; nothing else may change."""
    point = _point(*case)
    clear_caches()
    full = evaluate(point).as_dict()
    lean = evaluate(point, breakdown=False).as_dict()
    assert lean["breakdown"] == {} and full["breakdown"]
    assert {k: v for k, v in lean.items() if k != "breakdown"} == {k: v for k, v in full.items() if k != "breakdown"}
