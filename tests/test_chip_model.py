"""The chip model against the paper's Table 2 and the area-model laws (models/hardware/area.py,
models/hardware/device.py; paper §4.1.1, Table 2; docs/calibration.md §1).

Table 2 is hard-coded below from the paper (Table 2 and its notes; docs/calibration.md §1), so a
preset edited to match a wrong model cannot make these tests pass; the presets' own ``[paper_table2]`` copies
are checked against it as well.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.models.hardware.device import resolve_device
from deepstack.schema import ChipArchitecture

GiB = 1024**3
AREA_UNIT_mm2 = 800.0  # Table 2 is "per 800 mm²"
TOLERANCE = 0.05

# Paper Table 2 (per 800 mm²): FP16, FP32, SFU TFLOPS, L2 BW, L1 BW (TB/s), WGMMA; DRAM from the table notes:
# H100* 3.3 TB/s, 80 GiB HBM3; H200* 4.8 TB/s, 141 GiB HBM3e; the 4-layer 3D designs 13.1 TB/s, 64 GiB.
PAPER_TABLE2 = {
    #               fp16   fp32  sfu  l2_bw l1_bw dram_bw dram_GiB wgmma
    "h100-star":    (504.6, 31.5, 2.0, 9.8, 15.8, 3.3, 80.0, True),
    "h200-star":    (504.6, 31.5, 2.0, 11.8, 15.8, 4.8, 141.0, True),
    "standard":     (367.0, 11.5, 1.4, 13.1, 22.9, 13.1, 64.0, False),
    "wgmma":        (367.0, 11.5, 1.4, 13.1, 22.9, 13.1, 64.0, True),
    "weak-noc":     (412.9, 12.9, 1.6, 13.1, 25.8, 13.1, 64.0, False),
    "strong-noc":   (321.1, 10.0, 1.3, 13.1, 20.0, 13.1, 64.0, False),
    "strong-l2":    (275.3, 8.6, 1.1, 32.0, 17.2, 13.1, 64.0, False),
    "strong-l1":    (321.1, 10.0, 1.3, 13.1, 40.1, 13.1, 64.0, False),
    "less-sm":      (321.1, 10.0, 1.3, 13.1, 20.1, 13.1, 64.0, False),
    "large-matrix": (458.8, 14.3, 1.8, 13.1, 28.7, 13.1, 64.0, False),
    "large-vector": (321.1, 20.1, 2.5, 13.1, 20.1, 13.1, 64.0, False),
}
FIELDS = ("fp16_tflops", "fp32_tflops", "sfu_tflops", "l2_bw_TBps", "l1_bw_TBps", "dram_bw_TBps",
          "dram_capacity_GiB", "wgmma")
CHIPS_3D = tuple(name for name in PAPER_TABLE2 if not name.startswith(("h100", "h200")))


def _chip(name: str) -> ChipArchitecture:
    return catalog.load("chips", name)


def _tms1():
    return catalog.load("nocs", "tms1")


def _device(name: str):
    """The paper's calibration point: 3D chips at m = n = 4 on TMS1; the 2.5D baselines with their HBM."""
    chip = _chip(name)
    if chip.is_3d:
        return resolve_device(chip, 4, 4, _tms1())
    return resolve_device(chip)


def _per_800mm2(dev) -> dict[str, float]:
    scale = AREA_UNIT_mm2 / dev.device_area_mm2  # 8 clusters of 100 mm², or one 800 mm² die
    return {
        "fp16_tflops": dev.peak_matrix_flops * scale / 1e12,
        "fp32_tflops": dev.peak_vector_flops * scale / 1e12,
        "sfu_tflops": dev.peak_sfu_ops * scale / 1e12,
        "l2_bw_TBps": dev.l2_bw_Bps * scale / 1e12,
        "l1_bw_TBps": dev.l1_bw_Bps * scale / 1e12,
        "dram_bw_TBps": dev.dram.peak_bw_Bps * scale / 1e12,
        "dram_capacity_GiB": dev.dram.capacity_B * scale / GiB,
    }


def test_every_table2_chip_is_a_preset():
    assert set(catalog.names("chips")) == set(PAPER_TABLE2)


@pytest.mark.parametrize("name", list(PAPER_TABLE2))
def test_preset_carries_the_published_row(name):
    published = dict(zip(FIELDS, PAPER_TABLE2[name], strict=True))
    assert _chip(name).paper_table2.model_dump() == pytest.approx(published)


@pytest.mark.parametrize("name", list(PAPER_TABLE2))
def test_table2_per_800mm2(name):
    dev = _device(name)
    got = _per_800mm2(dev)
    published = dict(zip(FIELDS, PAPER_TABLE2[name], strict=True))
    for key, value in got.items():
        assert value == pytest.approx(published[key], rel=TOLERANCE), (name, key, value, published[key])
    assert dev.wgmma is published["wgmma"]
    # "All configurations satisfy the 800 mm² area constraint" (Table 2 notes)
    assert dev.area.total_mm2 <= dev.device_area_mm2
    assert dev.is_3d is (name in CHIPS_3D)


def test_standard_golden_device():
    """Standard at m = n = 4 on TMS1, by hand: 367.0 TFLOPS per 800 mm² / 8 clusters = 45.875 TFLOPS per
    cluster = PEs × 4096 FLOP/cycle × 1.4 GHz → 8 PEs (45.875 TFLOPS). DRAM: 4 × 409.375 GB/s = 1.6375 TB/s,
    4 layers × 2 GiB = 8 GiB; 4 × 32 = 128 banks of 2 KiB rows."""
    dev = _device("standard")
    assert dev.pes == 8
    assert dev.peak_matrix_flops == pytest.approx(8 * 4096 * 1.4e9)
    assert dev.dram.peak_bw_Bps == pytest.approx(1.6375e12)
    assert dev.dram.capacity_B == 8 * GiB
    assert (dev.dram.banks, dev.dram.row_B, dev.dram.interleave_ways) == (128, 2048, 1)


