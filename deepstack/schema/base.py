"""The base of every schema: frozen, strict about unknown keys, no NaN or infinity."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

_HASH_KEY = "_deepstack_hash"  # not a field: pydantic's equality and serialisation ignore it


class Frozen(BaseModel):
    """Immutable, validated record. Unknown keys are errors (a typo must never be silently ignored)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, str_strip_whitespace=True)

    def __hash__(self) -> int:
        """pydantic's frozen hash (the fields' values), computed once per instance: models, scenarios and
        schedules key the evaluators' memo tables and are hashed on every lookup of a search's inner loop."""
        state = self.__dict__
        value = state.get(_HASH_KEY)
        if value is None:
            value = state[_HASH_KEY] = hash(self._hashed_fields())
        return value

    def _hashed_fields(self) -> tuple:
        """What the hash is made of: the fields' values (a model with an unhashable field says how to hash it)."""
        return tuple(self.__dict__[name] for name in type(self).__pydantic_fields__)

    def model_copy(self, *, update=None, deep: bool = False):
        copied = super().model_copy(update=update, deep=deep)
        copied.__dict__.pop(_HASH_KEY, None)  # an update changes the fields the stored hash was made of
        return copied

    def __getstate__(self):
        state = super().__getstate__()  # string hashes differ between processes: never pickle the stored one
        return {**state, "__dict__": {k: v for k, v in state["__dict__"].items() if k != _HASH_KEY}}


class Sourced(Frozen):
    """A record that came from outside and says where its numbers come from."""

    name: str
    description: str = ""
    source: str
