"""Plugins: the example in examples/deepstack-star-plugin, installed by pip into a folder of its own, adds a
topology, an algorithm and a NoC preset that the console script then uses like built-ins; a broken plugin stops
every command with one line naming it. Times are worked by hand from eq. 4 (per step: hops × δ + busiest link's
bytes / B)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CliResult, assert_user_error, write_space

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "deepstack-star-plugin"
DEEPSTACK = str(Path(sys.executable).parent / "deepstack")


def _run(*args: str, path: Path, cwd: Path):
    env = {**os.environ, "PYTHONPATH": str(path)}
    proc = subprocess.run([DEEPSTACK, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The example plugin, built and installed by pip (no dependencies: DeepStack is already here)."""
    target, source = tmp_path_factory.mktemp("site"), tmp_path_factory.mktemp("plugin") / "src"
    shutil.copytree(EXAMPLE, source)  # the build leaves its folders beside the sources: not in the repository
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(source)], check=True, capture_output=True, timeout=600)
    assert (target / "deepstack_star" / "catalog" / "nocs" / "star8.toml").exists()
    return target


def test_the_plugins_algorithm_on_its_topology_by_hand(installed, tmp_path):
    # star8: a hub and 7 leaves, 100 GB/s per link each way, 100 ns per hop. reduce_then_broadcast of 1 MB:
    # every leaf sends 1 MB up its own link (1 hop, 10 µs + 0.1 µs), then the hub sends 1 MB down each: 20.2 µs
    proc = _run("collective", "--op", "all_reduce", "--bytes", "1e6", "--noc", "star8", "--algorithm",
                "reduce_then_broadcast", "--json", path=installed, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["algorithm"] == "reduce_then_broadcast" and result["devices"] == 8
    assert result["time_s"] == pytest.approx(2 * (1e6 / 100e9 + 100e-9))
    # the same topology from flags, and auto ranks the plugin's algorithm with the built-ins
    proc = _run("collective", "--op", "all_reduce", "--bytes", "1e6", "--topology", "star", "--dims", "8",
                "--link-bw-GBps", "100", "--hop-latency-ns", "100", "--json", path=installed, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    considered = {c["algorithm"] for c in json.loads(proc.stdout)["candidates"]}
    assert "reduce_then_broadcast" in considered and "ring" in considered


def test_evaluate_uses_the_plugins_preset_and_algorithm(installed, tmp_path):
    proc = _run("evaluate", "--model", "llama-3.2-1b", "--chip", "standard", "--noc", "star8", "--parallel",
                "tp=8,all_reduce=reduce_then_broadcast", "--json", path=installed, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["feasible"] and report["hardware"]["noc"] == "star8" and report["hardware"]["devices"] == 8
    assert report["schedule"]["collectives"] == {"all_reduce": "reduce_then_broadcast"}
    assert report["metrics"]["stps"] > 0


def test_without_the_plugin_its_names_are_refused(tmp_path):
    proc = _run("evaluate", "--model", "llama-3.2-1b", "--chip", "standard", "--noc", "star8", path=tmp_path,
                cwd=tmp_path)
    assert proc.returncode == 2 and "unknown NoC 'star8'" in proc.stderr


def _broken_plugin(site: Path) -> None:
    """An installed distribution (its dist-info, as pip writes one) whose entry point raises on import."""
    (site / "broken_plugin.py").write_text("raise RuntimeError('this plugin is broken')\n")
    info = site / "broken_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[deepstack.plugins]\nbroken = broken_plugin\n")


def test_a_broken_plugin_is_one_line_naming_it(tmp_path):
    _broken_plugin(tmp_path)
    proc = _run("catalog", "llms", path=tmp_path, cwd=tmp_path)
    assert_user_error(CliResult(proc.returncode, proc.stdout, proc.stderr), "plugin broken (broken_plugin",
                      "RuntimeError: this plugin is broken")


def test_a_plugin_is_part_of_the_code_so_results_stored_without_it_are_not_reused(installed, tmp_path):
    # the plugin's algorithm joins the automatic choice on built-in NoCs too, so what a design point computes may
    # change when it is installed: the code digest covers it, and a sweep stored without it is not resumed with it
    digest = [sys.executable, "-c", "from deepstack.search.studies.provenance import code_digest; print(code_digest())"]
    without, with_plugin = (subprocess.run(digest, capture_output=True, text=True, check=True, timeout=300,
                                           env={**os.environ, "PYTHONPATH": str(path)}).stdout
                            for path in (tmp_path, installed))
    assert without != with_plugin
    space = write_space(tmp_path / "tiny.toml", chips=("standard",), hops=(1.0,), stacked=(2,), connected=(2,),
                        level_bw=(1.0,), fsdp=(False,))
    sweep = ("sweep", "--mode", "exhaustive", "--space", str(space), "--out", "out")
    first = _run(*sweep, path=tmp_path, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    again = _run(*sweep, path=installed, cwd=tmp_path)
    assert_user_error(CliResult(again.returncode, again.stdout, again.stderr), "--out:",
                      "evaluated by other code")


def test_without_plugins_the_code_digest_is_the_packages_alone():
    # results stored before plugins entered the digest stay current where no plugin is installed
    import importlib

    from deepstack.registry import plugin_names
    from deepstack.search.studies.provenance import _PACKAGES, code_digest, digest_of

    if plugin_names():
        pytest.skip(f"plugins installed here: {', '.join(plugin_names())}")
    assert code_digest() == digest_of({name: Path(importlib.import_module(name).__file__).parent
                                       for name in _PACKAGES})
