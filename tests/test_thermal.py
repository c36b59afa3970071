"""Thermal model, DVFS and the power wall in a cooling environment (models/thermal.py, models/dvfs.py; paper §4.1.2).

Formulas: T = T_amb + R(m)·P with R(m) = 0.56 + 0.01·m °C/W on 100 mm² (× 100 mm² / area); static power 10 % of
TDP; the package removes P_th = (T_max − T_amb) / R(m) at the limit; f_th = (P_dyn(m) / P_dyn(4))^(1/3) with
P_dyn(m) = min(TDP, P_th) − P_static and P_dyn(4) = TDP − P_static; then the wall: the device's power within
min(TDP, P_th). At the paper's 25 °C and 85 °C, P_th = TDP·R(4)/R(m) for the 100 W, 100 mm² clusters.
"""

from __future__ import annotations

import csv
import itertools
import json

import pytest
from conftest import MINI8, assert_user_error
from hypothesis import given, settings
from hypothesis import strategies as st

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.models import dvfs, thermal
from deepstack.models.compute.gemm_tuner import tune_gemm
from deepstack.models.compute.operators import Gemm
from deepstack.models.design import DesignPoint, cooled
from deepstack.models.evaluate import evaluate
from deepstack.models.hardware.device import resolve_device
from deepstack.models.pipeline import run_phase
from deepstack.models.pipeline.rows import CommRow
from deepstack.schema import Scenario, Schedule

NOMINAL_GHZ = 1.4  # standard.toml clock_GHz
# f_th at m = 8, by hand: R(4) = 0.60, R(8) = 0.64, P_th = 60/0.64 = 93.75 W = TDP·R(4)/R(8) for TDP 100 W;
# P_dyn(8) = 93.75 − 10 = 83.75 W, P_dyn(4) = 90 W; f_th = (83.75 / 90)^(1/3) = 0.930556^(1/3) = 0.976294
F_TH_8 = ((0.9375 - 0.1) / 0.9) ** (1 / 3)
# f_th at m = 4 and 45 °C ambient: P_th = 40/0.60 = 66.667 W; (66.667 − 10) / 90 = 17/27; f = (17/27)^(1/3)
F_TH_4_AT_45 = (17 / 27) ** (1 / 3)
# m = 8 at 35 °C: P_th = 50/0.64 = 78.125 W; (78.125 − 10) / 90 = 0.756944; f = 0.911347
F_TH_8_AT_35 = (68.125 / 90) ** (1 / 3)


def _device(m: int, ambient_c: float | None = None, max_temp_c: float | None = None, chip: str = "standard"):
    return resolve_device(cooled(catalog.load("chips", chip), ambient_c, max_temp_c), m, m)


# --- the thermal model --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("m", "r"), [(0, 0.56), (1, 0.57), (4, 0.60), (8, 0.64), (10, 0.66), (16, 0.72)])
def test_thermal_resistance_linear_fit(m, r):
    assert thermal.thermal_resistance_c_per_w(m) == pytest.approx(r)


def test_anchor_four_layers_100w_is_85c():
    # 25 °C + 0.60 °C/W × 100 W = 85 °C: the paper's anchor sits exactly at the 85 °C target
    assert thermal.temperature_c(25.0, 4, 100.0) == pytest.approx(85.0)
    assert thermal.temperature_c(25.0, 8, 100.0) == pytest.approx(89.0)  # 25 + 0.64 × 100
    assert thermal.temperature_c(25.0, 4, 0.0) == pytest.approx(25.0)
    # T = T_amb + R(m)·P: 40 W at m = 6 (R = 0.62) over 32 °C coolant is 32 + 24.8 = 56.8 °C
    assert thermal.temperature_c(32.0, 6, 40.0) == pytest.approx(56.8)


def test_defaults_are_the_paper_anchor():
    assert (thermal.DEFAULT_AMBIENT_C, thermal.DEFAULT_MAX_TEMP_C) == (25.0, 85.0)
    chip = catalog.load("chips", "standard")
    assert (chip.thermal.ambient_c, chip.thermal.target_c) == (25.0, 85.0)


