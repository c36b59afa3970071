"""Parallel schedule: TP, EP, SP, CP, DP, PP and FSDP (paper §3.3.1), per module, with collective choices.

Attention and the FFN/MoE block may use different layouts (e.g. attention TP·DP, MoE EP·TP); each module's
degrees multiply to the same number of devices per pipeline stage. EP applies to routed experts; for
attention and dense FFNs it acts as DP (paper §3.3.1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, Field, PlainSerializer, model_validator

from deepstack.errors import UserInputError
from deepstack.registry import ALGORITHMS, registered
from deepstack.schema.base import Frozen
from deepstack.schema.frozen import FrozenMap

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
COLLECTIVES: tuple[str, ...] = get_args(Collective)
Algorithm = str  # "auto" or a registered algorithm that implements the collective (deepstack.registry.ALGORITHMS)
MODULE_DEGREES = ("tp", "ep", "sp", "cp", "dp")
_MODULE_ALIASES = {"attn": "attention", "attention": "attention", "ffn": "ffn", "moe": "ffn", "mlp": "ffn"}
_MAX_DEGREE = 1 << 20
# How a flat schedule maps onto the MoE block, in the paper artifact's words: "none" keeps the MoE block's tp and
# ep as given; "replace_only" folds its TP into EP (vLLM's TP8 with expert parallelism runs its MoE as EP8): the
# FFN module takes the folded layout for the routed experts, the rest of the FFN stays on the attention's TP.
MOE_MODES = ("none", "replace_only")


def dense_on_attention(moe_mode: str) -> bool:
    """Whether the dense FFN layers, shared experts and vocabulary-parallel embedding and head run on the
    attention's layout (``replace_only``) rather than the FFN module's."""
    return moe_mode == "replace_only"
def algorithms_for(collective: str) -> tuple[str, ...]:
    """The registered algorithms that implement ``collective``, in registration order (built-ins first)."""
    return registered(ALGORITHMS, lambda algorithm: collective in algorithm.ops)


def checked_collectives(table) -> FrozenMap:
    """A schedule's collective → algorithm table, checked (each collective known, each algorithm one that
    implements it, or auto) and read-only."""
    if not isinstance(table, Mapping):
        raise ValueError(f"collectives: must be a table of collective = algorithm (got {table!r})")
    for collective, algorithm in table.items():
        if collective not in COLLECTIVES:
            raise ValueError(f"collectives: unknown collective {collective!r}; allowed: {', '.join(COLLECTIVES)}")
        if algorithm != "auto" and algorithm not in algorithms_for(collective):
            raise ValueError(f"collectives.{collective}: must be auto or one of "
                             f"{', '.join(algorithms_for(collective))} (got {algorithm!r})")
    return table if isinstance(table, FrozenMap) else FrozenMap(table)


Collectives = Annotated[dict[Collective, Algorithm], AfterValidator(FrozenMap),  # checked by the schedule
                        PlainSerializer(dict, return_type=dict[Collective, Algorithm])]


class ModuleParallel(Frozen):
    """Degrees of one module. Their product is the devices of one pipeline stage."""

    tp: int = Field(1, ge=1, le=_MAX_DEGREE)
    ep: int = Field(1, ge=1, le=_MAX_DEGREE)
    sp: int = Field(1, ge=1, le=_MAX_DEGREE)
    cp: int = Field(1, ge=1, le=_MAX_DEGREE)
    dp: int = Field(1, ge=1, le=_MAX_DEGREE)

    @property
    def devices(self) -> int:
        return math.prod(getattr(self, name) for name in MODULE_DEGREES)

    @property
    def replicas(self) -> int:
        """Copies of the module that each serve their own share of the requests (DP × EP: under EP the attention
        of each expert-parallel rank serves its own requests)."""
        return self.dp * self.ep

    def __str__(self) -> str:
        return ",".join(f"{name}={getattr(self, name)}" for name in MODULE_DEGREES if getattr(self, name) > 1) or "tp=1"


class Schedule(Frozen):
    kind: Literal["schedule"] = "schedule"
    attention: ModuleParallel = ModuleParallel()
    ffn: ModuleParallel = ModuleParallel()
    pp: int = Field(1, ge=1, le=_MAX_DEGREE)
    fsdp: bool = False
    microbatches: int | None = Field(None, ge=1, le=_MAX_DEGREE, description="PP microbatches (None: tuned)")
    # read-only (a FrozenMap): an edited algorithm would otherwise keep the memoised results of the old one
    collectives: Collectives = Field(default_factory=FrozenMap, description='default "auto" each')
    moe_mode: Literal["none", "replace_only"] = Field(
        "none", description="replace_only: the FFN module's layout is for the routed experts alone; dense FFN layers, "
                            "shared experts and the vocabulary-parallel head stay on the attention's TP (as vLLM "
                            "runs TP with expert parallelism); none: the FFN layout covers every FFN layer")

    @model_validator(mode="after")
    def _algorithms_apply(self) -> Schedule:
        checked_collectives(self.collectives)
        return self

    def model_copy(self, *, update=None, deep: bool = False):
        if update and "collectives" in update:  # model_copy does not validate: check and freeze the new table
            update = {**update, "collectives": checked_collectives(update["collectives"])}
        return super().model_copy(update=update, deep=deep)

    @model_validator(mode="after")
    def _same_devices(self) -> Schedule:
        if self.attention.devices != self.ffn.devices:
            raise ValueError(
                f"attention uses {self.attention.devices} devices per stage but ffn uses {self.ffn.devices}; "
                "both modules must cover the same devices"
            )
        return self

    @property
    def devices(self) -> int:
        return self.attention.devices * self.pp

    def _hashed_fields(self) -> tuple:
        # the collectives table is a mapping; hash its sorted items so schedules (and design points) can key memos
        return (self.attention, self.ffn, self.pp, self.fsdp, self.microbatches,
                tuple(sorted(self.collectives.items())), self.moe_mode)

    @property
    def dense_on_attention(self) -> bool:
        return dense_on_attention(self.moe_mode)

    @property
    def is_per_module(self) -> bool:
        return self.attention != self.ffn

    def algorithm(self, collective: str) -> str:
        return self.collectives.get(collective, "auto")

    def __str__(self) -> str:
        extras = [f"pp={self.pp}"] if self.pp > 1 else []
        if self.microbatches is not None:  # a chosen count (the text must evaluate as this schedule does)
            extras.append(f"microbatches={self.microbatches}")
        if self.fsdp:
            extras.append("fsdp")
        if self.moe_mode != "none":
            extras.append(f"moe_mode={self.moe_mode}")
        if self.is_per_module:
            return ";".join([f"attn:{self.attention}", f"ffn:{self.ffn}", *([",".join(extras)] if extras else [])])
        degrees = [] if str(self.attention) == "tp=1" and extras else [str(self.attention)]
        return ",".join(degrees + extras)

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """Parse ``"tp=8,pp=4,dp=8"`` or ``"attn:tp=4,dp=64;moe:ep=32,tp=8"`` (``fsdp``, ``pp=``,
        ``microbatches=``, ``moe_mode=none|replace_only`` and ``<collective>=<algorithm>`` may appear in any
        segment)."""
        modules: dict[str, dict[str, int]] = {}
        shared: dict[str, int] = {}
        moe_mode = "none"
        top: dict = {"collectives": {}}
        # every key given so far, by where it applies (a module, all modules, the whole schedule): a degree given
        # twice for the same place is a typo, not an override, whether in one segment or two
        seen: dict[tuple[str, str], str] = {}
        for segment in filter(None, (s.strip() for s in text.split(";"))):
            target, scope = shared, "shared"
            if ":" in segment:
                head, segment = segment.split(":", 1)
                name = _MODULE_ALIASES.get(head.strip().lower())
                if name is None:
                    raise UserInputError(f"--parallel: unknown module {head.strip()!r}; allowed: attn, moe, ffn")
                target, scope = modules.setdefault(name, {}), name
            for item in filter(None, (s.strip() for s in segment.split(","))):
                key, equals, value = item.partition("=")
                key = key.strip().lower()
                if not equals and key != "fsdp":
                    raise UserInputError(f"--parallel: {item!r} needs the form name=value, e.g. tp=8 (only fsdp "
                                         "stands alone)")
                place = (scope if key in MODULE_DEGREES else "schedule", key)
                if place in seen:
                    raise UserInputError(f"--parallel: {key} is given twice in {text.strip()!r} ({seen[place]!r} "
                                         f"and {item!r}); give each degree once")
                seen[place] = item
                if key == "fsdp" and not value:
                    top["fsdp"] = True
                    continue
                if key in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"):
                    top["collectives"][key] = value.strip()
                    continue
                if key == "moe_mode":
                    moe_mode = value.strip().lower()
                    if moe_mode not in MOE_MODES:
                        raise UserInputError(f"--parallel: moe_mode must be one of {', '.join(MOE_MODES)} "
                                             f"(got {value.strip()!r})")
                    continue
                try:
                    number = int(value)
                except ValueError:
                    raise UserInputError(f"--parallel: {key} needs an integer value, got {value!r}") from None
                if key in ("pp", "microbatches"):
                    top[key] = number
                elif key == "fsdp":
                    top["fsdp"] = bool(number)
                elif key in MODULE_DEGREES:
                    target[key] = number
                else:
                    raise UserInputError(
                        f"--parallel: unknown degree {key!r}; allowed: tp, ep, sp, cp, dp, pp, fsdp, microbatches, "
                        "moe_mode"
                    )
        attention = {**shared, **modules.get("attention", {})}
        ffn = {**shared, **modules.get("ffn", {})}
        if "attention" in modules and "ffn" not in modules and not shared:
            ffn = dict(attention)
        if "ffn" in modules and "attention" not in modules and not shared:
            attention = dict(ffn)
        if moe_mode == "replace_only":  # the MoE block's TP folded into EP; attention keeps its TP
            ffn["ep"] = ffn.get("ep", 1) * ffn.pop("tp", 1)
            top["moe_mode"] = moe_mode
        from deepstack.schema.loader import validate

        return validate(cls, {"attention": attention, "ffn": ffn, **top}, origin="--parallel")
