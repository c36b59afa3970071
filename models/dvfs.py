"""DVFS of paper §4.1.2: the thermally sustainable clock first, then the power wall.

The thermal frequency (:func:`~deepstack.models.thermal.thermal_frequency_scale`) caps the clock for the stack's
thermal resistance; if the device's power at that clock still exceeds its TDP, the largest clock at which it
fits is found by bisection (core energy ∝ V² ∝ f², time from re-timing every row at that clock).
"""

from __future__ import annotations

from deepstack.errors import UserInputError
from deepstack.models import thermal
from deepstack.models.hardware.device import DeviceSpec
from deepstack.models.pipeline.rows import PhaseResult
from deepstack.schema import Network

DVFS_BISECTION_STEPS = 40  # halvings of the frequency interval: far below any meaningful precision
MIN_CLOCK_SCALE = 1e-3  # a design that needs a clock 1000× below nominal to fit its TDP cannot run at all


def noc_J_per_B(network: Network | None) -> tuple[float, ...]:
    """Energy per byte moved on each network level (J/B), innermost first; () without a network."""
    if network is None:
        return ()
    return tuple(level.energy_pJ_per_bit * 8e-12 for level in network.levels)


def clock_scale(phase: PhaseResult, dev: DeviceSpec, coefficients, noc_J_per_B: tuple[float, ...],
                devices: int) -> tuple[float, float, float]:
    """The clock DVFS settles on for ``phase`` on ``dev``.

    Args:
        phase: the step to run.
        dev: the device (its TDP, stacking and nominal clock).
        coefficients: the device's :class:`~deepstack.models.power.EnergyCoefficients`.
        noc_J_per_B: energy per byte on each network level (see :func:`noc_J_per_B`).
        devices: devices in the system (network energy is shared among them).

    Returns:
        (clock scale relative to nominal, step time in s, power per device in W).

    Raises:
        UserInputError: the device would need a clock below ``MIN_CLOCK_SCALE`` × nominal to fit its TDP.
    """
    static = thermal.static_power_w(dev.tdp_W)
    layers = dev.dram.stacked_layers if dev.is_3d else 0

    def power(scale: float) -> tuple[float, float]:
        t = phase.time_at(scale)
        return t, static + sum(phase.energy_J(coefficients, scale, noc_J_per_B, devices)) / t

    scale = thermal.thermal_frequency_scale(dev.tdp_W, layers)
    t, p = power(scale)
    if p > dev.tdp_W:  # power wall: the largest clock at which the device stays within its TDP
        low, high = 0.0, scale
        for _ in range(DVFS_BISECTION_STEPS):
            mid = (low + high) / 2
            if power(mid)[1] > dev.tdp_W:
                high = mid
            else:
                low = mid
        scale = low
        if scale < MIN_CLOCK_SCALE:
            raise UserInputError(f"tdp_W: the device cannot run within {dev.tdp_W:g} W (it would need a clock below "
                                 f"{MIN_CLOCK_SCALE:.1%} of nominal)")
        t, p = power(scale)
    return scale, t, p
