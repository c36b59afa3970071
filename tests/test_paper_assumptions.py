"""Real tokens only (a replica's padding serves no one) and the paper assumption set (docs/model.md §13, §17).

Golden numbers are worked by hand from the rule, never read back from the model: STPS = requests that exist ×
the tokens/s one user sees; a whole model copy without a request draws its static power, 0.1 × TDP = 10 W for a
Standard cluster (standard.toml: tdp_W = 100; paper §4.1.2).
"""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path

import pytest

from deepstack import api, catalog
from deepstack.accuracy import paper
from deepstack.errors import UserInputError
from deepstack.models import assumptions
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate, idle_devices
from deepstack.models.parallel.strategies import Strategy, expert_folded, prune_reason
from deepstack.schema import Scenario, Schedule, build_scenario
from deepstack.search.schedules import best_schedule

STATIC_W = 0.1 * 100.0  # a Standard cluster's static power: 10 % of its 100 W TDP


def _one_chip(batch: int, parallel: str, phase: str = "decode", **scenario):
    sc = Scenario(model="llama-3.2-1b", phase=phase, batch=batch, **scenario)
    return evaluate(DesignPoint(chip=catalog.load("chips", "standard"), scenario=sc,
                                schedule=Schedule.parse(parallel)), with_ttft=False)


def test_idle_data_replicas_serve_no_tokens_and_draw_static_power():
    # 4 data replicas, 2 requests: 2 replicas each serve one request, 2 idle
    report = _one_chip(2, "dp=4")
    m = report.metrics
    assert m.stps == pytest.approx(2 * m.utps, rel=1e-12)  # not 4 × (the padded batch)
    busy_w = report.breakdown.power_w_per_device
    assert m.power_w == pytest.approx(2 * busy_w + 2 * STATIC_W, rel=1e-12)
    assert m.tokens_per_joule == pytest.approx(m.stps / m.power_w, rel=1e-12)


def test_a_partly_padded_replica_counts_only_its_real_request():
    # 5 requests on 4 replicas: the busiest serves ⌈5/4⌉ = 2, the system 5 tokens per step (not 8)
    m = _one_chip(5, "dp=4").metrics
    assert m.stps == pytest.approx(5 * m.utps, rel=1e-12)


def test_expert_parallel_replicas_are_never_idle():
    # tp=16,ep=16 on 256 devices: 16 attention replicas, 4 requests; every device holds experts the 4 tokens reach
    point = DesignPoint(chip=catalog.load("chips", "wgmma"), network=catalog.load("nocs", "tms1"),
                        scenario=Scenario(model="deepseek-v3", phase="decode", batch=4),
                        schedule=Schedule.parse("tp=16,ep=16"))
    report = evaluate(point, with_ttft=False)
    assert report.metrics.stps == pytest.approx(4 * report.metrics.utps, rel=1e-12)  # the 3,069 was 16 ×
    assert report.metrics.power_w == pytest.approx(256 * report.breakdown.power_w_per_device, rel=1e-12)
    assert idle_devices(point.schedule, 4, 256) == 0


def test_gpu_dp_attention_with_one_request():
    # the case: attn:dp=8;moe:ep=8 at batch 1 on 8×B200 reported 8 × the single user's tokens/s
    r = api.evaluate(model="deepseek-v3", system="dgx-b200", parallel="attn:dp=8;moe:ep=8", batch=1,
                     with_ttft=False, breakdown=False)
    assert r.metrics.stps == pytest.approx(r.metrics.utps, rel=1e-12)


def test_idle_devices_by_hand():
    tp2_dp4 = Schedule.parse("tp=2,dp=4")
    assert idle_devices(tp2_dp4, batch=1, devices=8) == 6  # 3 idle copies of 2 devices
    assert idle_devices(tp2_dp4, batch=4, devices=8) == 0
    assert idle_devices(Schedule.parse("attn:dp=8;moe:ep=8"), batch=1, devices=8) == 0  # one expert-parallel copy
    assert idle_devices(Schedule.parse("tp=2,ep=2,dp=2"), batch=1, devices=8) == 4  # one of two EP copies idle


def test_best_schedule_search_counts_real_tokens():
    # the search ranks by the same report: its best's STPS is the batch × its user's tokens/s
    point = DesignPoint(chip=catalog.load("chips", "standard"), network=catalog.load("nocs", "tms1"),
                        scenario=Scenario(model="deepseek-v3", phase="decode", batch=6))
    best = best_schedule(point, "stps").best
    assert best.metrics.stps == pytest.approx(6 * best.metrics.utps, rel=1e-12)


