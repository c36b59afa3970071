"""The search study recipes (3d-vs-2.5d, ablation, noc-sensitivity, pareto) in quick mode, end to end through the
CLI, plus the pieces the ablation adds on top of the model (serialised re-timing, per-module schedules)."""

from __future__ import annotations

import csv
import itertools
import math
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import assert_run_record

from deepstack.models.evaluate import evaluate
from deepstack.models.hardware.device import resolve_device
from deepstack.schema import Schedule, build_scenario
from deepstack.search.studies.point_search import Hardware, flat_schedules, per_module_schedules, serialised_metrics

STUDIES = Path(__file__).resolve().parent.parent / "studies"
MINI8 = str(STUDIES.parent / "search" / "spaces" / "nocs" / "mini8.toml")
PNG_MAGIC = b"\x89PNG"
MIN_PNG_BYTES = 1000  # an empty 1-pixel PNG is ~70 B; any real plot is tens of kB
REL = 1e-9  # relative tolerance of recomputed ratios (CSV floats are printed with full precision)


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _float(value: str) -> float:
    return float(value) if value not in ("", None) else math.nan


def _check_3d_vs_2p5d(rows: list[dict]) -> None:
    assert len({r["area_mm2"] for r in rows}) == 1  # equal area on both sides, every row
    for r in rows:
        baselines = [_float(r[k]) for k in r if k.startswith("stps_") and not k.startswith(("stps_3d", "stps_2p5d"))]
        finite = [v for v in baselines if math.isfinite(v)]
        if finite:
            assert _float(r["stps_2p5d"]) == pytest.approx(max(finite), rel=REL)
        for suffix in ("", "_searched"):  # the fixed-stack (m = n = 4) and the stacking/NoC-searched 3D design
            expected = _float(r[f"stps_3d{suffix}"]) / _float(r["stps_2p5d"])
            if math.isfinite(expected):
                assert _float(r[f"speedup{suffix}"]) == pytest.approx(expected, rel=REL)
            else:
                assert math.isnan(_float(r[f"speedup{suffix}"]))
        if math.isfinite(_float(r["stps_3d"])):  # the searched pool contains the fixed-stack one
            assert _float(r["stps_3d_searched"]) >= _float(r["stps_3d"]) * (1 - REL)


def _check_ablation(rows: list[dict]) -> None:
    for batch in {r["batch"] for r in rows}:
        steps = [r for r in rows if r["batch"] == batch]
        assert [r["step"].split(" ", 1)[0] for r in steps] == [str(i) for i in range(1, 8)]
        stps = [_float(r["stps"]) for r in steps]
        assert all(math.isfinite(v) for v in stps), stps
        # each step's candidate pool contains the previous one's, so the best never gets worse
        assert all(b >= a * (1 - REL) for a, b in itertools.pairwise(stps)), stps
        assert not any(f"{d}=" in steps[0]["schedule"] for d in ("ep", "sp", "cp"))  # step 1: TP/PP/DP/FSDP only
        assert steps[0]["collectives"] == "fixed"
        for r in steps:  # the fixed-collective candidates are part of each step's pool
            fixed = _float(r["stps_fixed_collectives"])
            assert math.isnan(fixed) or fixed <= _float(r["stps"]) * (1 + REL)
        assert [r["overlap"] for r in steps] == ["off (serialised)"] * 4 + ["on"] * 3


def _check_noc_sensitivity(rows: list[dict]) -> None:
    for batch in {r["batch"] for r in rows}:
        mine = [r for r in rows if r["batch"] == batch]
        for level in {r["level"] for r in mine if r["sweep"] == "bandwidth"}:
            line = sorted((r for r in mine if r["sweep"] == "bandwidth" and r["level"] == level),
                          key=lambda r: float(r["scale"]))
            pes = [int(r["pes_per_device"]) for r in line]
            assert pes == sorted(pes, reverse=True), (level, pes)  # more NoC bandwidth costs area: never more PEs
        latency_pes = {r["pes_per_device"] for r in mine if r["sweep"] == "hop_latency"}
        assert len(latency_pes) == 1  # hop latency costs no area


