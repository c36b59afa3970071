"""Unit conversions: the one place where human units (files, flags, reports) become SI and back.

Inside the code everything is SI base units: s, B, B/s, FLOP/s, W, J, Hz, mm² (area stays in mm², the unit
the paper and every floorplan use), °C. Names carry the unit (``link_bw_Bps``, ``hop_latency_s``).
"""

from __future__ import annotations

KiB = 1024
MiB = 1024**2
GiB = 1024**3

KILO = 1e3
MEGA = 1e6
GIGA = 1e9
TERA = 1e12

NANO = 1e-9
PICO = 1e-12


def KiB_to_B(value: float) -> float:
    return value * KiB


def MiB_to_B(value: float) -> float:
    return value * MiB


def GiB_to_B(value: float) -> float:
    return value * GiB


def B_to_GiB(value: float) -> float:
    return value / GiB


def GBps_to_Bps(value: float) -> float:
    """Decimal gigabytes per second (vendor link and DRAM figures) to B/s."""
    return value * GIGA


def Bps_to_TBps(value: float) -> float:
    return value / TERA


def Bps_to_GBps(value: float) -> float:
    return value / GIGA


def GHz_to_Hz(value: float) -> float:
    return value * GIGA


def Hz_to_GHz(value: float) -> float:
    return value / GIGA


def ns_to_s(value: float) -> float:
    return value * NANO


def s_to_ns(value: float) -> float:
    return value / NANO


def pJ_to_J(value: float) -> float:
    return value * PICO


def FLOPps_to_TFLOPS(value: float) -> float:
    return value / TERA