def test_larger_footprint_lowers_resistance():
    # an 800 mm² 2.5D die (m = 0): 0.56 × 100/800 = 0.07 °C/W (convection-limited, scales as 1/area)
    assert thermal.thermal_resistance_c_per_w(0, 800.0) == pytest.approx(0.07)


def test_static_power_is_ten_percent_of_tdp():
    assert thermal.static_power_w(100.0) == pytest.approx(10.0)
    assert thermal.static_power_w(700.0) == pytest.approx(70.0)


def test_power_the_package_removes_at_the_limit():
    # P_th = (T_max − T_amb) / R(m): 60/0.60 = 100 W, 60/0.64 = 93.75 W, 40/0.60 = 66.667 W, 70/0.60 = 116.667 W
    assert thermal.thermal_power_w(4) == pytest.approx(100.0)
    assert thermal.thermal_power_w(8) == pytest.approx(93.75)
    assert thermal.thermal_power_w(4, ambient_c=45.0) == pytest.approx(200 / 3)
    assert thermal.thermal_power_w(4, max_temp_c=95.0) == pytest.approx(350 / 3)
    assert thermal.thermal_power_w(4, ambient_c=85.0) == 0.0  # coolant at the limit: nothing can be removed
    # the device may draw its TDP or what the package removes, whichever is less
    assert thermal.sustainable_power_w(100.0, 4) == pytest.approx(100.0)
    assert thermal.sustainable_power_w(100.0, 8) == pytest.approx(93.75)
    assert thermal.temperature_c(25.0, 8, thermal.sustainable_power_w(100.0, 8)) == pytest.approx(85.0)
    assert thermal.sustainable_power_w(100.0, 4, max_temp_c=95.0) == pytest.approx(100.0)
    # an 800 mm² die of 700 W (m = 0, R = 0.07): 60/0.07 = 857 W > TDP at 25 °C; 40/0.07 = 571.4 W at 45 °C
    assert thermal.sustainable_power_w(700.0, 0, 800.0) == pytest.approx(700.0)
    assert thermal.sustainable_power_w(700.0, 0, 800.0, ambient_c=45.0) == pytest.approx(4000 / 7)


def test_dvfs_thermal_clock():
    assert abs(F_TH_8 - 0.976294) < 1e-6 and abs(F_TH_4_AT_45 - 0.857094) < 1e-6
    # independent of the TDP for chips rated like the paper's (TDP·R(4) = 60 °C: 1 W/mm² at 100 W per 100 mm²)
    for tdp in (50.0, 100.0, 700.0):
        assert thermal.thermal_frequency_scale(tdp, 8, tdp) == pytest.approx(F_TH_8, rel=1e-12)
        assert thermal.thermal_frequency_scale(tdp, 4, tdp, ambient_c=45.0) == pytest.approx(F_TH_4_AT_45)
    assert thermal.thermal_frequency_scale(100.0, 4) == pytest.approx(1.0)
    # m = 16: R = 0.72, 0.60/0.72 = 0.8333; ((0.8333 − 0.1) / 0.9)^(1/3) = 0.81481^(1/3) = 0.93405
    assert thermal.thermal_frequency_scale(100.0, 16) == pytest.approx(((0.6 / 0.72 - 0.1) / 0.9) ** (1 / 3))
    # fewer layers than the anchor never overclock past nominal; a 95 °C limit does not either
    assert thermal.thermal_frequency_scale(100.0, 1) == 1.0
    assert thermal.thermal_frequency_scale(100.0, 4, max_temp_c=95.0) == 1.0
    assert thermal.thermal_frequency_scale(700.0, 0, 800.0) == 1.0
    # the 700 W die at 45 °C: (571.43 − 70) / 630 = 39/49
    assert thermal.thermal_frequency_scale(700.0, 0, 800.0, ambient_c=45.0) == pytest.approx((39 / 49) ** (1 / 3))
    # static power alone is more than the package removes at 80 °C (5/0.6 = 8.3 W < 10 W): no clock helps
    assert thermal.thermal_frequency_scale(100.0, 4, ambient_c=80.0) == 0.0


