"""What a new user met in a first hour (a walkthrough of the README on 2026-12-07), one test each: a flag's error
names that flag; a space whose stack heights no search evaluates is refused, not swept into nothing; an explicit
schedule with an empty pipeline stage or an empty microbatch is refused; --pes cannot exceed what fits; a memory
refusal suggests what can help on that machine; the schedule in a report's first line tells two runs apart; the
Python API takes the command's keywords; counts read as counts; --until-stall says what it stopped."""

from __future__ import annotations

import inspect

import pytest
from conftest import MINI8, assert_user_error, write_space

import deepstack
from deepstack.api import evaluation as api_evaluation
from deepstack.cli.search import _optimize_summary
from deepstack.errors import InfeasibleError
from deepstack.schema import Schedule

LLAMA_1B = ("evaluate", "--model", "llama-3.2-1b", "--chip", "standard")


def test_an_l1_bandwidth_out_of_range_is_refused_naming_its_own_flag(cli):
    # the standard chip's L1 moves 256 B/cycle; an SRAM option may scale it up to 64×: 16,384 B/cycle
    assert_user_error(cli(*LLAMA_1B, "--l1-bw-B-per-cycle", "1e9"), "--l1-bw-B-per-cycle: at most 16384 B/cycle")
    assert cli(*LLAMA_1B, "--l1-bw-B-per-cycle", "16384", "--json").code == 0


def test_a_space_whose_stacks_are_all_deeper_than_the_searches_go_is_refused(cli, tmp_path):
    space = write_space(tmp_path / "deep.toml", chips=("standard",), hops=(1.0,), stacked=(12,), connected=(2,))
    for args in (("validate", str(space)), ("sweep", "--mode", "exhaustive", "--space", str(space), "--out", "o")):
        assert_user_error(cli(*args), "hardware.stacked_layers: no value ≤ 10 (got [12])")
    assert not (tmp_path / "o").exists()


def test_an_explicit_schedule_with_an_empty_stage_or_microbatch_is_refused(cli):
    # llama-3.2-1b has 16 layers; at batch 1 a decode replica holds one request, so one microbatch
    on_tms1 = (*LLAMA_1B, "--noc", "tms1")
    assert_user_error(cli(*on_tms1, "--batch", "4", "--parallel", "pp=256"),
                      "--parallel: pp=256 > 16 layers: empty pipeline stages of llama-3.2-1b")
    assert_user_error(cli(*on_tms1, "--batch", "1", "--parallel", "tp=128,pp=2,microbatches=2"),
                      "--parallel: microbatches=2 but each data replica serves 1 request in decode: at most 1")
    assert cli(*on_tms1, "--batch", "1", "--parallel", "tp=128,pp=2,microbatches=1", "--json").code == 0
    # a prefill microbatch may hold a slice of a prompt: more microbatches than requests is a schedule
    assert cli(*on_tms1, "--phase", "prefill", "--batch", "1", "--parallel", "tp=128,pp=2,microbatches=2",
               "--json").code == 0


def test_more_pes_than_fit_are_refused(cli):
    on_tms1 = (*LLAMA_1B, "--noc", "tms1", "--parallel", "tp=8,dp=32", "--batch", "64")
    # the area model fits 8 PEs in a standard cluster at m = n = 4 on TMS1 (docs/model.md, Table 2's 8)
    assert_user_error(cli(*on_tms1, "--pes", "9"), "--pes: at most 8 PEs fit standard's 100 mm²")
    assert cli(*on_tms1, "--pes", "8", "--json").json()["hardware"]["pes_per_device"] == 8
    assert_user_error(cli("evaluate", "--model", "llama-3.3-70b", "--system", "dgx-h100", "--parallel", "tp=8",
                          "--pes", "133"), "--pes: at most the 132 PEs dgx-h100-gpu has")


def test_a_memory_refusal_suggests_what_helps_on_that_machine():
    def refusal(**where) -> str:
        with pytest.raises(InfeasibleError) as caught:
            api_evaluation.evaluate(model="llama-3.3-70b", batch=1, **where)
        return str(caught.value)

    assert refusal(chip="standard").endswith("shard the model over a network of devices (--noc)")
    assert refusal(chip="standard", noc="tms1", parallel="dp=256").endswith(
        "shard the model further (--parallel: TP, EP, PP), serve a smaller --batch or stack more DRAM layers")
    assert refusal(system="dgx-h100", parallel="dp=8").endswith("or take a system with more memory")


