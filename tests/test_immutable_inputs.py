"""Inputs are truly immutable (issue 29, item 7): a schedule's collectives table, FrozenMap, a study recipe's
parameters, the catalog's loads and the memo layer's keys. Each way in that once let an edited input return a
stale memoised result is closed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pydantic
import pytest
from conftest import assert_user_error

from deepstack import catalog
from deepstack.models import clear_caches, memo
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate
from deepstack.schema import FrozenMap, Scenario, Schedule

MINI8 = Path(__file__).resolve().parent.parent / "search" / "spaces" / "nocs" / "mini8.toml"
STUDIES = Path(__file__).resolve().parent.parent / "studies"


def _point(schedule: Schedule) -> DesignPoint:
    scenario = Scenario(model="llama-3.2-1b", phase="decode", batch=64)
    return DesignPoint(chip=catalog.load("chips", "standard"), scenario=scenario, schedule=schedule,
                       network=catalog.load("nocs", str(MINI8)))


def _metrics(point: DesignPoint) -> str:
    return json.dumps(evaluate(point, with_ttft=False).as_dict()["metrics"], sort_keys=True)


# --- Schedule.collectives --------------------------------------------------------------------------------------


def test_a_schedules_collectives_cannot_be_edited_in_place():
    schedule = Schedule.parse("tp=8,all_reduce=ring")
    evaluate(_point(schedule), with_ttft=False)
    with pytest.raises(TypeError):
        schedule.collectives["all_reduce"] = "double_tree"
    with pytest.raises(TypeError):
        del schedule.collectives["all_reduce"]
    assert dict(schedule.collectives) == {"all_reduce": "ring"}
    assert schedule.model_dump()["collectives"] == {"all_reduce": "ring"}  # plain data out, as before


def test_a_changed_algorithm_is_a_new_schedule_with_its_own_fresh_result():
    ring = Schedule.parse("tp=8,all_reduce=ring")
    _metrics(_point(ring))  # memoised now
    tree = ring.model_copy(update={"collectives": {"all_reduce": "double_tree"}})
    assert isinstance(tree.collectives, FrozenMap) and tree != ring and hash(tree) != hash(ring)
    warm = _metrics(_point(tree))
    clear_caches()
    assert warm == _metrics(_point(Schedule.parse("tp=8,all_reduce=double_tree")))


def test_an_unknown_algorithm_is_a_validation_error_naming_the_field():
    with pytest.raises(pydantic.ValidationError, match=r"collectives\.all_reduce: must be auto or one of ring"):
        Schedule(collectives={"all_reduce": "bogus"})
    with pytest.raises(ValueError, match=r"collectives\.all_reduce: must be auto or one of ring"):
        Schedule().model_copy(update={"collectives": {"all_reduce": "bogus"}})
    with pytest.raises(ValueError, match="unknown collective 'bogus'"):
        Schedule().model_copy(update={"collectives": {"bogus": "ring"}})


def test_an_unknown_algorithm_on_the_command_line_is_one_line(cli):
    result = cli("evaluate", "--chip", "standard", "--noc", str(MINI8), "--parallel", "tp=8,all_reduce=bogus")
    assert_user_error(result, "--parallel", "collectives.all_reduce", "(got 'bogus')")


# --- FrozenMap -----------------------------------------------------------------------------------------------


def test_frozen_map_is_read_only_and_exposes_no_plain_dict():
    frozen = FrozenMap({"a": 1, "b": {"c": 2}})
    with pytest.raises(TypeError):
        frozen["a"] = 2
    with pytest.raises(AttributeError):
        frozen._data = {}
    with pytest.raises(TypeError):
        frozen._data["a"] = 2  # its store is a read-only view, not a dict
    assert not any(isinstance(getattr(frozen, name, None), dict) for name in dir(frozen))
    copy = frozen.as_dict()
    copy["a"] = 3
    assert frozen["a"] == 1
    assert FrozenMap({"a": 1, "b": 2}) == FrozenMap({"b": 2, "a": 1})
    assert hash(FrozenMap({"a": 1, "b": 2})) == hash(FrozenMap({"b": 2, "a": 1}))


def test_the_report_and_the_schedule_share_one_frozen_map_type():
    from deepstack.models.results import FrozenMap as ReportFrozenMap

    assert ReportFrozenMap is FrozenMap
    report = evaluate(_point(Schedule.parse("tp=8,all_reduce=ring")), with_ttft=False)
    with pytest.raises(TypeError):
        report.schedule.collectives["all_reduce"] = "double_tree"


# --- a study recipe ---------------------------------------------------------------------------------------------


def test_a_loaded_recipes_parameters_cannot_be_edited_and_dump_as_plain_data():
    from deepstack.schema import load_file

    recipe = load_file(STUDIES / "dram-layers.toml", expected_kind="study")
    with pytest.raises(TypeError):
        recipe.parameters["x"] = 1
    with pytest.raises(TypeError):
        recipe.quick["m_values"] = [1]
    with pytest.raises(AttributeError):
        recipe.parameters["m_values"].append(17)  # nested arrays are tuples
    assert isinstance(recipe.parameters, FrozenMap) and hash(recipe) == hash(recipe)
    dumped = recipe.model_dump()
    assert isinstance(dumped["parameters"], dict) and isinstance(dumped["parameters"]["m_values"], list)
    assert json.loads(recipe.model_dump_json())["quick"]["m_values"] == [1, 4, 8, 16]


def test_a_study_still_runs_from_its_frozen_recipe(cli, tmp_path):
    result = cli("study", "run", str(STUDIES / "dram-layers.toml"), "--quick", "--out", str(tmp_path), "--json")
    assert result.code == 0, result.err
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["parameters"]["m_values"] == [1, 4, 8, 16]  # the quick table over the parameters, as plain JSON


# --- the catalog's loads ---------------------------------------------------------------------------------------


def test_editing_loaded_preset_data_never_changes_the_next_load():
    first = catalog.load_data("chips", "standard")
    pe = json.dumps(first["pe"], sort_keys=True)
    first["pe"]["matrix_flops_per_cycle"] = -1
    first["pe"]["new"] = "x"
    first["device"].clear()
    again = catalog.load_data("chips", "standard")
    assert json.dumps(again["pe"], sort_keys=True) == pe and again["device"]
    assert again is not first and again["pe"] is not first["pe"]


def test_a_loaded_preset_object_cannot_be_edited():
    chip = catalog.load("chips", "standard")
    with pytest.raises(pydantic.ValidationError):
        chip.pe.matrix_flops_per_cycle = 1
    assert catalog.load("chips", "standard") is chip  # shared, so it must be (and is) frozen


# --- the memo layer refuses keys that could change -------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class _Mutable:  # hashable by identity, yet its content can change: a stale memo waiting to happen
    value: int


@dataclasses.dataclass(frozen=True)
class _Fixed:
    value: int


@pytest.fixture
def private_registry(monkeypatch):
    """Tables made by a test stay out of the registry other tests count."""
    monkeypatch.setattr(memo, "_REGISTRY", list(memo._REGISTRY))


def test_a_memoised_function_refuses_a_mutable_key(private_registry):
    @memo.cached(maxsize=4)
    def double(x):
        return 2 * x.value

    assert double(_Fixed(2)) == 4
    with pytest.raises(memo.MutableMemoKeyError, match="_Mutable"):
        double(_Mutable(2))
    with pytest.raises(memo.MutableMemoKeyError):
        double(x=_Mutable(2))
    with pytest.raises(TypeError):
        double([2])  # unhashable: refused too


def test_a_memo_table_refuses_a_mutable_key(private_registry):
    table = memo.Table("test table", maxsize=4)
    table.put((_Fixed(1), "a", FrozenMap({"k": (1, 2)})), 1)
    with pytest.raises(memo.MutableMemoKeyError, match="test table"):
        table.put((_Fixed(1), _Mutable(1)), 1)


@pytest.mark.parametrize("value", [{}, [], set(), bytearray(), _Mutable(1), (1, [2]), frozenset({(1,)}) | {()}])
def test_what_can_key_a_memo(value):
    expected = isinstance(value, frozenset)
    assert memo.immutable(value) is expected


def test_schemas_key_memos():
    schedule = Schedule.parse("tp=8,all_reduce=ring")
    assert memo.immutable(schedule) and memo.immutable(_point(schedule)) and memo.immutable(schedule.collectives)
