"""The GPU serving model against measured vLLM decode on 8×B200 (validation/vllm_b200.csv): the figures of
issue 18 that the shipped model reaches, asserted so a regression fails. One evaluation per row (~5 s)."""

from __future__ import annotations

import hashlib

import pytest

from deepstack.accuracy import serving
from deepstack.api import evaluate
from deepstack.errors import UserInputError
from deepstack.schema import Schedule


@pytest.fixture(scope="module")
def rows():
    return serving.modelled_rows()


def test_reference_file_is_the_shipped_copy():
    digest = hashlib.sha256(serving.reference_path().read_bytes()).hexdigest()
    assert digest == "9194f6365287b64e8216cba2f03acd7e601ee574e55735f8fd8d19186a6bacfc"


def test_harness_matches_evaluate(rows):
    row = next(r for r in rows if r.model == "llama-3.3-70b" and r.batch == 1 and r.graphs)
    report = evaluate(model="llama-3.3-70b", system="dgx-b200", parallel="tp=8", phase="decode", batch=1,
                      with_ttft=False, breakdown=False)
    assert 1 / report.metrics.utps == pytest.approx(row.step_s(*serving.shipped_constants()), rel=1e-9)


def test_cuda_graph_rows(rows):
    s = serving.scores(rows, serving.shipped_constants())
    assert s["graphs"]["rows"] == 22
    assert s["llama-3.3-70b graphs"]["mape_pct"] <= 12.0  # target ≤ 12 % met (6.7 %)
    assert s["graphs"]["mape_pct"] <= 10.0  # target ≤ 10 % met (9.04 %), with the fused-MoE call latency
    # target ≤ 12 % met (11.8 %) with DeepSeek's measured expert popularity (13.5 % under uniform routing);
    # b512 stays +39 % (docs/calibration.md §GPU execution, open gap)
    assert s["deepseek-v3 graphs"]["mape_pct"] <= 12.0


def test_eager_rows(rows):
    # target ≤ 15 % met: the eager host time is counted per layer (models/gpu/kernels.py) at one calibrated
    # cost per PyTorch call and a sourced Triton launch cost
    s = serving.scores(rows, serving.shipped_constants())
    assert s["eager"]["mape_pct"] <= 15.0  # 7.3 %
    assert s["deepseek-v3 eager"]["mape_pct"] <= 15.0  # 4.7 %
    assert s["llama-3.3-70b eager"]["mape_pct"] <= 15.0  # 9.5 %


def test_shipped_constants_are_the_calibration_on_all_rows(rows):
    assert serving.calibrate(rows) == serving.shipped_constants()


def test_leave_one_model_out(rows):
    out = {r["predicted"]: r for r in serving.cross_validate(rows)}
    # the per-call cost comes out nearly the same from either model (9.4 µs on Llama, 10.9 µs on DeepSeek-V3):
    # the counts carry the 7× ratio of host work per layer
    assert out["deepseek-v3"]["eager_op_us"] == pytest.approx(out["llama-3.3-70b"]["eager_op_us"], rel=0.2)
    assert out["llama-3.3-70b"]["mape_pct"] <= 15.0  # target ≤ 15 % met (10.1 %)
    assert out["deepseek-v3"]["eager_mape_pct"] <= 15.0  # 13.2 %
    assert out["deepseek-v3"]["mape_pct"] <= 15.0  # target ≤ 15 % met (12.5 %; graphs 11.8 %)


# ---------------------------------------------------------------------------------------------- prefill
# The prefill columns (System Prefill TPS = batch · input_len / TTFT of the last request; User Prefill Speed = mean
# of input_len / TTFT) against the modelled vLLM wave (models/gpu/prefill.py), with the shipped constants; nothing
# is fitted to them (docs/calibration.md §GPU prefill). The bounds are what the model reaches, so a regression
# fails; they are far from the 15 % target for DeepSeek-V3 (the open gap is documented there).


@pytest.fixture(scope="module")
def prefill_rows():
    from deepstack.accuracy import prefill

    return prefill.modelled_rows(serving.reference_path(), [])