def test_the_first_line_names_microbatches_explicit_algorithms_and_scaled_links(cli):
    out = cli("evaluate", "--model", "llama-3.2-1b", "--chip", "standard", "--noc", "tms1", "--batch", "64",
              "--parallel", "tp=8,dp=8,pp=4,microbatches=8,all_reduce=ring", "--hop-latency-scale", "2").out
    first = " ".join(out.split("metrics")[0].split())  # the first line, however the console wraps it
    assert "over tms1* (*: its hop latency or link bandwidths scaled)" in first
    assert "(tp=8,dp=8,pp=4,microbatches=8; all_reduce=ring): feasible" in first
    tuned = cli("evaluate", "--model", "llama-3.2-1b", "--chip", "standard", "--noc", "tms1", "--batch", "64",
                "--parallel", "tp=8,dp=8,pp=4").out
    assert "(tp=8,dp=8,pp=4; 4 microbatches): feasible" in " ".join(tuned.split("metrics")[0].split())


def test_a_schedules_text_keeps_its_chosen_microbatches():
    # the text is what the CSVs and fronts carry and what --parallel reads back: a chosen count must survive it
    for text in ("tp=4,pp=2,microbatches=8", "attn:tp=4;ffn:ep=4;pp=2,microbatches=3", "dp=2,pp=4,microbatches=2,fsdp"):
        schedule = Schedule.parse(text)
        assert str(schedule) == text and Schedule.parse(str(schedule)) == schedule
    assert str(Schedule.parse("tp=4,pp=2")) == "tp=4,pp=2"  # a tuned count is not part of the schedule


def test_a_degree_without_a_value_says_the_form_it_needs(cli):
    assert_user_error(cli(*LLAMA_1B, "--noc", "tms1", "--parallel", "tp8"),
                      "--parallel: 'tp8' needs the form name=value, e.g. tp=8")


def test_the_python_api_takes_every_keyword_of_the_command():
    command = set(inspect.signature(api_evaluation.evaluate).parameters)
    assert command <= set(inspect.signature(deepstack.evaluate).parameters)
    point = {"model": "llama-3.2-1b", "chip": "standard", "noc": "tms1", "parallel": "tp=8,dp=32", "batch": 64,
             "hop_latency_scale": 2.0, "level_bw_scale": "0.5,1,1", "pes": 6, "assumptions": "paper",
             "with_ttft": False}
    assert deepstack.evaluate(**point).as_dict() == api_evaluation.evaluate(**point).as_dict()


def test_the_no_schedule_fits_refusal_reads_as_counts_by_rule():
    with pytest.raises(InfeasibleError) as caught:
        api_evaluation.evaluate(model="deepseek-v3", chip="standard", noc=str(MINI8), batch=1)
    message = str(caught.value)
    assert message.startswith("no schedule of 8 devices fits: strategies pruned by rule ")
    assert "{" not in message and "memory: 8.0 GiB per device" in message


def _summary(capsys, **run) -> list[str]:
    run = {"told": 40, "planned": 40, "resumed_from": 0, "refined": 0, "repaired": 1, "infeasible": 0,
           "over_thermal_limit": 0, "hypervolume": 0.5, "seed": 0, "evaluations": 100, "stalled": False,
           "interrupted": None, **run}
    _optimize_summary({"run": run})
    return capsys.readouterr().out.splitlines()


def test_until_stall_says_whether_it_cut_the_run_short(capsys):
    assert _summary(capsys, told=1)[0].startswith("this run: 1 trial told, 1 proposal repaired, 0 infeasible")
    # the sampler stalled, then the local search ran the rest: every planned trial ran
    assert _summary(capsys, stalled=True, refined=12)[1] == (
        "the sampler stopped early (the hypervolume did not grow for the --until-stall trials); the local search ran "
        "the remaining trials")
    # the stall came with the last batch, no local search: nothing was cut short
    assert _summary(capsys, stalled=True)[1] == ("the hypervolume did not grow over the last --until-stall trials "
                                                 "(every planned trial ran)")
    assert _summary(capsys, stalled=True, told=28)[1] == ("stopped 12 trials early: the hypervolume did not grow "
                                                          "for the --until-stall trials")
    assert len(_summary(capsys)) == 1


def test_a_given_schedule_the_search_would_skip_is_evaluated_with_a_note(cli):
    # llama-3.2-1b has 32 attention heads: TP 256 does not divide them (a pruning rule); TP 8 does
    on_tms1 = (*LLAMA_1B, "--noc", "tms1", "--batch", "4")
    skipped = cli(*on_tms1, "--parallel", "tp=256")
    assert skipped.code == 0 and ("note: the schedule search skips this schedule (tp=256 does not divide 32 "
                                  "attention heads); it was evaluated as given") in skipped.out
    assert cli(*on_tms1, "--parallel", "tp=256", "--json").json()["search"] == {
        "schedule": "given", "search_would_skip": "tp=256 does not divide 32 attention heads"}
    assert "search" not in cli(*LLAMA_1B, "--noc", "tms1", "--batch", "64", "--parallel", "tp=8,dp=32", "--json").json()


