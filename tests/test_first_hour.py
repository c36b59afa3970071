"""Issue 29, "a first hour without surprises": what a new user's first commands run into. Bad output folders and
seeds are one line naming the flag, exit 2, refused before any work starts (nothing is created or stored)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_user_error

ROOT = Path(__file__).resolve().parent.parent
QUICK_OPTIMIZE = ("optimize", "--space", "small", "--trials", "1", "--refine", "0", "--study", "x")


@pytest.fixture
def a_file(tmp_path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("not a folder\n")
    return path


def _nothing_created(folder: Path, *kept: str) -> None:
    assert sorted(p.name for p in folder.iterdir()) == sorted(kept)


@pytest.mark.parametrize("out", ["/proc/nope", "FILE", "FILE/sub"])
def test_optimize_refuses_an_unusable_out_folder_before_any_trial(cli, tmp_path, monkeypatch, a_file, out):
    monkeypatch.chdir(tmp_path)
    out = out.replace("FILE", str(a_file))
    result = cli(*QUICK_OPTIMIZE, "--out", out)
    assert_user_error(result, "--out", out)
    _nothing_created(tmp_path, a_file.name)  # no studies/ folder, no database: no trial ran


def test_optimize_out_as_an_existing_file_says_it_is_a_file(cli, tmp_path, monkeypatch, a_file):
    monkeypatch.chdir(tmp_path)
    assert_user_error(cli(*QUICK_OPTIMIZE, "--out", str(a_file)), "--out", "is a file, not a folder")


@pytest.mark.parametrize("out", ["/proc/nope", "FILE"])
def test_sweep_refuses_an_unusable_out_folder(cli, tmp_path, monkeypatch, a_file, out):
    monkeypatch.chdir(tmp_path)
    out = out.replace("FILE", str(a_file))
    assert_user_error(cli("sweep", "--space", "small", "--out", out), "--out", out)
    _nothing_created(tmp_path, a_file.name)


@pytest.mark.parametrize("out", ["/proc/nope", "FILE"])
def test_study_run_refuses_an_unusable_out_folder(cli, tmp_path, monkeypatch, a_file, out):
    monkeypatch.chdir(tmp_path)
    out = out.replace("FILE", str(a_file))
    result = cli("study", "run", str(ROOT / "studies" / "dram-layers.toml"), "--quick", "--out", out)
    assert_user_error(result, "--out", out)
    _nothing_created(tmp_path, a_file.name)


@pytest.mark.parametrize("seed", ["-1", "99999999999", str(2**32)])
def test_optimize_seed_outside_the_samplers_range(cli, tmp_path, monkeypatch, seed):
    monkeypatch.chdir(tmp_path)
    assert_user_error(cli(*QUICK_OPTIMIZE, "--seed", seed), "--seed", "0..4294967295", seed)
    _nothing_created(tmp_path)


def test_the_largest_seed_is_accepted(cli, tmp_path):
    result = cli(*QUICK_OPTIMIZE, "--seed", str(2**32 - 1), "--storage", f"sqlite:///{tmp_path / 'x.db'}",
                 "--out", str(tmp_path), "--json")
    assert result.code == 0, result.err
    assert result.json()["run"]["seed"] == 2**32 - 1


def test_the_console_script_prints_one_line_for_a_bad_out(cli_process, tmp_path):
    assert_user_error(cli_process(*QUICK_OPTIMIZE, "--out", "/proc/nope", cwd=tmp_path), "--out", "/proc/nope")
    _nothing_created(tmp_path)