@settings(max_examples=60, deadline=None)
@given(tdp=st.floats(1.0, 2000.0), m=st.integers(1, 15), ambient=st.floats(-20.0, 80.0), rise=st.floats(0.0, 4.0))
def test_more_layers_or_warmer_coolant_never_raise_the_thermal_clock(tdp, m, ambient, rise):
    area = tdp  # rated like the paper's chips: 1 W/mm²
    f = thermal.thermal_frequency_scale(tdp, m, area, ambient)
    assert thermal.thermal_frequency_scale(tdp, m + 1, area, ambient) <= f
    assert thermal.thermal_frequency_scale(tdp, m, area, ambient + rise) <= f
    assert thermal.thermal_frequency_scale(tdp, m, area, ambient, 85.0 + rise) >= f  # a higher limit never slows
    assert 0.0 <= f <= 1.0


# --- DVFS on a synthetic step --------------------------------------------------------------------------------

class _Step:
    """A step whose time scales as 1/f and whose core energy as f² (V ∝ f), as a phase's rows do; ``fixed_J`` is
    energy that does not scale (DRAM)."""

    def __init__(self, time_s: float, core_J: float, fixed_J: float = 0.0) -> None:
        self.time_s, self.core_J, self.fixed_J = time_s, core_J, fixed_J

    def time_at(self, scale: float) -> float:
        return self.time_s / scale

    def energy_J(self, coefficients, scale: float, noc_J_per_B, devices: int) -> tuple[float, float, float]:
        return self.core_J * scale**2, self.fixed_J, 0.0


def _dvfs(step: _Step, dev) -> tuple[float, float, float, float, str]:
    scale, time_s, power_w = dvfs.clock_scale(step, dev, None, (), 1)
    temperature = thermal.temperature_c(dev.ambient_c, dev.dram.stacked_layers, power_w, dev.device_area_mm2)
    return scale, time_s, power_w, temperature, dvfs.clock_limit(dev, scale, power_w, temperature)


def test_a_device_drawing_its_tdp_sits_at_the_limit_on_the_thermal_clock():
    """m = 4, 45 °C: 90 W dynamic at nominal (TDP 100 W). At f_th = (17/27)^(1/3) it draws 10 + 90·17/27 = 66.667 W
    = P_th, so T = 45 + 0.60 × 66.667 = 85 °C exactly: f_th is the clock that holds a full-TDP device at the limit."""
    scale, _, power_w, temperature, limit = _dvfs(_Step(1e-3, 0.09), _device(4, 45.0))
    assert scale == pytest.approx(F_TH_4_AT_45, rel=1e-12)
    assert power_w == pytest.approx(200 / 3) and temperature == pytest.approx(85.0)
    assert limit == dvfs.THERMAL_CLOCK


def test_an_overdrawn_device_meets_the_thermal_wall_below_its_tdp():
    """m = 8, 25 °C: 180 W dynamic at nominal. f_th = 0.976 leaves 177.5 W, more than the 93.75 W the package
    removes at 85 °C (less than the 100 W TDP), so the clock drops to ((93.75 − 10)/180)^(1/3) = 0.7749 and
    T = 25 + 0.64 × 93.75 = 85 °C. At m = 4 the budget is the 100 W TDP itself: the power wall, (90/180)^(1/3)."""
    scale, _, power_w, temperature, limit = _dvfs(_Step(1e-3, 0.18), _device(8))
    assert scale == pytest.approx((83.75 / 180) ** (1 / 3), rel=1e-9)
    assert power_w == pytest.approx(93.75, rel=1e-9) and power_w <= 93.75
    assert temperature == pytest.approx(85.0) and limit == dvfs.THERMAL_WALL
    scale, _, power_w, temperature, limit = _dvfs(_Step(1e-3, 0.18), _device(4))
    assert scale == pytest.approx(0.5 ** (1 / 3), rel=1e-9) and power_w == pytest.approx(100.0, rel=1e-9)
    assert limit == dvfs.POWER_WALL