def test_a_pipelines_operator_times_say_they_cover_every_pass_of_the_busiest_stage(cli):
    # pp = 2 at batch 1: one request, one microbatch, but a token's step crosses both stages: two stage passes
    out = cli(*LLAMA_1B, "--noc", "tms1", "--batch", "1", "--parallel", "tp=128,pp=2").out
    line = next(line for line in out.splitlines() if line.startswith("busiest device:"))
    assert "per forward pass (pipeline stage" in line and " of 2: " in line and "× 2 passes" in line
    step_ms, stage_ms = float(line.split()[2]), float(line.split(": ")[2].split()[0])
    assert step_ms == pytest.approx(2 * stage_ms, abs=0.002)


def test_a_kernel_reference_without_its_columns_names_the_missing_ones(cli, tmp_path):
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    assert_user_error(cli("accuracy", "kernels", "--reference", str(tmp_path / "bad.csv")),
                      "has no column kernel, point_index, measured_time_ms")


def test_a_schedule_on_part_of_a_system_says_how_to_fill_it(cli):
    done = cli("evaluate", "--model", "llama-3.3-70b", "--system", "dgx-h100", "--parallel", "tp=4")
    assert_user_error(done, "--parallel: the schedule uses 4 devices but dgx-h100-fabric has 8 (dp=2 runs 2 copies "
                            "of it over them)")
    assert cli("evaluate", "--model", "llama-3.3-70b", "--system", "dgx-h100", "--parallel", "tp=4,dp=2").code == 0


def test_a_steady_state_prefill_is_refused_not_ignored(cli):
    done = cli("evaluate", "--model", "llama-3.3-70b", "--system", "dgx-h100", "--parallel", "tp=8", "--phase",
               "prefill", "--steady-state")
    assert_user_error(done, "--steady-state: a server's steady state is a decode")


def test_a_model_whose_weights_alone_overflow_the_server_is_told_so():
    # DeepSeek-V3 at 8-bit weights: 671 G parameters over 8 H100s is 78 GiB a GPU against 72 GiB usable; no
    # schedule and no batch helps, fewer bits does
    with pytest.raises(InfeasibleError) as caught:
        api_evaluation.evaluate(model="deepseek-v3", system="dgx-h100", parallel="tp=8", batch=1)
    assert str(caught.value).endswith("its weights alone need 78.1 GiB per GPU spread evenly over all 8: take a "
                                      "system with more memory, or store the weights in fewer bits (--precision "
                                      "a16w4)")
    # at 16 bits, 8 would still not fit (78.1 GiB): the hint names the width that does
    with pytest.raises(InfeasibleError, match=r"156\.2 GiB per GPU .* \(--precision a16w4\)$"):
        api_evaluation.evaluate(model="deepseek-v3", system="dgx-h100", parallel="tp=8", batch=1, precision="a16w16")


def test_a_gpus_device_table_states_what_its_operators_are_timed_at():
    # H100 SXM: 3.35 TB/s peak; every operator is timed at no more than 87 % of it (hbm_efficiency), so that is
    # the sustained figure reported, not the 3D bank model's 93 %; its die is given (814 mm²), not sized by the
    # area model (which would count 1,007 mm² of SMs, L2 and PHYs)
    hw = api_evaluation.evaluate(model="llama-3.3-70b", system="dgx-h100", parallel="tp=8", with_ttft=False,
                                 breakdown=False).hardware
    assert hw.dram_effective_bw_TBps == pytest.approx(3.35 * 0.87)
    assert dict(hw.area_per_device_mm2) == {"die_mm2": 814.0} and hw.pes_per_device == 132


def test_the_paper_set_on_a_real_gpu_server_is_refused(cli):
    # its choices (35 °C junction, every local expert read, the 3D stack's DRAM curve, ...) describe the paper's
    # 3D designs and abstract baselines; applied to a measured GPU they changed its numbers silently
    done = cli("evaluate", "--model", "llama-3.3-70b", "--system", "dgx-h100", "--parallel", "tp=8", "--assumptions",
               "paper")
    assert_user_error(done, "--assumptions paper: the paper's choices describe its 3D designs")
    assert cli("evaluate", "--model", "llama-3.2-1b", "--chip", "h200-star", "--assumptions", "paper").code == 0
