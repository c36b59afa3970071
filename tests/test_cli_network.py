"""The network-facing commands end to end: ``deepstack strategies``, ``deepstack collective`` and
``deepstack evaluate`` on multi-device machines (docs/architecture.md §6). Golden numbers are worked by hand in the
comments; the per-rule strategy counts are derived in tests/test_parallel.py."""

from __future__ import annotations

import contextlib
import io
import json
import math

import pytest
from conftest import CliResult, assert_user_error

from deepstack.cli import run

GB = 1e9
NS = 1e-9
US = 1e-6

DEEPSEEK_DECODE = ("--model", "deepseek-v3", "--phase", "decode", "--batch", "1024")


# ------------------------------------------------------------------------------------------------- strategies


def test_strategies_count_on_the_console_script(cli_process):
    # 256 = 2⁸ over six factors: C(13, 5) = 1,287 ordered factorizations × FSDP on/off = 2,574 (paper §4.2.2)
    result = cli_process("strategies", "--devices", "256", "--count")
    assert result.code == 0, result.err
    assert result.out.strip() == "2574"


def test_strategies_rules_then_memory_prune_more(cli):
    everything = cli("strategies", "--devices", "256", "--count")
    assert everything.code == 0 and everything.out.strip() == "2574"
    # rules only: 2,574 − 1,584 (SP in decode) − 165 (FSDP without DP) − 20 (PP > 61 layers) − 1 (TP 256 ∤ 128
    # heads) = 804 (worked out in tests/test_parallel.py)
    rules = cli("strategies", "--devices", "256", *DEEPSEEK_DECODE, "--count")
    assert rules.code == 0 and rules.out.strip() == "804"
    memory = cli("strategies", "--devices", "256", *DEEPSEEK_DECODE, "--chip", "standard", "--count")
    assert memory.code == 0
    assert 0 < int(memory.out.strip()) < 804
    # without --model the memory check cannot run: --chip (or a scenario flag) is refused, not ignored (it used to
    # print the unpruned 2,574 as if checked)
    from conftest import assert_user_error

    assert_user_error(cli("strategies", "--devices", "256", "--chip", "standard", "--count"),
                      "--chip: applies only with --model")
    assert_user_error(cli("strategies", "--devices", "256", "--phase", "foo", "--batch", "0"),
                      "--phase, --batch: apply only with --model")


def test_strategies_json_lists_count_pruned_and_strategies(cli):
    result = cli("strategies", "--devices", "256", *DEEPSEEK_DECODE, "--chip", "standard", "--json")
    assert result.code == 0, result.err
    data = result.json()
    assert data["devices"] == 256 and data["total"] == 2574
    assert data["count"] == len(data["strategies"]) > 0
    assert data["pruned"]["sp_in_decode"] == 1584 and data["pruned"]["tp_heads"] == 1
    assert data["pruned"]["memory"] == 804 - data["count"]
    assert data["count"] + sum(data["pruned"].values()) == 2574
    for row in data["strategies"]:
        assert row["tp"] * row["ep"] * row["sp"] * row["cp"] * row["dp"] * row["pp"] == 256
        assert row["sp"] == 1 and (row["dp"] > 1 or not row["fsdp"])
    labels = [row["label"] for row in data["strategies"]]
    assert len(set(labels)) == len(labels)


# ------------------------------------------------------------------------------------------------- collective

RING8 = ("--topology", "ring", "--dims", "8", "--link-bw-GBps", "100", "--hop-latency-ns", "100")


def test_collective_ring_all_reduce_matches_the_textbook_formula(cli):
    # p = 8, S = 1 MiB, B = 100 GB/s, δ = 100 ns:
    #   2(p−1)/p · S/B = 1.75 · 1,048,576 / 1e11 = 18.35008 µs; 2(p−1)·δ = 14 · 100 ns = 1.4 µs → 19.75008 µs
    #   each step moves S/p = 131,072 B per link; 14 steps on the same link → 1,835,008 B on the busiest link
    result = cli("collective", "--op", "all_reduce", "--bytes", "1048576", *RING8, "--algorithm", "ring", "--json")
    assert result.code == 0, result.err
    data = result.json()
    S, p, B, delta = 1048576, 8, 100 * GB, 100 * NS
    assert data["algorithm"] == "ring" and data["devices"] == 8
    assert data["time_s"] == pytest.approx(2 * (p - 1) / p * S / B + 2 * (p - 1) * delta)
    assert data["time_s"] == pytest.approx(19.75008 * US)
    assert data["latency_s"] == pytest.approx(1.4 * US)
    assert data["max_link_bytes"] == pytest.approx(1_835_008)
    assert [(s["phase"], s["count"]) for s in data["steps"]] == [("reduce_scatter", 7), ("all_gather", 7)]
    assert all(s["max_link_bytes"] == pytest.approx(131_072) for s in data["steps"])
    assert data["candidates"] == [{"algorithm": "ring", "time_s": data["time_s"]}]
    # 8 up + 8 down links; only the up direction is used: busy 18.35008 / 19.75008, mean half of it
    (level,) = data["levels"]
    assert level["level"] == "L1" and level["links"] == 16
    assert level["max_busy_fraction"] == pytest.approx(18.35008 / 19.75008)
    assert level["mean_busy_fraction"] == pytest.approx(18.35008 / 19.75008 / 2)