def _check_pareto(rows: list[dict]) -> None:
    fronts = {"front_stps_utps": ("stps", "utps"), "front_stps_tokens_per_joule": ("stps", "tokens_per_joule")}
    for group_key in {(r["model"], r["batch"]) for r in rows}:
        group = [r for r in rows if (r["model"], r["batch"]) == group_key and r["feasible"] == "True"]
        for column, (a, b) in fronts.items():
            flagged = [r for r in group if r[column] == "True"]
            assert flagged, (group_key, column)
            for p in flagged:
                pa, pb = float(p[a]), float(p[b])
                for q in group:
                    qa, qb = float(q[a]), float(q[b])
                    assert not (qa >= pa and qb >= pb and (qa > pa or qb > pb)), (group_key, column, p, q)
        assert all(r["front_stps_utps"] == "False" for r in rows
                   if (r["model"], r["batch"]) == group_key and r["feasible"] == "False")


RECIPES = {
    "3d-vs-2.5d": ("comparison.csv", {"model", "phase", "batch", "stps_3d", "utps_3d", "stps_2p5d", "utps_2p5d",
                                      "speedup", "area_mm2", "stps_3d_searched", "speedup_searched"},
                   _check_3d_vs_2p5d),
    "ablation": ("steps.csv", {"batch", "step", "stps", "overlap", "stps_fixed_collectives", "chip", "noc",
                               "stacked_layers", "connected_layers", "hop_latency_scale", "level_bw_scales",
                               "schedule"}, _check_ablation),
    "noc-sensitivity": ("points.csv", {"batch", "sweep", "level", "scale", "pes_per_device", "stps", "schedule"},
                        _check_noc_sensitivity),
    "pareto": ("points.csv", {"model", "batch", "stps", "utps", "tokens_per_joule", "feasible", "front_stps_utps",
                              "front_stps_tokens_per_joule"}, _check_pareto),
}


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_quick_recipe_runs_and_its_numbers_hold(cli, tmp_path, name):
    csv_name, columns, check = RECIPES[name]
    result = cli("study", "run", str(STUDIES / f"{name}.toml"), "--quick", "--out", str(tmp_path), "--json")
    assert result.code == 0, result.err
    assert result.json()["unread_parameters"] == []  # the runner reads every parameter its recipe gives
    files = [Path(f) for f in result.json()["files"]]
    assert all(f.exists() and f.parent == tmp_path for f in files)
    table = tmp_path / csv_name
    assert table in files
    rows = _rows(table)
    assert rows and columns <= set(rows[0]), set(rows[0])
    pngs = [f for f in files if f.suffix == ".png"]
    assert pngs
    for png in pngs:
        data = png.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > MIN_PNG_BYTES, png
    if name == "pareto":  # one interactive plotly figure of the fronts
        html = tmp_path / "fronts.html"
        assert html in files and "plotly" in html.read_text().lower()
    summary = tmp_path / "summary.md"
    assert summary in files and "Quick mode" in summary.read_text()
    assert (STUDIES / f"{name}.md").exists()  # every recipe has its README
    assert_run_record(tmp_path, name)
    check(rows)


def test_a_model_that_fits_nowhere_is_reported_infeasible_not_a_crash(cli, tmp_path):
    recipe = tmp_path / "too-big.toml"
    recipe.write_text(f"""kind = "study"
name = "too-big"
question = "Does a model that fits neither side end as an infeasible row?"
runner = "baseline_comparison"

[parameters]
models = ["llama-3.1-405b"]
phases = ["decode"]
batches = [1]
chips_3d = ["standard"]
nocs_3d = ["{STUDIES / 'nocs' / 'tms1-chip16.toml'}"]
baselines = ["h100-star"]
baseline_noc = "{STUDIES / 'nocs' / 'h100-star-2x.toml'}"
""")
    result = cli("study", "run", str(recipe), "--out", str(tmp_path / "out"), "--json")
    assert result.code == 0, result.err
    (row,) = _rows(tmp_path / "out" / "comparison.csv")
    assert math.isnan(_float(row["speedup"])) and row["design_3d"] == "infeasible"
    assert row["status_h100-star"].startswith("memory")


