"""The curated public API of ``import deepstack`` (deepstack/__init__.py)."""

from __future__ import annotations

import subprocess
import sys

import deepstack
from deepstack.models.results import Metrics, Report

PUBLIC = ("evaluate", "DesignPoint", "Report", "best_schedules", "collective_time", "sweep", "optimize")


def test_all_lists_the_public_api_and_every_name_resolves_with_a_docstring():
    for name in PUBLIC:
        assert name in deepstack.__all__
    for name in deepstack.__all__:
        getattr(deepstack, name)
    for name in PUBLIC:  # each states its contract
        assert getattr(deepstack, name).__doc__, name


def test_import_is_light_and_prints_the_api():
    code = ("import sys, deepstack; print(deepstack.__all__); "
            "print(sorted(m for m in ('optuna', 'ortools', 'dask', 'deepstack.search', 'deepstack.models.evaluate') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    listed, heavy = out.strip().splitlines()
    assert all(repr(name) in listed for name in PUBLIC)
    assert heavy == "[]"  # the evaluator and the searches load on first use


def test_evaluate_returns_a_typed_report():
    report = deepstack.evaluate(model="llama-3.2-1b", chip="standard", phase="decode", batch=1)
    assert isinstance(report, Report) and isinstance(report.metrics, Metrics)
    assert report.metrics.stps > 0 and report.metrics["stps"] == report.metrics.stps
    point = deepstack.DesignPoint(chip=deepstack.load_preset("chips", "standard"),
                                  scenario=deepstack.Scenario(model="llama-3.2-1b", phase="decode", batch=1))
    assert deepstack.evaluate(point).as_dict() == report.as_dict()


def test_best_schedules_ranks_a_hardware_point():
    point = deepstack.DesignPoint(chip=deepstack.load_preset("chips", "standard"),
                                  scenario=deepstack.Scenario(model="llama-3.2-1b", phase="decode", batch=64),
                                  network=deepstack.load_preset("nocs", "h100-star-32x"))
    search = deepstack.best_schedules(point)
    assert isinstance(search.best, Report) and search.ranking_all
    values = [r["stps"] for r in search.ranking_all if r["feasible"]]
    assert values == sorted(values, reverse=True)