def test_study_rows_count_real_tokens(cli, tmp_path):
    result = cli("study", "run", "studies/parallelism-spread.toml", "--quick", "--out", str(tmp_path), "--json")
    assert result.code == 0, result.err
    rows = list(csv.DictReader((tmp_path / "points.csv").open()))
    assert rows
    for r in rows:  # the quick recipe: llama-3.2-1b decode at batch 64 on 8 devices, every schedule
        assert float(r["stps"]) == pytest.approx(64 * float(r["utps"]), rel=1e-9), r["schedule"]


# --- the paper assumption set -----------------------------------------------------------------------------------

def test_paper_decode_is_the_mean_over_four_kv_lengths():
    sc = Scenario(model="llama-3.2-1b", phase="decode", batch=1, assumptions="paper")
    assert assumptions.decode_kv_lengths(sc) == (1024, 1365, 1707, 2048)  # 1024 + j·1024/3, rounded
    point = DesignPoint(chip=catalog.load("chips", "standard"), scenario=sc)
    mean = evaluate(point, with_ttft=False)
    each = [evaluate(dataclasses.replace(point, scenario=sc.model_copy(update={"decode_kv_len": kv})),
                     with_ttft=False).metrics for kv in (1024, 1365, 1707, 2048)]
    assert mean.metrics.stps == pytest.approx(math.fsum(m.stps for m in each) / 4, rel=1e-12)
    assert mean.metrics.temperature_c == max(m.temperature_c for m in each)


@pytest.mark.parametrize("model, parallel", [
    ("deepseek-v3", "attn:tp=4,ep=32;ffn:ep=128;pp=2,moe_mode=replace_only"),
    ("deepseek-v3", "attn:tp=8,cp=4,dp=8;ffn:ep=256"),
    ("llama-3.3-70b", "tp=8,sp=2,dp=16"),
    ("llama-3.3-70b", "tp=8,dp=32,fsdp"),
])
def test_the_four_cached_lengths_share_what_never_reads_them(model, parallel):
    # a paper-set decode point's four steps share their memory check, prefill budget and collectives, keyed on the
    # scenario without its length (assumptions.without_kv_length): those laws must give the same at every length,
    # while attention itself must not (else the four steps would be one)
    from deepstack.models.compute.workload import build_workload, device_share, ffn_share
    from deepstack.models.parallel import communication
    from deepstack.models.parallel.memory import _footprint, _layout
    from deepstack.models.parallel.prefill_budget import prefill_budget

    schedule = Schedule.parse(parallel)
    sc = Scenario(model=model, phase="decode", batch=1024, assumptions="paper")
    steps = assumptions.averaged_steps(sc)
    assert [step.decode_kv_len for step in steps] == [1024, 1365, 1707, 2048]
    assert all(assumptions.without_kv_length(step) == sc for step in steps)
    m, a, f = sc.model, schedule.attention, schedule.ffn

    def laws(scenario):
        share_a, share_f = device_share(m, scenario, a, schedule.pp), ffn_share(m, scenario, a, f, schedule.pp)
        comms = [communication.attention_comms(m, scenario, schedule, share_a),
                 communication.stage_comms(m, scenario, schedule, share_a)]
        kinds = (False, True) if m.moe else (False,)
        comms += [communication.ffn_comms(m, scenario, schedule, share_a, share_f, moe)
                  + communication.fsdp_comms(m, scenario, schedule, moe) for moe in kinds]
        return (_footprint(scenario, _layout(schedule, "decode"), None),
                prefill_budget(scenario, schedule, 8 * 2**30), comms)

    assert all(laws(step) == laws(sc) for step in steps)
    attention = {step.decode_kv_len: build_workload(m, step, a, f, schedule.pp, 0, None, schedule.moe_mode)
                 for step in steps}
    assert len(set(attention.values())) == 4


def test_paper_judges_the_junction_at_35_c_with_the_clock_of_the_anchor():
    # the clock of the paper's DVFS rule is anchored at its fit, not at the coolant: the same as the default's;
    # the junction sits at 35 °C + R(4)·P = 35 + (0.56 + 0.04)·P
    default = _one_chip(1, "tp=1", phase="prefill", input_len=16)  # 16 tokens: below the 100 W cap in both sets
    ours = _one_chip(1, "tp=1", phase="prefill", input_len=16, assumptions="paper")
    assert ours.metrics.frequency_ghz == default.metrics.frequency_ghz
    assert ours.metrics.temperature_c == pytest.approx(35.0 + 0.60 * ours.metrics.power_w, rel=1e-12)
    assert default.metrics.temperature_c == pytest.approx(25.0 + 0.60 * default.metrics.power_w, rel=1e-12)
    assert ours.hardware.ambient_c == 35.0
    # with one choice back at the default the rest of the set still applies
    without = _one_chip(1, "tp=1", phase="prefill", input_len=16, assumptions="paper-without-junction_35c")
    assert without.hardware.ambient_c == 25.0 and without.metrics.power_w == ours.metrics.power_w