def test_stacked_layers_set_the_thermal_limit_whether_connected_or_not():
    """Heat flows through every stacked layer, connected to the logic die or not: m = 8 layers with only n = 2
    connected (capacity without bandwidth) have R(8) = 0.64 °C/W, so the package removes 93.75 W at 85 °C and the
    thermal clock is F_TH_8 = 0.976, as for m = n = 8, not that of two layers (R(2) = 0.58: 103.4 W > TDP, nominal).
    The 180 W step then meets the thermal wall at ((93.75 − 10)/180)^(1/3) at 85 °C (T = 25 + 0.64 × 93.75), as
    for the fully connected stack."""
    dev = resolve_device(catalog.load("chips", "standard"), 8, 2)
    assert (dev.dram.stacked_layers, dev.dram.connected_layers) == (8, 2)
    assert dvfs.power_budget_w(dev) == pytest.approx(93.75)
    assert dvfs.thermal_scale(dev) == pytest.approx(F_TH_8, rel=1e-12)
    scale, _, power_w, temperature, limit = _dvfs(_Step(1e-3, 0.18), dev)
    assert scale == pytest.approx((83.75 / 180) ** (1 / 3), rel=1e-9) and power_w == pytest.approx(93.75, rel=1e-9)
    assert temperature == pytest.approx(85.0) and limit == dvfs.THERMAL_WALL


def test_a_lower_clock_stretches_compute_but_not_dram_or_the_network():
    """DVFS re-times a step at another clock (docs/model.md §6): compute, L1 and L2 take 1/f longer, DRAM and the
    network do not (their clocks are not the core's). Standard at m = n = 2 (818.75 GB/s): a decode GEMV of
    2,048 × 8,192 BF16 weights is DRAM-bound with every wave's DRAM time over twice its compute, so at half the
    clock it takes exactly as long; a 4,096-row GEMM of 64 waves is compute-bound and its waves take twice as long
    (the DRAM access latency of its pipeline fill does not). A collective's time is the same at any core clock."""
    dev = resolve_device(catalog.load("chips", "standard"), 2, 2)
    gemv = tune_gemm(Gemm("down_proj", 1, 2048, 8192), dev)
    assert all(w.fixed_s >= 2 * w.clocked_s for w in gemv.wave_timings)
    assert gemv.time_at(0.5) == pytest.approx(gemv.time_s, rel=1e-12)
    gemm = tune_gemm(Gemm("down_proj", 4096, 2048, 2048), dev)
    assert all(w.clocked_s >= w.fixed_s for w in gemm.wave_timings)
    assert gemm.time_at(0.5) - gemm.prologue_s == pytest.approx(2 * (gemm.time_s - gemm.prologue_s), rel=1e-12)
    network = catalog.load("nocs", str(MINI8))
    point = DesignPoint(chip=catalog.load("chips", "standard"), network=network, stacked_layers=2,
                        connected_layers=2, scenario=Scenario(model="llama-3.2-1b", phase="decode", batch=8),
                        schedule=Schedule.parse("tp=8"))
    phase = run_phase(point, resolve_device(point.chip, 2, 2, network), point.scenario)
    comms = [r for r in phase.rows if isinstance(r, CommRow)]
    assert comms and all(r.time_at(0.5) == r.time_at(1.0) for r in comms)


def _boosted(m: int, ambient_c: float | None = None):
    chip = cooled(catalog.load("chips", "standard"), ambient_c, None)
    chip = chip.model_copy(update={"thermal": chip.thermal.model_copy(update={"dvfs": dvfs.BOOST})})
    return resolve_device(chip, m, m)


