"""Bad input gets one line naming the field and what is allowed, exit status 2, no traceback (issue 2 item 4)."""

from __future__ import annotations

from importlib import resources

import pytest
from conftest import assert_user_error

STANDARD = (resources.files("deepstack.catalog") / "chips" / "standard.toml").read_text()
TMS1 = (resources.files("deepstack.catalog") / "nocs" / "tms1.toml").read_text()


def test_unknown_preset(cli):
    assert_user_error(cli("catalog", "show", "gpt-17"), "unknown preset 'gpt-17'", "allowed:", "deepseek-v3")


def test_unknown_catalog_kind(cli):
    assert_user_error(cli("catalog", "gpus"), "must be one of llms, chips, nocs, systems")


def test_negative_bandwidth(cli, tmp_path):
    path = tmp_path / "noc.toml"
    path.write_text(TMS1.replace("link_bw_GBps = 800.0", "link_bw_GBps = -800.0"))
    assert_user_error(cli("validate", str(path)), "levels.0.link_bw_GBps", "greater than 0", "-800")


def test_connected_layers_above_stacked(cli, tmp_path):
    path = tmp_path / "chip.toml"
    path.write_text(STANDARD.replace("connected_layers = 4", "connected_layers = 6"))
    assert_user_error(cli("validate", str(path)), "device.dram", "connected_layers (n = 6) must be ≤ stacked_layers")


def test_unknown_key(cli, tmp_path):
    path = tmp_path / "chip.toml"
    path.write_text(STANDARD.replace("[pe]\n", "[pe]\nmatrix_flop_per_cycle = 1\n"))
    assert_user_error(cli("validate", str(path)), "pe.matrix_flop_per_cycle", "unknown key",
                      "allowed: matrix_flops_per_cycle")


def test_misspelt_keys_are_named_before_the_keys_they_leave_missing(cli, tmp_path):
    # four misspelt keys: the one-line message is capped at five errors, and the missing keys the misspellings
    # caused came first, hiding the unknown ones behind "(and N more errors)"
    import re

    text = STANDARD
    for key in ("process_nm", "clock_GHz", "tdp_W", "l0_KiB"):
        text = re.sub(rf"^{key} = ", f"{key.lower()}x = ", text, count=1, flags=re.M)
    path = tmp_path / "chip.toml"
    path.write_text(text)
    result = cli("validate", str(path))
    assert_user_error(result, "process_nmx: unknown key", "clock_ghzx: unknown key", "tdp_wx: unknown key",
                      "pe.l0_kibx: unknown key")
    assert result.err.count("allowed: name, description") == 1  # each list of allowed keys once


@pytest.mark.parametrize(("suffix", "text"), [
    (".toml", 'kind = "schedule"\npp = 2\npp = 4\n'),
    (".yaml", "kind: schedule\npp: 2\npp: 4\n"),
    (".json", '{"kind": "schedule", "pp": 2, "pp": 4}'),
])
def test_duplicate_key(cli, tmp_path, suffix, text):
    path = tmp_path / f"dup{suffix}"
    path.write_text(text)
    result = cli("validate", str(path))
    assert_user_error(result, str(path))
    assert "pp" in result.err and ("duplicate" in result.err.lower() or "overwrite" in result.err.lower())


@pytest.mark.parametrize(("suffix", "text"), [
    (".toml", 'kind = "llm"\nname = "x\n'),
    (".yaml", "kind: [llm\n"),
    (".json", '{"kind": "llm",'),
    (".toml", ""),
])
def test_malformed_file(cli, tmp_path, suffix, text):
    path = tmp_path / f"bad{suffix}"
    path.write_text(text)
    assert_user_error(cli("validate", str(path)), str(path))


def test_missing_file_and_wrong_type(cli, tmp_path):
    assert_user_error(cli("validate", str(tmp_path / "nope.toml")), "no such file")
    (tmp_path / "x.txt").write_text("hello")
    assert_user_error(cli("validate", str(tmp_path / "x.txt")), "unsupported file type", ".toml")


def test_unknown_kind(cli, tmp_path):
    path = tmp_path / "k.toml"
    path.write_text('kind = "gpu"\n')
    assert_user_error(cli("validate", str(path)), "kind: must be one of llm, chip, noc")


def test_nan_is_rejected(cli, tmp_path):
    path = tmp_path / "noc.toml"
    path.write_text(TMS1.replace("link_bw_GBps = 800.0", "link_bw_GBps = nan"))
    assert_user_error(cli("validate", str(path)), "link_bw_GBps", "finite")


