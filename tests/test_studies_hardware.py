"""The hardware study recipes (dram-layers, layers-e2e, stacked-vs-connected, thermal) in quick mode, end to end
through the CLI, with one behavioural check per study on the numbers it writes."""

from __future__ import annotations

import csv
import math
import tomllib
from pathlib import Path

import pytest
from conftest import assert_run_record, assert_user_error

from deepstack.search.studies.cells import EVALUATED
from deepstack.search.studies.temperatures import share_above

STUDIES = Path(__file__).resolve().parents[1] / "studies"
LAYER_BW_GBps = 409.375  # standard chip: one connected layer's TSV bandwidth (catalog, from paper Table 2 notes)

EXPECTED_COLUMNS = {
    "dram-layers": {"l1_KiB", "l1_bw_B_per_cycle", "stacked_layers", "connected_layers", "pes_per_device",
                    "theoretical_bw_GBps", "curve_bw_GBps", "little_bw_GBps", "l1_fill_bw_GBps", "effective_bw_GBps",
                    "bound"},
    "layers-e2e": {"phase", "batch", "stacked_layers", "status", "stps", "schedule", "feasible", "area_pes_mm2",
                   "area_l2_mm2", "area_dram_interface_mm2", "area_noc_mm2", "area_overhead_mm2", "area_total_mm2"},
    "stacked-vs-connected": {"phase", "batch", "stacked_layers", "connected_layers", "objective", "status", "stps",
                             "tokens_per_joule", "schedule", "w_per_mm2", "feasible"},
    "thermal": {"dvfs", "ambient_c", "chip", "noc", "phase", "batch", "stacked_layers", "connected_layers", "status",
                "temperature_c", "power_density_W_per_mm2", "clock_limit", "feasible", "violations", "above_limit",
                "thermal_violation"},
}


def _read(path: str) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def cache() -> dict:
    return {}


def _run(cli, tmp_path_factory, cache: dict, name: str) -> dict:
    """Run one recipe with --quick once per test module; returns the CLI's JSON result."""
    if name not in cache:
        out = tmp_path_factory.mktemp(name)
        result = cli("study", "run", str(STUDIES / f"{name}.toml"), "--quick", "--out", str(out), "--json")
        assert result.code == 0, (result.out, result.err)
        cache[name] = result.json()
        assert cache[name]["unread_parameters"] == []  # the runner reads every parameter its recipe gives
    return cache[name]


def _files(result: dict, suffix: str) -> list[str]:
    return [f for f in result["files"] if f.endswith(suffix)]


@pytest.mark.parametrize("name", sorted(EXPECTED_COLUMNS))
def test_quick_recipe_writes_csv_pngs_and_summary(cli, tmp_path_factory, cache, name):
    result = _run(cli, tmp_path_factory, cache, name)
    points = [f for f in _files(result, ".csv") if f.endswith("points.csv")]
    assert len(points) == 1
    rows = _read(points[0])
    assert rows, "points.csv has no rows"
    assert EXPECTED_COLUMNS[name] <= set(rows[0]), EXPECTED_COLUMNS[name] - set(rows[0])
    pngs = _files(result, ".png")
    assert pngs
    for png in pngs:
        data = Path(png).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 1000, png
    summary = Path(_files(result, "summary.md")[0]).read_text()
    question = tomllib.loads((STUDIES / f"{name}.toml").read_text())["question"]
    assert question in summary
    assert_run_record(Path(result["out"]), name)


def test_dram_layers_theoretical_is_layers_times_layer_bw_and_effective_is_the_binding_bound(
        cli, tmp_path_factory, cache):
    rows = _read(next(f for f in _run(cli, tmp_path_factory, cache, "dram-layers")["files"]
                      if f.endswith("points.csv")))
    bounds = {"transaction curve": "curve_bw_GBps", "Little's law": "little_bw_GBps", "L1 fill": "l1_fill_bw_GBps"}
    for r in rows:
        m = int(r["stacked_layers"])
        assert int(r["connected_layers"]) == m
        assert float(r["theoretical_bw_GBps"]) == pytest.approx(m * LAYER_BW_GBps, rel=1e-12)
        effective = float(r["effective_bw_GBps"])
        assert effective <= float(r["theoretical_bw_GBps"])
        if int(r["pes_per_device"]) == 0:
            assert effective == 0.0
            continue
        terms = {name: float(r[column]) for name, column in bounds.items()}
        assert effective == pytest.approx(min(terms.values()), rel=1e-12)  # same terms as the model's own function
        assert terms[r["bound"]] == pytest.approx(effective, rel=1e-12)


def test_layers_e2e_area_components_sum_to_the_total(cli, tmp_path_factory, cache):
    rows = _read(next(f for f in _run(cli, tmp_path_factory, cache, "layers-e2e")["files"]
                      if f.endswith("points.csv")))
    parts = ("area_pes_mm2", "area_l2_mm2", "area_dram_interface_mm2", "area_noc_mm2", "area_overhead_mm2")
    checked = 0
    for r in rows:
        if not r["area_total_mm2"]:
            continue
        total = float(r["area_total_mm2"])
        assert sum(float(r[p]) for p in parts) == pytest.approx(total, abs=0.01)  # as_dict rounds to 0.001 mm²
        assert total <= 100.0 + 1e-9  # the 100 mm² device budget of the standard chip
        checked += 1
    assert checked
    assert any(r["status"] == EVALUATED and float(r["stps"]) > 0 for r in rows)