def test_a_named_coolant_sets_clock_and_junction_under_the_paper_set():
    # a coolant the scenario names is the ambient of both the clock and the junction, in either set: the point
    # moves it onto the chip, and still judges the junction at it (not at the paper's 35 °C)
    ours = _one_chip(1, "tp=1", phase="prefill", input_len=16, assumptions="paper", ambient_c=45.0)
    assert ours.hardware.ambient_c == 45.0
    assert ours.metrics.temperature_c == pytest.approx(45.0 + 0.60 * ours.metrics.power_w, rel=1e-12)
    point = DesignPoint(chip=catalog.load("chips", "standard"),
                        scenario=Scenario(model="llama-3.2-1b", phase="prefill", batch=1, input_len=16,
                                          assumptions="paper", ambient_c=45.0))
    assert point.judged_ambient_c == 45.0
    assert dataclasses.replace(point, schedule=Schedule.parse("tp=1")).judged_ambient_c == 45.0


def test_the_breakdown_names_the_clock_limit_at_the_judged_junction():
    # paper set, 60 °C limit: the design is judged at 35 + 0.60·P; above 60 °C it is infeasible, and the
    # breakdown says so instead of naming the clock from the chip's own 25 °C environment (25 + 0.60·P < 60)
    report = api.evaluate(model="llama-3.2-1b", chip="standard", noc="tms1", phase="prefill", batch=64,
                          parallel="dp=256", assumptions="paper", max_temp_c=60.0)
    power_w = report.breakdown.power_w_per_device
    assert report.metrics.temperature_c == pytest.approx(35.0 + 0.60 * power_w, rel=1e-12)
    assert 25.0 + 0.60 * power_w < 60.0 < report.metrics.temperature_c
    assert not report.feasible and report.breakdown.clock_limit == "above limit"


def test_a_study_names_a_coolant_only_where_the_set_does_not_already_judge_at_it():
    paper_sc = Scenario(model="llama-3.2-1b", phase="decode", batch=1, assumptions="paper")
    default_sc = paper_sc.model_copy(update={"assumptions": "default"})
    assert assumptions.coolant_to_name(paper_sc, 25.0, 35.0) is None  # the paper's rule: anchor clock, 35 °C junction
    assert assumptions.coolant_to_name(paper_sc, 25.0, 25.0) == 25.0  # named: clock and junction at 25 °C
    assert assumptions.coolant_to_name(default_sc, 25.0, 35.0) == 35.0
    assert assumptions.coolant_to_name(default_sc, 25.0, 25.0) is None  # the chip's own: naming it changes nothing
    assert assumptions.junction_ambient_c(paper_sc, 25.0, named_ambient_c=45.0) == 45.0


def test_paper_designs_above_the_limit_are_infeasible():
    # a 4-layer cluster at its 100 W cap sits at 35 + (0.56 + 0.04)·100 = 95 °C under the paper's rule
    from deepstack.models import thermal

    assert 35.0 + thermal.thermal_resistance_c_per_w(4) * 100.0 == pytest.approx(95.0)


def test_paper_runs_pp_micro_batches_in_decode():
    sc = Scenario(model="deepseek-v3", phase="decode", batch=1024, assumptions="paper")
    assert assumptions.pipeline_microbatches(sc, 8) == 8
    assert assumptions.pipeline_microbatches(sc.model_copy(update={"assumptions": "default"}), 8) is None


def test_paper_pruning_counts_dp_alone_and_lets_tp_exceed_heads():
    sc = Scenario(model="deepseek-v3", phase="decode", batch=4)
    paper_sc = sc.model_copy(update={"assumptions": "paper"})
    tp16_ep16 = Strategy(tp=16, ep=16)  # Table 4 step 2 at batch 4: 16 attention replicas for 4 requests
    assert prune_reason(sc, tp16_ep16)[0] == "replicas_exceed_batch"
    assert prune_reason(paper_sc, tp16_ep16) is None
    assert prune_reason(sc, Strategy(tp=256))[0] == "tp_heads"  # Table 4 step 1: tp=256 on 128 heads
    assert prune_reason(paper_sc, Strategy(tp=256)) is None


