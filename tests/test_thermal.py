"""Thermal model, DVFS and the power wall (models/thermal.py, models/dvfs.py; paper §4.1.2).

Formulas of the paper: T = T_amb + R(m)·P with R(m) = 0.56 + 0.01·m °C/W; static power 10 % of TDP;
f_th = (P_dyn(m) / P_dyn(4))^(1/3) with P_dyn(m) = TDP·R(4)/R(m) − P_static; then a power-wall check.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.models import dvfs, thermal
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate
from deepstack.models.hardware.device import resolve_device
from deepstack.schema import Scenario

NOMINAL_GHZ = 1.4  # standard.toml clock_GHz
# f_th at m = 8, by hand: R(4) = 0.60, R(8) = 0.64, R(4)/R(8) = 0.9375;
# P_dyn(8) = TDP·(0.9375 − 0.1) = 0.8375·TDP, P_dyn(4) = TDP·(1 − 0.1) = 0.9·TDP;
# f_th = (0.8375 / 0.9)^(1/3) = 0.930556^(1/3) = 0.976294 (independent of the TDP)
F_TH_8 = ((0.9375 - 0.1) / 0.9) ** (1 / 3)


@pytest.mark.parametrize(("m", "r"), [(0, 0.56), (1, 0.57), (4, 0.60), (8, 0.64), (10, 0.66), (16, 0.72)])
def test_thermal_resistance_linear_fit(m, r):
    assert thermal.thermal_resistance_c_per_w(m) == pytest.approx(r)


def test_anchor_four_layers_100w_is_85c():
    # 25 °C + 0.60 °C/W × 100 W = 85 °C: the paper's anchor sits exactly at the 85 °C target
    assert thermal.temperature_c(25.0, 4, 100.0) == pytest.approx(85.0)
    assert thermal.temperature_c(25.0, 8, 100.0) == pytest.approx(89.0)  # 25 + 0.64 × 100
    assert thermal.temperature_c(25.0, 4, 0.0) == pytest.approx(25.0)


def test_larger_footprint_lowers_resistance():
    # an 800 mm² 2.5D die (m = 0): 0.56 × 100/800 = 0.07 °C/W (convection-limited, scales as 1/area)
    assert thermal.thermal_resistance_c_per_w(0, 800.0) == pytest.approx(0.07)


def test_static_power_is_ten_percent_of_tdp():
    assert thermal.static_power_w(100.0) == pytest.approx(10.0)
    assert thermal.static_power_w(700.0) == pytest.approx(70.0)


def test_sustainable_power():
    # TDP·R(4)/R(m): 100 W at the anchor, 93.75 W at m = 8 — which again sits at 85 °C (25 + 0.64 × 93.75)
    assert thermal.sustainable_power_w(100.0, 4) == pytest.approx(100.0)
    assert thermal.sustainable_power_w(100.0, 8) == pytest.approx(93.75)
    assert thermal.temperature_c(25.0, 8, thermal.sustainable_power_w(100.0, 8)) == pytest.approx(85.0)
    assert thermal.sustainable_power_w(700.0, 0) == pytest.approx(700.0)  # 2.5D dies are rated at their TDP


def test_dvfs_at_eight_layers():
    assert abs(F_TH_8 - 0.976294) < 1e-6
    for tdp in (50.0, 100.0, 700.0):
        assert thermal.thermal_frequency_scale(tdp, 8) == pytest.approx(F_TH_8, rel=1e-12)
    assert thermal.thermal_frequency_scale(100.0, 4) == pytest.approx(1.0)
    # m = 16: R = 0.72, 0.60/0.72 = 0.8333; ((0.8333 − 0.1) / 0.9)^(1/3) = 0.81481^(1/3) = 0.93405
    assert thermal.thermal_frequency_scale(100.0, 16) == pytest.approx(((0.6 / 0.72 - 0.1) / 0.9) ** (1 / 3))
    # fewer layers than the anchor never overclock past nominal
    assert thermal.thermal_frequency_scale(100.0, 1) == 1.0
    assert thermal.thermal_frequency_scale(700.0, 0) == 1.0


@settings(max_examples=60, deadline=None)
@given(tdp=st.floats(1.0, 2000.0), m=st.integers(1, 15))
def test_more_layers_never_raise_frequency(tdp, m):
    assert thermal.thermal_frequency_scale(tdp, m + 1) <= thermal.thermal_frequency_scale(tdp, m)
    assert 0.0 < thermal.thermal_frequency_scale(tdp, m) <= 1.0


class _Step:
    """A step whose time scales as 1/f and whose core energy as f² (V ∝ f), as a phase's rows do."""

    def __init__(self, time_s: float, core_J: float) -> None:
        self.time_s, self.core_J = time_s, core_J

    def time_at(self, scale: float) -> float:
        return self.time_s / scale

    def energy_J(self, coefficients, scale: float, noc_J_per_B, devices: int) -> tuple[float, float, float]:
        return self.core_J * scale**2, 0.0, 0.0


