"""The base of every schema: frozen, strict about unknown keys, no NaN or infinity."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Immutable, validated record. Unknown keys are errors (a typo must never be silently ignored)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, str_strip_whitespace=True)


class Sourced(Frozen):
    """A record that came from outside and says where its numbers come from."""

    name: str
    description: str = ""
    source: str
