"""DVFS of paper §4.1.2: the thermally sustainable clock first, then the power wall.

The thermal frequency (:func:`~deepstack.models.thermal.thermal_frequency_scale`) caps the clock for the stack's
thermal resistance in the device's cooling environment (ambient and limit: the chip's ``thermal`` table, or the
scenario's ``ambient_c`` / ``max_temp_c``). If the device's power at that clock still exceeds what it may draw —
its TDP, or less where the package cannot remove the TDP at the limit — the largest clock at which it fits is found
by bisection (core energy ∝ V² ∝ f², time from re-timing every row at that clock). That is the paper's
``static`` policy; under ``boost`` (the chip's ``thermal.dvfs``) the clock starts at nominal, as GPU Boost
does, and only the power budget lowers it, so only a design that draws more than its package removes slows.
Either way a device runs at or below the limit, as a GPU's power and thermal throttling keep it; one that
cannot even idle below the limit (static power alone too much) runs at the lowest clock and is reported above
the limit (infeasible).
"""

from __future__ import annotations

from deepstack.errors import UserInputError
from deepstack.models import thermal
from deepstack.models.gpu import power as gpu_power
from deepstack.models.hardware.device import DeviceSpec
from deepstack.models.pipeline.rows import PhaseResult
from deepstack.schema import Network

DVFS_BISECTION_STEPS = 40  # halvings of the frequency interval: far below any meaningful precision
MIN_CLOCK_SCALE = 1e-3  # a design that needs a clock 1000× below nominal to fit its TDP cannot run at all
WALL_TOLERANCE = 1e-6  # relative: a power this close to the budget is at the wall (the bisection stops just below)

STATIC, BOOST = "static", "boost"  # the clock policies (schema Thermal.dvfs)

# what set a device's clock (see :func:`clock_limit`)
NOMINAL, THERMAL_CLOCK, POWER_WALL, THERMAL_WALL, ABOVE_LIMIT = (
    "nominal", "thermal clock", "power wall", "thermal wall", "above limit")


def noc_J_per_B(network: Network | None) -> tuple[float, ...]:
    """Energy per byte moved on each network level (J/B), innermost first; () without a network."""
    if network is None:
        return ()
    return tuple(level.energy_pJ_per_bit * 8e-12 for level in network.levels)


def layers_of(dev: DeviceSpec) -> int:
    """m of the thermal fit: the stacked layers of a 3D device, 0 for a die with HBM beside it."""
    return dev.dram.stacked_layers if dev.is_3d else 0


def power_budget_w(dev: DeviceSpec) -> float:
    """The most ``dev`` may draw: its TDP, or what its package removes at the limit if that is less."""
    return thermal.sustainable_power_w(dev.tdp_W, layers_of(dev), dev.device_area_mm2, dev.ambient_c, dev.target_c)


def tdp_bound(dev: DeviceSpec, budget_w: float) -> bool:
    """Whether the budget is the TDP (the package removes at least that much at the limit; at the paper's
    anchor the two are equal, up to rounding)."""
    return budget_w >= dev.tdp_W * (1 - WALL_TOLERANCE)


def thermal_scale(dev: DeviceSpec) -> float:
    """The clock DVFS starts from, relative to nominal: f_th / f_nominal of ``dev`` in its cooling environment
    under the paper's static policy; nominal under ``boost``, where only the power budget lowers the clock."""
    if dev.dvfs == BOOST:
        return 1.0
    return thermal.thermal_frequency_scale(dev.tdp_W, layers_of(dev), dev.device_area_mm2, dev.ambient_c,
                                           dev.target_c)


def clock_scale(phase: PhaseResult, dev: DeviceSpec, coefficients, noc_J_per_B: tuple[float, ...],
                devices: int) -> tuple[float, float, float]:
    """The clock DVFS settles on for ``phase`` on ``dev``.

    Args:
        phase: the step to run.
        dev: the device (its TDP, stacking, nominal clock, footprint, ambient and temperature limit).
        coefficients: the device's :class:`~deepstack.models.power.EnergyCoefficients`.
        noc_J_per_B: energy per byte on each network level (see :func:`noc_J_per_B`).
        devices: devices in the system (network energy is shared among them).

    Returns:
        (clock scale relative to nominal, step time in s, power per device in W).

    Raises:
        UserInputError: the device would need a clock below ``MIN_CLOCK_SCALE`` × nominal to fit its TDP.
    """
    static = gpu_power.idle_power_w(dev)
    budget = power_budget_w(dev)

    def power(scale: float) -> tuple[float, float]:
        t = phase.time_at(scale)
        energy = sum(phase.energy_J(coefficients, scale, noc_J_per_B, devices))
        if dev.gpu:  # a GPU's SMs also draw while they wait (models/gpu/power.py)
            energy += gpu_power.waiting_energy_J(phase, dev, coefficients, scale)
        return t, static + energy / t

    scale = max(thermal_scale(dev), MIN_CLOCK_SCALE)
    t, p = power(scale)
    if p > budget:  # the wall: the largest clock at which the device draws no more than its budget
        low, high = 0.0, scale
        for _ in range(DVFS_BISECTION_STEPS):
            mid = (low + high) / 2
            if power(mid)[1] > budget:
                high = mid
            else:
                low = mid
        scale = low
        if scale < MIN_CLOCK_SCALE:
            if tdp_bound(dev, budget):
                raise UserInputError(f"tdp_W: the device cannot run within {dev.tdp_W:g} W (it would need a clock "
                                     f"below {MIN_CLOCK_SCALE:.1%} of nominal)")
            scale = MIN_CLOCK_SCALE  # not even idle stays below the limit: reported above it
        t, p = power(scale)
    return scale, t, p


def clock_limit(dev: DeviceSpec, scale: float, power_w: float, temperature_c: float) -> str:
    """What set the clock DVFS chose for ``dev`` (``scale``, at ``power_w`` and ``temperature_c``): nothing
    (nominal), the thermal frequency f_th, the TDP (power wall), the temperature limit (thermal wall: held at
    the limit below the TDP), or nothing could (above the limit)."""
    if temperature_c > dev.target_c + 1e-9:
        return ABOVE_LIMIT
    budget = power_budget_w(dev)
    if power_w >= budget * (1 - WALL_TOLERANCE) and scale < thermal_scale(dev):
        return POWER_WALL if tdp_bound(dev, budget) else THERMAL_WALL
    return THERMAL_CLOCK if scale < 1.0 else NOMINAL