def test_moe_mode_replace_only_folds_the_moe_tp_into_ep():
    s = Schedule.parse("tp=4,ep=32,dp=2,moe_mode=replace_only")
    assert (s.attention.tp, s.attention.ep, s.attention.dp) == (4, 32, 2)
    assert (s.ffn.tp, s.ffn.ep, s.ffn.dp) == (1, 128, 2)
    assert Schedule.parse("tp=16,ep=16,moe_mode=none") == Schedule.parse("tp=16,ep=16")


def test_expert_folding_is_vllms_tp_with_expert_parallelism():
    # DeepSeek-V3: 256 routed experts. tp=4·ep=32 folds into EP 128 for the routed experts, attention keeps tp=4
    sc = build_scenario("deepseek-v3", "decode", 1024)
    folded = expert_folded(sc, Strategy(tp=4, ep=32, pp=2))
    assert folded == Schedule.parse("tp=4,ep=32,pp=2,moe_mode=replace_only")
    assert (folded.ffn.tp, folded.ffn.ep, folded.attention.tp, folded.attention.ep) == (1, 128, 4, 32)
    assert expert_folded(sc, Strategy(tp=8, pp=32)).ffn.ep == 8  # vLLM's TP8 + --enable-expert-parallel: EP8
    assert expert_folded(sc, Strategy(ep=256)) is None  # no TP to fold: the strategy itself
    assert expert_folded(sc, Strategy(tp=4, ep=128)) is None  # 512 does not divide 256 experts
    assert expert_folded(build_scenario("llama-3.3-70b", "decode", 1), Strategy(tp=8)) is None  # dense


def test_the_best_schedule_search_finds_table4_step3_schedule_at_its_hardware():
    # Table 4 b1024 steps 3-5 run tp4·ep32·pp2 with the MoE's TP folded into EP; the searches must reach it
    row = next(r for r in paper.table4_rows() if r.batch == 1024 and r.step == 3)
    point = paper.table4_point(row, "paper")
    ranking = [Schedule.parse(r["schedule"]) for r in best_schedule(point).ranking_all]
    same = [i for i, s in enumerate(ranking) if (s.attention, s.ffn, s.pp, s.moe_mode) == (
        point.schedule.attention, point.schedule.ffn, point.schedule.pp, "replace_only")]
    assert same == [0]  # found, once, and the best of this hardware point


def test_every_table4_row_is_expressible_and_evaluates():
    rows = paper.table4_rows()
    assert len(rows) == 14
    for row in rows:
        point = paper.table4_point(row, "paper")
        report = evaluate(point, with_ttft=False, breakdown=False, overlap=row.overlap)
        assert report.hardware.pes_per_device == row.pes
        assert report.metrics.stps > 0


def test_accuracy_paper_cli(cli):
    result = cli("accuracy", "paper", "--json")
    assert result.code == 0, result.err
    data = result.json()
    assert len(data["table4"]) == 14
    assert {f["finding"] for f in data["findings"]} >= {"Table 4 total", "R21", "R12", "R24", "R13", "R17", "R22"}
    for row in data["table4"]:
        assert row["verdict"] in ("holds", "fails")
        assert row["ratio"] == pytest.approx(row["paper_set_stps"] / row["paper_stps"])
    # the paper's rows are all within its limits; ours name the two b1024 rows our memory check rejects
    beyond = data["summary"]["table4_beyond_limits_paper_set"]
    assert sorted(beyond) == ["b1024 step 1", "b1024 step 2"]
    assert all(why.startswith("memory: ") for why in beyond.values())
    # R10 / R21: Table 4's b1024 steps 5 and 7 over the best H200* design of the same set, whose STPS is reported
    found = {(f["finding"], f["what"]): f for f in data["findings"]}
    baseline = found["R10 baseline", "the best H200* design, DeepSeek-V3 decode b1024 (STPS, schedule)"]
    assert baseline["paper"] == "29,278–31,376 (implied by R21)"  # 38,061 / 1.30 and 54,280 / 1.73
    step = {r["step"]: r for r in data["table4"] if r["batch"] == 1024}
    for name, number in (("R21", 5), ("R10", 7)):
        ratio = found[name, f"b1024 Table 4 step {number} over the best H200*"]
        for s in ("paper_set", "default_set"):
            assert ratio[s] == pytest.approx(step[number][f"{s}_stps"] / baseline["stps"][s])


