"""`deepstack evaluate` on one device (the chip model): golden decode step, DRAM bandwidth, the m = n = 1…16
sweep of the README, and bad input.

Every golden number is worked by hand in the comments from the presets (deepstack/catalog/chips/standard.toml,
deepstack/catalog/llms/llama-3.2-1b.toml) and the paper's formulas, never read back from the model.
"""

from __future__ import annotations

import pytest
from conftest import assert_user_error

from deepstack import catalog
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate
from deepstack.schema import Scenario

DECODE_1B = ("evaluate", "--model", "llama-3.2-1b", "--chip", "standard", "--phase", "decode", "--batch", "1")

# --- llama-3.2-1b weights (deepstack/catalog/llms/llama-3.2-1b.toml: hidden d = 2048, 16 layers, 32 heads,
# 8 kv heads, head dim 64, SwiGLU intermediate 8192, vocab 128256, tied embeddings) ---
#   per layer: q d·32·64 = 4,194,304 + k,v 2·d·8·64 = 2,097,152 + o 32·64·d = 4,194,304
#              + gate, up, down 3·d·8192 = 50,331,648 + 2 RMSNorms 2·d = 4,096          = 60,821,504
#   total: 16 · 60,821,504 + embedding (tied, so once) 128256·d = 262,668,288 + final norm d = 2,048
#        = 1,235,814,400 parameters (published: 1.24 B)
PARAMS_1B = 16 * (2048 * 32 * 64 + 2 * 2048 * 8 * 64 + 32 * 64 * 2048 + 3 * 2048 * 8192 + 2 * 2048) \
    + 128256 * 2048 + 2048
