"""Energy per operation (models/power.py), DRAM access energy (models/hardware/dram.py) and the board-level power
anchors of benchmarks/calibrate_power.py (docs/calibration.md §3, §8)."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import MINI8, assert_user_error
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.models import dvfs, power
from deepstack.models.design import DesignPoint
from deepstack.models.hardware import dram as dram_model
from deepstack.models.hardware.device import resolve_device
from deepstack.models.pipeline import run_phase
from deepstack.schema import Scenario, Schedule
from deepstack.schema.hardware import HBMDram

PJ = 1e-12  # energies compare with abs=0: approx's default absolute tolerance, 1e-12, is a whole pJ
# (57/160)·(0.7/0.9)²: gate pitch 45 nm → N7, supply 0.9 → 0.7 V
TECH = 57 / 160 * 0.49 / 0.81


def _calibration():
    """benchmarks/calibrate_power.py as a module (benchmarks/ is not a package)."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "calibrate_power.py"
    spec = importlib.util.spec_from_file_location("calibrate_power", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


def test_process_scale_by_hand():
    assert pytest.approx(0.21551, abs=1e-5) == power.TECH_SCALE_45_TO_7
    assert power.node_energy_scale(7) == 1.0
    assert power.node_energy_scale(4) == power.node_energy_scale(5) == pytest.approx(0.70)  # TSMC N5 vs N7
    assert power.node_energy_scale(45) == pytest.approx(1 / TECH)
    with pytest.raises(UserInputError, match="process_nm"):
        power.node_energy_scale(10)


def test_per_operation_energies_by_hand():
    # Horowitz datapath: FP16 multiply 1.1 + FP32 add 0.9 pJ per FMA (2 FLOPs) at 45 nm → 1.0 pJ/FLOP × 0.2155
    assert power.matrix_datapath_J_per_flop() == pytest.approx(1.0 * TECH * PJ, rel=1e-9, abs=0)
    # the calibrated engine: 0.84 pJ/FLOP at 7 nm (3.9× the datapath), 0.84 × 0.7 = 0.588 pJ in 4N
    assert power.matrix_energy_J_per_flop(7) == pytest.approx(0.84 * PJ, rel=1e-9, abs=0)
    assert power.matrix_energy_J_per_flop(4) == pytest.approx(0.588 * PJ, rel=1e-9, abs=0)
    # vector: (0.9 + 3.7 + 30 / 32 lanes) / 2 = 2.76875 pJ/FLOP at 45 nm → 0.5967 pJ at 7 nm; SFU = 4 FMAs = 8 FLOPs
    assert power.vector_energy_J_per_flop() == pytest.approx(2.76875 * TECH * PJ, rel=1e-9, abs=0)
    assert power.vector_energy_J_per_flop() == pytest.approx(0.5967 * PJ, rel=1e-4, abs=0)
    assert power.sfu_energy_J_per_op() == pytest.approx(8 * 2.76875 * TECH * PJ, rel=1e-9, abs=0)
    # SRAM: 10 / 20 / 100 pJ per 64 bit at 8 KB / 32 KB / 1 MB; 256 KB on the 32 KB–1 MB slope ln 5 / ln 32
    assert power.sram_energy_J_per_B(8 * 1024) == pytest.approx(10 / 8 * TECH * PJ, rel=1e-9, abs=0)
    assert power.sram_energy_J_per_B(1024 * 1024) == pytest.approx(100 / 8 * TECH * PJ, rel=1e-9, abs=0)
    slope = math.log(5) / math.log(32)
    assert power.sram_energy_J_per_B(256 * 1024) == pytest.approx(20 * 8**slope / 8 * TECH * PJ, rel=1e-9, abs=0)
    assert power.sram_energy_J_per_B(256 * 1024) == pytest.approx(1.4151 * PJ, rel=1e-4, abs=0)
    assert power.sram_energy_J_per_B(1024 * 1024, 4) == pytest.approx(100 / 8 * TECH * 0.7 * PJ, rel=1e-9, abs=0)


def test_dram_energy_split_by_hand():
    std = resolve_device(catalog.load("chips", "standard")).dram
    # hybrid bond 0.88 pJ/bit = 7.04 pJ/B; a 2 KiB row opened: 0.101 pJ per row bit × 16,384 bits = 1654.8 pJ
    assert std.transfer_J_per_B == pytest.approx(7.04 * PJ, rel=1e-9, abs=0)
    assert std.activation_J_per_row == pytest.approx(1654.784 * PJ, rel=1e-9, abs=0)
    # a full-row stream: 7.04 + 1654.784 / 2048 = 7.848 pJ/B (0.98 pJ/bit); 32-byte random reads: 58.75 pJ/B
    assert dram_model.stream_energy_J_per_B(std) == pytest.approx(7.848 * PJ, rel=1e-9, abs=0)
    assert dram_model.access_energy_J(std, 32 * 1000, 32) / (32 * 1000) == pytest.approx(58.752 * PJ, rel=1e-9, abs=0)
    hbm = resolve_device(catalog.load("chips", "h100-star")).dram
    # HBM: 2.54 on-die + 0.22 I/O = 2.76 pJ/bit = 22.08 pJ/B; a 1 KB row: 827.4 pJ (DRAMsim3's HBM2 IDD: 828 pJ)
    assert hbm.activation_J_per_row == pytest.approx(827.392 * PJ, rel=1e-9, abs=0)
    assert dram_model.stream_energy_J_per_B(hbm) == pytest.approx((22.08 + 827.392 / 1024) * PJ, rel=1e-9, abs=0)


@pytest.mark.parametrize("chip", ["standard", "h100-star"])
def test_full_row_streams_cost_less_per_byte_than_random_accesses(chip):
    dram = resolve_device(catalog.load("chips", chip)).dram
    total = 64 * dram.row_B
    per_byte = {size: dram_model.access_energy_J(dram, total, size) / total for size in (32, 256, dram.row_B)}
    assert per_byte[dram.row_B] < per_byte[256] < per_byte[32]
    assert per_byte[dram.row_B] == pytest.approx(dram_model.stream_energy_J_per_B(dram), rel=1e-9, abs=0)
    # a transaction of two rows opens both: the same per byte as full rows
    assert dram_model.access_energy_J(dram, total, 2 * dram.row_B) == pytest.approx(per_byte[dram.row_B] * total)
    assert dram_model.access_energy_J(dram, 0, 32) == 0.0


def test_energy_opens_the_rows_the_stream_law_times():
    """One count of row openings for time and energy: a transaction longer than a 2 KiB row is served as its rows
    by successive banks, so 10,000 B read in 3,072 B (1.5-row) transactions open ⌈10,000 / 2,048⌉ = 5 rows, 0.1171875
    beyond the stream's 4.8828125 (not 2 per transaction, 6.5 rows); 128 B transactions open ⌈10,000 / 128⌉ = 79."""
    dram = resolve_device(catalog.load("chips", "standard")).dram
    assert dram.row_B == 2048
    assert float(dram_model.row_pieces(dram, 10_000, 3_072)[1]) == 5
    assert dram_model.extra_rows_opened(dram, 10_000, 3_072) == 5 - 10_000 / 2048 == 0.1171875
    assert dram_model.extra_rows_opened(dram, 10_000, 128) == 79 - 10_000 / 2048
    assert dram_model.extra_rows_opened(dram, 0, 128) == 0.0
    assert dram_model.access_energy_J(dram, 10_000, 3_072) == pytest.approx(
        10_000 * dram.transfer_J_per_B + 5 * dram.activation_J_per_row, rel=1e-15)


COUNTS = st.floats(min_value=0, max_value=1e12, allow_nan=False)


def _timing(**counts):
    zero = dict(matrix_flops=0.0, vector_flops=0.0, sfu_ops=0.0, l0_B=0.0, l1_B=0.0, l2_B=0.0, dram_B=0.0,
                dram_extra_rows=0.0)
    return SimpleNamespace(**(zero | counts))


@given(rows=st.integers(min_value=1, max_value=4096), tail=st.integers(min_value=0, max_value=2047),
       small=st.integers(min_value=1, max_value=2048), large=st.integers(min_value=1, max_value=2048))
def test_no_transaction_size_opens_fewer_rows_than_a_full_row_stream(rows, tail, small, large):
    """A stream of any length opens at least its rows' worth (never negative extra), the extra openings fall as
    the transactions grow up to a row, and any transaction of a row or more opens exactly the rows the data
    touches (⌈bytes / row⌉)."""
    dram = resolve_device(catalog.load("chips", "standard")).dram
    total = rows * dram.row_B + tail
    small, large = min(small, large), max(small, large)
    assert 0.0 <= dram_model.extra_rows_opened(dram, total, large) <= dram_model.extra_rows_opened(dram, total, small)
    for longer in (dram.row_B, dram.row_B + 1, 3 * dram.row_B):
        assert float(dram_model.row_pieces(dram, total, longer)[1]) == math.ceil(total / dram.row_B)


def test_partial_row_transactions_open_rows_of_their_own():
    """Row-major weights read 128 B per access from 2 KiB rows: 1 MiB streamed opens 8,192 rows instead of 512,
    so the DRAM energy is 1 MiB × the stream's J/B plus 7,680 more activations (the row-major layout's energy)."""
    from deepstack.models.compute import gemm

    dev = resolve_device(catalog.load("chips", "standard"))
    row_major = dataclasses.replace(dev, dram=dataclasses.replace(dev.dram, weight_layout="row_major"))
    assert gemm._extra_rows(dev, 2**20, 128) == 0.0
    assert gemm._extra_rows(row_major, 2**20, 128) == 2**20 / 128 - 2**20 / 2048 == 7680
    c = power.coefficients(dev)
    _, dram = power.operator_energy_J(1, _timing(dram_B=2**20, dram_extra_rows=7680), c)
    assert dram == pytest.approx(2**20 * c.dram_J_per_B + 7680 * dev.dram.activation_J_per_row, rel=1e-12)


@given(flops=COUNTS, extra_flops=COUNTS, dram_B=COUNTS, extra_B=COUNTS, l2_B=COUNTS)
def test_energy_grows_with_flops_and_bytes(flops, extra_flops, dram_B, extra_B, l2_B):
    c = power.coefficients(resolve_device(catalog.load("chips", "standard")))
    core, dram = power.operator_energy_J(1, _timing(matrix_flops=flops, dram_B=dram_B, l2_B=l2_B), c)
    more_core, _ = power.operator_energy_J(1, _timing(matrix_flops=flops + extra_flops, dram_B=dram_B, l2_B=l2_B), c)
    _, more_dram = power.operator_energy_J(1, _timing(matrix_flops=flops, dram_B=dram_B + extra_B, l2_B=l2_B), c)
    assert more_core >= core and more_dram >= dram
    assert more_core - core == pytest.approx(extra_flops * c.matrix_J_per_flop, abs=1e-9)
    assert more_dram - dram == pytest.approx(extra_B * c.dram_J_per_B, abs=1e-9)


def test_operator_energy_by_hand():
    c = power.coefficients(resolve_device(catalog.load("chips", "standard")))
    t = _timing(matrix_flops=1e12, vector_flops=1e9, sfu_ops=1e8, l0_B=1e10, l1_B=1e10, l2_B=1e9, dram_B=1e9)
    core, dram = power.operator_energy_J(3, t, c)
    # 3 × (1e12 × 0.84 pJ + 1e9 × 0.5967 pJ + 1e8 × 4.774 pJ + 1e10 × 0.2694 pJ (L0) + 1e10 × 1.415 pJ (256 KiB L1)
    #      + 1e9 × 5.128 pJ (4 MiB L2)) in J
    expected = 3 * (1e12 * c.matrix_J_per_flop + 1e9 * c.vector_J_per_flop + 1e8 * c.sfu_J_per_op
                    + 1e10 * c.l0_J_per_B + 1e10 * c.l1_J_per_B + 1e9 * c.l2_J_per_B)
    assert core == pytest.approx(expected)
    assert core == pytest.approx(3 * (0.84 + 5.967e-4 + 4.774e-4 + 2.694e-3 + 1.415e-2 + 5.128e-3), rel=1e-3)
    assert dram == pytest.approx(3 * 1e9 * 7.848 * PJ)



def test_a_steps_core_energy_falls_as_the_clock_squared_and_its_memory_and_network_energy_stay():
    # V ∝ f, so every switched operation costs C·V² ∝ f²: at 0.8 × the nominal clock a step's core energy is
    # 0.64 × the nominal one, at half the clock a quarter (not f³: that is power, energy × f). DRAM and network
    # bytes cost their energy per byte whatever the core clock (they are not on its DVFS rail). A real step:
    # Llama-3.2-1B decode b8 on mini8 with TP 8, so it moves bytes on both network levels.
    chip, network = catalog.load("chips", "standard"), catalog.load("nocs", str(MINI8))
    point = DesignPoint(chip=chip, network=network, scenario=Scenario(model="llama-3.2-1b", phase="decode", batch=8),
                        schedule=Schedule.parse("tp=8"), stacked_layers=4, connected_layers=4)
    dev = resolve_device(chip, 4, 4, network)
    phase = run_phase(point, dev, point.scenario)
    c, noc_J_per_B = power.coefficients(dev), dvfs.noc_J_per_B(network)
    core, dram, net = phase.energy_J(c, 1.0, noc_J_per_B, 8)
    assert core > 0 and dram > 0 and net > 0
    for scale in (0.8, 0.5):
        core_at, dram_at, net_at = phase.energy_J(c, scale, noc_J_per_B, 8)
        assert core_at == pytest.approx(scale**2 * core, rel=1e-12)
        assert (dram_at, net_at) == (dram, net)


def test_network_energy_per_byte_is_eight_bits_at_the_levels_energy_per_bit():
    # mini8: the die switch at 1.0 pJ/bit and UCIe at 0.3 pJ/bit move a byte for 8 pJ and 2.4 pJ
    per_byte = dvfs.noc_J_per_B(catalog.load("nocs", str(MINI8)))
    assert [e / PJ for e in per_byte] == pytest.approx([8.0, 2.4])  # in pJ: approx's 1e-12 abs floor would pass 1 pJ
    assert dvfs.noc_J_per_B(None) == ()


def test_coefficients_follow_the_process_node():
    dgx = resolve_device(catalog.load("systems", "dgx-h100").architecture)
    assert dgx.process_nm == 4
    c = power.coefficients(dgx)
    assert c.matrix_J_per_flop == pytest.approx(0.84 * 0.7 * PJ, rel=1e-9, abs=0)
    assert c.l2_J_per_B == pytest.approx(power.sram_energy_J_per_B(50 * 1024**2) * 0.7, rel=1e-9, abs=0)


def test_a_single_per_bit_dram_energy_is_refused_with_its_replacement():
    with pytest.raises(ValidationError, match="transfer_pJ_per_bit and activation_pJ_per_row_bit"):
        HBMDram(stacks=1, stack_capacity_GiB=16, stack_bw_GBps=800, banks_per_stack=512, row_bytes=1024,
                timing=dict(tRCD_ns=14, tRP_ns=14, tRAS_ns=34, tCL_ns=14, access_latency_ns=480),
                energy_pJ_per_bit=3.97)


def test_board_power_anchors_hold():
    """The anchors of benchmarks/calibrate_power.py: GPUs under dense GEMM at 85–105 % of their TDP, a Standard
    cluster at full load at 0.5–0.9 W/mm², and the committed matrix energy where its calibration anchors put it."""
    calibration = _calibration()
    anchors = calibration.anchors()
    measured = [calibration.measure(a) for a in anchors]
    failed = [(m.anchor.label, round(m.figure, 3)) for m in measured if not m.holds]
    assert not failed
    fitted = calibration.calibrated_matrix_pj([a.point for a in anchors if a.calibration])
    assert fitted == pytest.approx(power.MATRIX_PJ_PER_FLOP_7NM, rel=0.05)
    for m in measured:
        assert m.power_w <= m.tdp_w * (1 + 1e-6)  # the power wall
        assert m.anchor.per_mm2 or m.compute_utilization > 0.45  # compute-bound steps (dgx-b200 is L2-bound)


def _chip_file(tmp_path, replace: dict[str, str]) -> str:
    """The standard preset with whole lines replaced (key → new line, or "" to drop the line)."""
    lines = (Path(catalog.__file__).parent / "chips" / "standard.toml").read_text().splitlines()
    out = [replace.get(line.split("=")[0].strip(), line) for line in lines]
    path = tmp_path / "chip.toml"
    path.write_text("\n".join(line for line in out if line) + "\n")
    return str(path)


def test_cli_names_the_dram_energy_split_and_the_known_nodes(cli, tmp_path):
    old = _chip_file(tmp_path, {"transfer_pJ_per_bit": "energy_pJ_per_bit = 2.09", "activation_pJ_per_row_bit": ""})
    assert_user_error(cli("evaluate", "--model", "llama-3.2-1b", "--chip", old), "device.dram",
                      "transfer_pJ_per_bit and activation_pJ_per_row_bit")
    node = _chip_file(tmp_path, {"process_nm": "process_nm = 10"})
    assert_user_error(cli("evaluate", "--model", "llama-3.2-1b", "--chip", node), "process_nm", "45, 7, 5, 4 nm")