def test_table4_b1024_steps_1_and_2_exceed_memory_by_hand():
    """The paper's b1024 step 1 (tp=8, pp=32 on 8 GiB per device) needs more than the 90 % its memory check allows
    (§4.2.3): the busiest stage holds two MoE layers' TP shards in FP8 and the replicated MLA cache of all 1,024
    requests at the end of generation (2,048 tokens, 576 BF16 elements per token and layer), 7.22 GiB > 7.20."""
    from deepstack.models.parallel.memory import memory_footprint, usable_capacity_B

    h = 7168
    mla = (h * 1536 + 1536 + 1536 * 128 * 192 // 8 + h * 576 + 512 + 512 * 128 * 256 // 8 + 128 * 128 * h // 8
           + 2 * h)  # q down / up, kv down / up, o (up and o split over TP 8), their norms, the two RMSNorms
    experts = 256 * 3 * h * 2048 // 8 + 3 * h * 2048 // 8 + h * 256 + 256  # routed and shared TP shards, router
    row = next(r for r in paper.table4_rows() if r.batch == 1024 and r.step == 1)
    point = paper.table4_point(row, "paper")
    used = memory_footprint(point.scenario, point.schedule)
    assert used.weights_B == 2 * (mla + experts) * 1  # 2,906,554,880 B
    assert used.kv_cache_B == 1024 * 2048 * 576 * 2 * 2 == 4.5 * 2**30
    # weights and cache alone, 7.207 GiB, already exceed the 7.2 GiB usable; the activations add 0.016
    assert used.total_B > used.weights_B + used.kv_cache_B > usable_capacity_B(8 * 2**30)


def test_assumptions_flag_is_validated(cli):
    from conftest import assert_user_error

    assert_user_error(cli("evaluate", "--model", "llama-3.2-1b", "--assumptions", "bogus"), "--assumptions")


def test_sweep_rows_count_real_tokens(cli, tmp_path):
    # 3 requests on the small space's 8 devices: schedules of 2 replicas serve 2 + 1 (the busiest sets the step)
    result = cli("sweep", "--mode", "hierarchical", "--space", "small", "--batch", "3", "--out", str(tmp_path / "s"),
                 "--json")
    assert result.code == 0, result.err
    rows = list(csv.DictReader((tmp_path / "s" / "points.csv").open()))
    assert any("dp=2" in r["schedule"] for r in rows)
    for r in rows:
        assert float(r["stps"]) == pytest.approx(3 * float(r["utps"]), rel=1e-9), r["schedule"]


def test_optimize_front_counts_real_tokens(cli, tmp_path):
    result = cli("optimize", "--objective", "stps,utps", "--space", "small", "--batch", "3", "--trials", "4",
                 "--refine", "0", "--study", "real", "--storage", f"sqlite:///{tmp_path / 'real.db'}", "--out",
                 str(tmp_path / "out"), "--json")
    assert result.code == 0, result.err
    front = result.json()["pareto"]
    assert front
    for row in front:
        assert row["stps"] == pytest.approx(3 * row["utps"], rel=1e-9), row


def test_a_space_file_names_its_assumption_set(tmp_path):
    from deepstack.search.space import load_space, scenarios

    text = (Path(__file__).resolve().parents[1] / "search" / "spaces" / "small.toml").read_text()
    space = tmp_path / "small-paper.toml"
    (tmp_path / "nocs").mkdir()
    (tmp_path / "nocs" / "mini8.toml").write_text(
        (Path(__file__).resolve().parents[1] / "search" / "spaces" / "nocs" / "mini8.toml").read_text())
    space.write_text(text.replace('sequence_lengths = [[1024, 1024]]',
                                  'sequence_lengths = [[1024, 1024]]\nassumptions = "paper"'))
    assert {sc.assumptions for sc in scenarios(load_space(str(space)))} == {"paper"}
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('sequence_lengths = [[1024, 1024]]',
                                'sequence_lengths = [[1024, 1024]]\nassumptions = "papers"'))
    with pytest.raises(UserInputError, match="assumptions"):
        load_space(str(bad))


def test_paper_reads_the_2p5d_cluster_as_table3_prints_it():
    # Table 3: 200 GB/s per GPU between nodes; the default reads a DGX's one 400 Gb/s NIC per GPU (50 GB/s)
    assert assumptions.cluster_network("paper", "h100-star-32x") == "h100-star-32x-table3"
    assert assumptions.cluster_network("default", "h100-star-32x") == "h100-star-32x"
    assert assumptions.cluster_network("paper-without-table3_cluster_bw", "h100-star-32x") == "h100-star-32x"
    assert assumptions.cluster_network("paper", "tms1") == "tms1"
    table3 = catalog.load("nocs", "h100-star-32x-table3")
    assert table3.levels[-1].link_bw_GBps == 200.0