def test_unknown_option_is_one_line(cli):
    assert_user_error(cli("catalog", "--bogus"), "--bogus")


def test_console_script_end_to_end(cli_process):
    result = cli_process("catalog", "show", "no-such-chip")
    assert_user_error(result, "unknown preset 'no-such-chip'")
    ok = cli_process("catalog", "nocs", "--json")
    assert ok.code == 0 and '"tms1"' in ok.out


def test_a_degree_given_twice_is_refused(cli):
    # "tp=8,tp=4" used to run tp=4 silently (the last won); a module's own segment may still override the shared one
    result = cli("evaluate", "--chip", "standard", "--noc", "tms1", "--parallel", "tp=8,tp=4,dp=64")
    assert_user_error(result, "--parallel: tp is given twice in 'tp=8,tp=4,dp=64'", "give each degree once")
    assert cli("evaluate", "--chip", "standard", "--noc", "tms1", "--parallel", "tp=8,dp=32;attn:tp=4,dp=64").code == 0


@pytest.mark.parametrize(("text", "key"), [("tp=8;tp=4", "tp"), ("attn:tp=4;moe:ep=8;attn:tp=2", "tp"),
                                           ("tp=8;pp=2;pp=4", "pp"), ("tp=8,fsdp;fsdp", "fsdp")])
def test_a_degree_given_twice_in_two_segments_is_refused(text, key):
    # the same place twice across ";" segments used to let the last one win silently
    from deepstack.errors import UserInputError
    from deepstack.schema.schedule import Schedule

    with pytest.raises(UserInputError, match=f"--parallel: {key} is given twice"):
        Schedule.parse(text)


def test_a_space_whose_every_n_is_above_every_m_is_refused(cli, tmp_path):
    # no (m, n) with n ≤ m is left: optimize would say "no feasible hardware", which points at memory instead
    from conftest import write_space

    path = write_space(tmp_path / "s.toml", stacked=(2, 4), connected=(6,))
    assert_user_error(cli("validate", str(path)), "connected_layers [6] are all above stacked_layers [2, 4]",
                      "n ≤ m")


def test_a_dims_value_that_is_not_a_shape_is_named(cli):
    result = cli("collective", "--op", "all_reduce", "--bytes", "1000", "--topology", "ring", "--dims", "8,x",
                 "--link-bw-GBps", "100", "--hop-latency-ns", "100")
    assert_user_error(result, "--dims: 'x' is not a level's shape", "give 8 or 4x4")


def test_a_refine_budget_above_the_trials_is_refused(cli, tmp_path):
    result = cli("optimize", "--space", "small", "--trials", "4", "--refine", "2000", "--storage",
                 f"sqlite:///{tmp_path / 'r.db'}")
    assert_user_error(result, "--refine: the local search's share of the run's --trials, so at most 4 (got 2000)")
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize("name", ["a/b", "../evil", "", ".hidden", "-x"])
def test_a_study_name_that_is_not_a_plain_name_is_refused(cli, tmp_path, monkeypatch, name):
    # "a/b" ran every trial and then crashed writing its front; "../evil" split the storage and the front files
    monkeypatch.chdir(tmp_path)
    result = cli("optimize", "--space", "small", "--trials", "4", "--study", name)
    assert_user_error(result, "--study: a name without", repr(name))
    assert list(tmp_path.rglob("*")) == []  # refused before any storage or folder was made


@pytest.mark.parametrize(("axis", "value", "needle"), [
    ({"model": "nosuch"}, "scenarios.models", "unknown model 'nosuch'"),
    ({"chips": ("standard", "nochip")}, "hardware.chips", "unknown chip 'nochip'"),
])
def test_validate_checks_the_presets_a_space_names(cli, tmp_path, axis, value, needle):
    # such a space used to pass validate ("ok") and fail only in a search, without naming the file or field
    from conftest import write_space

    space = write_space(tmp_path / "s.toml", **axis)
    for command in (("validate", str(space)), ("optimize", "--space", str(space), "--trials", "2",
                                                "--storage", f"sqlite:///{tmp_path / 's.db'}")):
        assert_user_error(cli(*command), f"{space}: {value}: {needle}")
    assert not (tmp_path / "s.db").exists()


def test_validate_checks_a_study_recipes_runner(cli, tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('kind = "study"\nname = "r"\nrunner = "nosuch"\nquestion = "q"\n')
    assert_user_error(cli("validate", str(recipe)), f"{recipe}: runner: must be one of", "(got 'nosuch')")