def test_boost_runs_at_nominal_until_the_budget_binds():
    """Boost (GPU-Boost-like) DVFS, m = 4, 45 °C, P_th = 40/0.60 = 66.667 W. A step drawing 10 + 50 = 60 W at
    nominal fits: nominal clock, T = 45 + 0.6 × 60 = 81 °C (the static policy would run it at f_th = 0.857 and
    10 + 50·17/27 = 41.48 W). A step drawing 10 + 90 = 100 W does not: the clock drops to the thermal wall,
    ((66.667 − 10)/90)^(1/3) = (17/27)^(1/3) (the same clock f_th gives it: a full-TDP device is where the two
    policies agree), at exactly 85 °C."""
    scale, _, power_w, temperature, limit = _dvfs(_Step(1e-3, 0.05), _boosted(4, 45.0))
    assert (scale, limit) == (1.0, dvfs.NOMINAL)
    assert power_w == pytest.approx(60.0) and temperature == pytest.approx(81.0)
    scale, _, power_w, _, limit = _dvfs(_Step(1e-3, 0.05), _device(4, 45.0))
    assert scale == pytest.approx(F_TH_4_AT_45) and power_w == pytest.approx(10 + 50 * 17 / 27)
    assert limit == dvfs.THERMAL_CLOCK
    scale, _, power_w, temperature, limit = _dvfs(_Step(1e-3, 0.09), _boosted(4, 45.0))
    assert scale == pytest.approx(F_TH_4_AT_45, rel=1e-9) and power_w <= 200 / 3
    assert temperature == pytest.approx(85.0) and limit == dvfs.THERMAL_WALL


def test_boost_never_clocks_below_the_static_policy():
    """Over stackings and coolants, the same step under boost runs at least as fast as under the paper's static
    policy (boost starts from nominal instead of f_th; both then obey the same budget) and never above the limit."""
    for m, ambient, core_J in itertools.product((1, 4, 8, 10), (25.0, 45.0), (0.03, 0.09, 0.18)):
        static = _dvfs(_Step(1e-3, core_J), _device(m, ambient))
        boost = _dvfs(_Step(1e-3, core_J), _boosted(m, ambient))
        assert boost[0] >= static[0] - 1e-12
        assert boost[3] <= 85.0 + 1e-6


def test_a_device_that_cannot_idle_below_the_limit_is_above_it():
    """80 °C coolant, m = 4: the package removes 5/0.60 = 8.3 W, less than the 10 W static power. The device runs
    at the lowest clock and is reported above the limit (10 W → 86 °C), not refused."""
    scale, _, _, temperature, limit = _dvfs(_Step(1e-3, 0.09), _device(4, 80.0))
    assert scale == dvfs.MIN_CLOCK_SCALE
    assert temperature == pytest.approx(80.0 + 0.6 * 10.0, abs=1e-3) and limit == dvfs.ABOVE_LIMIT


@settings(max_examples=80, deadline=None)
@given(core_J=st.floats(0.001, 0.3), fixed_J=st.floats(0.0, 0.05), m=st.integers(1, 12),
       ambient=st.floats(0.0, 78.0), rise=st.floats(0.0, 6.0))
def test_warmer_coolant_never_lowers_temperature_nor_raises_the_clock(core_J, fixed_J, m, ambient, rise):
    """Whatever the step (compute-heavy, DRAM-heavy, over or under its TDP), a warmer coolant never makes the
    device cooler or faster; DVFS keeps it within its TDP and, when it can, at or below the limit."""
    step = _Step(1e-3, core_J, fixed_J)  # 1–300 W that scales as f³, 0–50 W that scales as f, at nominal
    cool, warm = _dvfs(step, _device(m, ambient)), _dvfs(step, _device(m, ambient + rise))
    assert warm[0] <= cool[0] * (1 + 1e-9)
    assert warm[3] >= cool[3] - 1e-6
    for scale, _, power_w, temperature, limit in (cool, warm):
        assert power_w <= 100.0 * (1 + 1e-9) or scale == dvfs.MIN_CLOCK_SCALE
        assert (temperature <= 85.0 + 1e-6) == (limit != dvfs.ABOVE_LIMIT)


def test_the_tdp_wall_refuses_a_device_that_cannot_run_at_all():
    dev = _device(4)
    with pytest.raises(UserInputError, match="tdp_W"):
        dvfs.clock_scale(_Step(1e-3, 1e9), dev, None, (), 1)  # would need a clock below 0.1 % of nominal


# --- end to end: scenarios, design points, reports --------------------------------------------------------------