@pytest.mark.parametrize(("scale", "pes"), [(0.75, 9), (1.0, 8), (2.0, 5)])
def test_noc_bandwidth_anchor(scale, pes):
    """docs/calibration.md §1 (paper §5.5.5): Standard on TMS1 with every NoC level's bandwidth ×0.75 / ×1 / ×2
    leaves 9 / 8 / 5 PEs per cluster."""
    assert resolve_device(_chip("standard"), 4, 4, _tms1(), noc_bw_scale=scale).pes == pes


@pytest.mark.parametrize("name", CHIPS_3D)
def test_unconnected_layers_cost_no_logic_area(name):
    """m = 8, n = 4: four more layers of capacity through the connected ones; same PEs, area and bandwidth."""
    chip = _chip(name)
    base = resolve_device(chip, 4, 4, _tms1())
    deep = resolve_device(chip, 8, 4, _tms1())
    assert deep.pes == base.pes
    assert deep.area.total_mm2 == pytest.approx(base.area.total_mm2)
    assert deep.area.dram_interface_mm2 == pytest.approx(base.area.dram_interface_mm2)
    assert deep.dram.peak_bw_Bps == pytest.approx(base.dram.peak_bw_Bps)
    assert deep.dram.banks == base.dram.banks
    assert deep.dram.capacity_B == pytest.approx(2 * base.dram.capacity_B)


@pytest.mark.parametrize("name", ["standard", "strong-l2", "h200-star"])
def test_the_searches_capacity_at_m_is_the_devices(name):
    """The capacity the searches read off a chip at m stacked layers (before any device is built: the CP-SAT
    memory table) is the resolved device's: m layers × 2 GiB on a 3D stack (1 → 2 GiB, 10 → 20 GiB); HBM keeps
    its stacks' 141 GiB whatever m."""
    chip = _chip(name)
    dram = chip.device.dram
    if dram.technology == "hbm":
        assert dram.capacity_at_B(7) == dram.capacity_B == 141 * GiB
        assert resolve_device(chip).dram.capacity_B == 141 * GiB
        return
    for m in (1, 4, 10):
        assert dram.capacity_at_B(m) == m * 2 * GiB
        assert resolve_device(chip, m, min(m, 4), _tms1()).dram.capacity_B == m * 2 * GiB


def test_connecting_more_layers_costs_area():
    """The converse: connecting the 4 extra layers pays controller/PHY and peripheral area for 4 × 409.375 GB/s
    (4 · (0.409375 · 3.0 + 1.736) = 11.86 mm² more DRAM interface), so fewer PEs fit."""
    chip = _chip("standard")
    four = resolve_device(chip, 8, 4, _tms1())
    eight = resolve_device(chip, 8, 8, _tms1())
    assert eight.area.dram_interface_mm2 - four.area.dram_interface_mm2 == pytest.approx(
        4 * (0.409375 * 3.0 + 1.736), rel=1e-6)
    assert eight.pes < four.pes
    assert eight.dram.peak_bw_Bps == pytest.approx(2 * four.dram.peak_bw_Bps)


def _pes_or_zero(chip: ChipArchitecture, m: int, n: int, network) -> int:
    """PEs that fit, 0 when none does (the model then refuses the design with a user error)."""
    try:
        return resolve_device(chip, m, n, network).pes
    except UserInputError as exc:
        assert "no PE fits" in str(exc)
        return 0


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(CHIPS_3D), m=st.integers(1, 16), data=st.data(), with_noc=st.booleans())
def test_more_connected_layers_never_give_more_pes(name, m, data, with_noc):
    n_low = data.draw(st.integers(1, m), label="n_low")
    n_high = data.draw(st.integers(n_low, m), label="n_high")
    chip, network = _chip(name), (_tms1() if with_noc else None)
    assert _pes_or_zero(chip, m, n_high, network) <= _pes_or_zero(chip, m, n_low, network)


def _with_area(chip: ChipArchitecture, area_mm2: float) -> ChipArchitecture:
    return chip.model_copy(update={"device": chip.device.model_copy(update={"area_mm2": area_mm2})})


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(CHIPS_3D), small=st.floats(40.0, 400.0), extra=st.floats(0.0, 400.0),
       n=st.integers(1, 8))
def test_more_area_never_gives_fewer_pes(name, small, extra, n):
    chip = _chip(name)
    pes_small = _pes_or_zero(_with_area(chip, small), n, n, None)
    pes_large = _pes_or_zero(_with_area(chip, small + extra), n, n, None)
    assert pes_large >= pes_small


def test_area_budget_scales_pes():
    """A 250 mm² standard cluster holds 4× the PEs of a 100 mm² one, not 2.5×: the fixed parts (L2 7.624, DRAM
    interface 11.857, NoC 24.182 = 43.662 mm²) are paid once. 250/1.15 − 43.662 = 173.73 mm² of room / 5.295 mm²
    per PE = 32.8 → 32 PEs (100 mm²: 86.957 − 43.662 = 43.29 / 5.295 = 8.18 → 8)."""
    chip = _chip("standard")
    assert resolve_device(_with_area(chip, 250.0)).pes == 32
    assert resolve_device(chip).pes == 8
