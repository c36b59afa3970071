"""A space's ``per_module`` axis: the sweeps and ``optimize``'s trials search each MoE strategy also in vLLM's form
(the MoE block's TP folded into EP, attention keeping it), as ``deepstack evaluate`` and the studies do."""

from __future__ import annotations

import pytest
from conftest import write_space

from deepstack.models.evaluate import evaluate
from deepstack.schema import Schedule
from deepstack.search.bilevel import InnerTask, solve
from deepstack.search.problem import Problem
from deepstack.search.space import base_points, design_point, load_space, scenarios
from deepstack.search.sweep.points import SweepTask, evaluate_hardware


def _space(tmp_path, per_module: bool) -> str:
    """Qwen3-30B-A3B (128 routed experts) decode b64 on the 8 devices of mini8, one hardware point (Standard,
    m = n = 8: 16 GiB per device, enough for every strategy that the pruning rules keep)."""
    return str(write_space(tmp_path / f"moe8-{per_module}.toml", model="qwen3-30b-a3b", chips=("standard",),
                           stacked=(8,), connected=(8,), hops=(1.0,), level_bw=(1.0,), fsdp=(False,),
                           per_module=per_module))


def _rows(ref: str) -> list[dict]:
    space = load_space(ref)
    return evaluate_hardware(SweepTask(ref, scenarios(space)[0].model_dump_json(), base_points(space)[0], False))


def test_sweep_rows_hold_each_moe_strategy_in_vllm_form(tmp_path):
    on, off = _rows(_space(tmp_path, True)), _rows(_space(tmp_path, False))
    flat = [r for r in on if "moe_mode" not in r["schedule"]]
    assert flat == off  # the flat rows are the same with and without the per-module forms
    # 10 strategies fit (pp8, ep2·pp4, ep4·pp2, ep8, tp2·pp4, tp2·ep2·pp2, tp2·ep4, tp4·pp2, tp4·ep2, tp8); the 6 with
    # TP fold, TP·EP ∈ {2, 4, 8} dividing the 128 experts
    assert len(off) == 10
    folded = [r for r in on if "moe_mode" in r["schedule"]]
    assert len(folded) == 6 and len(on) == 16
    for row in folded:  # each label reads back as the schedule it names, experts over TP·EP, none split
        schedule = Schedule.parse(row["schedule"])
        assert str(schedule) == row["schedule"] and schedule.moe_mode == "replace_only"
        assert schedule.ffn.tp == 1 and schedule.ffn.ep == schedule.attention.tp * schedule.attention.ep
    best = max(folded, key=lambda r: r["stps"])
    space = load_space(_space(tmp_path, True))
    again = evaluate(design_point(space, base_points(space)[0], scenarios(space)[0], Schedule.parse(best["schedule"])))
    assert again.metrics["stps"] == best["stps"]  # what `evaluate --parallel <label>` reports, to the last bit
    # on this point vLLM's form of tp4·ep2 beats every flat strategy (its experts whole: 8 routed experts' GEMMs
    # per device instead of 32 quarter-width ones)
    assert best["schedule"] == "attn:tp=4,ep=2;ffn:ep=8;moe_mode=replace_only"
    assert best["stps"] > max(r["stps"] for r in flat)


@pytest.mark.parametrize("per_module", [True, False])
def test_trial_solves_the_space_schedules(tmp_path, per_module):
    space = load_space(_space(tmp_path, per_module))
    problem = Problem(space, scenarios(space)[0], ("stps", "tokens_per_joule"))
    hw = base_points(space)[0]
    exact = solve(InnerTask(problem, hw, None))
    assert exact.schedules == (16 if per_module else 10)
    # the fastest schedule (vLLM's form of tp4·ep2, above) is on the point's front when searched
    assert any(r["schedule"] == "attn:tp=4,ep=2;ffn:ep=8;moe_mode=replace_only" for r in exact.front) == per_module
    assert exact.report["schedule"]["text"] == exact.representative["schedule"]
    if per_module:  # a screen keeps a folded elite schedule by its label
        label = "attn:tp=4,ep=2;ffn:ep=8;moe_mode=replace_only"
        screened = solve(InnerTask(problem, hw, (label,)))
        assert screened.schedules == 1 and screened.representative["schedule"] == label


def test_sweep_front_holds_vllm_form_and_evaluate_reproduces_it(cli, tmp_path):
    """End to end: the exhaustive sweep's front holds the folded schedule (the fastest here), and its id
    reproduces it through `deepstack evaluate --design`."""
    out = tmp_path / "sweep"
    result = cli("sweep", "--mode", "exhaustive", "--space", _space(tmp_path, True), "--out", str(out),
                 "--workers", "1", "--json")
    assert result.code == 0, result.err
    front = result.json()["pareto"]
    fastest = max(front, key=lambda row: row["stps"])
    assert fastest["schedule"] == "attn:tp=4,ep=2;ffn:ep=8;moe_mode=replace_only"
    again = cli("evaluate", "--design", fastest["id"], "--front", str(out / "pareto.csv"), "--json")
    assert again.code == 0, again.err
    assert again.json()["metrics"]["stps"] == fastest["stps"]
    assert again.json()["schedule"]["text"] == fastest["schedule"]
