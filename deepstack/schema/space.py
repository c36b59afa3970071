"""Design spaces and study recipes (the search and study issues fill in how they are used)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, PlainSerializer, field_validator, model_validator

from deepstack.registry import ALGORITHMS
from deepstack.schema.base import Frozen
from deepstack.schema.frozen import FrozenMap, frozen, plain
from deepstack.schema.hardware import MAX_STACKED_LAYERS
from deepstack.schema.scenario import Assumptions
from deepstack.schema.schedule import Algorithm

MAX_L1_BW_SCALE = 64.0  # an SRAM option's L1 bandwidth at most 64 × its chip's (a bound on input, not physics)


class SramOption(Frozen):
    """An on-chip SRAM variant applied on top of a chip template (None keeps the template's value)."""

    name: str = Field(min_length=1)
    l1_KiB: float | None = Field(None, gt=0, le=1e5)
    l1_bw_scale: float = Field(1.0, gt=0, le=MAX_L1_BW_SCALE)
    l2_MiB: float | None = Field(None, gt=0, le=1e5)

    def override(self) -> SramOption | None:
        """The option as the evaluator takes it: None for "base" when it changes nothing of the chip (so a
        design point with it is the chip's own, memo tables included)."""
        unchanged = self.l1_KiB is None and self.l2_MiB is None and self.l1_bw_scale == 1.0
        return None if self.name == "base" and unchanged else self


class ScenarioAxes(Frozen):
    models: tuple[str, ...] = Field(min_length=1)
    phases: tuple[Literal["prefill", "decode"], ...] = Field(("decode",), min_length=1)
    batches: tuple[int, ...] = Field((1,), min_length=1)
    sequence_lengths: tuple[tuple[int, int], ...] = Field(((1024, 1024),), min_length=1,
                                                          description="(input_len, output_len) pairs")
    precision: str | None = None
    ambient_c: float | None = Field(None, ge=-50, le=100, description="°C; default: each chip's (Scenario.ambient_c)")
    max_temp_c: float | None = Field(None, gt=0, le=200, description="°C; default: each chip's (Scenario.max_temp_c)")
    assumptions: Assumptions = Field("default", description="the assumption set (Scenario.assumptions)")

    @model_validator(mode="after")
    def _positive(self) -> ScenarioAxes:
        problems = []  # every problem at once: a file with three mistakes needs one round trip, not three
        if any(b < 1 for b in self.batches):
            problems.append("batches must be ≥ 1")
        if any(i < 1 or o < 1 for i, o in self.sequence_lengths):
            problems.append("sequence lengths must be ≥ 1")
        if self.ambient_c is not None and self.max_temp_c is not None and self.ambient_c >= self.max_temp_c:
            problems.append("ambient_c must be below max_temp_c")
        if problems:
            raise ValueError("; ".join(problems))
        return self


class HardwareAxes(Frozen):
    chips: tuple[str, ...] = Field(min_length=1)
    nocs: tuple[str, ...] = Field(min_length=1)
    stacked_layers: tuple[int, ...] = Field((4,), min_length=1)
    connected_layers: tuple[int, ...] | Literal["all"] = Field("all", min_length=1, description='"all": every n ≤ m')
    sram: tuple[SramOption, ...] = Field((SramOption(name="base"),), min_length=1)
    hop_latency_scale: tuple[float, ...] = Field((1.0,), min_length=1)
    level_bw_scale: tuple[float, ...] = Field((1.0,), min_length=1, description="applied to each level independently")

    @model_validator(mode="after")
    def _ranges(self) -> HardwareAxes:
        names = [option.name for option in self.sram]
        problems = []  # every problem at once, as in ScenarioAxes
        if len(set(names)) != len(names):
            problems.append("sram option names must be unique")
        if any(not 1 <= m <= MAX_STACKED_LAYERS for m in self.stacked_layers):
            problems.append(f"stacked_layers must be in 1..{MAX_STACKED_LAYERS}")
        if self.connected_layers != "all" and any(not 1 <= n <= MAX_STACKED_LAYERS for n in self.connected_layers):
            problems.append(f"connected_layers must be in 1..{MAX_STACKED_LAYERS} or \"all\"")
        elif self.connected_layers != "all" and min(self.connected_layers) > max(self.stacked_layers):
            problems.append(f"connected_layers {list(self.connected_layers)} are all above stacked_layers "
                            f"{list(self.stacked_layers)}: a 3D point needs n ≤ m")
        if any(s <= 0 for s in (*self.hop_latency_scale, *self.level_bw_scale)):
            problems.append("scales must be > 0")
        if problems:
            raise ValueError("; ".join(problems))
        return self


class ScheduleAxes(Frozen):
    fsdp: tuple[bool, ...] = Field((False, True), min_length=1)
    per_module: bool = Field(True, description="also search each MoE strategy in vLLM's per-module form: the MoE "
                             "block's TP folded into EP, attention keeping it (moe_mode = replace_only)")
    collective_algorithms: tuple[Algorithm, ...] = Field(("auto",), min_length=1)
    single_chip_schedules: int = Field(64, ge=1, description="operator schedules per strategy (paper §4.2.2)")

    @field_validator("collective_algorithms")
    @classmethod
    def _known_algorithms(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        known = ALGORITHMS.names()
        for name in value:
            if name != "auto" and name not in known:
                raise ValueError(f"must be auto or one of {', '.join(known)} (got {name!r})")
        return value


class DesignSpace(Frozen):
    kind: Literal["space"] = "space"
    name: str
    description: str = ""
    source: str = ""
    scenarios: ScenarioAxes
    hardware: HardwareAxes
    schedule: ScheduleAxes = ScheduleAxes()


# A recipe's parameter table, deep-frozen (tables → FrozenMap, arrays → tuples): a runner that edited it in place
# would change the recipe for every later run in the process. Dumped as plain tables and lists.
FrozenTable = Annotated[dict[str, Any], AfterValidator(frozen), PlainSerializer(plain, return_type=dict[str, Any])]


class StudyRecipe(Frozen):
    """A paper experiment as data: which runner, on which space and scenarios, with which parameters."""

    kind: Literal["study"] = "study"
    name: str
    question: str
    runner: str = Field(description="the study runner that interprets the parameters")
    space: str | None = Field(None, description="design space preset or path")
    scenarios: ScenarioAxes | None = None
    parameters: FrozenTable = Field(default_factory=FrozenMap)
    quick: FrozenTable = Field(default_factory=FrozenMap, description="overrides of parameters for --quick")