def test_prefill_rows(prefill_rows):
    from deepstack.accuracy import prefill

    s = prefill.scores(prefill_rows, lambda r: r.model)
    assert s["all"]["rows"] == 44
    # figures with the GPU power law (docs/calibration.md §GPU power): budget-sized prefill steps hold the B200 at
    # its 1,000 W TDP, so DVFS lowers their clock (before it: Llama 26.5 %, DeepSeek-V3 66.6 %, user 25.6 % and
    # 45.0 %, the largest Llama row from 64 requests up 13.7 %)
    assert s["llama-3.3-70b"]["mape_pct"] <= 27.5  # 27.0 % (before the vLLM wave: 63.9 %)
    assert s["deepseek-v3"]["mape_pct"] <= 67.0  # 66.4 % (before: 290.5 %)
    assert s["llama-3.3-70b"]["user_mape_pct"] <= 25.5  # 25.0 %
    assert s["deepseek-v3"]["user_mape_pct"] <= 45.5  # 44.8 %
    # from 64 requests up Llama's steps are the budget's: within 16 % of the measured system rate (15.1 %, b1024
    # with CUDA graphs), 10 % of the user rate (the per-request speed, whose TTFTs come from the scheduler's order)
    big = [r for r in prefill_rows if r.model == "llama-3.3-70b" and r.batch >= 64]
    assert max(abs(r.error()) for r in big) <= 0.16
    assert max(abs(r.user_error()) for r in big if r.batch >= 128) <= 0.10


def test_prefill_leave_one_model_out(rows):
    out = {r["predicted"]: r for r in serving.cross_validate(rows)}
    assert out["llama-3.3-70b"]["prefill_mape_pct"] <= 28.0  # 27.4 % with DeepSeek-V3's decode constants
    assert out["deepseek-v3"]["prefill_mape_pct"] <= 74.0  # 73.7 % with Llama's


def test_cli_serving_json_carries_prefill_scores(cli):
    result = cli("accuracy", "serving", "--json")
    assert result.code == 0, result.err
    prefill = result.json()["prefill"]
    for key in ("llama-3.3-70b", "deepseek-v3", "llama-3.3-70b graphs", "deepseek-v3 eager", "all"):
        assert {"mape_pct", "user_mape_pct", "rows"} <= set(prefill["scores"][key])
    row = prefill["rows"][0]
    assert {"measured_tps", "model_tps", "measured_ttft_ms", "model_ttft_ms", "error_pct"} <= set(row)
    assert row["measured_ttft_ms"] == pytest.approx(row["batch"] * row["input_len"] / row["measured_tps"] * 1e3)


def test_mi325x_runs_on_its_own_figures():
    report = evaluate(model="llama-3.3-70b", system="mi325x-4", parallel="tp=4", phase="decode", batch=1,
                      with_ttft=False, breakdown=False)
    assert report.feasible
    assert 60 < report.metrics.stps < 80  # 73.4 tokens/s today


def test_cli_serving_table_plot_and_cross_validation(cli, tmp_path):
    """End to end: `accuracy serving --json --plot` gives the same MAPE as the harness and writes a PNG;
    `accuracy --cross-validate` prints both leave-one-model-out rows and the kernels' leave-one-kind-out rows."""
    png = tmp_path / "serving.png"
    result = cli("accuracy", "serving", "--json", "--plot", str(png))
    assert result.code == 0, result.err
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    graphs = [r for r in serving.modelled_rows() if r.graphs]
    assert result.json()["scores"]["graphs"]["mape_pct"] == pytest.approx(
        serving.mape_pct(graphs, serving.shipped_constants()), rel=1e-9)
    table = cli("accuracy", "--cross-validate")
    assert table.code == 0, table.err
    for needle in ("llama-3.3-70b", "deepseek-v3", "moe-gemm-ar", "ep-dispatch", "ulysses"):
        assert needle in table.out


def test_each_check_prints_its_own_cross_validation(cli):
    """`accuracy serving --cross-validate` and `accuracy kernels --cross-validate` give their own rows of the
    generalisation table, the same figures as `accuracy cross-validate`, and nothing of the other check's."""
    every = cli("accuracy", "cross-validate", "--json")
    assert every.code == 0, every.err
    for family, predicted in (("serving", {"deepseek-v3", "llama-3.3-70b"}),
                              ("kernels", {"ag-gemm", "gemm-rs", "moe-gemm-ar", "ep-dispatch", "ulysses"})):
        result = cli("accuracy", family, "--cross-validate", "--json")
        assert result.code == 0, result.err
        rows = result.json()
        assert {row["predicted"] for row in rows} == predicted
        assert rows == [row for row in every.json() if row["check"].startswith(family)]
        held_out = 12.0 if family == "kernels" else 13.0  # issue target ≤ 12 %; serving's DeepSeek-V3: 12.5 %
        assert all(row["mape_pct"] <= held_out for row in rows), rows