def test_r19_r20_are_computed_from_the_noc_sweep_under_both_sets():
    """The paper-findings study's R19/R20 rows (batch 4 only here): the SM counts of the area trade are the paper's
    (0.75 / 1 / 2× NoC bandwidth → 9 / 8 / 5 SMs, the area model's anchors), and each effect is a percentage of
    the nominal point's STPS with a verdict that follows the 5-point rule."""
    from deepstack.search.studies.paper_findings import NOC_POINTS, noc_findings

    class Quick:  # the study context: batch 4 only, progress counted
        finished = 0

        def param(self, key, default=None):
            return {"noc_batches": [4], "workers": 1}.get(key, default)

        def planned(self, tasks):
            self.tasks = tasks
            return lambda: setattr(self, "finished", self.finished + 1)

    ctx = Quick()
    rows = noc_findings(ctx)
    assert ctx.finished == ctx.tasks == 2 * 8  # both sets, the 8 distinct hardware points
    sms = rows[0]
    assert sms["paper_set"] == sms["default_set"] == "9 / 8 / 5" and sms["verdict"] == "holds"
    effects = [r for r in rows if r["finding"] == "R19" and isinstance(r["paper"], float)]
    assert [r["what"] for r in effects] == ["b4: spread over 0.25–4× hop latency (% STPS)",
                                            "b4: 0.75× bandwidth, all levels (% STPS)",
                                            "b4: 0.75× bandwidth with 0.25× hop latency (% STPS)"]
    for r in effects:
        agree = (r["paper_set"] > 0) == (r["paper"] > 0) and abs(r["paper_set"] - r["paper"]) <= NOC_POINTS
        assert r["verdict"] == ("holds" if agree else "fails")
    assert effects[0]["paper_set"] >= 0  # a spread
    (r20,) = [r for r in rows if r["finding"] == "R20"]
    assert r20["what"].startswith("b4:") and r20["verdict"] in ("holds", "fails")


def test_r22_compares_the_whole_schedule_space_with_tp_pp_dp_only():
    """R22 on the baseline hardware: the whole space holds every TP/PP/DP-only schedule, so its best is never
    worse (ratio ≥ 1). DeepSeek-V3 at b1024 has no TP/PP/DP-only schedule within 8 GiB per device by default (the
    weights and the replicated MLA cache of tp·pp ≤ 256 do not fit), which the row says instead of a ratio; the
    paper set's memory check counts FSDP weights as their shards, so there an FSDP schedule fits (and gathers
    every layer each step: far slower)."""
    from deepstack.search.studies.paper_findings import parallelism_findings

    class Context:
        def param(self, key, default=None):
            return {"workers": 1}.get(key, default)

        def planned(self, tasks):
            return lambda: None

    deepseek, qwen = parallelism_findings(Context())
    assert deepseek["default_set"] == "no TP/PP/DP-only schedule fits memory"
    assert set(deepseek["ratio"]) == {"paper"} and deepseek["ratio"]["paper"] >= 1.0
    assert deepseek["verdict"] == ("holds" if abs(deepseek["ratio"]["paper"] / 5.03 - 1) <= 0.15 else "fails")
    # the row names both schedules: the paper set's best TP/PP/DP-only one shards its weights (FSDP)
    assert deepseek["paper_set"].startswith(f"{deepseek['ratio']['paper']:.2f} (")
    assert deepseek["paper_set"].split(" over ")[1].split(",")[-2] == "fsdp"
    for name in ("paper", "default"):
        assert qwen["ratio"][name] >= 1.0
    assert qwen["verdict"] == ("holds" if abs(qwen["ratio"]["paper"] / 2.31 - 1) <= 0.15 else "fails")


def test_r23_the_hardware_search_with_and_without_ep():
    """R23 over two stackings: the best design with every schedule allowed, and with no schedule using EP. Under
    the paper set at b1024 both pick the shallower stack with more SMs (m = 6, 7 SMs): TP's whole-row weight
    runs (longer than a DRAM row) stream over successive banks, so TP/PP alone no longer gain from the deeper
    stack's banks (m = 9 before); the paper's search picks 7 and 8 layers, so the verdict fails."""
    from deepstack.search.studies.paper_findings import ep_hardware_findings

    class Context:
        def param(self, key, default=None):
            return {"workers": 1, "m_values": [6, 9]}.get(key, default)

        def planned(self, tasks):
            return lambda: None

    b1024, b4 = ep_hardware_findings(Context())
    assert b1024["paper_set"] == "with EP m = 6, 7 SMs; without m = 6, 7 SMs" and b1024["verdict"] == "fails"
    assert b4["what"].startswith("b4:") and b4["verdict"] in ("holds", "fails")


