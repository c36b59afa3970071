"""Laws of the area model (models/hardware/area.py, paper §4.1.1; docs/model.md §3) that a mutation run found
unchecked: the PE counts the other tests pin did not move, but each test below fails with the code mutated as its
docstring says.

- one PE's area is the sum of its parts, the SFU and the L1 port width included, and the operand-delivery
  overhead is set by the array's shorter edge;
- a 2.5D die pays 10 mm² of PHY per HBM stack on top of its controller's bandwidth rule;
- the +15 % for control and routing applies to every component, the fixed ones included;
- the derived PE count is the largest that fits the budget, 0 when none does (and the device is then refused),
  and a budget of exactly k PEs holds k (no PE lost to rounding);
- a NoC level past the third is priced as the third.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.models.hardware import area
from deepstack.models.hardware.device import resolve_device

STANDARD = catalog.load("chips", "standard")
H100_STAR = catalog.load("chips", "h100-star")


# --- one PE's area -------------------------------------------------------------------------------------------

def test_standard_pe_area_is_the_sum_of_its_parts():
    """Standard PE (16×16 tile, 4096 FP16 FLOP/cycle, 128 FP32, 16 SFU ops, 256 + 256 KiB L0 + L1, 256 B/cycle L1):
    matrix 4096 · (7.523e-4 + 4.443e-3 / 16) = 4.2188288, vector 128 · 3.413e-3 = 0.436864,
    SFU 16 · 6.827e-3 = 0.109232, SRAM 512/1024 · 0.7429 = 0.37145, L1 port 256 · 6.195e-4 = 0.158592:
    5.2949668 mm². (SFU coefficient ×1.1: 5.3058900; L1 port coefficient ×1.1: 5.3108260.)"""
    assert area.pe_area_mm2(STANDARD.pe, 256.0, 256.0) == pytest.approx(5.2949668, rel=1e-9)
    assert resolve_device(STANDARD).area.pe_each_mm2 == pytest.approx(5.2949668, rel=1e-9)


def test_the_operand_overhead_is_set_by_the_shorter_array_edge():
    """H100* SM (64×16 wgmma tile): its array edge is min(64, 16) = 16, so matrix = 4096 · (7.523e-4 + 4.443e-3 / 16)
    = 4.2188288 as for a 16×16 tile; vector 256 · 3.413e-3 = 0.873728, SFU 0.109232, SRAM 0.37145, L1 port
    128 · 6.195e-4 = 0.079296: 5.6525348 mm². (Priced at the longer edge, 64: matrix 3.3657728, PE 4.7994788.)"""
    assert area.pe_area_mm2(H100_STAR.pe, 256.0, 128.0) == pytest.approx(5.6525348, rel=1e-9)
    square = H100_STAR.pe.model_copy(update={"min_tile": H100_STAR.pe.min_tile.model_copy(update={"m": 16})})
    assert area.pe_area_mm2(square, 256.0, 128.0) == pytest.approx(area.pe_area_mm2(H100_STAR.pe, 256.0, 128.0))


# --- the 2.5D die's DRAM interface and the +15 % on every component -----------------------------------------

def test_h100_star_area_breakdown():
    """H100* (88 SMs fixed, 800 mm² die, 5 HBM3 stacks at 3.3 TB/s, no 3D layers, no NoC area):
    DRAM interface = 3.3 · 3.0 + 0 · 1.736 + 5 · 10 (HBM PHYs) = 59.9 mm² (without the PHYs 9.9; at 11 mm² a
    stack 64.9); L2 = 50 · 0.7429 + 7000 · 3.976e-3 = 37.145 + 27.832 = 64.977; SMs 88 · 5.6525348 = 497.4230624;
    components 622.3000624, overhead 0.15 · 622.3000624 = 93.34500936 (on the SMs alone: 74.61345936),
    total 715.64507176 mm²."""
    dev = resolve_device(H100_STAR)
    assert dev.pes == 88
    assert dev.area.dram_interface_mm2 == pytest.approx(59.9, rel=1e-9)
    assert dev.area.l2_mm2 == pytest.approx(64.977, rel=1e-9)
    assert dev.area.noc_mm2 == 0
    assert dev.area.overhead_mm2 == pytest.approx(93.34500936, rel=1e-9)
    assert dev.area.total_mm2 == pytest.approx(715.64507176, rel=1e-9)


def test_standard_total_pays_the_overhead_on_the_fixed_parts_too():
    """Standard at m = n = 4 on TMS1: 8 PEs · 5.2949668 = 42.3597344, L2 4 · 0.7429 + 1170 · 3.976e-3 = 7.62352,
    DRAM i/f 1.6375 · 3.0 + 4 · 1.736 = 11.8565, NoC 7.07 + 12.92 + 4.192 = 24.182: components 86.0217544,
    total × 1.15 = 98.92501756 mm² (overhead 12.90326316; on the PEs alone it would be 6.35396016)."""
    dev = resolve_device(STANDARD)
    assert dev.pes == 8
    assert dev.area.overhead_mm2 == pytest.approx(12.90326316, rel=1e-9)
    assert dev.area.total_mm2 == pytest.approx(98.92501756, rel=1e-9)


# --- the derived PE count: the largest that fits, 0 when none does -------------------------------------------

def _standard_area(budget_mm2: float, connected_layers: int = 4, noc_scale: float = 1.0) -> area.AreaBreakdown:
    return area.device_area(
        pe=STANDARD.pe, pes=None, budget_mm2=budget_mm2, l1_KiB=256.0, l1_bw_B_per_cycle=256.0, l2_MiB=4.0,
        l2_bw_B_per_cycle=1170.0, dram_peak_bw_Bps=connected_layers * 409.375e9, connected_layers=connected_layers,
        noc_level_bw_Bps=tuple(bw * noc_scale for bw in area.TMS1_LEVEL_BW_Bps))


def _fixed_mm2(bd: area.AreaBreakdown) -> float:
    """The parts of a device that do not scale with its PEs: L2, DRAM interface, NoC."""
    return bd.l2_mm2 + bd.dram_interface_mm2 + bd.noc_mm2


def test_no_pe_fits_a_budget_smaller_than_the_fixed_parts():
    """A 40 mm² Standard device: 40 / 1.15 = 34.783 mm² of room before the fixed parts (L2 7.624 + DRAM i/f
    11.857 + NoC 24.182 = 43.662 mm²), so 0 PEs fit, and the device is refused with "no PE fits"."""
    assert _standard_area(40.0).pes == 0
    chip = STANDARD.model_copy(update={"device": STANDARD.device.model_copy(update={"area_mm2": 40.0})})
    with pytest.raises(UserInputError, match="no PE fits"):
        resolve_device(chip)


@settings(max_examples=120, deadline=None)
@given(budget=st.floats(20.0, 400.0), n=st.integers(1, 10), noc_scale=st.floats(0.25, 4.0))
def test_the_derived_pe_count_is_the_largest_that_fits(budget, n, noc_scale):
    """PEs = ⌊(budget / 1.15 − fixed) / PE area⌋, floored at 0: a device with PEs fits its budget, and one PE
    more would not (with 0 PEs the fixed parts alone may exceed the budget: the device is then refused)."""
    bd = _standard_area(budget, n, noc_scale)
    fixed = _fixed_mm2(bd)
    assert bd.pes >= 0
    assert bd.pes == 0 or bd.total_mm2 <= budget * (1 + 1e-9)
    assert ((bd.pes + 1) * bd.pe_each_mm2 + fixed) * 1.15 > budget * (1 - 1e-9)


# --- a NoC level past the third ------------------------------------------------------------------------------

def test_a_fourth_noc_level_is_priced_as_the_third():
    """A fourth level carrying TMS1's torus bandwidth per device (18.75 GB/s) costs the torus baseline, 4.192 mm²:
    TMS1's three levels 7.07 + 12.92 + 4.192 = 24.182, plus the fourth = 28.374 mm² (dropped: 24.182)."""
    assert area.noc_area_mm2((0.0, 0.0, 0.0, 18.75e9)) == pytest.approx(4.192, rel=1e-9)
    assert area.noc_area_mm2((*area.TMS1_LEVEL_BW_Bps, 18.75e9)) == pytest.approx(28.374, rel=1e-9)


@pytest.mark.parametrize("k", range(1, 41))
def test_a_budget_of_exactly_k_pes_fits_k_pes(k):
    """A budget of exactly (k · PE area + fixed) · 1.15 holds k PEs: the floor must not lose one to rounding
    (in floating point room / PE area comes out a hair under k for k = 1, 6–10, 22–24, 37, 38)."""
    ref = _standard_area(100.0)
    fixed = _fixed_mm2(ref)
    assert _standard_area((k * ref.pe_each_mm2 + fixed) * 1.15).pes == k
