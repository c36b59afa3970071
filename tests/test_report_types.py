"""Typed, immutable reports (models/results.py): fields with units, read-only mappings, the JSON form, and no
report can be changed through another (memo tables hand the same parts to many reports)."""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
from pathlib import Path

import pytest

from deepstack import catalog
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate
from deepstack.models.results import Breakdown, FrozenMap, Metrics, Report
from deepstack.schema import Scenario, Schedule

NOCS = Path(__file__).resolve().parent.parent / "search" / "spaces" / "nocs"


def _point(batch: int, parallel: str = "tp=8", model: str = "llama-3.2-1b") -> DesignPoint:
    return DesignPoint(chip=catalog.load("chips", "standard"), scenario=Scenario(model=model, phase="decode",
                       batch=batch), schedule=Schedule.parse(parallel), network=catalog.load("nocs",
                       str(NOCS / "mini8.toml")))


def test_mutating_one_report_raises_and_never_changes_another():
    """Two design points on the same schedule and hardware share memoised schedule and hardware entries; none
    of them can be changed, so one report can never alter another (it once could: ``_schedule`` handed out
    shared nested dicts)."""
    r1, r2 = evaluate(_point(64)), evaluate(_point(32))
    before = json.dumps(r2.as_dict())
    with pytest.raises(TypeError):
        r1.schedule["attention"]["tp"] = 99
    with pytest.raises(TypeError):
        r1.hardware["area_per_device_mm2"]["noc_mm2"] = 0.0
    with pytest.raises(TypeError):
        r1.metrics["stps"] = 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        r1.metrics.stps = 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        r1.schedule.pp = 7
    with pytest.raises(AttributeError):
        r1.schedule.attention._data = {}
    with pytest.raises(AttributeError):
        r1.violations.append("x")
    # the JSON form is a fresh copy: changing it changes no report
    copy = r1.as_dict()
    copy["schedule"]["attention"]["tp"] = 99
    copy["hardware"]["area_per_device_mm2"]["noc_mm2"] = 0.0
    assert r1.schedule["attention"]["tp"] == 8 and r2.schedule.attention["tp"] == 8
    assert json.dumps(r2.as_dict()) == before


def test_fields_carry_units_and_read_as_the_json_keys():
    report = evaluate(_point(64))
    assert isinstance(report, Report) and isinstance(report.metrics, Metrics)
    assert isinstance(report.breakdown, Breakdown)
    m = report.metrics
    assert m["stps"] == m.stps and m["ttft_s"] == m.ttft_s > 0 and m.power_w > 0 and m.frequency_ghz > 0
    assert list(m) == ["ttft_s", "utps", "stps", "tokens_per_joule", "power_w", "temperature_c",
                       "frequency_ghz", "area_mm2", "memory_gib", "power_density_W_per_mm2"]
    assert m["power_density_W_per_mm2"] == m.power_density_W_per_mm2 == m.power_w / m.area_mm2  # derived, W/mm²
    assert dict(report.metrics) == report.as_dict()["metrics"]
    assert report.hardware["pes_per_device"] == report.hardware.pes_per_device > 0
    util = report.breakdown["utilization"]
    assert list(util) == ["compute", "l2", "dram", "noc_L1", "noc_L2"] and util["noc_L2"] == util.noc[1]
    with pytest.raises(KeyError):
        util["noc_L3"]
    with pytest.raises(KeyError):
        m["as_dict"]  # a method is not a key
    entry = report.breakdown.operators[0]
    assert entry["time_s"] == entry.time_s and list(entry)[:4] == ["layer", "count", "time_s", "share"]
    assert "search" not in report and len(report) == 7


def test_as_dict_is_plain_json_data_in_key_order():
    report = evaluate(_point(64))
    data = report.as_dict()
    assert list(data) == ["feasible", "violations", "metrics", "hardware", "schedule", "scenario", "breakdown"]

    def plain(value):
        if isinstance(value, dict):
            return all(isinstance(k, str) and plain(v) for k, v in value.items())
        if isinstance(value, list):
            return all(plain(v) for v in value)
        return value is None or isinstance(value, bool | int | float | str)

    assert plain(data)
    assert list(data["schedule"]) == ["text", "devices", "attention", "ffn", "pp", "fsdp", "microbatches",
                                      "collectives"]
    assert evaluate(_point(64), breakdown=False).as_dict()["breakdown"] == {}
    searched = report.with_search({"top": [{"schedule": "tp=8"}], "pruned": {}})
    assert searched.as_dict()["search"] == {"top": [{"schedule": "tp=8"}], "pruned": {}}
    assert "search" not in report.as_dict() and searched["search"]["top"][0]["schedule"] == "tp=8"


def test_reports_survive_pickling():
    report = evaluate(_point(64))
    assert pickle.loads(pickle.dumps(report)).as_dict() == report.as_dict()
    frozen = FrozenMap({"a": 1})
    assert pickle.loads(pickle.dumps(frozen)) == {"a": 1}


def test_overlap_off_serialises_collectives_and_never_speeds_up():
    point = _point(64, "tp=8")
    overlapped = evaluate(point, with_ttft=False)
    serial = evaluate(point, with_ttft=False, overlap=False)
    assert serial.metrics.stps < overlapped.metrics.stps
    assert serial.breakdown.phase_time_s > overlapped.breakdown.phase_time_s
    assert not any("overlapped with" in e.config for e in serial.breakdown.operators)
    assert any("overlapped with" in e.config for e in overlapped.breakdown.operators)
    # a schedule that moves no data has nothing to serialise
    alone = DesignPoint(chip=point.chip, scenario=point.scenario)
    assert evaluate(alone, overlap=False).as_dict() == evaluate(alone).as_dict()
    assert math.isnan(serial.metrics.ttft_s)