def test_r15_r16_prefill_stacking_grid():
    """R15 / R16 over the grid n ≤ m ∈ {2, 6}: prefill b4 is fastest at (6, 2) under the paper set, not the paper's
    (6, 6): its 4,096 tokens are split evenly over the 256 FFN replicas (16 each), so the step is compute-bound
    and the area two fewer TSV layers free for SMs wins (before the FFN counted a whole prompt per replica and
    (6, 6) won); the verdict follows the choice; the energy-optimal designs stack more layers than they connect
    (m > n), and R16's verdict follows its power-density band."""
    from deepstack.search.studies.paper_findings import R16_W_PER_MM2, stacked_connected_findings

    class Context:
        def param(self, key, default=None):
            return {"workers": 1, "m_values": [2, 6]}.get(key, default)

        def planned(self, tasks):
            return lambda: None

    rows = stacked_connected_findings(Context())
    fast = {r["what"]: r for r in rows if r["finding"] == "R15"}
    b4 = fast["prefill b4: the STPS-optimal (m, n)"]
    assert b4["paper_set"] == "(6, 2)" and b4["verdict"] == "fails"
    for r in (r for r in rows if r["finding"] == "R16"):
        m, n = (int(v) for v in r["paper_set"].split(")")[0].strip("(").split(","))
        density = float(r["paper_set"].split(", ")[-1].removesuffix(" W/mm²"))
        assert m > n
        assert r["verdict"] == ("holds" if R16_W_PER_MM2[0] <= density <= R16_W_PER_MM2[1] else "fails")


def test_r14_groups_follow_from_r13s_choices():
    """R14 by hand: the paper's own R13 choices (decode b4 9, decode b1024 7, prefill b4 7, prefill b1024 2) form
    its three groups; decode b1024 as deep as decode b4 does not (the groups must be strict); a regime without a
    feasible design never holds."""
    from deepstack.search.studies.paper_findings import _batch_groups

    def verdict(decode_b4, decode_b1024, prefill_b4, prefill_b1024):
        m = {("decode", 4): decode_b4, ("decode", 1024): decode_b1024, ("prefill", 4): prefill_b4,
             ("prefill", 1024): prefill_b1024}
        return _batch_groups({"paper": m, "default": m})["verdict"]

    assert verdict(9, 7, 7, 2) == "holds"
    assert verdict(9, 9, 7, 4) == "fails"  # ours under the paper set: decode b1024 as deep as decode b4
    assert verdict(9, 7, 7, 7) == "fails"  # large-batch prefill not the shallowest
    assert verdict(9, 7, None, 2) == "fails"


def _expert_groups(batch: int, assumptions: str) -> int:
    from deepstack.models.compute.workload import build_workload

    sc = Scenario(model="deepseek-v3", phase="decode", batch=batch, assumptions=assumptions)
    s = Schedule.parse("tp=16,ep=16")
    layers = build_workload(catalog.load("llms", "deepseek-v3"), sc, s.attention, s.ffn, 1)
    moe = next(layer for layer in layers if layer.kind == "moe")
    return next(op for op in moe.ops if op.name == "expert_gate_up").groups


def test_paper_reads_every_local_expert():
    # tp16·ep16 on 256 devices: 256 / 16 = 16 experts per device. Four requests route 32 token-slots, so a
    # device expects about two of its 16 experts to be active: the default reads those, the paper set all 16
    assert _expert_groups(4, "paper") == 16
    assert _expert_groups(4, "default") < 16
    assert _expert_groups(4, "paper-without-all_local_experts") == _expert_groups(4, "default")
    # at batch 1,024 every expert is active: the two sets read the same weights
    assert _expert_groups(1024, "paper") == _expert_groups(1024, "default") == 16


