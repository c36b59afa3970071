"""Thermal model and DVFS of the paper §4.1.2, in a stated cooling environment.

T = T_amb + R(m)·P with R(m) = 0.56 + 0.01·m °C/W for a 100 mm² stack (ANSYS fit anchored at 4 layers, 100 W,
6000 W/m²K convection). The package removes P_th = (T_max − T_amb) / R(m) with the junction at the limit T_max;
at the paper's 25 °C ambient and 85 °C target that is TDP·R(4)/R(m) for the 100 W, 100 mm² clusters, so the
paper's thermally sustainable frequency f_th = (P_dyn(m) / P_dyn(4))^(1/3) with P_dyn(m) = P_th − P_static and
P_dyn(4) = TDP − P_static is unchanged there, and a warmer coolant or a lower limit lowers it. DVFS then holds the
device's actual power within min(TDP, P_th) (models/dvfs.py).
"""

from __future__ import annotations

R_BASE_C_PER_W = 0.56  # paper §4.1.2 fit: R(m) = 0.56 + 0.01·m
R_PER_LAYER_C_PER_W = 0.01
REFERENCE_LAYERS = 4  # the anchor of the fit (4 layers, 100 W)
REFERENCE_AREA_MM2 = 100.0  # the anchored stack's footprint
STATIC_FRACTION_OF_TDP = 0.10  # paper §4.1.2: static power is 10 % of TDP
# The temperature of the coolant the heat sink / cold plate sees (the fit's convection boundary). 25 °C: the
# paper's anchor implies it (85 °C − 0.60 °C/W × 100 W), and it lies inside ASHRAE TC 9.9's recommended
# 18–27 °C IT inlet envelope (Thermal Guidelines for Data Processing Environments, 5th ed., 2021) and its W27
# facility-water class (≤ 27 °C); docs/calibration.md §10.
DEFAULT_AMBIENT_C = 25.0
DEFAULT_MAX_TEMP_C = 85.0  # paper §4.1.2 target: the top of DRAM's normal operating range (JEDEC JESD79 0–85 °C)


def thermal_resistance_c_per_w(stacked_layers: int, area_mm2: float = REFERENCE_AREA_MM2) -> float:
    """R(m) of §4.1.2. Other footprints scale as 1/area (convection-limited; inferred for the 2.5D dies,
    whose HBM sits beside the die: m = 0)."""
    return (R_BASE_C_PER_W + R_PER_LAYER_C_PER_W * stacked_layers) * REFERENCE_AREA_MM2 / area_mm2


def temperature_c(ambient_c: float, stacked_layers: int, power_w: float, area_mm2: float = REFERENCE_AREA_MM2) -> float:
    return ambient_c + thermal_resistance_c_per_w(stacked_layers, area_mm2) * power_w


def static_power_w(tdp_w: float) -> float:
    return STATIC_FRACTION_OF_TDP * tdp_w


def thermal_power_w(stacked_layers: int, area_mm2: float = REFERENCE_AREA_MM2, ambient_c: float = DEFAULT_AMBIENT_C,
                    max_temp_c: float = DEFAULT_MAX_TEMP_C) -> float:
    """P_th: the power the package removes with the junction at ``max_temp_c`` (≤ 0 when the coolant is at or
    above the limit)."""
    return (max_temp_c - ambient_c) / thermal_resistance_c_per_w(stacked_layers, area_mm2)


def sustainable_power_w(tdp_w: float, stacked_layers: int, area_mm2: float = REFERENCE_AREA_MM2,
                        ambient_c: float = DEFAULT_AMBIENT_C, max_temp_c: float = DEFAULT_MAX_TEMP_C) -> float:
    """The most a device may draw: its TDP, or less where the package cannot remove that much at the limit."""
    return min(tdp_w, thermal_power_w(stacked_layers, area_mm2, ambient_c, max_temp_c))


def thermal_frequency_scale(tdp_w: float, stacked_layers: int, area_mm2: float = REFERENCE_AREA_MM2,
                            ambient_c: float = DEFAULT_AMBIENT_C, max_temp_c: float = DEFAULT_MAX_TEMP_C) -> float:
    """f_th / f_nominal = (P_dyn(m) / P_dyn(4))^(1/3): the clock at which a device drawing its TDP at nominal
    clock sits at the limit. In [0, 1]: DVFS never overclocks past nominal; 0 when static power alone is
    more than the package removes."""
    p_static = static_power_w(tdp_w)
    dynamic = sustainable_power_w(tdp_w, stacked_layers, area_mm2, ambient_c, max_temp_c) - p_static
    return min(1.0, max(dynamic, 0.0) / (tdp_w - p_static)) ** (1 / 3)