def _scenario(phase: str = "decode", batch: int = 1, **cooling) -> Scenario:
    return Scenario(model=catalog.load("llms", "llama-3.2-1b"), phase=phase, batch=batch, **cooling)


def _report(m: int, phase: str = "decode", batch: int = 1, **cooling):
    point = DesignPoint(chip=catalog.load("chips", "standard"), scenario=_scenario(phase, batch, **cooling),
                        stacked_layers=m, connected_layers=m)
    return evaluate(point)


def test_the_scenario_cooling_goes_onto_the_chip():
    point = DesignPoint(chip=catalog.load("chips", "standard"), scenario=_scenario(ambient_c=35.0, max_temp_c=90.0))
    assert (point.chip.thermal.ambient_c, point.chip.thermal.target_c) == (35.0, 90.0)
    assert point.scenario == _scenario()  # the workload alone: timed phases are shared across environments
    plain = DesignPoint(chip=catalog.load("chips", "standard"), scenario=_scenario())
    assert plain.chip is catalog.load("chips", "standard")
    with pytest.raises(UserInputError, match="--ambient-c"):
        DesignPoint(chip=catalog.load("chips", "standard"), scenario=_scenario(ambient_c=90.0))
    with pytest.raises(ValueError, match="below max_temp_c"):
        _scenario(ambient_c=50.0, max_temp_c=40.0)


def test_report_temperature_is_ambient_plus_r_times_power():
    """Llama-3.2-1B decode, batch 1, m = n = 8 at 35 °C: memory-bound, far under its budget, so the clock is the
    thermal one, 1.4 GHz × 0.911347, and T = 35 + 0.64 × P."""
    report = _report(8, ambient_c=35.0)
    m, hw = report.metrics, report.hardware
    assert (hw["ambient_c"], hw["max_temp_c"]) == (35.0, 85.0)
    assert m.frequency_ghz == pytest.approx(NOMINAL_GHZ * F_TH_8_AT_35, rel=1e-9)
    assert m.temperature_c == pytest.approx(35.0 + 0.64 * m.power_w)
    assert m.power_density_W_per_mm2 == pytest.approx(m.power_w / 100.0)
    assert report.as_dict()["metrics"]["power_density_W_per_mm2"] == m.power_density_W_per_mm2


def test_a_decode_reports_ttft_is_its_prefill_at_the_devices_clock():
    """A 3D device runs one clock (the paper's DVFS): Llama-3.2-1B b8 at m = n = 8 runs decode and prefill at the
    thermal clock 1.4 GHz × F_TH_8 (both under the budget), so a decode report's TTFT is the prefill report's
    time, slower than the prefill at the nominal clock: the compute-bound prefill stretches by about 1/F_TH_8."""
    chip = catalog.load("chips", "standard")

    def report(phase: str):
        return evaluate(DesignPoint(chip=chip, scenario=Scenario(model="llama-3.2-1b", phase=phase, batch=8),
                                    schedule=Schedule(), stacked_layers=8, connected_layers=8))

    decode, prefill = report("decode"), report("prefill")
    assert decode.metrics.frequency_ghz == prefill.metrics.frequency_ghz == pytest.approx(NOMINAL_GHZ * F_TH_8)
    assert decode.metrics.ttft_s == pytest.approx(prefill.metrics.ttft_s, rel=1e-12)
    assert prefill.metrics.ttft_s == pytest.approx(prefill.breakdown.phase_time_s, rel=1e-12)


DESIGNS = [(m, phase, batch) for m in (2, 4, 8) for phase, batch in (("decode", 1), ("prefill", 4))]
AMBIENTS_C = (0.0, 15.0, 25.0, 35.0, 45.0, 55.0, 65.0, 75.0, 80.0, 84.0)


@pytest.fixture(scope="module")
def ambient_sweep() -> dict:
    """Each fixed design (schedule and all) evaluated at every ambient."""
    return {(design, ambient): _report(*design, ambient_c=ambient) for design in DESIGNS for ambient in AMBIENTS_C}


