"""Thermal model and DVFS of the paper §4.1.2.

T = T_amb + R(m)·P with R(m) = 0.56 + 0.01·m °C/W for a 100 mm² stack (ANSYS fit anchored at 4 layers, 100 W,
6000 W/m²K convection). With P_dyn ∝ f³, the thermally sustainable frequency at m layers is
f_th = (P_dyn(m) / P_dyn(4))^(1/3) with P_dyn(m) = TDP·R(4)/R(m) − P_static; a second power-wall check lowers
the frequency further if the device's actual power exceeds what the package can remove (models/dvfs.py).
"""

from __future__ import annotations

R_BASE_C_PER_W = 0.56  # paper §4.1.2 fit: R(m) = 0.56 + 0.01·m
R_PER_LAYER_C_PER_W = 0.01
REFERENCE_LAYERS = 4  # the anchor of the fit (4 layers, 100 W)
REFERENCE_AREA_MM2 = 100.0  # the anchored stack's footprint
STATIC_FRACTION_OF_TDP = 0.10  # paper §4.1.2: static power is 10 % of TDP


def thermal_resistance_c_per_w(stacked_layers: int, area_mm2: float = REFERENCE_AREA_MM2) -> float:
    """R(m) of §4.1.2. Other footprints scale as 1/area (convection-limited; inferred for the 2.5D dies,
    whose HBM sits beside the die: m = 0)."""
    return (R_BASE_C_PER_W + R_PER_LAYER_C_PER_W * stacked_layers) * REFERENCE_AREA_MM2 / area_mm2


def temperature_c(ambient_c: float, stacked_layers: int, power_w: float, area_mm2: float = REFERENCE_AREA_MM2) -> float:
    return ambient_c + thermal_resistance_c_per_w(stacked_layers, area_mm2) * power_w


def static_power_w(tdp_w: float) -> float:
    return STATIC_FRACTION_OF_TDP * tdp_w


def sustainable_power_w(tdp_w: float, stacked_layers: int) -> float:
    """Power the package removes at m layers while staying at the temperature the TDP was rated for:
    TDP·R(4)/R(m) (§4.1.2). The 2.5D dies (m = 0) are rated at their TDP."""
    if stacked_layers <= 0:
        return tdp_w
    return tdp_w * thermal_resistance_c_per_w(REFERENCE_LAYERS) / thermal_resistance_c_per_w(stacked_layers)


def thermal_frequency_scale(tdp_w: float, stacked_layers: int) -> float:
    """f_th / f_nominal = (P_dyn(m) / P_dyn(4))^(1/3), capped at 1 (DVFS never overclocks past nominal)."""
    if stacked_layers <= 0:
        return 1.0
    p_static = static_power_w(tdp_w)
    dyn_m = sustainable_power_w(tdp_w, stacked_layers) - p_static
    dyn_4 = tdp_w - p_static
    return min(1.0, (max(dyn_m, 0.0) / dyn_4) ** (1 / 3))