def test_under_the_paper_set_hbm_streams_on_the_3d_stacks_curve():
    # H200*: 6 stacks of 800 GB/s. The 3D layer: 409.375 GB/s over 32 banks = 12.79 GB/s per bank, 2 KiB rows.
    # 800 / 12.79 = 62.5 → 63 banks per stack, 378 in all, direct (no pseudo-channel interleaving)
    from deepstack.models.hardware import dram
    from deepstack.models.hardware.device import resolve_device

    h200 = catalog.load("chips", "h200-star")
    sc = build_scenario("deepseek-v3", "decode", 1, assumptions="paper")
    hbm = resolve_device(assumptions.chip_under(sc, h200)).dram
    assert (hbm.banks, hbm.row_B, hbm.interleave_ways) == (378, 2048, 1)
    assert hbm.peak_bw_Bps == pytest.approx(4.8e12) and hbm.capacity_B == pytest.approx(141 * 2**30)
    own = resolve_device(assumptions.chip_under(build_scenario("deepseek-v3", "decode", 1), h200)).dram
    assert (own.banks, own.row_B, own.interleave_ways) == (3072, 1024, 16)
    stack = resolve_device(catalog.load("chips", "standard")).dram  # the 3D stack the curve comes from
    total = 64 * 2**20
    for segment in (128, 256, 1024):  # the same fraction of the peak at every transaction size (≤ 1 % apart)
        on_curve = total / dram.stream_time_s(hbm, total, segment) / hbm.peak_bw_Bps
        assert on_curve == pytest.approx(total / dram.stream_time_s(stack, total, segment) / stack.peak_bw_Bps,
                                         rel=0.01)
    # 128-byte transactions: a row activation (tRCD + tRP = 28 ns) per 128 B moved in 10.1 ns at 800 / 63 GB/s
    # per bank, less refresh (93.3 % available) → 24.7 % of the peak
    transfer_s = 128 / (800e9 / 63)
    assert total / dram.stream_time_s(hbm, total, 128) / hbm.peak_bw_Bps == pytest.approx(
        transfer_s / (transfer_s + 28e-9) * 0.93333, rel=2e-3)
    assert total / dram.stream_time_s(own, total, 128) / own.peak_bw_Bps > 0.9  # HBM3's pseudo-channels hide them
    real = catalog.load("systems", "dgx-h200").architecture  # a real GPU keeps its HBM under either set
    assert assumptions.chip_under(sc, real).device.dram == real.device.dram


def test_table4_designs_stay_within_the_thermal_limit_under_the_paper_set():
    """The paper's Table 4 rows are all within the area and thermal limits (its §5.6): judged at 35 °C + R(m)·P,
    the hottest (batch 1,024, steps 6–7 at m = 7) stays below 85 °C, and above the 4-layer rows."""
    temperature = {}
    for row in paper.table4_rows():
        report = evaluate(paper.table4_point(row, "paper"), with_ttft=False, overlap=row.overlap)
        assert not any(v.startswith("thermal") for v in report.violations), (row.batch, row.step)
        temperature[row.batch, row.step] = report.metrics.temperature_c
    assert max(temperature.values()) < 85.0
    assert temperature[1024, 7] > temperature[1024, 5] > 35.0


def test_paper_memory_check_counts_fsdp_weights_as_their_shards():
    """FSDP's gathered layer: by default a device holds the largest layer it gathers beside its shards; the paper's
    check counts weights, KV cache and activations alone. DeepSeek-V3 prefill b1024, ep16·dp16·fsdp: the largest
    gathered unit is a MoE layer (it outweighs the 129,280 × 7,168 embedding), FP8, at m = 2 (4 GiB, 3.6 GiB
    usable) deciding whether the schedule fits."""
    mla = (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168
           + 2 * 7168)  # q down/up, kv down/up, o, their norms and the layer's two RMSNorms
    expert = 3 * 7168 * 2048  # gate, up, down
    router = 7168 * 256 + 256  # weights + bias
    moe_layer = mla + expert + router + 256 // 16 * expert  # one shared expert, 16 routed experts per EP rank
    from deepstack.models.parallel.memory import memory_footprint, usable_capacity_B
    plan = Schedule.parse("ep=16,dp=16,fsdp")
    sizes = {}
    for name in ("default", "paper", "paper-without-fsdp_shards_only"):
        sc = Scenario(model="deepseek-v3", phase="prefill", batch=1024, prefill_chunk_tokens=1024, assumptions=name)
        sizes[name] = memory_footprint(sc, plan)
    assert moe_layer > 129_280 * 7_168
    assert sizes["default"].weights_B - sizes["paper"].weights_B == moe_layer * 1
    assert sizes["paper-without-fsdp_shards_only"] == sizes["default"]
    usable = usable_capacity_B(2 * 2 * 2**30)
    assert sizes["paper"].total_B < usable < sizes["default"].total_B
    # without FSDP nothing is gathered: both sets count the same weights
    flat = Schedule.parse("ep=16,dp=16")
    assert (memory_footprint(Scenario(model="deepseek-v3", phase="prefill", batch=1024, assumptions="paper"), flat)
            .weights_B == memory_footprint(Scenario(model="deepseek-v3", phase="prefill", batch=1024), flat).weights_B)