# ---------------------------------------------------------------------------------------------- other files
# `deepstack accuracy serving --reference FILE` checks any file of the shipped columns: held-out measurements of
# other models, GPUs and vLLM parallel layouts are scored the same way, with each system's shipped constants.

HEADER = "model,hardware,tp,ep,dp,pp,batch,input_len,output_len,eager_mode,cuda_graphs,measured_system_decode_tps\n"


@pytest.mark.parametrize(("text", "name"), [
    ("DeepSeek-V3 (display: DeepSeek V3)", "deepseek-v3"), ("Llama-3 70B (display: Llama3 70B)", "llama-3.3-70b"),
    ("Llama 3.1 405B", "llama-3.1-405b"), ("Qwen3-235B", "qwen3-235b-a22b"), ("DeepSeek-R1", "deepseek-r1"),
    ("Mixtral 8x7B", "mixtral-8x7b")])
def test_model_column_names_one_catalog_model(text, name):
    assert serving.model_name(text) == name


@pytest.mark.parametrize("text", ["Llama", "DeepSeek", "GPT-4 1.8T", ""])
def test_model_column_that_names_none_or_several_is_an_error(text):
    with pytest.raises(UserInputError, match="catalog_model column"):
        serving.model_name(text)


@pytest.mark.parametrize(("sizes", "moe", "schedule"), [
    ((8, 1, 1, 1), True, "tp=8"),  # the shipped rows: TP8, experts sharded by TP
    ((8, 8, 1, 1), True, "attn:tp=8;moe:ep=8"),  # --enable-expert-parallel: whole experts per GPU
    ((4, 1, 2, 1), True, "attn:tp=4,dp=2;moe:tp=8"),  # DP attention, experts TP over all tp × dp GPUs
    ((2, 8, 4, 1), True, "attn:tp=2,dp=4;moe:ep=8"),
    ((4, 1, 2, 1), False, "tp=4,dp=2"),  # a dense model's FFN follows attention
    ((8, 1, 1, 2), False, "tp=8;pp=2")])
def test_vllm_parallel_sizes_as_a_schedule(sizes, moe, schedule):
    text = serving.vllm_schedule(*sizes, moe=moe)
    assert text == schedule
    tp, _, dp, pp = sizes
    assert Schedule.parse(text).devices == tp * dp * pp


def test_expert_parallel_must_span_the_tp_dp_gpus():
    with pytest.raises(UserInputError, match="ep must be 1 or 8"):
        serving.vllm_schedule(8, 4, 1, 1, moe=True)


@pytest.mark.parametrize(("hardware", "system"), [("8x NVIDIA B200", "dgx-b200"), ("8x NVIDIA H100 SXM", "dgx-h100"),
                                                  ("8× H200", "dgx-h200"), ("4x AMD Instinct MI325X", "mi325x-4"),
                                                  ("8x AMD MI325X", "mi325x-8")])
def test_hardware_column_names_a_catalog_system(hardware, system):
    assert serving.system_name({"hardware": hardware}) == system
    assert serving.system_name({"hardware": "whatever", "system": "dgx-h200"}) == "dgx-h200"


def test_another_file_is_scored_row_by_row_as_evaluate_times_it(cli, tmp_path):
    """A held-out-style file (other GPUs, models, layouts; one run that cannot fit): every scored row's step is
    what `deepstack evaluate` gives for the same system, model, schedule and mode, its error is against the
    file's measurement, and the run that does not fit is listed, not scored."""
    ref = tmp_path / "held_out.csv"
    ref.write_text(HEADER + "Llama-3.3-70B,8x AMD MI325X,8,1,1,1,1,1024,1024,False,True,100\n"
                            "DeepSeek-R1,8x NVIDIA H200,8,8,1,1,64,1024,1024,False,True,2000\n"
                            "Qwen3-235B,8x NVIDIA B200,4,1,2,1,32,1024,1024,True,False,1500\n"
                            "Llama-3.1-405B,8x NVIDIA H100,8,1,1,1,16,1024,1024,False,True,300\n")
    result = cli("accuracy", "serving", "--reference", str(ref), "--json")
    assert result.code == 0, result.err
    data = result.json()
    expected = [("mi325x-8", "llama-3.3-70b", "tp=8", 1, True, 100), ("dgx-h200", "deepseek-r1",
                "attn:tp=8;moe:ep=8", 64, True, 2000), ("dgx-b200", "qwen3-235b-a22b", "attn:tp=4,dp=2;moe:tp=8",
                32, False, 1500)]
    assert [(r["system"], r["model"], r["parallel"]) for r in data["rows"]] == [e[:3] for e in expected]
    for row, (system, model, parallel, batch, graphs, measured) in zip(data["rows"], expected, strict=True):
        report = evaluate(model=model, system=system, parallel=parallel, phase="decode", batch=batch,
                          cuda_graphs=graphs, with_ttft=False, breakdown=False)
        assert row["model_tps"] == pytest.approx(report.metrics.stps, rel=1e-9)
        assert row["error_pct"] == pytest.approx(100 * (report.metrics.stps / measured - 1), rel=1e-9)
    [failure] = data["failures"]
    assert failure["line"] == 5
    assert failure["problem"].startswith("llama-3.1-405b on dgx-h100 (tp=8), batch 16: infeasible: memory")
    assert data["scores"]["mi325x-8 llama-3.3-70b graphs"]["rows"] == 1
    assert data["scores"]["dgx-b200"]["rows"] == 1 and data["scores"]["all"]["rows"] == 3


