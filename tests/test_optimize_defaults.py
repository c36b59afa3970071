"""``deepstack optimize`` details (issue 20): a front row of a study over a space *file* reproduces with
``deepstack evaluate --design ID --front FILE`` (the front keeps the file's SRAM options), and the public
``deepstack.optimize`` has the CLI's defaults (objectives, trial count, seed, batch, inner solver)."""

from __future__ import annotations

import inspect
import json

import pytest
from conftest import run_in_process, write_space

import deepstack
from deepstack import cli
from deepstack.search import optimize as search_optimize


def test_a_front_row_of_a_space_file_re_evaluates(tmp_path):
    # the file's only SRAM option is its own (no catalog or shipped space defines it): a front that lost the
    # file's options could not rebuild any row
    space = write_space(tmp_path / "sramfile.toml", chips=("standard",), hops=(1.0,))
    space.write_text(space.read_text().replace('[[hardware.sram]]\nname = "base"\n',
                                               '[[hardware.sram]]\nname = "big-l1"\nl1_KiB = 512\nl1_bw_scale = 2\n'))
    run = run_in_process("optimize", "--space", "sramfile.toml", "--trials", "4", "--study", "s", "--storage",
                         "sqlite:///s.db", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    saved = json.loads((tmp_path / "s.pareto.json").read_text())
    assert saved["sram_options"] == {"big-l1": {"name": "big-l1", "l1_KiB": 512.0, "l1_bw_scale": 2.0,
                                                "l2_MiB": None}}
    assert saved["pareto"] and all(row["sram"] == "big-l1" for row in saved["pareto"])
    for row in saved["pareto"]:
        again = run_in_process("evaluate", "--design", row["id"], "--front", "s.pareto.json", "--json",
                               cwd=tmp_path)
        assert again.returncode == 0, again.stderr[-2000:]
        metrics = json.loads(again.stdout)["metrics"]
        for key in ("stps", "tokens_per_joule", "power_w", "temperature_c"):
            assert metrics[key] == pytest.approx(row[key], rel=1e-9), (row["id"], key)


def _defaults(function) -> dict:
    return {name: p.default for name, p in inspect.signature(function).parameters.items()
            if p.default is not inspect.Parameter.empty}


def test_the_public_optimize_has_the_cli_defaults():
    public, command = _defaults(deepstack.optimize), _defaults(cli.optimize)
    engine = _defaults(search_optimize.optimize)
    assert list(public["objectives"]) == command["objective"].split(",") == ["stps", "tokens_per_joule"]
    for name in ("sampler", "trials", "study", "storage", "seed", "workers", "until_stall", "inner", "out", "refine"):
        assert public[name] == command[name] == engine[name], name
    assert public["seed"] == search_optimize.DEFAULT_SEED == 0 and public["trials"] == 1000
    assert public["refine"] is None  # the engine's share of the trials (REFINE_SHARE)
    # the CLI's --trials-per-batch is None for "the default", which is the engine's
    assert command["trials_per_batch"] is None and public["batch"] == engine["batch"] == search_optimize.DEFAULT_BATCH