def test_stacked_vs_connected_energy_optimum_is_at_least_as_efficient_in_every_cell(cli, tmp_path_factory, cache):
    rows = _read(next(f for f in _run(cli, tmp_path_factory, cache, "stacked-vs-connected")["files"]
                      if f.endswith("points.csv")))
    cells: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        key = (r["phase"], r["batch"], r["stacked_layers"], r["connected_layers"])
        cells.setdefault(key, {})[r["objective"]] = r
    assert cells
    compared = 0
    for key, by_objective in cells.items():
        assert set(by_objective) == {"stps", "tokens_per_joule"}, key
        throughput, energy = by_objective["stps"], by_objective["tokens_per_joule"]
        assert int(key[3]) <= int(key[2])
        if throughput["status"] != EVALUATED:
            assert energy["status"] == throughput["status"]
            continue
        assert float(energy["tokens_per_joule"]) >= float(throughput["tokens_per_joule"]) * (1 - 1e-12), key
        assert float(throughput["stps"]) >= float(energy["stps"]) * (1 - 1e-12), key
        compared += 1
    assert compared
    assert _files(_run(cli, tmp_path_factory, cache, "stacked-vs-connected"), ".html")


def test_thermal_share_above_85c_matches_the_csv(cli, tmp_path_factory, cache):
    result = _run(cli, tmp_path_factory, cache, "thermal")
    rows = _read(next(f for f in result["files"] if f.endswith("points.csv")))
    share = _read(next(f for f in result["files"] if f.endswith("share.csv")))
    assert share and {s["ambient_c"] for s in share} == {"25.0", "45.0"}  # the quick recipe's two ambients
    assert {s["dvfs"] for s in share} == {"static", "boost"}  # both clock policies
    for s in share:
        regime = [r for r in rows if (r["dvfs"], r["ambient_c"], r["phase"], r["batch"])
                  == (s["dvfs"], s["ambient_c"], s["phase"], s["batch"])]
        evaluated = [r for r in regime if r["status"] == EVALUATED]
        above = [r for r in evaluated if float(r["temperature_c"]) > 85.0]
        assert int(s["evaluated"]) == len(evaluated)
        assert int(s["above_limit"]) == len(above) == sum(r["above_limit"] == "True" for r in evaluated)
        assert float(s["share_above_limit"]) == pytest.approx(len(above) / len(evaluated))
        assert int(s["feasible"]) + int(s["infeasible"]) == len(evaluated)
        # the report's own thermal violation agrees with the 85 °C count (the chips' target is 85 °C)
        assert int(s["thermal_violations"]) == len(above)
        # every evaluated design's clock was set by exactly one cause
        assert (int(s["nominal"]) + int(s["throttled"]) + int(s["above_limit"]) == len(evaluated)
                == sum(r["clock_limit"] in ("nominal", "thermal clock", "power wall", "thermal wall", "above limit")
                       for r in evaluated))
        for r in evaluated:  # T = T_amb + R(m)·P per device, R(m) = (0.56 + 0.01·m) °C/W on 100 mm²
            r_c_per_w = 0.56 + 0.01 * int(r["stacked_layers"])
            assert float(r["temperature_c"]) == pytest.approx(float(r["ambient_c"])
                                                              + r_c_per_w * float(r["power_w_per_device"]))
    # boost starts from the nominal clock: at the warm coolant it never runs slower than the static policy
    clock = {(r["dvfs"], r["ambient_c"], r["chip"], r["phase"], r["stacked_layers"], r["connected_layers"]):
             float(r["clock_share"]) for r in rows if r["status"] == EVALUATED}
    warm = [key for key in clock if key[:2] == ("static", "45.0")]
    assert warm and all(clock[("boost", *key[1:])] >= clock[key] for key in warm)
    assert any(clock[("boost", *key[1:])] > clock[key] for key in warm)


def test_share_above_counts_feasible_and_infeasible_designs():
    rows = [{"status": EVALUATED, "temperature_c": t, "feasible": f}
            for t, f in ((70.0, True), (85.0, True), (85.5, False), (99.0, False))]
    rows.append({"status": "no schedule fits"})
    share = share_above(rows, 85.0)
    assert share == {"evaluated": 4, "above": 2, "share_above": 0.5}
    assert math.isnan(share_above([], 85.0)["share_above"])


@pytest.mark.parametrize(("runner", "parameters", "needle"), [
    ("dram_layers", 'chip = "h100-star"', "3D-stacked"),
    ("thermal_distribution", 'chips = ["standard"]\nmodel = "llama-3.2-1b"\nm_values = [0, 4]', "m_values"),
    ("layers_e2e", 'model = "llama-3.2-1b"\nworkers = 0', "workers"),
])
def test_bad_parameters_are_one_line_user_errors(cli, tmp_path, runner, parameters, needle):
    recipe = tmp_path / "bad.toml"
    recipe.write_text(f'kind = "study"\nname = "bad"\nquestion = "?"\nrunner = "{runner}"\n\n'
                      f"[parameters]\n{parameters}\n")
    assert_user_error(cli("study", "run", str(recipe), "--out", str(tmp_path / "out")), needle)
