"""Flag values made into validated inputs: scenario fields set by flags, and per-level comma-separated lists."""

from __future__ import annotations

import math

from deepstack.errors import UserInputError
from deepstack.schema import Scenario, validate


def with_flags(scenario: Scenario, **values) -> Scenario:
    """``scenario`` with the scenario fields the command's flags set (``prefill_chunk_tokens``, ``ambient_c``,
    ``max_temp_c``; None keeps the scenario's value), each validated so an error names its flag."""
    for key, value in values.items():
        if value is not None:
            fields = {name: getattr(scenario, name) for name in Scenario.model_fields}
            scenario = validate(Scenario, {**fields, key: value}, origin="--" + key.replace("_", "-"))
    return scenario


def _split(value: str | None, what: str) -> list[str]:
    if value is None:
        return []
    parts = [part.strip() for part in str(value).split(",")]
    if not all(parts):
        raise UserInputError(f"{what}: empty value in {value!r}; give one value per level, innermost first")
    return parts


def _numbers(value: str | None, what: str, kind=float) -> list:
    out = []
    for part in _split(value, what):
        try:
            number = kind(part)
            finite = math.isfinite(number)
        except (ValueError, OverflowError):
            raise UserInputError(f"{what}: {part[:20]!r}… is not a usable number") from None
        if not finite:
            raise UserInputError(f"{what}: must be finite (got {part!r})")
        out.append(number)
    return out
