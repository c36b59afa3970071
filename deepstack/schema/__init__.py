"""Validated, frozen input schemas. Data enters DeepStack only through these."""

from __future__ import annotations

from pathlib import Path

from deepstack.errors import UserInputError
from deepstack.schema.frozen import FrozenMap
from deepstack.schema.hardware import (
    PE,
    ChipArchitecture,
    Device,
    DramTiming,
    HBMDram,
    MinTile,
    Network,
    NetworkLevel,
    Stacked3DDram,
    System,
    Table2Row,
    Thermal,
)
from deepstack.schema.llm import LLM, Attention, MoE
from deepstack.schema.loader import build_scenario, read_file, validate
from deepstack.schema.scenario import Precision, Scenario
from deepstack.schema.schedule import ModuleParallel, Schedule
from deepstack.schema.space import (
    DesignSpace,
    HardwareAxes,
    ScenarioAxes,
    ScheduleAxes,
    SramOption,
    StudyRecipe,
)

SCHEMAS = {
    "llm": LLM,
    "chip": ChipArchitecture,
    "noc": Network,
    "system": System,
    "scenario": Scenario,
    "schedule": Schedule,
    "space": DesignSpace,
    "study": StudyRecipe,
}


def load_file(path: str | Path, expected_kind: str | None = None):
    """Read and validate any schema file; its ``kind`` key says which schema it is."""
    data = read_file(path)
    kind = data.get("kind", expected_kind)
    if not isinstance(kind, str) or kind not in SCHEMAS:
        raise UserInputError(f"{path}: kind: must be one of {', '.join(SCHEMAS)} (got {kind!r})")
    if expected_kind is not None and kind != expected_kind:
        raise UserInputError(f"{path}: kind: expected {expected_kind!r}, got {kind!r}")
    return validate(SCHEMAS[kind], data, origin=str(path))


__all__ = [
    "LLM",
    "PE",
    "SCHEMAS",
    "Attention",
    "ChipArchitecture",
    "DesignSpace",
    "Device",
    "DramTiming",
    "FrozenMap",
    "HBMDram",
    "HardwareAxes",
    "MinTile",
    "MoE",
    "ModuleParallel",
    "Network",
    "NetworkLevel",
    "Precision",
    "Scenario",
    "ScenarioAxes",
    "Schedule",
    "ScheduleAxes",
    "SramOption",
    "Stacked3DDram",
    "StudyRecipe",
    "System",
    "Table2Row",
    "Thermal",
    "build_scenario",
    "load_file",
    "read_file",
    "validate",
]
