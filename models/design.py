"""The design point: everything one evaluation needs (hardware, network, workload scenario and schedule)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from deepstack.errors import UserInputError
from deepstack.models import assumptions, memo
from deepstack.models.hardware.device import DeviceSpec, resolve_device
from deepstack.models.parallel.strategies import prune_pp_exceeds_layers
from deepstack.schema import ChipArchitecture, Network, Scenario, Schedule, SramOption


@dataclass(frozen=True)
class DesignPoint:
    """Everything one evaluation needs. Without a network, devices only replicate data-parallel.

    Frozen and hashable: its hash and equality (over every field) key the evaluator's memo tables, so a field
    added here takes part in every key without further edits.

    Attributes:
        chip: the chip architecture (a Table 2 preset or a user file), in the scenario's cooling environment.
        scenario: the model, phase, batch and sequence lengths served (the cooling environment moved to ``chip``).
        schedule: the parallel schedule (TP, EP, SP, CP, DP per module, PP, FSDP, collective algorithms).
        network: the device network; None for a single device or pure data-parallel replicas.
        stacked_layers: DRAM layers stacked on the die (m); None keeps the chip's.
        connected_layers: DRAM layers with their own bandwidth to the logic die (n); None keeps the chip's.
        sram: an SRAM option overriding the chip's L1/L2; None keeps the chip's.
        noc_bw_scale: multiplies the chip's NoC bandwidth (and area).
        named_ambient_c: the coolant the scenario named (set when the point is made, kept by
            ``dataclasses.replace``): the cooling environment leaves the scenario, but whether it was named decides
            the ambient the junction is judged at (:attr:`judged_ambient_c`).
    """

    chip: ChipArchitecture
    scenario: Scenario
    schedule: Schedule = field(default_factory=Schedule)
    network: Network | None = None
    stacked_layers: int | None = None
    connected_layers: int | None = None
    sram: SramOption | None = None
    noc_bw_scale: float = 1.0
    named_ambient_c: float | None = None

    def __post_init__(self) -> None:
        """The scenario's cooling environment (``ambient_c``, ``max_temp_c``) goes onto the chip's ``thermal``
        table, where the device model reads it; the point's scenario keeps the workload alone, so phases timed
        for one environment serve every other (their memo keys hold the scenario)."""
        sc = self.scenario
        object.__setattr__(self, "chip", assumptions.chip_under(sc, self.chip))
        if sc.ambient_c is None and sc.max_temp_c is None:
            return
        if sc.ambient_c is not None:
            object.__setattr__(self, "named_ambient_c", sc.ambient_c)
        object.__setattr__(self, "chip", cooled(self.chip, sc.ambient_c, sc.max_temp_c))
        object.__setattr__(self, "scenario", workload_of(sc))

    @property
    def judged_ambient_c(self) -> float:
        """The ambient the junction temperature is judged at: a named coolant, else the assumption set's."""
        return assumptions.junction_ambient_c(self.scenario, self.chip.thermal.ambient_c, self.named_ambient_c)

    @property
    def device(self) -> DeviceSpec:
        """The device this point's hardware resolves to (chip with its stacking, SRAM, network area and NoC
        scale): the one place a design point becomes a device."""
        return resolve_device(self.chip, self.stacked_layers, self.connected_layers, self.network, self.sram,
                              self.noc_bw_scale)

    @property
    def devices(self) -> int:
        return _network_devices(self.network) if self.network is not None else self.schedule.devices


@memo.cached(maxsize=1024)
def cooled(chip: ChipArchitecture, ambient_c: float | None, max_temp_c: float | None) -> ChipArchitecture:
    """``chip`` in another cooling environment (None keeps the chip's value; one object per input)."""
    ambient = chip.thermal.ambient_c if ambient_c is None else ambient_c
    limit = chip.thermal.target_c if max_temp_c is None else max_temp_c
    if ambient >= limit:
        raise UserInputError(f"ambient_c (--ambient-c): the ambient {ambient:g} °C must be below the thermal limit "
                             f"max_temp_c (--max-temp-c) {limit:g} °C of {chip.name}")
    if (ambient, limit) == (chip.thermal.ambient_c, chip.thermal.target_c):
        return chip
    thermal = chip.thermal.model_copy(update={"ambient_c": ambient, "target_c": limit})
    return chip.model_copy(update={"thermal": thermal})


@memo.cached(maxsize=1024)
def workload_of(scenario: Scenario) -> Scenario:
    """``scenario`` without its cooling environment (one object per input)."""
    return scenario.model_copy(update={"ambient_c": None, "max_temp_c": None})


@memo.cached(maxsize=256)
def _network_devices(network: Network) -> int:
    return network.devices


def check_schedule(point: DesignPoint) -> None:
    """Reject schedules the machine cannot run (user errors, one line each)."""
    s = point.schedule
    if point.network is not None and s.devices != point.network.devices:
        have = point.network.devices
        hint = (f" (dp={have // s.devices * s.attention.dp} runs {have // s.devices} copies of it over them)"
                if have % s.devices == 0 and not s.is_per_module else "")
        raise UserInputError(f"--parallel: the schedule uses {s.devices} devices but {point.network.name} has "
                             f"{have}{hint}")
    if point.network is None and (s.devices != s.attention.dp or s.ffn.devices != s.ffn.dp or s.pp > 1):
        raise UserInputError("--parallel: TP, SP, CP, EP and PP need a network: add --noc or use --system")
    scenario = point.scenario
    empty_stages = prune_pp_exceeds_layers(scenario, s)  # a pruning rule the evaluation cannot run either
    if empty_stages:
        raise UserInputError(f"--parallel: {empty_stages} of {scenario.model.name}")
    check_microbatches(s, scenario)


def check_microbatches(s, scenario, admitted: bool = False) -> None:
    """Reject a decode whose explicit PP microbatches outnumber the requests a data replica serves (``admitted``:
    those a GPU's KV cache admits), one line."""
    if scenario.phase == "decode" and s.microbatches:
        requests = math.ceil(scenario.batch / s.attention.replicas)  # a decode microbatch holds whole requests
        if s.microbatches > requests:
            serves = f"runs {requests} at once (those whose KV cache fits)" if admitted else (
                f"serves {requests} request{'s' * (requests != 1)}")
            raise UserInputError(f"--parallel: microbatches={s.microbatches} but each data replica {serves} in "
                                 f"decode: at most {requests} (an empty microbatch would serve no one)")
