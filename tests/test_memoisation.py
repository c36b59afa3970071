"""Memoisation never changes a result: reports are identical to the last digit with and without caches."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from deepstack import catalog
from deepstack.models import clear_caches, memo
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate
from deepstack.models.pipeline import run_phase
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


# TMS1 is 4 (switch) × 2×2 (mesh) × 4×4 (torus) = 256 devices, innermost level first.
INSIDE_LEVEL_1 = tuple(tuple(range(start, start + 4)) for start in range(0, 256, 4))
ACROSS_LEVEL_3 = tuple(tuple(range(start, 256, 16)) for start in range(16))


def _summary(result) -> tuple:
    return (result.algorithm, result.time_s, result.latency_s, result.congestion_s, result.level_bytes,
            result.candidates)


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "all_to_all"])
def test_a_collective_reused_across_speeds_of_levels_it_never_crosses_equals_a_cold_one(op):
    """Rankings are shared between networks that differ only in levels the groups' flows never cross; a
    collective timed on one network after another must equal the same collective timed from cold."""
    from deepstack.models.collectives import collective_time
    from deepstack.search.space import scaled_network

    base, faster_top = scaled_network("tms1", 1.0, (1.0, 1.0, 1.0)), scaled_network("tms1", 1.0, (1.0, 1.0, 2.0))
    for groups, top_level_matters in ((INSIDE_LEVEL_1, False), (ACROSS_LEVEL_3, True)):
        clear_caches()
        cold = _summary(collective_time(op, 1 << 20, groups, faster_top))
        clear_caches()
        on_base = _summary(collective_time(op, 1 << 20, groups, base))
        after_base = _summary(collective_time(op, 1 << 20, groups, faster_top))
        assert after_base == cold
        assert (on_base != cold) == top_level_matters  # the faster top level helps only groups that cross it


@dataclasses.dataclass(frozen=True)
class TaggedPoint(DesignPoint):
    """A design point with one more input, as a future field of DesignPoint would add."""

    tag: str = ""


def _tagged(point: DesignPoint, tag: str) -> TaggedPoint:
    return TaggedPoint(**{f.name: getattr(point, f.name) for f in dataclasses.fields(DesignPoint)}, tag=tag)


def test_the_phase_memo_key_follows_every_field_of_the_design_point():
    """The phase memo keys on the design point itself, never on a hand-made list of its fields: two points that
    differ only in a field added later must not share an entry, and equal points must."""
    base = _point(*SAMPLE[0])
    dev = base.device
    clear_caches()
    a, b = _tagged(base, "a"), _tagged(base, "b")
    phase_a = run_phase(a, dev, a.scenario)
    phase_b = run_phase(b, dev, b.scenario)
    assert phase_b is not phase_a  # the added field is part of the key
    assert run_phase(_tagged(base, "a"), dev, a.scenario) is phase_a  # an equal point hits the same entry
    assert phase_b.nominal_stage_s == phase_a.nominal_stage_s  # (the tag changes no physics)


def test_the_pipeline_memos_are_bounded_registered_tables():
    from deepstack.models.pipeline import phase

    for table in (phase._PHASES, phase._TUNED):
        assert table in memo.registered() and table.maxsize > 0
    assert phase._PHASES.lru
    evaluate(_point(*SAMPLE[0]))
    assert len(phase._PHASES) > 0 and len(phase._TUNED) > 0
    clear_caches()
    assert len(phase._PHASES) == 0 and len(phase._TUNED) == 0