@settings(max_examples=60, deadline=None)
@given(core_J=st.floats(0.01, 100.0), m=st.integers(1, 16))
def test_the_power_wall_keeps_the_device_within_its_tdp(core_J, m):
    """DVFS (models/dvfs.py): the thermal clock when the device fits its TDP there; otherwise the largest clock
    at which it does (P = static + E·f²/(t/f) ∝ f³ above static)."""
    dev = resolve_device(catalog.load("chips", "standard"), m, m)
    step = _Step(1e-3, core_J * 1e-3)
    try:
        scale, time_s, power_w = dvfs.clock_scale(step, dev, None, (), 1)
    except UserInputError:  # would need a clock below MIN_CLOCK_SCALE
        assert thermal.static_power_w(dev.tdp_W) + step.core_J / step.time_s * dvfs.MIN_CLOCK_SCALE**3 > dev.tdp_W
        return
    f_th = thermal.thermal_frequency_scale(dev.tdp_W, m)
    assert 0.0 < scale <= f_th and time_s == step.time_at(scale)
    assert power_w == thermal.static_power_w(dev.tdp_W) + step.core_J * scale**2 / time_s
    if scale < f_th:  # throttled: at the TDP, to the bisection's precision
        assert power_w <= dev.tdp_W and power_w == pytest.approx(dev.tdp_W, rel=1e-9)
    else:
        assert power_w <= dev.tdp_W


def test_dvfs_frequency_reported_by_the_cli(cli):
    """Llama-3.2-1B decode, batch 1, at m = n = 8: memory-bound and far under the power wall, so the reported
    clock is exactly the thermal one: 1.4 GHz × 0.976294 = 1.366812 GHz."""
    result = cli("evaluate", "--model", "llama-3.2-1b", "--chip", "standard", "--phase", "decode", "--batch", "1",
                 "--stacked-layers", "8", "--connected-layers", "8", "--json")
    assert result.code == 0, result.err
    report = result.json()
    assert report["metrics"]["power_w"] < report["hardware"]["tdp_w_per_device"]  # the power wall stays idle
    assert report["metrics"]["frequency_ghz"] == pytest.approx(NOMINAL_GHZ * F_TH_8, rel=1e-9)
    assert report["breakdown"]["clock_scale"] == pytest.approx(F_TH_8, rel=1e-9)
    # the temperature the report gives is R(8)·P above ambient
    assert report["metrics"]["temperature_c"] == pytest.approx(25.0 + 0.64 * report["metrics"]["power_w"])


def _prefill(chip) -> dict:
    scenario = Scenario(model=catalog.load("llms", "llama-3.2-1b"), phase="prefill", batch=4)
    return evaluate(DesignPoint(chip=chip, scenario=scenario)).as_dict()


def test_power_wall_throttles_a_compute_bound_prefill():
    """Llama-3.2-1B prefill of 4 × 1024 tokens is compute-bound. At the standard 100 W TDP it runs at the nominal
    clock; with the TDP cut to 15 W (static 1.5 W) its nominal-clock power is above the TDP, so the power wall
    lowers the clock until the device draws at most 15 W (or the design would be reported infeasible)."""
    chip = catalog.load("chips", "standard")
    nominal = _prefill(chip)
    assert nominal["metrics"]["frequency_ghz"] == pytest.approx(NOMINAL_GHZ)
    assert nominal["breakdown"]["utilization"]["compute"] > 0.5  # really compute-bound
    low_tdp = 15.0
    assert nominal["metrics"]["power_w"] > low_tdp  # precondition: the nominal clock breaks the 15 W wall
    walled = _prefill(chip.model_copy(update={"tdp_W": low_tdp}))
    throttled = walled["metrics"]["frequency_ghz"] < NOMINAL_GHZ
    assert throttled or walled["violations"]
    if throttled:
        assert walled["breakdown"]["power_w_per_device"] <= low_tdp * (1 + 1e-6)
        # the wall uses the whole budget (bisection to the largest clock within the TDP)
        assert walled["breakdown"]["power_w_per_device"] == pytest.approx(low_tdp, rel=1e-3)
        # a slower clock means a slower compute-bound prefill
        assert walled["metrics"]["ttft_s"] > nominal["metrics"]["ttft_s"]
