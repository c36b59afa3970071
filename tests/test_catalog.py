"""Preset catalog: every preset validates, parameter counts match the published totals, CLI listings."""

from __future__ import annotations

import pytest

from deepstack import catalog

PUBLISHED_B = {  # issue 2 / docs/calibration.md §2: vendor totals
    "llama-3.3-70b": 70.6,
    "llama-3.1-405b": 405,
    "deepseek-v3": 671,
    "deepseek-r1": 671,
    "deepseek-v3.2": 671,  # V3's 671 B; its indexer adds 0.85 B (docs/calibration.md §2)
    "qwen3-235b-a22b": 235,
    "mixtral-8x7b": 46.7,
    "qwen3-30b-a3b": 30.5,
    "llama-3.2-1b": 1.24,
}
TABLE2 = ["standard", "wgmma", "weak-noc", "strong-noc", "strong-l2", "strong-l1", "less-sm", "large-matrix",
          "large-vector", "h100-star", "h200-star"]
TABLE3 = ["h100-star-32x", "tms1", "tms2", "tms3", "tms4", "tms5", "tms6", "tms7", "tmm8"]
NOCS = [*TABLE3, "h100-star-32x-table3"]  # Table 3's printed 200 GB/s InfiniBand reading (docs/calibration.md §1)


@pytest.mark.parametrize("name", sorted(PUBLISHED_B))
def test_parameter_count_within_2_percent(name):
    model = catalog.load("llms", name)
    assert model.parameter_count() / 1e9 == pytest.approx(PUBLISHED_B[name], rel=0.02)


def test_llama_70b_parameter_count_by_hand():
    # per layer: q 8192·8192 + k,v 2·8192·1024 + o 8192·8192 + SwiGLU 3·8192·28672 + 2 norms·8192
    per_layer = 8192 * 8192 * 2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
    total = 80 * per_layer + 8192 + 2 * 128256 * 8192  # + final norm + untied embedding and LM head
    assert catalog.load("llms", "llama-3.3-70b").parameter_count() == total


def test_deepseek_active_parameters_match_the_published_37b():
    # DeepSeek-V3 technical report: 37B activated parameters per token
    assert catalog.load("llms", "deepseek-v3").active_parameter_count() / 1e9 == pytest.approx(37, rel=0.03)


def test_catalog_llms_json_lists_all_eight(cli):
    result = cli("catalog", "llms", "--json")
    assert result.code == 0
    rows = {row["name"]: row for row in result.json()}
    assert set(PUBLISHED_B) <= set(rows)
    for name, published in PUBLISHED_B.items():
        assert rows[name]["parameters"] / 1e9 == pytest.approx(published, rel=0.02)


def test_catalog_chips_lists_table2(cli):
    result = cli("catalog", "chips")
    assert result.code == 0
    for name in TABLE2:
        assert name in result.out
    assert {row["name"] for row in cli("catalog", "chips", "--json").json()} == set(TABLE2)


def test_catalog_nocs_lists_table3_with_device_counts(cli):
    rows = {row["name"]: row for row in cli("catalog", "nocs", "--json").json()}
    assert set(rows) == set(NOCS)
    for name in NOCS:
        assert rows[name]["devices"] == (32 if name.startswith("h100-star-32x") else 256)
    text = cli("catalog", "nocs").out
    assert all(name in text for name in NOCS)


def test_catalog_systems(cli):
    rows = {row["name"]: row for row in cli("catalog", "systems", "--json").json()}
    assert set(rows) == {"dgx-h100", "dgx-h200", "dgx-b200", "mi325x-4", "mi325x-8"}
    assert rows["dgx-h100"]["devices"] == 8 and rows["mi325x-4"]["devices"] == 4 and rows["mi325x-8"]["devices"] == 8
    # spec-sheet peaks (docs/calibration.md §5, AMD data sheet): dense FP16 TFLOPS and HBM per GPU
    assert rows["dgx-h100"]["fp16_tflops_per_device"] == pytest.approx(989, rel=0.01)
    assert rows["dgx-b200"]["fp16_tflops_per_device"] == pytest.approx(2250, rel=0.01)
    assert rows["mi325x-4"]["fp16_tflops_per_device"] == pytest.approx(1307.4, rel=0.01)
    assert rows["dgx-h200"]["dram_TBps_per_device"] == pytest.approx(4.8)


def test_table2_dram_notes():
    # Table 2 notes: 3D chips 13.1 TB/s and 64 GiB per 800 mm² at 4 layers (8 clusters of 100 mm²)
    for name in TABLE2[:-2]:
        dram = catalog.load("chips", name).device.dram
        assert dram.peak_bw_Bps * 8 / 1e12 == pytest.approx(13.1)
        assert dram.capacity_B * 8 / 2**30 == pytest.approx(64)
    assert catalog.load("chips", "h100-star").device.dram.capacity_B / 2**30 == pytest.approx(80)
    assert catalog.load("chips", "h200-star").device.dram.peak_bw_Bps / 1e12 == pytest.approx(4.8)


def test_catalog_show(cli):
    result = cli("catalog", "show", "tms1", "--json")
    assert result.code == 0
    data = result.json()
    assert data["kind"] == "noc" and data["summary"]["devices"] == 256
    assert cli("catalog", "show", "deepseek-v3").code == 0


def test_every_preset_validates_with_the_validate_command(cli):
    from importlib import resources

    for kind in catalog.KINDS:
        for name in catalog.names(kind):
            path = resources.files("deepstack.catalog") / kind / f"{name}.toml"
            result = cli("validate", str(path))
            assert result.code == 0, (name, result.err)


def test_every_preset_cites_a_source():
    for kind in catalog.KINDS:
        for name in catalog.names(kind):
            assert catalog.load(kind, name).source.strip()


def test_a_user_file_is_read_again_only_when_it_changes(tmp_path):
    """A search loads its NoC file once per trial: the validated file is kept until the file changes (size or
    modification time)."""
    import os

    from conftest import MINI8

    path = tmp_path / "mine.toml"
    text = MINI8.read_text()
    path.write_text(text)
    first = catalog.load("nocs", str(path))
    assert catalog.load("nocs", str(path)) is first  # unchanged: the same validated object
    path.write_text(text.replace('name = "mini8"', 'name = "mine8"'))  # same size
    os.utime(path, ns=(1, 1))  # a modification time no earlier load saw
    assert catalog.load("nocs", str(path)).name == "mine8" and first.name == "mini8"