def test_warmer_coolant_never_cools_or_speeds_up_a_design(ambient_sweep):
    for design in DESIGNS:
        reports = [ambient_sweep[(design, a)] for a in AMBIENTS_C]
        for cooler, warmer in itertools.pairwise(reports):
            assert warmer.metrics.temperature_c >= cooler.metrics.temperature_c - 1e-9, design
            assert warmer.metrics.frequency_ghz <= cooler.metrics.frequency_ghz * (1 + 1e-12), design


def test_the_limit_removes_designs_as_the_coolant_warms(ambient_sweep):
    """None at 25 °C; every one at 80 °C and above, where the package removes less than the 10 W static power
    (5/R(m) ≤ 5/0.57 = 8.8 W), so no clock keeps the junction at 85 °C; never fewer at a warmer ambient."""
    removed = [sum(not ambient_sweep[(d, a)].feasible for d in DESIGNS) for a in AMBIENTS_C]
    assert removed == sorted(removed)
    assert removed[AMBIENTS_C.index(25.0)] == 0
    assert removed[AMBIENTS_C.index(80.0)] == removed[-1] == len(DESIGNS)
    for d in DESIGNS:
        assert any(v.startswith("thermal") for v in ambient_sweep[(d, 80.0)].violations)


def test_a_lower_limit_slows_and_then_removes():
    """At 25 °C, m = 4: 85 °C leaves the nominal clock; 60 °C removes 35/0.6 = 58.3 W, so f_th = (48.3/90)^(1/3);
    30 °C removes 8.3 W, under the static 10 W: infeasible."""
    nominal, lower, lowest = (_report(4, max_temp_c=t) for t in (85.0, 60.0, 30.0))
    assert nominal.metrics.frequency_ghz == pytest.approx(NOMINAL_GHZ)
    assert lower.metrics.frequency_ghz == pytest.approx(NOMINAL_GHZ * ((35 / 0.6 - 10) / 90) ** (1 / 3), rel=1e-9)
    assert lower.feasible and lower.metrics.temperature_c <= 60.0
    assert not lowest.feasible and lowest.hardware["max_temp_c"] == 30.0


# --- the CLI ------------------------------------------------------------------------------------------------------

def test_evaluate_flags_set_the_environment(cli):
    args = ("evaluate", "--model", "llama-3.2-1b", "--chip", "standard", "--stacked-layers", "8",
            "--connected-layers", "8")
    result = cli(*args, "--ambient-c", "35", "--json")
    assert result.code == 0, result.err
    report = result.json()
    assert report["hardware"]["ambient_c"] == 35.0 and report["hardware"]["max_temp_c"] == 85.0
    assert report["metrics"]["frequency_ghz"] == pytest.approx(NOMINAL_GHZ * F_TH_8_AT_35, rel=1e-9)
    assert report["metrics"]["temperature_c"] == pytest.approx(35.0 + 0.64 * report["metrics"]["power_w"])
    assert report["metrics"]["power_density_W_per_mm2"] == pytest.approx(report["metrics"]["power_w"] / 100.0)
    # a 95 °C limit at 25 °C: the package removes 70/0.64 = 109 W > TDP, so the nominal clock
    assert cli(*args, "--max-temp-c", "95", "--json").json()["metrics"]["frequency_ghz"] == pytest.approx(1.4)
    text = cli(*args, "--ambient-c", "35")
    assert text.code == 0, text.err
    line = next(line for line in text.out.splitlines() if line.startswith("thermal:"))
    assert "limit 85 °C" in line and "ambient 35 °C" in line and "W/mm²" in line


@pytest.mark.parametrize(("flags", "needle"), [
    (("--ambient-c", "90"), "--ambient-c"),  # above the chip's 85 °C limit
    (("--ambient-c", "nan"), "--ambient-c"),
    (("--ambient-c", "120"), "--ambient-c"),
    (("--max-temp-c", "0"), "--max-temp-c"),
    (("--max-temp-c", "inf"), "--max-temp-c"),
    (("--ambient-c", "50", "--max-temp-c", "40"), "--max-temp-c"),
    (("--max-temp-c", "20"), "--max-temp-c"),  # below the chip's 25 °C ambient
    (("--ambient-c", "warm"), "--ambient-c"),
])
def test_bad_cooling_flags_are_one_line_user_errors(cli, flags, needle):
    assert_user_error(cli("evaluate", "--model", "llama-3.2-1b", *flags), needle)


