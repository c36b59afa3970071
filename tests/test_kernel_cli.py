"""`deepstack kernel`: one distributed kernel timed end to end through the CLI (models/gpu/overlapped)."""

from __future__ import annotations

from conftest import assert_user_error


def test_json_gives_the_time_and_its_parts(cli):
    result = cli("kernel", "--system", "dgx-h100", "--kind", "ag-gemm", "--m", "8192", "--n", "1376", "--k", "4096",
                 "--tile", "128x256x64", "--stages", "3", "--json")
    assert result.code == 0, result.err
    data = result.json()
    assert data["kind"] == "ag-gemm" and data["ranks"] == 8
    assert data["comm_B"] == 8192 // 8 * 4096 * 2 * 7  # seven remote shards of M/8 × K × 2 B
    assert 0.2e-3 < data["time_s"] < 0.4e-3  # measured 0.26 ms (validation/h100_kernels.csv)
    assert data["gemm"].startswith("tile 128x256x64, 3 stages")


def test_pure_communication_golden_time(cli):
    """EP dispatch is communication and copies, worked by hand: 1,024 tokens × top-2 × 4,096 × 2 B = 16 MiB sent per
    GPU, 7/8 of it to other GPUs at the payload rate NVLink delivers, 0.82 × 450 GB/s (dgx-h100's
    nccl_bus_efficiency; nccl-tests #212: ~370 GB/s) × 337/370 (SM-issued puts, DeepEP #16),
    plus one NVSwitch path (2 hops × 250 ns) and one step (10.1 µs, sglang #2904); the tokens copied in (8 MiB read
    and written) and the 16 MiB received copied out, at 0.87 × 3.35 TB/s; five launches/barriers × 10.1 µs."""
    result = cli("kernel", "--kind", "ep-dispatch", "--tokens", "1024", "--hidden", "4096", "--experts", "8",
                 "--topk", "2", "--json")
    assert result.code == 0, result.err
    sent_B = 1024 * 2 * 4096 * 2
    hbm_Bps = 0.87 * 3.35e12
    sm_put_Bps = 0.82 * 450e9 * 337 / 370
    expected_s = (sent_B * 7 / 8 / sm_put_Bps + 2 * 250e-9 + 10.1e-6 + 2 * (sent_B / 2) / hbm_Bps + 2 * sent_B / hbm_Bps
                  + 5 * 10.1e-6)
    assert abs(result.json()["time_s"] - expected_s) < 1e-12


def test_fp8_halves_a_compute_bound_gemm(cli):
    args = ("kernel", "--kind", "gemm-rs", "--m", "8192", "--n", "8192", "--k", "8192", "--tile", "128x256x64",
            "--json")
    fp16 = cli(*args).json()["parts"]["ref: gemm alone"]
    fp8 = cli(*args, "--dtype", "fp8").json()["parts"]["ref: gemm alone"]
    assert 0.4 < fp8 / fp16 < 0.6


def test_text_table(cli):
    result = cli("kernel", "--kind", "ulysses", "--batch", "1", "--seq", "8192", "--heads", "64", "--head-dim", "128",
                 "--out-features", "8192", "--sp", "8")
    assert result.code == 0, result.err
    assert "ulysses on dgx-h100 (8 GPUs, fp16)" in result.out and "gemm+all-to-all (eq. 5)" in result.out


def test_bad_input_is_one_line_and_exit_2(cli):
    assert_user_error(cli("kernel", "--kind", "foo"), "--kind", "ag-gemm")
    assert_user_error(cli("kernel", "--kind", "ep-dispatch", "--tokens", "8", "--hidden", "8", "--experts", "8"),
                      "--topk")
    assert_user_error(cli("kernel", "--kind", "gemm-rs", "--m", "0", "--n", "8", "--k", "8"), "--m", "positive")
    assert_user_error(cli("kernel", "--kind", "gemm-rs", "--m", "8", "--n", "8", "--k", "8", "--tile", "128x256"),
                      "--tile")
    assert_user_error(cli("kernel", "--kind", "gemm-rs", "--m", "8", "--n", "8", "--k", "8", "--dtype", "fp32"),
                      "--dtype", "fp8")
    assert_user_error(cli("kernel", "--kind", "ulysses", "--batch", "1", "--seq", "64", "--heads", "8",
                          "--head-dim", "64", "--out-features", "64", "--sp", "16"), "16")
    assert_user_error(cli("kernel", "--kind", "ag-gemm", "--m", "8", "--n", "8", "--k", "8", "--system", "nope"),
                      "nope")
