"""Schema behaviour: parsing helpers, user files in place of presets, unit conversion at the boundary."""

from __future__ import annotations

from importlib import resources

import pytest

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.schema import LLM, Precision, Scenario, Schedule, load_file, validate


def test_precision_parsing():
    p = Precision.model_validate("A16W8")
    assert (p.activation_bits, p.weight_bits, p.kv_bits) == (16, 8, 16)
    assert p.weight_bytes == 1.0 and str(p) == "a16w8"
    assert Precision.model_validate("a16w8kv8").kv_bits == 8


def test_scenario_takes_the_models_default_precision():
    scenario = Scenario(model="deepseek-v3", phase="decode", batch=4)
    assert str(scenario.precision) == "a16w8"
    assert scenario.model.name == "deepseek-v3"


def test_flat_schedule():
    s = Schedule.parse("tp=8,pp=4,dp=8")
    assert s.devices == 256 and s.pp == 4 and not s.is_per_module
    assert s.attention.tp == 8 and s.ffn.dp == 8


def test_per_module_schedule():
    s = Schedule.parse("attn:tp=4,dp=64;moe:ep=32,tp=8;all_to_all=pairwise")
    assert s.is_per_module and s.devices == 256
    assert s.ffn.ep == 32 and s.attention.dp == 64
    assert s.algorithm("all_to_all") == "pairwise" and s.algorithm("all_reduce") == "auto"


def test_per_module_schedule_must_cover_the_same_devices():
    with pytest.raises(UserInputError, match="same devices"):
        Schedule.parse("attn:tp=4;moe:ep=8")


def test_schedule_rejects_unknown_degree():
    with pytest.raises(UserInputError, match="unknown degree 'xp'"):
        Schedule.parse("xp=4")


def test_si_conversion_at_the_boundary():
    level = catalog.load("nocs", "tms1").levels[0]
    assert level.link_bw_Bps == 800e9 and level.hop_latency_s == pytest.approx(10e-9)
    dram = catalog.load("chips", "standard").device.dram
    assert dram.capacity_B == 4 * 2 * 2**30


def test_user_file_replaces_a_preset(tmp_path):
    text = (resources.files("deepstack.catalog") / "llms" / "llama-3.2-1b.toml").read_text()
    path = tmp_path / "tiny.toml"
    path.write_text(text.replace('name = "llama-3.2-1b"', 'name = "tiny"').replace("layers = 16", "layers = 2"))
    model = catalog.load("llms", str(path))
    assert model.name == "tiny" and model.layers == 2
    assert Scenario(model=str(path), phase="prefill", batch=1).model.layers == 2


def test_yaml_and_json_files(tmp_path):
    (tmp_path / "s.yaml").write_text("kind: schedule\nattention: {tp: 4}\nffn: {tp: 4}\npp: 2\n")
    assert load_file(tmp_path / "s.yaml").devices == 8
    (tmp_path / "s.json").write_text('{"kind": "scenario", "model": "mixtral-8x7b", "phase": "decode", "batch": 8}')
    assert load_file(tmp_path / "s.json").batch == 8


def test_mla_needs_its_fields():
    data = catalog.load_data("llms", "deepseek-v3")
    data["attention"] = {**data["attention"], "kv_lora_rank": None}
    with pytest.raises(UserInputError, match="MLA needs"):
        validate(LLM, data)