def test_collective_all_to_all_on_a_16_port_switch_with_framing(cli):
    # S = 1 MiB → 65,536 B per destination = 16 packets of 4 KiB + 16 · 64 B headers = 66,560 B on the wire;
    # an uplink carries 15 of them = 998,400 B → 2 · 250 ns + 998,400 B / 50 GB/s = 20.468 µs (direct);
    # pairwise: 15 · (0.5 µs + 1.3312 µs) = 27.468 µs → auto picks direct.
    result = cli("collective", "--op", "all_to_all", "--bytes", "1048576", "--topology", "switch", "--dims", "16",
                 "--link-bw-GBps", "50", "--hop-latency-ns", "250", "--packet-bytes", "4096", "--header-bytes", "64",
                 "--json")
    assert result.code == 0, result.err
    data = result.json()
    assert data["algorithm"] == "direct"
    assert data["time_s"] == pytest.approx(20.468 * US)
    assert data["max_link_bytes"] == pytest.approx(998_400)
    # auto skips pairwise (it can never beat direct under eq. 4); asked for explicitly, it costs 27.468 µs
    assert [c["algorithm"] for c in data["candidates"]] == ["direct"]
    pairwise = cli("collective", "--op", "all_to_all", "--bytes", "1048576", "--topology", "switch", "--dims", "16",
                   "--link-bw-GBps", "50", "--hop-latency-ns", "250", "--packet-bytes", "4096", "--header-bytes",
                   "64", "--algorithm", "pairwise", "--json").json()
    assert pairwise["time_s"] == pytest.approx(27.468 * US)


def test_collective_two_level_flags_give_one_value_per_level(cli):
    # switch 4 (100 GB/s, 100 ns) inside, ring 4 (10 GB/s, 1 µs) outside, S = 400 kB, hierarchical all-reduce
    # (tests/test_collectives.py works this case by hand: 27.4 µs); the CLI reads each list innermost first.
    result = cli("collective", "--op", "all_reduce", "--bytes", "4e5", "--topology", "switch,ring",
                 "--dims", "4,4", "--link-bw-GBps", "100,10", "--hop-latency-ns", "100,1000",
                 "--algorithm", "hierarchical", "--json")
    assert result.code == 0, result.err
    data = result.json()
    assert data["devices"] == 16 and data["algorithm"] == "hierarchical"
    assert data["time_s"] == pytest.approx(27.4 * US)
    assert [level["level"] for level in data["levels"]] == ["L1", "L2"]


def test_collective_human_output(cli):
    result = cli("collective", "--op", "all_reduce", "--bytes", "1048576", *RING8, "--algorithm", "ring")
    assert result.code == 0, result.err
    assert "19.750 µs with ring" in result.out
    assert "reduce_scatter" in result.out and "links per level" in result.out


@pytest.mark.parametrize(("args", "needles"), [
    (("--op", "broadcast", "--bytes", "1024", *RING8), ("--op", "all_reduce", "broadcast")),
    (("--op", "all_reduce", "--bytes", "1024", *RING8, "--algorithm", "pairwise"),
     ("algorithm for all_reduce", "ring", "pairwise")),
    (("--op", "all_to_all", "--bytes", "1024", *RING8, "--algorithm", "warp"), ("direct, pairwise", "warp")),
    (("--op", "all_reduce", "--bytes", "1024", "--topology", "switch,switch", "--dims", "8,8",
      "--link-bw-GBps", "256", "--hop-latency-ns", "128,512"), ("--link-bw-GBps", "give 2 value(s)")),
    (("--op", "all_reduce", "--bytes", "1024", "--topology", "switch,switch", "--dims", "8",
      "--link-bw-GBps", "256,32", "--hop-latency-ns", "128,512"), ("--dims", "give 2 value(s)")),
    (("--op", "all_reduce", "--bytes", "1024", "--topology", "ring", "--dims", "8", "--link-bw-GBps", "-100",
      "--hop-latency-ns", "100"), ("link_bw_GBps", "greater than 0", "-100")),
    (("--op", "all_reduce", "--bytes", "1024", "--topology", "switch,ring", "--dims", "4,4",
      "--link-bw-GBps", "100,-10", "--hop-latency-ns", "10,100"), ("level 2", "link_bw_GBps")),
    (("--op", "all_reduce", "--bytes", "-5", *RING8), ("--bytes",)),
    (("--op", "all_reduce", "--bytes", "1024", "--topology", "ring", "--dims", "6", "--link-bw-GBps", "100",
      "--hop-latency-ns", "100", "--algorithm", "halving_doubling"), ("power-of-two", "usable here")),
])
def test_collective_bad_input_is_one_line(cli, args, needles):
    assert_user_error(cli("collective", *args), *needles)


