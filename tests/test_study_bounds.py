"""studies/check_bounds.py, the matrix-peak check of study results: its FLOPs per token worked by hand, and a
row just above the bound flagged where one just below passes (the study results themselves are not committed;
the script checks them after a run)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from deepstack import catalog

_SPEC = importlib.util.spec_from_file_location(
    "check_bounds", Path(__file__).resolve().parent.parent / "studies" / "check_bounds.py")
check_bounds = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(check_bounds)


def test_ffn_flops_per_token_by_hand():
    # DeepSeek-V3: 3 dense layers of 18,432 and 58 MoE layers of 8 routed + 1 shared experts of 2,048, hidden
    # 7,168: 6 · 7,168 · (55,296 + 1,069,056) = 48,356,130,816; Llama-3.3-70B 6 · 8,192 · 80 · 28,672 (no MoE)
    assert check_bounds.ffn_flops_per_token(catalog.load("llms", "deepseek-v3")) == 48_356_130_816
    assert check_bounds.ffn_flops_per_token(catalog.load("llms", "llama-3.3-70b")) == 112_742_891_520


def test_a_row_above_the_matrix_peak_is_flagged(tmp_path):
    # Standard on TMS1 at m = n = 4: 256 devices of 9 PEs × 4,096 FLOPs per cycle × 1.4 GHz = 13.21 PFLOP/s; over
    # Llama-3.3-70B's 112.7 GFLOPs per token, 117,187.5 STPS at most
    bound = 256 * 9 * 4096 * 1.4e9 / 112_742_891_520
    assert bound == 117_187.5
    study = tmp_path / "some-study"
    study.mkdir()
    header = "model,phase,batch,chip,noc,stacked_layers,connected_layers,pes_per_device,schedule,stps\n"
    row = "llama-3.3-70b,prefill,1024,standard,tms1,4,4,9,tp=8,{}\n"
    (study / "points.csv").write_text(header + row.format(0.99 * bound) + row.format(1.01 * bound)
                                      + "llama-3.3-70b,prefill,1024,standard,tms1,4,4,,tp=8,\n")  # a failed cell
    checked, broken = check_bounds.rows_above_peak(study / "points.csv")
    assert checked == 2 and len(broken) == 1 and "118,359 > 117,188" in broken[0]
    assert check_bounds.main([str(tmp_path)]) == 1
