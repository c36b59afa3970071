"""The serving scenario: which LLM, prefill or decode, batch, sequence lengths, precision."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from deepstack.schema.base import Frozen
from deepstack.schema.llm import LLM

_PRECISION = re.compile(r"^a(\d+)w(\d+)(?:kv(\d+))?$")
# The paper set's choices where it differs from the default (docs/model.md §17; models/assumptions.py decides
# each). "paper-without-<choice>" is the paper set with that one choice back at the default: which assumption
# moves a result is then a run, not an argument.
PAPER_CHOICES = ("junction_35c", "kv_average", "pp_microbatches", "row_major_weights", "dp_only_pruning",
                 "tp_beyond_heads", "table3_cluster_bw", "all_local_experts", "one_dram_curve",
                 "fsdp_shards_only")
ASSUMPTION_SETS = ("default", "paper", *(f"paper-without-{choice}" for choice in PAPER_CHOICES))
Assumptions = Literal[ASSUMPTION_SETS]
_ALLOWED_BITS = (4, 8, 16, 32)


class Precision(Frozen):
    """Bits of activations, weights and KV cache. Written ``a16w8`` (KV defaults to the activation width)."""

    activation_bits: int
    weight_bits: int
    kv_bits: int

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, value):
        if isinstance(value, str):
            match = _PRECISION.match(value.strip().lower())
            if not match:
                raise ValueError(f"precision must look like a16w16, a16w8 or a16w8kv8, got {value!r}")
            a, w, kv = match.groups()
            return {"activation_bits": int(a), "weight_bits": int(w), "kv_bits": int(kv or a)}
        return value

    @field_validator("activation_bits", "weight_bits", "kv_bits")
    @classmethod
    def _bits(cls, value: int) -> int:
        if value not in _ALLOWED_BITS:
            raise ValueError(f"bits must be one of {', '.join(map(str, _ALLOWED_BITS))}")
        return value

    @property
    def activation_bytes(self) -> float:
        return self.activation_bits / 8

    @property
    def weight_bytes(self) -> float:
        return self.weight_bits / 8

    @property
    def kv_bytes(self) -> float:
        return self.kv_bits / 8

    def __str__(self) -> str:
        tail = "" if self.kv_bits == self.activation_bits else f"kv{self.kv_bits}"
        return f"a{self.activation_bits}w{self.weight_bits}{tail}"


class Scenario(Frozen):
    """One serving workload. In decode, ``batch`` requests each generate one token per step with a KV cache
    that grows from ``input_len`` to ``input_len + output_len``; prefill processes ``batch × input_len``."""

    kind: Literal["scenario"] = "scenario"
    model: LLM
    phase: Literal["prefill", "decode"]
    batch: int = Field(ge=1, le=1_048_576)
    input_len: int = Field(1024, ge=1, le=10_485_760)
    output_len: int = Field(1024, ge=1, le=10_485_760)
    precision: Precision | None = Field(None, description="default: the model's default_precision")
    prefill_chunk_tokens: int | None = Field(
        None, ge=1, le=10_485_760,
        description="prefill tokens one data replica processes per step (vLLM's max_num_batched_tokens); "
                    "default (None): automatic per schedule, vLLM's 8192 halved until weights, KV cache and one "
                    "chunk's activations fit in memory, down to 64 (docs/model.md §11, docs/calibration.md §10)")
    cuda_graphs: bool = Field(
        True, description="GPUs only (a chip with a gpu table): decode steps replay CUDA graphs (vLLM's default, "
                          "up to the chip's graph_max_batch) instead of launching every kernel from the host "
                          "(eager, vLLM --enforce-eager); other devices ignore it (docs/model.md §GPU execution)")
    steady_state: bool = Field(
        False, description="GPUs only (a chip with a gpu table), decode: the batch as a server keeps it running at "
                           "steady state (continuous batching: each finished request replaced at once, so the "
                           "steps also prefill batch / output_len new prompts per step, or as many as each "
                           "step's prefill budget takes when they queue for it) instead of the batch "
                           "arriving together and decoding alone (vLLM's benchmark); other devices ignore it "
                           "(docs/model.md §GPU power)")
    # the cooling environment the design runs in (models/thermal.py); None keeps the chip's thermal table
    ambient_c: float | None = Field(
        None, ge=-50, le=100,
        description="°C of the coolant the heat sink / cold plate sees (T = T_amb + R·P); default: the chip's "
                    "thermal.ambient_c, 25 °C (ASHRAE TC 9.9 recommended inlet 18–27 °C; docs/calibration.md §10)")
    max_temp_c: float | None = Field(
        None, gt=0, le=200,
        description="junction limit DVFS holds and feasibility checks; default: the chip's thermal.target_c, "
                    "85 °C (the top of DRAM's normal range, JEDEC)")
    assumptions: Assumptions = Field(
        "default", description="the assumption set: default (this project's) or paper (the DeepStack paper's and "
                               "its artifact's stated choices; docs/model.md §17 lists where they differ)")
    decode_kv_len: int | None = Field(
        None, ge=1, le=20_971_520,
        description="decode: cached tokens each request attends to; default (None): the mean over the generation, "
                    "input_len + output_len / 2 (under the paper set, the mean of four lengths, docs/model.md §17)")

    @field_validator("model", mode="before")
    @classmethod
    def _model(cls, value):
        if isinstance(value, str):
            from deepstack.catalog import load_data

            return load_data("llms", value)
        return value

    @model_validator(mode="after")
    def _default_precision(self) -> Scenario:
        if self.precision is None:
            object.__setattr__(self, "precision", Precision.model_validate(self.model.default_precision))
        return self

    @model_validator(mode="after")
    def _ambient_below_limit(self) -> Scenario:
        if self.ambient_c is not None and self.max_temp_c is not None and self.ambient_c >= self.max_temp_c:
            raise ValueError(f"ambient_c ({self.ambient_c:g} °C) must be below max_temp_c ({self.max_temp_c:g} °C)")
        return self

    def with_cooling(self, ambient_c: float | None = None, max_temp_c: float | None = None) -> Scenario:
        """This scenario in another cooling environment (None keeps this scenario's value), validated."""
        data = {name: getattr(self, name) for name in type(self).model_fields}
        data.update({k: v for k, v in (("ambient_c", ambient_c), ("max_temp_c", max_temp_c)) if v is not None})
        return type(self).model_validate(data)
