"""The library API behind the CLI: parse → compute → plain data. Never prints.

One module per job, each name re-exported here (callers use ``api.<name>``):

- ``presets``: the catalog's summary rows, one preset in full, template files, ``validate_file``
- ``flags``: scenario fields set by flags (``with_flags``) and per-level comma-separated values
- ``evaluation``: ``evaluate`` (one design point, or a front's row), ``strategies``, ``collective``, ``kernel``
- ``search``: ``run_optimize``, ``space_size``, ``run_sweep``, ``run_compare``
- ``accuracy``: the checks against validation/ and the rows of ``accuracy all``
"""

from __future__ import annotations

from deepstack.api.accuracy import (
    accuracy_summary,
    cross_validation,
    kernels_accuracy,
    network_accuracy,
    paper_accuracy,
    power_accuracy,
    serving_accuracy,
)
from deepstack.api.evaluation import collective, evaluate, evaluate_front_design, kernel, strategies
from deepstack.api.flags import with_flags
from deepstack.api.presets import TEMPLATES, catalog_rows, show_preset, template, validate_file
from deepstack.api.search import run_compare, run_optimize, run_sweep, space_size
from deepstack.schema import build_scenario  # re-exported: benchmarks/calibrate_power.py takes it from here

__all__ = [
    "TEMPLATES",
    "accuracy_summary",
    "build_scenario",
    "catalog_rows",
    "collective",
    "cross_validation",
    "evaluate",
    "evaluate_front_design",
    "kernel",
    "kernels_accuracy",
    "network_accuracy",
    "paper_accuracy",
    "power_accuracy",
    "run_compare",
    "run_optimize",
    "run_sweep",
    "serving_accuracy",
    "show_preset",
    "space_size",
    "strategies",
    "template",
    "validate_file",
    "with_flags",
]