def test_a_row_short_of_the_optional_columns_scores(cli, tmp_path):
    ref = tmp_path / "short.csv"
    ref.write_text(HEADER.replace("\n", ",precision,system\n")
                   + "Llama-3.3-70B,8x NVIDIA B200,8,1,1,1,1,1024,1024,False,True,100\n")
    result = cli("accuracy", "serving", "--reference", str(ref), "--json")
    assert result.code == 0, result.err
    assert [(r["system"], r["model"]) for r in result.json()["rows"]] == [("dgx-b200", "llama-3.3-70b")]


def test_the_shipped_file_given_as_a_reference_scores_the_same(cli):
    for check in ("serving", "kernels", "network"):
        shipped = cli("accuracy", check, "--json").json()
        path = shipped["reference"]
        again = cli("accuracy", check, "--reference", path, "--json").json()
        assert again == shipped


@pytest.mark.parametrize(("body", "needle"), [
    (HEADER + "Llama-3.3-70B,8x Cerebras WSE,8,1,1,1,1,1024,1024,False,True,100\n", "hardware '8x Cerebras WSE'"),
    (HEADER + "Llama,8x NVIDIA B200,8,1,1,1,1,1024,1024,False,True,100\n", "model 'Llama'"),
    (HEADER + "DeepSeek-V3,8x NVIDIA B200,8,4,1,1,1,1024,1024,False,True,100\n", "ep must be 1 or 8"),
    (HEADER + "Llama-3.3-70B,8x NVIDIA B200,8,1,1,1,one,1024,1024,False,True,100\n", "line 2"),
    ("model,batch\nLlama-3.3-70B,1\n", "needs the columns"),
    (HEADER + "Llama-3.3-70B,8x NVIDIA B200,8,1,1,1,0,1024,1024,False,True,100\n", "line 2: batch:"),
    (HEADER + "Llama-3.3-70B,8x NVIDIA B200,8,1,1,1,1,1024,1024,False,True,0\n", "positive throughput"),
    (HEADER.replace("\n", ",precision\n") + "Llama-3.3-70B,8x NVIDIA B200,8,1,1,1,1,1024,1024,False,True,9,zz\n",
     "line 2: precision:"),
    (HEADER + "Llama-3.3-70B,8x NVIDIA B200,8\n", "line 2:"),  # a row that stops short
])
def test_a_bad_reference_file_is_one_line_and_status_2(cli, tmp_path, body, needle):
    ref = tmp_path / "bad.csv"
    ref.write_text(body)
    result = cli("accuracy", "serving", "--reference", str(ref))
    assert result.code == 2
    assert result.err.count("\n") == 1 and result.err.startswith("deepstack: error:")
    assert needle in result.err


@pytest.mark.parametrize("check", ["serving", "kernels", "network"])
def test_a_missing_or_unreadable_reference_is_one_line_and_status_2(cli, tmp_path, check):
    missing = cli("accuracy", check, "--reference", str(tmp_path / "none.csv"))
    assert missing.code == 2 and "--reference" in missing.err and missing.err.count("\n") == 1
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    unreadable = cli("accuracy", check, "--reference", str(binary))
    assert unreadable.code == 2 and "cannot read" in unreadable.err and unreadable.err.count("\n") == 1