# ------------------------------------------------------------------------------------------------- evaluate


def _run_captured(*args: str) -> CliResult:
    """The in-process CLI without capsys (usable from a module-scoped fixture)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(list(args))
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def deepseek_search() -> tuple[dict, dict]:
    """`deepstack evaluate` without --parallel (schedule search over 256 devices, ~10 s): run once, shared;
    with the strategy count of the same point after the rules and the memory check."""
    result = _run_captured("evaluate", *DEEPSEEK_DECODE, "--chip", "standard", "--noc", "tms1",
                           "--input-len", "1024", "--output-len", "1024", "--json")
    assert result.code == 0, result.err
    feasible = _run_captured("strategies", "--devices", "256", *DEEPSEEK_DECODE, "--chip", "standard", "--json")
    assert feasible.code == 0, feasible.err
    return result.json(), feasible.json()


def test_schedule_search_reports_the_best_schedule(deepseek_search):
    report, _ = deepseek_search
    schedule = report["schedule"]
    assert schedule["devices"] == 256
    assert schedule["text"]
    degrees = schedule["attention"]
    assert degrees["tp"] * degrees["ep"] * degrees["sp"] * degrees["cp"] * degrees["dp"] * schedule["pp"] == 256
    assert report["hardware"]["devices"] == 256 and report["hardware"]["noc"] == "tms1"
    assert report["scenario"]["model"] == "deepseek-v3" and report["scenario"]["batch"] == 1024


def test_schedule_search_section(deepseek_search):
    report, feasible = deepseek_search
    search = report["search"]
    assert search["strategies"] == 2574
    assert 0 < search["evaluated"] == feasible["count"]
    assert search["evaluated"] + sum(search["pruned"].values()) == 2574
    assert 0 < search["moe_tp_folded"] <= search["evaluated"]  # DeepSeek-V3 is MoE: vLLM's forms were ranked too
    top = search["top"]
    assert top[0]["schedule"] == report["schedule"]["text"]
    assert [t["stps"] for t in top] == sorted((t["stps"] for t in top), reverse=True)
    # the best is re-evaluated with TTFT; its throughput is the one that ranked it first
    assert report["metrics"]["stps"] == pytest.approx(top[0]["stps"])


def test_schedule_search_metrics_are_finite_and_positive(deepseek_search):
    report, _ = deepseek_search
    assert report["feasible"] is True and report["violations"] == []
    for key in ("ttft_s", "utps", "stps", "tokens_per_joule", "power_w", "temperature_c", "frequency_ghz",
                "area_mm2", "memory_gib"):
        value = report["metrics"][key]
        assert math.isfinite(value) and value > 0, (key, value)
    # 256 devices of 100 mm²
    assert report["metrics"]["area_mm2"] == pytest.approx(25_600)
    assert {"noc_L1", "noc_L2", "noc_L3"} <= set(report["breakdown"]["utilization"])
    json.dumps(report, allow_nan=False)  # strict JSON all the way down


@pytest.fixture(scope="module")
def dgx_tp8() -> dict:
    result = _run_captured("evaluate", "--system", "dgx-h100", "--model", "llama-3.3-70b", "--parallel", "tp=8",
                           "--json")
    assert result.code == 0, result.err
    return result.json()


def test_dgx_tp8_metrics_and_utilization(dgx_tp8):
    metrics = dgx_tp8["metrics"]
    for key in ("ttft_s", "utps", "stps", "tokens_per_joule", "power_w", "frequency_ghz"):
        assert math.isfinite(metrics[key]) and metrics[key] > 0, key
    utilization = dgx_tp8["breakdown"]["utilization"]
    assert "noc_L1" in utilization and 0 < utilization["noc_L1"] < 1
    assert dgx_tp8["schedule"]["devices"] == 8


def test_dgx_tp8_gemms_and_their_all_reduces_run_one_after_the_other(dgx_tp8):
    # A real GPU (dgx-h100 has a gpu table) decodes as vLLM does: the TP all-reduce is launched after its GEMM
    # on the same stream, no overlap (docs/model.md §GPU execution); both rows are still there
    configs = {op["name"]: op["config"] for op in dgx_tp8["breakdown"]["operators"]}
    assert {"o_proj", "attn_tp_allreduce", "down_proj", "ffn_tp_allreduce"} <= configs.keys()
    assert not any("overlapped with" in config for config in configs.values())


def test_3d_chip_tp_all_reduces_overlap_with_their_gemms():
    # A statically scheduled 3D chip keeps the overlap of each TP all-reduce with the GEMM that feeds it
    result = _run_captured("evaluate", "--model", "llama-3.2-1b", "--chip", "standard", "--noc", "tms1",
                           "--batch", "256", "--parallel", "tp=4,dp=64", "--json")
    assert result.code == 0, result.err
    configs = {op["name"]: op["config"] for op in result.json()["breakdown"]["operators"]}
    assert "overlapped with attn_tp_allreduce" in configs["o_proj"]
    assert "overlapped with ffn_tp_allreduce" in configs["down_proj"]
    assert sum("overlapped with" in config for config in configs.values()) == 2


def test_dgx_tp8_embedding_all_reduce_golden(dgx_tp8):
    # Batch 1 decode, 1 token, d = 8192, 2 B → S = 16,384 B over the 8-port NVSwitch (450 GB/s per link,
    # δ = 250 ns, 256-B packets + 16-B headers). Halving-doubling: 6 steps of 2 hops = 3 µs; every uplink
    # carries one flow per step of S/2, S/4, S/8 (RS) and back (AG):
    #   8,192 B = 32 packets → 8,704 B; 4,096 → 4,352 B; 2,048 → 2,176 B; twice: 30,464 B / 450 GB/s = 67.70 ns
    #   → 3.0677 µs (ring would pay 14 · 500 ns = 7 µs of latency). That is the network model's algorithm; on a
    # real GPU (dgx-h100's gpu table) vLLM's custom all-reduce runs it instead (and the report names it), which
    # pays a measured 10.1 µs floor (sglang#2904) plus 34.9 µs/MiB: 10.1 + 16,384 / 2^20 · 34.9 = 10.6453 µs
    (row,) = [op for op in dgx_tp8["breakdown"]["operators"] if op["name"] == "embedding_allreduce"]
    assert row["config"] == "all_reduce custom, 1×8 ranks"
    assert row["time_s"] == pytest.approx(10.1e-6 + 16384 / 2**20 * 34.9e-6)


# ------------------------------------------------------------------------------------------------- bad schedules


def test_schedule_on_the_wrong_number_of_devices(cli):
    # tms1 has 4 · 4 · 16 = 256 devices; tp=4 · dp=32 = 128
    assert_user_error(cli("evaluate", "--model", "llama-3.2-1b", "--chip", "standard", "--noc", "tms1",
                          "--batch", "256", "--parallel", "tp=4,dp=32"), "--parallel", "128", "256")
    assert_user_error(cli("evaluate", "--system", "dgx-h100", "--model", "llama-3.3-70b", "--parallel", "tp=4"),
                      "--parallel", "4 devices", "8")


@pytest.mark.parametrize("parallel", ["tp=4", "pp=2", "attn:tp=2;moe:dp=2"])
def test_model_parallelism_without_a_network(cli, parallel):
    assert_user_error(cli("evaluate", "--model", "llama-3.2-1b", "--chip", "standard", "--parallel", parallel),
                      "--parallel", "--noc", "--system")


def test_data_parallel_replicas_need_no_network(cli):
    # dp (and ep, which acts as dp for a dense model) only replicate: two independent llama-3.2-1b servers
    result = cli("evaluate", "--model", "llama-3.2-1b", "--chip", "standard", "--parallel", "dp=2", "--batch", "2",
                 "--json")
    assert result.code == 0, result.err
    assert result.json()["schedule"]["devices"] == 2


def test_expert_parallelism_of_a_moe_needs_a_network(cli):
    # qwen3-30b-a3b fits two h200-star devices with its experts split (ep=2), but splitting experts needs the
    # token all-to-all the error message itself names: "TP, SP, CP, EP and PP need a network".
    assert_user_error(cli("evaluate", "--model", "qwen3-30b-a3b", "--chip", "h200-star", "--parallel", "ep=2",
                          "--batch", "2"), "--parallel", "--noc")
