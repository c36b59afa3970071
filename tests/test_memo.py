"""The one memo layer (models/memo.py): every cache is registered, bounded, cleared by ``clear_caches()``, keyed
on the inputs themselves and keeps only immutable values; no module keeps a memo of its own."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import pkgutil
import sys

import pytest

import deepstack
import deepstack.models
import deepstack.search
from deepstack import catalog
from deepstack.cli import run
from deepstack.models import clear_caches, memo
from deepstack.models.design import DesignPoint
from deepstack.models.parallel.memory import memory_footprint
from deepstack.models.parallel.strategies import Strategy
from deepstack.schema import Scenario


def _work(chips: tuple[str, str], batch: int, seed: int, folder) -> list[tuple[str, ...]]:
    """CLI commands that reach every layer: a single device, a 256-device fixed schedule, a multi-device prefill,
    a system preset with a per-module schedule, best-schedule searches (every feasible schedule of a hardware
    point, as a sweep evaluates them), collectives on a preset and on an inline topology, and a few Optuna
    trials (in this process). ``chips``, ``batch`` and ``seed`` vary the inputs between two rounds."""
    first, second = chips
    return [
        ("evaluate", "--model", "llama-3.2-1b", "--chip", first, "--phase", "decode", "--batch", str(batch)),
        ("evaluate", "--model", "deepseek-v3", "--chip", first, "--noc", "tms1", "--phase", "decode",
         "--batch", str(64 * batch), "--parallel", "tp=4,ep=32,pp=2"),
        ("evaluate", "--model", "llama-3.3-70b", "--chip", second, "--noc", "h100-star-32x", "--phase",
         "prefill", "--batch", str(batch), "--parallel", "tp=8,pp=4"),
        ("evaluate", "--model", "mixtral-8x7b", "--system", "dgx-h100", "--phase", "decode", "--batch",
         str(2 * batch), "--parallel", "attn:tp=8;moe:ep=8"),
        ("evaluate", "--model", "mixtral-8x7b", "--system", "dgx-h100", "--phase", "decode", "--batch", str(batch)),
        ("evaluate", "--model", "llama-3.2-1b", "--chip", first, "--noc", "tmm8", "--phase", "decode",
         "--batch", str(4 * batch)),
        ("collective", "--op", "all_reduce", "--bytes", str(65536 * batch), "--noc", "tms1"),
        ("collective", "--op", "all_to_all", "--bytes", str(4096 * batch), "--topology", "switch,switch",
         "--dims", "8,8", "--link-bw-GBps", "256,32", "--hop-latency-ns", "128,512"),
        ("optimize", "--trials", "2", "--space", "small", "--seed", str(seed), "--workers", "1", "--study",
         f"memo{seed}", "--storage", f"journal:{folder}/memo{seed}.log", "--out", str(folder)),
    ]


def _import_everything() -> None:
    """Import every module of deepstack, deepstack.models and deepstack.search (so every table exists)."""
    for package in (deepstack, deepstack.models, deepstack.search):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(info.name)


def _cli(*argv: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        status = run([*argv, "--json"])
    assert status == 0, argv


def _module_containers() -> dict[tuple[str, str], tuple[int, int]]:
    """(module, name) → (id, length) of every module-level dict, set or list in deepstack.* (memo tables aside)."""
    found = {}
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "deepstack" or module_name.startswith("deepstack.")):
            continue
        for name, value in vars(module).items():
            if isinstance(value, dict | set | list) and not isinstance(value, memo.Table):
                found[module_name, name] = (id(value), len(value))
    return found


# --- clear_caches ------------------------------------------------------------------------------------------


def test_clear_caches_empties_every_registered_table(tmp_path):
    _import_everything()
    for argv in _work(("standard", "h100-star"), 16, 1, tmp_path):
        _cli(*argv)
    assert memo.entries() > 0
    cleared = clear_caches()
    tables = memo.registered()
    assert cleared == len(tables) > 40
    assert memo.entries() == 0
    for table in tables:
        size = len(table) if isinstance(table, memo.Table) else table.cache_info().currsize
        assert size == 0, table


# --- no memo outside the memo layer -------------------------------------------------------------------------


def test_no_module_level_container_grows_with_new_inputs(tmp_path):
    """A module-level dict/set/list that grows with new inputs is an unbounded memo: it must be a memo.Table.

    The first round runs every code path once (so per-class constants and lazily built registries settle); the
    second runs the same paths on other chips, batches and sizes: only memos keyed on inputs grow then.
    """
    _import_everything()
    for argv in _work(("standard", "h100-star"), 16, 1, tmp_path):
        _cli(*argv)
    before = _module_containers()
    for argv in _work(("strong-l2", "h200-star"), 8, 2, tmp_path):
        _cli(*argv)
    after = _module_containers()
    grew = sorted(f"{module}.{name}: {before[module, name][1]} → {length}"
                  for (module, name), (ident, length) in after.items()
                  if (module, name) in before and before[module, name][0] == ident and length > before[module, name][1])
    assert not grew, "module-level containers used as unbounded memos:\n" + "\n".join(grew)


# --- the two kinds of table -------------------------------------------------------------------------------


def test_cached_refuses_a_mutable_value_and_an_unbounded_table():
    @memo.cached(maxsize=4)
    def rows(n: int) -> dict:
        return {"n": n}

    with pytest.raises(memo.MutableMemoValueError, match="returned a dict"):
        rows(1)
    assert rows.cache_info().currsize == 0  # nothing was kept
    with pytest.raises(ValueError, match="bounded"):
        memo.cached(maxsize=0)
    with pytest.raises(ValueError, match="bounded"):
        memo.cached(maxsize=None)
    with pytest.raises(ValueError, match="bounded"):
        memo.Table("unbounded", maxsize=0)


def test_cached_is_registered_bounded_and_cleared():
    calls = []

    @memo.cached(maxsize=2)
    def square(n: int) -> int:
        calls.append(n)
        return n * n

    assert square in memo.registered()
    assert [square(n) for n in (1, 2, 1, 3, 1)] == [1, 4, 1, 9, 1]
    assert calls == [1, 2, 3]  # the second 1 was a hit; 3 evicted 2 (least recently used), not 1
    assert square.cache_info().currsize == 2
    clear_caches()
    assert square.cache_info().currsize == 0
    square(1)
    assert calls == [1, 2, 3, 1]


def test_table_clears_when_full():
    table = memo.Table("test clear-when-full", maxsize=3)
    assert table in memo.registered()
    for key in "abc":
        table.put(key, key.upper())
    table.put("a", "A again")  # an existing key never counts against the bound
    assert dict(table) == {"a": "A again", "b": "B", "c": "C"}
    table.put("d", "D")  # full: everything is forgotten, then d kept
    assert dict(table) == {"d": "D"}
    assert table.cache_info() == (1, 3)
    clear_caches()
    assert len(table) == 0


def test_lru_table_forgets_the_least_recently_used_entry():
    table = memo.Table("test lru", maxsize=3, lru=True)
    for key in "abc":
        table.put(key, key.upper())
    assert table.lookup("a") == "A"  # a is now the most recently used
    assert table.lookup("missing", "default") == "default"
    table.put("d", "D")  # evicts b, the least recently used
    assert dict(table) == {"a": "A", "c": "C", "d": "D"}
    table.put("e", "E")  # evicts c
    assert sorted(table) == ["a", "d", "e"]
    assert len(table) <= table.maxsize
    clear_caches()
    assert len(table) == 0
    for key in "wxyz":  # the recency order was cleared too: the bound still holds after a clear
        table.put(key, key)
    assert sorted(table) == ["x", "y", "z"]


def test_on_clear_hooks_run_with_clear_caches():
    state = {"interned": 1}
    hook = memo.on_clear(state.clear)
    assert hook == state.clear
    clear_caches()
    assert state == {}


# --- memo keys follow the inputs --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Point:
    chip: str
    devices: int


def test_memo_key_follows_a_field_added_to_the_inputs():
    """The key is the inputs themselves (never a hand-listed subset): a field added later takes part in it."""
    Extended = dataclasses.make_dataclass("Extended", [("voltage_V", float, 0.8)], bases=(_Point,), frozen=True)

    @memo.cached(maxsize=16)
    def describe(point) -> tuple:
        return (type(point).__name__, *dataclasses.astuple(point))

    first = describe(Extended("standard", 8, 0.8))
    assert describe(Extended("standard", 8, 0.8)) is first  # equal inputs: the same memoised object
    other = describe(Extended("standard", 8, 0.9))  # differs only in the added field
    assert other is not first and other[-1] == 0.9


def test_design_point_keys_the_evaluator_memos_on_every_field_including_a_new_one():
    assert all(f.compare and f.hash is not False for f in dataclasses.fields(DesignPoint))
    Extended = dataclasses.make_dataclass("Extended", [("voltage_V", float, 0.8)], bases=(DesignPoint,),
                                          frozen=True)
    scenario = Scenario(model=catalog.load("llms", "llama-3.2-1b"), phase="decode", batch=1)
    low = Extended(chip=catalog.load("chips", "standard"), scenario=scenario, voltage_V=0.7)
    same = Extended(chip=catalog.load("chips", "standard"), scenario=scenario, voltage_V=0.7)
    high = dataclasses.replace(low, voltage_V=0.9)
    table = memo.Table("test design points", maxsize=4)
    table.put(low, "kept for 0.7 V")
    assert table.get(same) == "kept for 0.7 V"  # equal inputs find the entry
    assert high not in table  # the added field alone tells the keys apart


def test_library_memos_return_the_same_object_for_equal_inputs_only():
    def scenario(batch: int) -> Scenario:
        return Scenario(model=catalog.load("llms", "llama-3.3-70b"), phase="decode", batch=batch)

    footprint = memory_footprint(scenario(8), Strategy(tp=8, pp=4))
    assert memory_footprint(scenario(8), Strategy(tp=8, pp=4)) is footprint  # rebuilt, equal inputs
    assert memory_footprint(scenario(16), Strategy(tp=8, pp=4)) is not footprint
    assert memory_footprint(scenario(8), Strategy(tp=8, pp=4, fsdp=True)) is not footprint
    assert memory_footprint(scenario(8), Strategy(tp=4, pp=8)) != footprint
    assert Strategy(tp=8, pp=4).to_schedule() is Strategy(tp=8, pp=4).to_schedule()
    assert Strategy(tp=8, pp=4).to_schedule() is not Strategy(tp=8, pp=4, fsdp=True).to_schedule()
