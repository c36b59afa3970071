"""The GPU serving model against measured vLLM decode on 8×B200 (validation/vllm_b200.csv): the figures of
issue 18 that the shipped model reaches, asserted so a regression fails. One evaluation per row (~5 s)."""

from __future__ import annotations

import hashlib

import pytest

from deepstack.accuracy import serving
from deepstack.api import evaluate


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
    assert s["llama-3.3-70b graphs"]["mape_pct"] <= 12.0  # target ≤ 12 % met (6.8 %)
    assert s["graphs"]["mape_pct"] <= 10.0  # target ≤ 10 % met (9.84 %), with the fused-MoE call latency
    # NOT MET, achieved figure asserted: DeepSeek-V3 13.5 % (target ≤ 12 %): b8–b128 −11…−21 %, b512 +40 %
    # (the MLA decode kernel's bandwidth at 16 heads per GPU has no public B200 figure; docs/calibration.md)
    assert s["deepseek-v3 graphs"]["mape_pct"] < 14.0


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
    assert out["llama-3.3-70b"]["mape_pct"] <= 15.0  # target ≤ 15 % met (10.2 %)
    assert out["deepseek-v3"]["eager_mape_pct"] <= 15.0  # 13.2 %
    assert out["deepseek-v3"]["mape_pct"] <= 15.0  # target ≤ 15 % met (13.4 %; graphs 13.6 %)


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