def test_unequal_areas_are_a_user_error(cli, tmp_path):
    recipe = tmp_path / "unequal.toml"
    recipe.write_text(f"""kind = "study"
name = "unequal"
question = "Is an unequal-area comparison refused?"
runner = "baseline_comparison"

[parameters]
models = ["llama-3.2-1b"]
phases = ["decode"]
batches = [1]
chips_3d = ["standard"]
nocs_3d = ["{MINI8}"]
baselines = ["h100-star"]
baseline_noc = "{STUDIES / 'nocs' / 'h100-star-2x.toml'}"
""")
    result = cli("study", "run", str(recipe), "--out", str(tmp_path / "out"))
    assert result.code == 2 and "equal area" in result.err


@pytest.fixture(scope="module")
def small_moe():
    sc = build_scenario("qwen3-30b-a3b", "decode", 16, precision="a16w8")
    base = Hardware("standard", MINI8, 4, 4).design(sc)
    dev = resolve_device(base.chip, base.stacked_layers, base.connected_layers, base.network)
    return sc, base, dev


def test_serialised_metrics_match_the_evaluator_without_overlap_and_never_speed_up(small_moe):
    sc, base, dev = small_moe
    schedules = flat_schedules(sc, base.devices, dev.dram.capacity_B)
    schedules += per_module_schedules(sc, base.devices, dev.dram.capacity_B, max_pp=1)
    overlapped_somewhere = False
    for schedule in schedules:
        design = replace(base, schedule=schedule)
        report = evaluate(design, with_ttft=False)
        serial = serialised_metrics(design, report)
        direct = evaluate(design, with_ttft=False, overlap=False).metrics
        assert serial["stps"] == pytest.approx(direct["stps"], rel=REL)
        assert serial["tokens_per_joule"] == pytest.approx(direct["tokens_per_joule"], rel=REL)
        assert serial["stps"] <= report.metrics["stps"] * (1 + REL)
        overlapped_somewhere |= serial["stps"] < report.metrics["stps"] * (1 - 1e-6)
    assert overlapped_somewhere  # the EP/TP collectives of this MoE model do overlap with their GEMMs


def test_per_module_schedules_cover_the_same_devices_and_differ_between_modules(small_moe):
    sc, base, dev = small_moe
    schedules = per_module_schedules(sc, base.devices, dev.dram.capacity_B, max_pp=2)
    assert schedules
    for s in schedules:
        assert s.devices == base.devices and s.is_per_module and s.attention.tp != s.ffn.tp
        assert s.attention.ep == s.ffn.dp == 1 and s.pp <= 2


def test_the_flat_family_holds_vllms_form_counted_as_per_module(small_moe):
    # Qwen3-30B-A3B on 8 devices: each flat strategy with TP also in vLLM's form (its MoE TP folded into EP),
    # which the ablation's step 2 (flat only) must not pick: it is the paper's step-3 mapping
    from deepstack.search.studies.point_search import PointTask, search_point

    sc, _, _ = small_moe
    result = search_point(PointTask(Hardware("standard", MINI8, 4, 4), sc, ("flat",)))
    folded = [c for c in result.candidates if "moe_mode=replace_only" in c.schedule]
    flat = [c for c in result.candidates if "moe_mode" not in c.schedule]
    assert folded and flat
    assert all(c.per_module and not c.restricted for c in folded)
    assert not any(c.per_module for c in flat)
    with_tp = [c for c in flat if Schedule.parse(c.schedule).attention.tp > 1]
    assert len(folded) <= len(with_tp)  # at most one folded form per flat strategy with TP
    for c in folded:  # each keeps its strategy's attention layout, every routed expert whole
        schedule = Schedule.parse(c.schedule)
        assert schedule.ffn.tp == 1 and schedule.ffn.ep == schedule.attention.tp * schedule.attention.ep
