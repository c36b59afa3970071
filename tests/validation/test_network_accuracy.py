"""``deepstack accuracy network``: the collective model against ASTRA-sim NS-3 simulations
(validation/ns3_collectives.csv), and the harness itself (metrics worked by hand, the row → model-call mapping,
the CLI end to end)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from conftest import assert_user_error

import deepstack
from deepstack.accuracy import network as acc
from deepstack.errors import UserInputError

REFERENCE = Path(__file__).resolve().parents[2] / "validation" / "ns3_collectives.csv"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def accuracy() -> acc.NetworkAccuracy:
    return acc.network_accuracy()


@pytest.fixture(scope="module")
def reference_rows() -> list[dict[str, str]]:
    return acc.read_reference(REFERENCE)


# ------------------------------------------------------------------------------------------------ acceptance


def test_the_model_runs_on_every_row(accuracy):
    assert not accuracy.failures, "\n".join(f"{row.topology} {row.dims} {row.collective} {row.payload_B} B: {error}"
                                            for row, error in accuracy.failures)
    assert len(accuracy.rows) == 140 and len(accuracy.no_reference) == 7


@pytest.mark.parametrize(("family", "weighted_max_pct"), [("switch", 2.0), ("torus", 1.5)])
def test_weighted_error_per_family(accuracy, family, weighted_max_pct):
    measured = accuracy.families[family]
    assert measured.weighted_pct <= weighted_max_pct, (
        f"{family}: weighted error {measured.weighted_pct:.2f} % > {weighted_max_pct} % over {measured.rows} rows")


@pytest.mark.parametrize("family", ["switch", "torus"])
def test_median_row_error_per_family(accuracy, family):
    measured = accuracy.families[family]
    assert measured.median_pct <= 10.0, (
        f"{family}: median per-row error {measured.median_pct:.2f} % > 10 % over {measured.rows} rows")


# ------------------------------------------------------------------------------------------------ metrics by hand

# (reference, model): errors +10 %, −5 %, 0 %, −25 %
PAIRS = [(100.0, 110.0), (200.0, 190.0), (50.0, 50.0), (400.0, 300.0)]


def test_weighted_error_is_the_papers_metric():
    # (10 + 10 + 0 + 100) / (100 + 200 + 50 + 400) = 120 / 750 = 16 % (the mean of the row errors would be 10 %)
    assert acc.weighted_error_pct(PAIRS) == pytest.approx(16.0)


def test_median_and_worst_row_errors():
    # |errors| sorted 0, 5, 10, 25 %: the median is (5 + 10) / 2 = 7.5 %, the worst 25 %
    assert acc.median_error_pct(PAIRS) == pytest.approx(7.5)
    assert acc.worst_error_pct(PAIRS) == pytest.approx(25.0)
    assert acc.score(PAIRS) == pytest.approx(acc.Score(16.0, 7.5, 4))
    assert acc.size_score(PAIRS) == pytest.approx(acc.SizeScore(4, 7.5, 25.0))


def test_metrics_of_no_rows_are_nan():
    assert math.isnan(acc.weighted_error_pct([])) and math.isnan(acc.median_error_pct([]))
    assert math.isnan(acc.worst_error_pct([]))


def test_size_buckets():
    assert [acc.size_bucket(b) for b in (1, 65536, 65537, 16 * 2**20, 16 * 2**20 + 1)] == [
        "small", "small", "medium", "medium", "large"]


def test_family_panel_and_size_scores_are_the_metrics_of_their_rows(accuracy):
    compared = [row for row in accuracy.rows if row.error is not None]
    for family, measured in accuracy.families.items():
        pairs = [(row.ref_ns, row.model_ns) for row in compared if row.family == family]
        assert measured == pytest.approx(acc.score(pairs))
    for panel, measured in accuracy.panels.items():
        assert measured.rows == sum(row.panel == panel for row in compared)
    assert sum(s.rows for s in accuracy.sizes.values()) == len(compared) == 133
    for row in compared:
        assert row.error == pytest.approx((row.model_ns - row.ref_ns) / row.ref_ns)


def test_rows_without_reference_or_with_a_failing_model_are_not_scored(tmp_path, reference_rows):
    rows = [dict(r) for r in reference_rows if r["topology"] == "switch_2level" and r["dims"] == "8x1"
            and r["collective"] == "all_to_all"][:3]
    rows[1]["ns3_time_ns"] = ""
    rows[2]["collective"] = "broadcast"  # no algorithm mapped: the model call fails
    path = tmp_path / "tiny.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    result = acc.network_accuracy(path)
    assert result.families["switch"].rows == 1
    assert [row.payload_B for row in result.no_reference] == [int(rows[1]["payload_bytes_inferred"])]
    assert result.no_reference[0].model_ns > 0  # evaluated, not scored
    assert [(row.collective, "KeyError" in error) for row, error in result.failures] == [("broadcast", True)]
    data = json.loads(json.dumps(result.as_dict()))
    assert data["rows_total"] == 3 and data["rows_with_reference"] == 2 and len(data["failures"]) == 1


# ------------------------------------------------------------------------------------------------ row → model call


def test_framing_of_a_row(reference_rows):
    assert acc.SIMULATOR_PAYLOAD_PER_PACKET_B == 1000
    # a 1,024-byte packet on the wire carries 1,000 bytes of payload: 24 bytes per packet on top
    assert {acc.header_bytes_per_packet(row) for row in reference_rows} == {24}


def test_a_two_level_switch_row(reference_rows):
    row = next(r for r in reference_rows if r["topology"] == "switch_2level" and r["dims"] == "8x8")
    topology = acc.row_topology(row)
    assert topology.completion == "acknowledged"
    l1, l2 = topology.levels
    assert (l1.topology, l1.dims, l1.link_bw_Bps, l1.hop_latency_s, l1.ports) == (
        "switch", (8,), 256e9, pytest.approx(128e-9), "per_device")
    assert (l2.topology, l2.dims, l2.link_bw_Bps, l2.hop_latency_s, l2.ports) == (
        "switch", (8,), 32e9, pytest.approx(512e-9), "shared_uplink")
    assert {(level.packet_bytes, level.header_bytes) for level in topology.levels} == {(1000, 24)}


def test_one_level_switch_and_torus_rows(reference_rows):
    switch = next(r for r in reference_rows if r["topology"] == "switch_2level" and r["dims"] == "8x1")
    torus = next(r for r in reference_rows if r["topology"] == "torus_2d" and r["dims"] == "4x4")
    (s,) = acc.row_topology(switch).levels
    (t,) = acc.row_topology(torus).levels
    assert (s.topology, s.dims, s.link_bw_Bps) == ("switch", (8,), 128e9)
    assert (t.topology, t.dims, t.link_bw_Bps, t.ports) == ("torus", (4, 4), 128e9, "per_device")


def test_bytes_per_rank_follow_collective_time():
    row = {"payload_bytes_inferred": "4096", "nodes": "16"}
    assert acc.bytes_per_rank({**row, "collective": "all_gather"}) == 4096  # the shard
    assert acc.bytes_per_rank({**row, "collective": "all_reduce"}) == 4096  # the buffer
    assert acc.bytes_per_rank({**row, "collective": "all_to_all"}) == 4096 * 16  # message to each of 16 ranks


def test_every_row_has_a_mapped_algorithm(reference_rows):
    for row in reference_rows:
        assert (acc.FAMILIES[row["topology"]], row["collective"]) in acc.ALGORITHMS


def test_a_missing_reference_file_is_one_clear_error(monkeypatch, tmp_path, cli):
    monkeypatch.setattr(deepstack, "__file__", str(tmp_path / "deepstack" / "__init__.py"))
    with pytest.raises(UserInputError, match="reference file"):
        acc.reference_path()
    assert_user_error(cli("accuracy", "network"), "reference file", "validation")


# ------------------------------------------------------------------------------------------------ the CLI


def test_cli_json(cli_process):
    result = cli_process("accuracy", "network", "--json")
    assert result.code == 0, result.err
    data = result.json()
    assert set(data["families"]) == {"switch", "torus"}
    assert data["rows_total"] == 140 and data["rows_with_reference"] == 133
    assert {p["topology"] for p in data["panels"]} == {"switch_2level", "torus_2d"}


def test_cli_plot(cli_process, tmp_path):
    target = tmp_path / "acc.png"
    result = cli_process("accuracy", "network", "--plot", str(target))
    assert result.code == 0, result.err
    assert target.read_bytes().startswith(PNG_SIGNATURE)
    assert str(target) in result.out


def test_cli_plot_into_a_missing_folder(cli_process):
    assert_user_error(cli_process("accuracy", "network", "--plot", "/nonexistent/dir/x.png"), "--plot")


def test_cli_text_report(cli):
    result = cli("accuracy", "network")
    assert result.code == 0, result.err
    for needle in ("140 rows", "133 with a simulated time", "error per topology family", "error per panel",
                   "error per payload size", "no reference"):
        assert needle in result.out, needle


def test_accuracy_all_gives_each_checks_headline_figures(cli):
    result = cli("accuracy", "all", "--json")
    assert result.code == 0, result.err
    rows = {(row["check"], row["family"]): row for row in result.json()}
    network = acc.network_accuracy()
    assert {check for check, _ in rows} == {"network", "serving", "power", "kernels", "paper", "cross-validation"}
    assert {family for check, family in rows if check == "network"} == {"switch", "torus"}
    for (_, family), row in ((key, row) for key, row in rows.items() if key[0] == "network"):
        weighted, median, scored = network.families[family]
        assert (row["weighted_pct"], row["median_pct"], row["rows"], row["failures"]) == pytest.approx(
            (weighted, median, scored, 0))