WEIGHT_B = PARAMS_1B * 2  # a16w16: 2 bytes per weight = 2,471,628,800 B
# KV cache read per decode step: 1 request × mean context (1024 + 1024/2 = 1536 tokens) × 16 layers × (K, V)
# × 8 kv heads × 64 × 2 bytes = 50,331,648 B
KV_B = 1 * (1024 + 1024 // 2) * 16 * 2 * 8 * 64 * 2

# --- effective DRAM bandwidth of the standard chip at m = n = 4 (standard.toml [device.dram]) ---
PEAK_BW_Bps = 4 * 409.375e9  # 4 connected layers × 409.375 GB/s = 1.6375 TB/s
BANKS = 4 * 32  # 32 banks per connected layer = 128
BANK_BW_Bps = PEAK_BW_Bps / BANKS  # 12.793 GB/s per bank
ROW_TRANSFER_s = 2048 / BANK_BW_Bps  # one 2 KiB row at the bank's share of the TSVs: 160.09 ns
ROW_OVERHEAD_s = (14.0 + 14.0) * 1e-9  # tRCD + tRP = 28 ns per row activation
REFRESH = 1 - 260 / 3900  # banks refresh for tRFC = 260 ns every tREFI = 3900 ns (DRAMsim3 HBM2): 0.93333
# 160.0855 / 188.0855 = 0.851133 of the time streaming, × 0.93333 not refreshing = 0.794391
EFFICIENCY = ROW_TRANSFER_s / (ROW_TRANSFER_s + ROW_OVERHEAD_s) * REFRESH
EFFECTIVE_BW_Bps = EFFICIENCY * PEAK_BW_Bps  # 1.30081 TB/s
# Little's law (1 MiB in flight: 8 PEs × 256 KiB / 2 over 130 ns = 8.07 TB/s) and the L1 fill bound
# (8 PEs × 256 B/cycle × 1.4 GHz = 2.87 TB/s) are both looser at m = 4, so the transaction curve sets it.

# decode step ≈ (weights + KV) / effective bandwidth = 2,521,960,448 B / 1.30081 TB/s = 1.9387 ms
HAND_STEP_s = (WEIGHT_B + KV_B) / EFFECTIVE_BW_Bps


def test_hand_figures_are_what_the_comments_say():
    """The hand calculation above, checked digit by digit (guards the comments themselves)."""
    assert PARAMS_1B == 1_235_814_400
    assert KV_B == 50_331_648
    assert abs(EFFICIENCY - 0.794391) < 1e-6
    assert EFFECTIVE_BW_Bps / 1e12 == pytest.approx(1.300815, abs=1e-6)
    assert HAND_STEP_s == pytest.approx(1.9387e-3, rel=1e-4)


def test_decode_batch1_step_is_weights_plus_kv_over_effective_bandwidth(cli):
    result = cli(*DECODE_1B, "--json")
    assert result.code == 0, result.err
    report = result.json()
    assert report["feasible"] is True and report["violations"] == []
    for key in ("ttft_s", "utps", "stps", "tokens_per_joule", "power_w", "temperature_c", "frequency_ghz",
                "area_mm2", "memory_gib"):
        assert report["metrics"][key] > 0, key
    step_s = 1.0 / report["metrics"]["utps"]
    # batch 1 decode is memory-bound: every weight and the request's KV cache stream once per step
    assert step_s == pytest.approx(HAND_STEP_s, rel=0.15)
    # one request: the system sees exactly the user's rate
    assert report["metrics"]["stps"] == pytest.approx(report["metrics"]["utps"])
    hw = report["hardware"]
    assert hw["dram_effective_bw_TBps"] == pytest.approx(EFFECTIVE_BW_Bps / 1e12, rel=1e-6)
    assert hw["dram_bw_TBps"] == pytest.approx(PEAK_BW_Bps / 1e12, rel=1e-9)
    assert hw["dram_capacity_GiB"] == pytest.approx(4 * 2.0)  # 4 stacked layers × 2 GiB
    assert (hw["stacked_layers"], hw["connected_layers"]) == (4, 4)
    # the footprint: 1.2358e9 weights × 2 B = 2.302 GiB + KV and activations, well inside 90 % of 8 GiB
    assert WEIGHT_B / 2**30 < report["metrics"]["memory_gib"] < 0.9 * 8


def test_human_output_shows_the_operator_breakdown(cli_process):
    """The installed console script, end to end: verdict, metrics and the per-operator table."""
    result = cli_process(*DECODE_1B)
    assert result.code == 0, result.err
    assert result.err == ""
    for needle in ("llama-3.2-1b", "feasible", "UTPS", "gate_up_proj", "down_proj", "lm_head", "bound", "dram"):
        assert needle in result.out, needle


# --- m = n = 1…16 sweep (README "One device: the chip model") ---
# PEs per device from the area model (models/hardware/area.py): floor((100/1.15 − L2 − NoC − DRAM(m)) / PE), with
# L2 = 4 MiB·0.7429 + 1170 B/cycle·3.976e-3 = 7.624 mm², NoC (TMS1, per level) 7.07 + 12.92 + 4.192 = 24.182 mm²,
# DRAM(m) = m·(0.409375 TB/s·3.0 + 1.736) mm² and one PE = 4096·(7.523e-4 + 4.443e-3/16) + 128·3.413e-3
# + 16·6.827e-3 + 0.5 MiB·0.7429 + 256·6.195e-4 = 5.295 mm². E.g. m = 4: (86.957 − 7.624 − 24.182 − 11.857)
# / 5.295 = 8.18 → 8; m = 8: (86.957 − 7.624 − 24.182 − 23.713) / 5.295 = 5.94 → 5 (the paper's §5.6 count);
# m = 16: (… − 47.426) / 5.295 = 1.46 → 1.
SWEEP_PES = {1: 9, 2: 9, 3: 8, 4: 8, 5: 7, 6: 7, 7: 6, 8: 5, 9: 5, 10: 4, 11: 4, 12: 3, 13: 3, 14: 2, 15: 2, 16: 1}
L1_BW_B_PER_CYCLE = 256  # standard.toml [pe]
L1_B = 256 * 1024
CLOCK_HZ = 1.4e9
ACCESS_LATENCY_s = 130e-9  # standard.toml [device.dram.timing]


def _sweep_hardware(cli, m: int) -> dict:
    """The resolved hardware of the README sweep row ``m``. At m = 1 the stack holds 2 GiB, less than the
    2.30 GiB of weights, so the CLI refuses the request (exit 2); the library still reports the hardware."""
    args = (*DECODE_1B, "--stacked-layers", str(m), "--connected-layers", str(m), "--json")
    result = cli(*args)
    if m == 1:
        assert_user_error(result, "memory", "1.80 GiB is usable")
        point = DesignPoint(chip=catalog.load("chips", "standard"), stacked_layers=1, connected_layers=1,
                            scenario=Scenario(model=catalog.load("llms", "llama-3.2-1b"), phase="decode", batch=1))
        report = evaluate(point)
        assert not report.feasible and report.violations[0].startswith("memory")
        return report.hardware
    assert result.code == 0, (m, result.err)
    return result.json()["hardware"]


def test_stacking_sweep_m_equals_n(cli):
    rows = {}
    for m in range(1, 17):
        hw = _sweep_hardware(cli, m)
        assert (hw["stacked_layers"], hw["connected_layers"]) == (m, m)
        assert hw["dram_capacity_GiB"] == pytest.approx(2.0 * m)
        rows[m] = (hw["pes_per_device"], hw["dram_bw_TBps"] * 1e12, hw["dram_effective_bw_TBps"] * 1e12)
    assert {m: pes for m, (pes, _, _) in rows.items()} == SWEEP_PES
    for m, (pes, peak, effective) in rows.items():
        # theoretical bandwidth is linear in the connected layers: m × 409.375 GB/s
        assert peak == pytest.approx(m * 409.375e9, rel=1e-9)
        assert effective <= peak
        # eq. 3: min(transaction curve at a full row (its efficiency does not depend on m: bank bandwidth is
        # per layer), Little with half of every PE's L1 in flight, L1 fill of the PEs)
        curve = EFFICIENCY * peak
        little = pes * L1_B / 2 / ACCESS_LATENCY_s
        l1_fill = pes * L1_BW_B_PER_CYCLE * CLOCK_HZ
        assert effective == pytest.approx(min(curve, little, l1_fill), rel=1e-9), m
    for m in range(1, 16):
        assert rows[m + 1][0] <= rows[m][0], f"PEs grew from m = {m} to {m + 1}"
    # the effective bandwidth peaks where the L1 fill bound overtakes the curve (m = 7: 6 PEs × 256 B × 1.4 GHz
    # = 2.15 TB/s) and falls beyond it, although the theoretical bandwidth keeps growing (paper §4.2.3)
    best = max(rows, key=lambda m: rows[m][2])
    assert best == 7
    assert rows[best][2] == pytest.approx(6 * 256 * 1.4e9, rel=1e-9)
    assert rows[16][2] < rows[8][2] < rows[16][1]


# --- bad input: one line on stderr naming the problem, exit status 2, no traceback (docs/architecture.md §6) ---


def test_unknown_model(cli):
    assert_user_error(cli("evaluate", "--model", "nope", "--chip", "standard", "--json"),
                      "unknown model 'nope'", "allowed:", "llama-3.2-1b")


def test_batch_zero(cli):
    assert_user_error(cli(*DECODE_1B[:-1], "0", "--json"), "batch", "greater than or equal to 1", "got 0")


def test_model_that_cannot_fit_one_device(cli):
    # 405 B parameters × 2 B = 757 GiB ≫ 90 % of 8 GiB
    assert_user_error(cli("evaluate", "--model", "llama-3.1-405b", "--chip", "standard", "--json"),
                      "memory", "GiB per device", "7.20 GiB is usable")


def test_connected_above_stacked(cli):
    assert_user_error(cli(*DECODE_1B, "--connected-layers", "6", "--stacked-layers", "4", "--json"),
                      "connected_layers (n = 6) must be ≤ stacked_layers (m = 4)")


def test_stacking_on_an_hbm_chip(cli):
    assert_user_error(cli("evaluate", "--model", "llama-3.2-1b", "--chip", "h100-star", "--stacked-layers", "4",
                          "--json"), "3D-stacked chips only", "h100-star")


@pytest.mark.parametrize(("stacked", "connected", "needle"), [
    ("0", "0", "stacked_layers (m): must be in 1..16 (got 0)"),
    ("17", "17", "stacked_layers (m): must be in 1..16 (got 17)"),
    ("4", "0", "connected_layers (n): must be in 1..16 (got 0)"),
])
def test_stacking_out_of_range(cli, stacked, connected, needle):
    """Paper §4.2.2 explores m = 1…16; outside that range the request is refused, not evaluated."""
    result = cli(*DECODE_1B, "--stacked-layers", stacked, "--connected-layers", connected, "--json")
    assert_user_error(result, needle)
