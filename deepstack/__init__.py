"""DeepStack: design-space exploration for distributed 3D-DRAM-stacked AI accelerators serving LLMs.

The curated public API. Internals (``deepstack.models``, ``deepstack.search``) may move between releases.
"""

from __future__ import annotations

from deepstack.catalog import load as load_preset
from deepstack.errors import DeepStackError, InfeasibleError, UserInputError
from deepstack.schema import (
    LLM,
    ChipArchitecture,
    DesignSpace,
    Network,
    Precision,
    Scenario,
    Schedule,
    StudyRecipe,
    System,
    load_file,
)

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "ChipArchitecture",
    "DeepStackError",
    "DesignSpace",
    "InfeasibleError",
    "Network",
    "Precision",
    "Scenario",
    "Schedule",
    "StudyRecipe",
    "System",
    "UserInputError",
    "__version__",
    "load_file",
    "load_preset",
]
