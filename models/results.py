"""Typed, immutable evaluation results: :class:`Report` and its parts.

Each type is a small frozen dataclass whose field names are the report's JSON keys, units included
(``ttft_s``, ``power_w``, ``temperature_c``, ``frequency_ghz``, ...). Each is also a read-only
:class:`~collections.abc.Mapping` of those keys, so ``report.metrics.stps`` and ``report.metrics["stps"]`` read
the same number, and :meth:`Record.as_dict` gives the report's JSON form (plain dicts and lists, in key order).
Nothing in a report can be changed: one report shared by many readers (memo tables hand the same parts to every
report of a hardware point) can never be altered through another.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import ClassVar

from deepstack.schema.frozen import FrozenMap, frozen, plain  # the read-only maps of schemas and reports alike


class Record(Mapping):
    """Base of the result types: a frozen dataclass read as a mapping of its field names."""

    __slots__ = ()
    KEYS: ClassVar[tuple[str, ...]] = ()  # the JSON keys in order (set by :func:`record`)
    _KEYSET: ClassVar[frozenset[str]] = frozenset()

    def _keys(self) -> tuple[str, ...]:
        return self.KEYS

    def __getitem__(self, key: str):
        if key in self._KEYSET:
            return getattr(self, key)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def as_dict(self) -> dict:
        """The JSON form: plain dicts and lists, keys in field order."""
        return {key: plain(self[key]) for key in self._keys()}


def record(cls):
    """Make ``cls`` a frozen, slotted dataclass whose mapping keys are its fields."""
    cls = dataclasses.dataclass(frozen=True, slots=True, eq=False)(cls)
    cls.KEYS = tuple(f.name for f in dataclasses.fields(cls))
    cls._KEYSET = frozenset(cls.KEYS)
    return cls


@record
class Metrics(Record):
    """The headline figures of a design point (the whole system unless named per device)."""

    ttft_s: float  # time to first token (NaN when a decode evaluation leaves it out)
    utps: float  # tokens/s per user
    stps: float  # tokens/s of the system
    tokens_per_joule: float
    power_w: float  # all devices
    temperature_c: float  # junction temperature of one device
    frequency_ghz: float  # clock after DVFS
    area_mm2: float  # silicon of all devices
    memory_gib: float  # DRAM used per device

    DERIVED: ClassVar[tuple[str, ...]] = ("power_density_W_per_mm2",)  # keys computed from the fields

    @property
    def power_density_W_per_mm2(self) -> float:
        """Power per silicon area (all devices over all their area: one device's W/mm²)."""
        return self.power_w / self.area_mm2 if self.area_mm2 else float("nan")

    def _keys(self) -> tuple[str, ...]:
        return (*self.KEYS, *self.DERIVED)

    def __getitem__(self, key: str):
        if key in self._KEYSET or key in self.DERIVED:
            return getattr(self, key)
        raise KeyError(key)


@record
class HardwareSummary(Record):
    """The resolved hardware of a design point (per device unless named otherwise)."""

    chip: str
    noc: str | None
    devices: int
    pes_per_device: int
    stacked_layers: int
    connected_layers: int
    dram_technology: str
    dram_bw_TBps: float
    dram_effective_bw_TBps: float
    dram_capacity_GiB: float
    fp16_tflops_per_device: float
    l1_bw_TBps_per_device: float
    l2_bw_TBps_per_device: float
    nominal_clock_ghz: float
    tdp_w_per_device: float
    area_per_device_mm2: FrozenMap  # area term → mm²
    ambient_c: float  # the coolant the heat sink sees (the chip's thermal table or the scenario's)
    max_temp_c: float  # the junction limit DVFS held and feasibility checked


@record
class ScheduleSummary(Record):
    """The schedule evaluated (``attention``/``ffn``: each module's degrees; ``collectives``: algorithm per
    collective where not "auto")."""

    text: str
    devices: int
    attention: FrozenMap
    ffn: FrozenMap
    pp: int
    fsdp: bool
    microbatches: int
    collectives: FrozenMap


@record
class ScenarioSummary(Record):
    model: str
    phase: str
    batch: int
    input_len: int
    output_len: int
    precision: str
    prefill_chunk_tokens: int | None = None  # prefill tokens per step of a data replica the schedule ran with
    # requests running at once when fewer than ``batch`` fit their KV cache (a GPU's vLLM admits only those; the
    # others wait): in decode the step, STPS, UTPS and power are theirs; in prefill the others take the places
    # that free up and the metrics cover the whole batch. None (key absent): the whole batch runs at once
    running_batch: int | None = None

    def _keys(self) -> tuple[str, ...]:
        return self.KEYS if self.running_batch is not None else self.KEYS[:-1]


@record
class Utilization(Record):
    """Busy fractions over the step: matrix units, L2, DRAM, and each network level's links (``noc_L1``...)."""

    compute: float
    l2: float
    dram: float
    noc: tuple[float, ...] = ()  # per network level, innermost first

    def _keys(self) -> tuple[str, ...]:
        return ("compute", "l2", "dram", *(f"noc_L{i + 1}" for i in range(len(self.noc))))

    def __getitem__(self, key: str):
        if key.startswith("noc_L") and key[5:].isdigit() and 1 <= int(key[5:]) <= len(self.noc):
            return self.noc[int(key[5:]) - 1]
        if key in ("compute", "l2", "dram"):
            return getattr(self, key)
        raise KeyError(key)


@record
class Energy(Record):
    """Energy of one step on one device (J)."""

    core: float
    dram: float
    network: float
    static: float


@record
class MemoryUse(Record):
    """DRAM held per device (GiB)."""

    weights: float
    kv_cache: float
    activations: float


@record
class OperatorEntry(Record):
    """One row of the breakdown: an operator, a collective, or a GEMM overlapped with its collective."""

    layer: str
    count: int
    time_s: float  # count × time × pipeline multiplier, per step
    share: float  # of the step
    name: str
    bound: str
    compute_utilization: float
    dram_utilization: float
    config: str


@record
class Breakdown(Record):
    """Where the step's time, energy and memory go on the busiest device."""

    phase_time_s: float
    stage_time_s: float
    bottleneck_stage: int
    clock_scale: float
    clock_limit: str  # what set the clock (models/dvfs.py): nominal, thermal clock, power or thermal wall, above limit
    utilization: Utilization
    energy_J_per_device: Energy
    power_w_per_device: float
    memory_GiB_per_device: MemoryUse
    operators: tuple[OperatorEntry, ...]
    # the engine steps the times cover when the phase is a GPU's vLLM prefill wave or steady-state cycle (the
    # operators' counts are over all of them); None (key absent): one forward pass
    engine_steps: int | None = None

    def _keys(self) -> tuple[str, ...]:
        return self.KEYS if self.engine_steps is not None else self.KEYS[:-1]


@record
class Report(Record):
    """The evaluation report of one design point (:meth:`as_dict` gives the JSON form).

    ``breakdown`` is None when the evaluation left it out (``as_dict`` then gives ``{}``); ``search`` holds the
    best-schedule search's summary when the schedule was searched (key absent otherwise).
    """

    feasible: bool
    violations: tuple[str, ...]
    metrics: Metrics
    hardware: HardwareSummary
    schedule: ScheduleSummary
    scenario: ScenarioSummary
    breakdown: Breakdown | None = None
    search: FrozenMap | None = None

    def _keys(self) -> tuple[str, ...]:
        return self.KEYS if self.search is not None else self.KEYS[:-1]

    def __getitem__(self, key: str):
        if key in self._KEYSET and (key != "search" or self.search is not None):
            return getattr(self, key)
        raise KeyError(key)

    def as_dict(self) -> dict:
        out = {"feasible": self.feasible, "violations": list(self.violations), "metrics": self.metrics.as_dict(),
               "hardware": self.hardware.as_dict(), "schedule": self.schedule.as_dict(),
               "scenario": self.scenario.as_dict(),
               "breakdown": self.breakdown.as_dict() if self.breakdown is not None else {}}
        if self.search is not None:
            out["search"] = self.search.as_dict()
        return out

    def with_search(self, summary: Mapping) -> Report:
        """This report with a best-schedule search's summary attached (a new report)."""
        return dataclasses.replace(self, search=frozen(dict(summary)))