@pytest.mark.parametrize("command", ["sweep", "optimize"])
def test_search_commands_refuse_bad_cooling_before_searching(cli, tmp_path, command):
    space = _one_point_space(tmp_path)
    where = ("--out", str(tmp_path / "out")) if command == "sweep" else ("--storage", f"sqlite:///{tmp_path}/s.db")
    assert_user_error(cli(command, "--space", str(space), *where, "--ambient-c", "-60"), "--ambient-c")
    assert_user_error(cli(command, "--space", str(space), *where, "--ambient-c", "88"), "--ambient-c")
    assert_user_error(cli(command, "--space", str(space), *where, "--max-temp-c", "300"), "--max-temp-c")
    assert not (tmp_path / "out").exists() and not (tmp_path / "s.db").exists()


def _one_point_space(folder, cooling: str = "") -> str:
    """Llama-3.2-1B decode at batch 64 on the 8-device mini8 network of standard clusters, m ∈ {4, 8}, n = 4."""
    path = folder / "one.toml"
    path.write_text(f"""kind = "space"
name = "one"
[scenarios]
models = ["llama-3.2-1b"]
phases = ["decode"]
batches = [64]
{cooling}
[hardware]
chips = ["standard"]
nocs = [{json.dumps(str(MINI8))}]
stacked_layers = [4, 8]
connected_layers = [4]
[[hardware.sram]]
name = "base"
[schedule]
fsdp = [false]
""")
    return str(path)


def _csv(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_sweep_rows_carry_temperature_and_power_density(cli, tmp_path):
    """Every row of points.csv and pareto.csv (and pareto.json) has temperature_c and power_density_W_per_mm2;
    the space's ambient (30 °C) sets T = 30 + R(m)·P per device unless --ambient-c says otherwise."""
    space = _one_point_space(tmp_path, "ambient_c = 30.0")
    for ambient, flags in ((30.0, ()), (40.0, ("--ambient-c", "40"))):
        out = tmp_path / f"sweep{ambient:g}"
        result = cli("sweep", "--mode", "exhaustive", "--space", space, "--out", str(out), "--workers", "1",
                     "--json", *flags)
        assert result.code == 0, result.err
        assert json.loads((out / "summary.json").read_text())["scenario"]["ambient_c"] == ambient
        for name in ("points.csv", "pareto.csv"):
            rows = _csv(out / name)
            assert rows and {"temperature_c", "power_density_W_per_mm2"} <= set(rows[0]), name
            for r in rows:
                per_device_w = float(r["power_w"]) / 8  # mini8: 8 devices of 100 mm²
                assert float(r["power_density_W_per_mm2"]) == pytest.approx(per_device_w / 100.0)
                r_c_per_w = 0.56 + 0.01 * int(r["stacked_layers"])
                assert float(r["temperature_c"]) == pytest.approx(ambient + r_c_per_w * per_device_w)
        front = json.loads((out / "pareto.json").read_text())["pareto"]
        assert front and all("power_density_W_per_mm2" in r and "temperature_c" in r for r in front)


def test_a_fixed_schedule_point_keeps_its_timing_across_environments():
    """The environment changes clock, power and temperature, never the work: at a clock scale s the step time
    is the nominal step re-timed at s, for the same schedule."""
    schedule = Schedule()
    cool, warm = (evaluate(DesignPoint(chip=catalog.load("chips", "standard"), scenario=_scenario(ambient_c=a),
                                       schedule=schedule, stacked_layers=4, connected_layers=4))
                  for a in (25.0, 45.0))
    assert cool.breakdown.clock_scale == 1.0
    assert warm.breakdown.clock_scale == pytest.approx(F_TH_4_AT_45, rel=1e-12)
    assert warm.metrics.utps < cool.metrics.utps
    assert warm.metrics.memory_gib == cool.metrics.memory_gib
