"""Fuzzing the input boundary (issue "Scale-out and reliability", item 4).

Every schema file (llm, chip, noc, system, scenario, schedule, space, study) and the flags of ``evaluate``,
``collective`` and ``strategies`` are mutated at random from a valid starting point. Each case must end in exit
status 0, or in exit status 2 with exactly one ``deepstack: error:`` line on stderr — never a traceback, never a
warning (an extra stderr line), never a hang.

How the cases run, and why (measured on a 2-core machine):

* Every case goes through the real ``deepstack.cli.run`` in-process. ``run`` rebuilds typer's click command on
  each call (~90 ms of typer introspecting signatures); the module's ``fast_cli`` fixture caches that one build
  — parsing, validation, the error funnel and rendering all run as usual — which takes a case to 1–10 ms.
* Hypothesis draws the shape of each schema case (start document, mutations, repeated key, format, accident) and
  seeds a Random for the details; drawing every detail through Hypothesis cost ~15 ms a case, more than running
  it. 1,000 cases per schema then take ~10 s.
* Hypothesis runs derandomized without its example database: CI sees the same cases on every run.
* A case that hits a bug these fuzzers found and that is still open (``KNOWN_BUGS``) is let through, so the
  fuzzers keep looking for new ones; each known bug has a strict-xfail regression test at the end of this file,
  which starts failing when the fix lands — then delete its ``KNOWN_BUGS`` entry too.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import math
import os
import random
import shutil
import struct
import tomllib
import traceback
import warnings
from importlib import resources
from pathlib import Path

import optuna
import pytest
import typer.main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from deepstack.cli import run
from deepstack.schema import SCHEMAS

REPO = Path(__file__).resolve().parent.parent
CATALOG = resources.files("deepstack.catalog")
MINI8 = REPO / "search" / "spaces" / "nocs" / "mini8.toml"

SCHEMA_CASES = int(os.environ.get("DEEPSTACK_FUZZ_CASES", 1000))  # per schema (acceptance: ≥ 1,000)
FLAG_CASES = max(1, SCHEMA_CASES // 5)  # per command

_SETTINGS = dict(derandomize=True, database=None, deadline=None, print_blob=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SCHEMA_FUZZ = settings(max_examples=SCHEMA_CASES, **_SETTINGS)
FLAG_FUZZ = settings(max_examples=FLAG_CASES, **_SETTINGS)

# Open bugs these fuzzers found: (exception type name, the last repo frame's file and function). Each one has a
# strict-xfail test below that reproduces it.
KNOWN_BUGS: dict[tuple[str, str, str], str] = {}


# ---------------------------------------------------------------------------------------------- the contract


def _known_bug(exc: BaseException) -> str | None:
    ours = []  # frames in DeepStack's own packages (not in a virtualenv that may sit inside the checkout)
    for frame in traceback.extract_tb(exc.__traceback__):
        path = Path(frame.filename)
        if path.is_relative_to(REPO) and path.relative_to(REPO).parts[0] in ("deepstack", "models", "search"):
            ours.append((path.relative_to(REPO).as_posix(), frame.name))
    return KNOWN_BUGS.get((type(exc).__name__, *ours[-1])) if ours else None


def check_cli(*args: str) -> tuple[int | None, str, str]:
    """Run the CLI in-process and assert the contract: exit 0, or exit 2 with one stderr line; no exception
    escapes ``run`` (that would be a traceback) and no warning is issued (an extra stderr line). Returns
    ``(None, …)`` for a case that hit a known bug."""
    # the streams of a real process: UTF-8, strict on stdout, backslashreplace on stderr
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace", write_through=True)
    try:
        with (contextlib.redirect_stdout(out), contextlib.redirect_stderr(err),
              warnings.catch_warnings(record=True) as caught):
            warnings.simplefilter("always")
            code = run(list(args))
    except Exception as exc:
        if _known_bug(exc):
            return None, "", ""
        raise
    stdout, stderr = out.buffer.getvalue().decode(), err.buffer.getvalue().decode()
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert not caught, (args, [f"{w.category.__name__}: {w.message}" for w in caught])
    assert "Traceback" not in stderr, (args, stderr)
    if code == 0:
        assert not lines, (args, stderr)
    else:
        assert code == 2, (args, code, stderr)
        assert len(lines) == 1, (args, stderr)
        assert lines[0].startswith("deepstack: error: "), (args, lines)
    return code, stdout, stderr


@pytest.fixture(scope="module", autouse=True)
def fast_cli():
    """Build the click command once instead of on every ``run`` (see the module docstring)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(typer.main, "get_command", functools.cache(typer.main.get_command))
        yield


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


# ---------------------------------------------------------------------------------------- valid start points


def _toml(path) -> tuple[dict, str]:
    text = path.read_text()
    return tomllib.loads(text), text


def _catalog(kind: str) -> list[tuple[dict, str]]:
    return [_toml(p) for p in sorted((CATALOG / kind).iterdir(), key=lambda p: p.name) if p.name.endswith(".toml")]


def tiny_space() -> dict:
    return {"kind": "space", "name": "tiny", "description": "fuzz seed",
            "scenarios": {"models": ["llama-3.2-1b"], "phases": ["decode"], "batches": [64],
                          "sequence_lengths": [[1024, 1024]], "precision": "a16w8"},
            "hardware": {"chips": ["standard"], "nocs": [str(MINI8)], "stacked_layers": [2, 4],
                         "connected_layers": [1, 2, 4], "hop_latency_scale": [1.0, 2.0],
                         "level_bw_scale": [0.5, 1.0],
                         "sram": [{"name": "base"}, {"name": "big", "l1_KiB": 512.0, "l1_bw_scale": 2.0,
                                                     "l2_MiB": 64.0}]},
            "schedule": {"fsdp": [False, True], "per_module": True, "collective_algorithms": ["auto", "ring"],
                         "single_chip_schedules": 16}}


def _seeds() -> dict[str, list[tuple[dict, str | None]]]:
    """Valid documents of every kind: the catalog presets, the shipped spaces and study recipes, and small
    hand-written scenarios, schedules, a system by preset names, a space and a study."""
    llm_inline = tomllib.loads((CATALOG / "llms" / "llama-3.2-1b.toml").read_text())
    return {
        "llm": _catalog("llms"),
        "chip": _catalog("chips"),
        "noc": [*_catalog("nocs"), _toml(MINI8)],
        "system": [*_catalog("systems"),
                   ({"kind": "system", "name": "by-name", "source": "fuzz seed", "architecture": "standard",
                     "network": "tms1"}, None)],
        "scenario": [
            ({"kind": "scenario", "model": "llama-3.2-1b", "phase": "decode", "batch": 64, "input_len": 1024,
              "output_len": 1024, "precision": "a16w8"}, None),
            ({"kind": "scenario", "model": llm_inline, "phase": "prefill", "batch": 1}, None),
            ({"kind": "scenario", "model": "deepseek-v3", "phase": "decode", "batch": 1024,
              "precision": {"activation_bits": 16, "weight_bits": 8, "kv_bits": 8}}, None),
        ],
        "schedule": [
            ({"kind": "schedule", "attention": {"tp": 4, "dp": 2}, "ffn": {"ep": 8}, "pp": 2, "fsdp": True,
              "microbatches": 4, "collectives": {"all_reduce": "ring", "all_to_all": "pairwise"}}, None),
            ({"kind": "schedule"}, None),
        ],
        "space": [*(_toml(p) for p in sorted((REPO / "search" / "spaces").glob("*.toml"))), (tiny_space(), None)],
        "study": [*(_toml(p) for p in sorted((REPO / "studies").glob("*.toml"))),
                  ({"kind": "study", "name": "s", "question": "q?", "runner": "thermal_distribution",
                    "space": "small", "scenarios": {"models": ["llama-3.2-1b"]},
                    "parameters": {"model": "llama-3.2-1b", "batches": [64]}, "quick": {"batches": [1]}}, None)],
    }


SEEDS = _seeds()


def _field_names() -> list[str]:
    """Every key any schema knows (a real key in the wrong place is a good mutation)."""
    names: set[str] = set()
    seen: set[type] = set()

    def walk(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, field in model.model_fields.items():
            names.add(name)
            stack = [field.annotation]
            while stack:
                t = stack.pop()
                if isinstance(t, type) and issubclass(t, BaseModel):
                    walk(t)
                stack.extend(getattr(t, "__args__", ()))

    for model in SCHEMAS.values():
        walk(model)
    return sorted(names)


# ------------------------------------------------------------------------------------------------ junk values
#
# Hypothesis draws the shape of each case (start document, which mutations, repeated key, format, accident); the
# details (where, which key, which junk) come from a Random that Hypothesis seeds. Drawing every detail through
# Hypothesis costs ~15 ms a case (its per-choice bookkeeping), more than running the case; this costs ~3 ms.

SPECIAL_NUMBERS = [0, -1, 1, 2, 3, 7, 64, -0.0, 0.5, 1e-300, 5e-324, 1e300, 1.7976931348623157e308, -1e308,
                   2**31, 2**53 + 1, 2**63, -(2**63), 2**64, 10**30, 10**400, -(10**400), math.nan, math.inf,
                   -math.inf]
SPECIAL_STRINGS = ["", " ", "\t", "auto", "all", "none", "null", "NaN", "inf", "-1", "0", "1e999", "1_000", "4x4",
                   "0x0", "4x", "x", "3d-stacked", "hbm", "decode", "prefill", "a16w8", "a99w99", "a16w8kv4",
                   "standard", "tms1", "mini8", "dgx-h100", "llama-3.2-1b", "deepseek-v3", "no-such-preset",
                   "nocs/mini8.toml", "../x.toml", "/", "/dev/null.toml", ".toml", "x.yaml", "C:\\x.json", "ring",
                   "all_reduce", "switch", "torus", "mha", "mla", "é" * 40, "\u202e\u200b", "😀" * 3, "a\nb",
                   "[/x]", "[bold]", "%s", "{0}", "\x1b[31m", "💥" * 200, "x" * 5000, str(MINI8),
                   str(CATALOG / "chips" / "standard.toml"), str(CATALOG / "llms" / "llama-3.2-1b.toml")]
JUNK_VALUES = [*SPECIAL_NUMBERS, *SPECIAL_STRINGS, None, True, False, [], {}, [[]], [{}], [1, "a", None],
               {"x": 1}, {"": None}, {"kind": "llm"}, [math.nan, math.inf], [[1024, 1024], [0, -1]], ["auto"],
               [2, 4, 8], [True, False], {"name": "base"}, [{"name": "base"}, {"name": "base"}],
               {"tp": 0}, {"tp": 2**40}, {"tp": 3, "dp": 5}]
FIELD_NAMES = _field_names()
# Code points worth trying: ASCII, Latin-1, combining marks, RTL and zero-width controls, CJK, emoji, C0/C1
# controls (no NUL, no surrogates: a shell cannot pass the one, UTF-8 cannot hold the other).
CODE_POINTS = [(0x20, 0x7E), (0x01, 0x1F), (0x80, 0xFF), (0x300, 0x36F), (0x200B, 0x202E), (0x4E00, 0x4FFF),
               (0x1F300, 0x1F6FF), (0xE000, 0xF8FF), (0xFFF0, 0xFFFF), (0x10000, 0x10FFFF)]


def junk_text(rnd: random.Random) -> str:
    chars = []
    for _ in range(rnd.choice((0, 1, 3, 8, 16))):
        low, high = rnd.choice(CODE_POINTS)
        chars.append(chr(rnd.randint(low, high)))
    return "".join(chars)


def junk_scalar(rnd: random.Random):
    pick = rnd.randrange(7)
    if pick == 0:
        return rnd.choice(SPECIAL_NUMBERS)
    if pick == 1:
        return rnd.choice(SPECIAL_STRINGS)
    if pick == 2:
        return rnd.choice((rnd.randint(-10, 100), rnd.randint(-(2**70), 2**70), 2 ** rnd.randint(0, 300)))
    if pick == 3:  # any 64-bit pattern: subnormals, NaNs with payloads, infinities
        return rnd.choice((rnd.uniform(-1e3, 1e3), struct.unpack("<d", rnd.getrandbits(64).to_bytes(8, "little"))[0]))
    if pick == 4:
        return junk_text(rnd)
    return copy.deepcopy(rnd.choice(JUNK_VALUES))


def junk(rnd: random.Random, depth: int = 2):
    """A scalar, or a list or table of junk up to ``depth`` levels deep."""
    pick = rnd.randrange(6)
    if depth == 0 or pick < 4:
        return junk_scalar(rnd)
    if pick == 4:
        return [junk(rnd, depth - 1) for _ in range(rnd.randint(0, 3))]
    return {junk_key(rnd): junk(rnd, depth - 1) for _ in range(rnd.randint(0, 3))}


def junk_key(rnd: random.Random) -> str:
    pick = rnd.randrange(4)
    if pick < 2:
        return rnd.choice(FIELD_NAMES)  # a real key in the wrong place
    return rnd.choice(("kind", "name", "", " ", "é", "[x]", "a.b", '"')) if pick == 2 else junk_text(rnd)


OPS = ("delete", "insert", "replace", "number", "retype", "string")
FACTORS = (-1, 0, 2, 1e-9, 1e9, 1e300, math.nan, math.inf)
RETYPES = (str, lambda v: [v], lambda v: {"value": v}, lambda v: None, lambda v: 1, lambda v: True)


class Pairs(list):
    """A mapping written with a repeated key: a list of (key, value) pairs."""


def _containers(node, out: list) -> list:
    if isinstance(node, dict):
        out.append(node)
        for value in node.values():
            _containers(value, out)
    elif isinstance(node, list):
        out.append(node)
        for value in node:
            _containers(value, out)
    return out


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def mutate(data, op: str, rnd: random.Random) -> None:
    """One structural mutation of ``data``, in place, at a random table or list."""
    node = rnd.choice(_containers(data, []))
    keys = list(node) if isinstance(node, dict) else list(range(len(node)))
    if op == "insert" or not keys:
        if isinstance(node, dict):
            node[junk_key(rnd)] = junk(rnd)
        else:
            node.insert(rnd.randint(0, len(node)), junk(rnd))
        return
    key = rnd.choice(keys)
    value = node[key]
    if op == "delete":
        del node[key]
    elif op == "replace":
        node[key] = junk(rnd)
    elif op == "number":
        if _number(value) and rnd.random() < 0.5:
            with contextlib.suppress(OverflowError):
                value = value * rnd.choice(FACTORS)
            node[key] = value
        else:
            node[key] = rnd.choice(SPECIAL_NUMBERS)
    elif op == "retype":
        node[key] = rnd.choice(RETYPES)(value)
    else:
        node[key] = rnd.choice((junk_text(rnd), rnd.choice(SPECIAL_STRINGS)))


def repeat_key(data, rnd: random.Random):
    """Write one key of one table twice (the second time with the same value or junk)."""
    tables = [d for d in _containers(data, []) if isinstance(d, dict) and d]
    if not tables:
        return data
    target = rnd.choice(tables)
    key = rnd.choice(list(target))
    pairs = Pairs(target.items())
    pairs.insert(rnd.randint(0, len(pairs)), (key, copy.deepcopy(target[key]) if rnd.random() < 0.5 else junk(rnd)))
    if target is data:
        return pairs
    for node in _containers(data, []):
        for k, v in list(node.items() if isinstance(node, dict) else enumerate(node)):
            if v is target:
                node[k] = pairs
                return data
    return data


# ------------------------------------------------------------------------------------------------- writers


def _items(node) -> list:
    return list(node) if isinstance(node, Pairs) else list(node.items())


def to_json(node) -> str:
    if isinstance(node, dict | Pairs):
        return "{" + ", ".join(f"{json.dumps(str(k), ensure_ascii=False)}: {to_json(v)}" for k, v in _items(node)) + "}"
    if isinstance(node, list):
        return "[" + ", ".join(to_json(v) for v in node) + "]"
    return json.dumps(node, ensure_ascii=False)  # NaN/Infinity as Python's json writes (and reads) them


def _yaml_scalar(value) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else ".inf" if value > 0 else "-.inf"
    return json.dumps(value, ensure_ascii=False)  # a JSON scalar is a YAML flow scalar


def _yaml_flow(node) -> str:
    if isinstance(node, dict | Pairs):
        return "{" + ", ".join(f"{_yaml_scalar(str(k))}: {_yaml_flow(v)}" for k, v in _items(node)) + "}"
    if isinstance(node, list):
        return "[" + ", ".join(_yaml_flow(v) for v in node) + "]"
    return _yaml_scalar(node)


def to_yaml(node, indent: str = "") -> str:
    """Block style for mappings (so a repeated key reaches PyYAML as one), flow style below."""
    if not isinstance(node, dict | Pairs) or not _items(node):
        return indent + _yaml_flow(node)
    lines = []
    for key, value in _items(node):
        if isinstance(value, dict | Pairs) and _items(value):
            lines.append(f"{indent}{_yaml_scalar(str(key))}:\n{to_yaml(value, indent + '  ')}")
        else:
            lines.append(f"{indent}{_yaml_scalar(str(key))}: {_yaml_flow(value)}")
    return "\n".join(lines)


def _toml_string(value: str) -> str:
    escapes = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t"}
    return '"' + "".join(escapes.get(ch, ch if ch.isprintable() else f"\\U{ord(ch):08X}") for ch in value) + '"'


def _toml_value(value) -> str | None:
    """Inline TOML; ``None`` (TOML has no null) leaves the key or item out."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list) and not isinstance(value, Pairs):
        return "[" + ", ".join(v for v in map(_toml_value, value) if v is not None) + "]"
    pairs = [(k, _toml_value(v)) for k, v in _items(value)]
    return "{" + ", ".join(f"{_toml_string(str(k))} = {v}" for k, v in pairs if v is not None) + "}"


def to_toml(node) -> str:
    if not isinstance(node, dict | Pairs):
        return f"value = {_toml_value(node)}\n"
    pairs = [(k, _toml_value(v)) for k, v in _items(node)]
    return "".join(f"{_toml_string(str(k))} = {v}\n" for k, v in pairs if v is not None)


WRITERS = {".toml": to_toml, ".json": to_json, ".yaml": to_yaml, ".yml": to_yaml}
SUFFIXES = (".toml", ".toml", ".toml", ".json", ".json", ".json", ".yaml", ".yml")  # PyYAML is the slow parser
JUNK_LINES = ("=", "[", "]]", "[[x]]", "{", "key = ", "- -", ": :", '"', "'''", "\x00", "kind = 1", "&a [*a]",
              "!!python/object/apply:os.system ['true']", "x: !!binary AAAA", "*x", "%YAML 9.9", "---", "...",
              "a: &a [*a, *a]", "<<: *x", "? [a]\n: b")
ACCIDENTS = ("truncate", "overwrite", "repeat-line", "drop-line", "junk-line", "bytes", "bom", "deep", "empty",
             "surrogate", "latin-1", "utf-16")


def garble(text: str, accident: str, rnd: random.Random) -> bytes:
    """File text after one accident: cut short, overwritten, a line repeated or dropped, junk, bad bytes."""
    data = text.encode()
    lines = text.splitlines(keepends=True) or [""]
    line = rnd.randrange(len(lines))
    if accident == "truncate":
        return data[: rnd.randint(0, len(data))]
    if accident == "overwrite":
        i = rnd.randint(0, len(data))
        return data[:i] + junk_text(rnd).encode() + data[i + rnd.randint(0, 8):]
    if accident == "repeat-line":
        return "".join([*lines[: line + 1], *lines[line:]]).encode()
    if accident == "drop-line":
        return "".join([*lines[:line], *lines[line + 1:]]).encode()
    if accident == "junk-line":
        return "".join([*lines[:line], rnd.choice(JUNK_LINES) + "\n", *lines[line:]]).encode()
    if accident == "bytes":
        i = rnd.randint(0, len(data))
        return data[:i] + rnd.randbytes(rnd.randint(1, 8)) + data[i:]
    if accident == "bom":
        return b"\xef\xbb\xbf" + data
    if accident == "deep":  # nested far past any recursion limit
        depth = rnd.choice((50, 1000, 100_000))
        return data + b"\nx = " + b"[" * depth + b"]" * depth + b"\n"
    if accident == "surrogate":  # an escaped lone surrogate in the first string
        return data.replace(b'"', b'"\\ud800', 1)
    if accident == "latin-1":
        return text.encode("latin-1", "replace")
    if accident == "utf-16":
        return text.encode("utf-16")
    return b""


@st.composite
def schema_file(draw, kind: str) -> tuple[str, bytes]:
    """A document of ``kind`` after 0–4 mutations, maybe a repeated key, in one of the formats, maybe garbled."""
    rnd = draw(st.randoms(use_true_random=True), label="details")
    base, text = draw(SEED_CHOICE[kind], label="start")
    data = copy.deepcopy(base)
    ops = draw(MUTATIONS, label="mutations")
    for op in ops:
        mutate(data, op, rnd)
    repeat = draw(st.integers(0, 9), label="repeat") == 0
    if repeat:
        data = repeat_key(data, rnd)
    suffix = draw(st.sampled_from(SUFFIXES), label="format")
    # untouched presets keep their own file (tables, comments), so accidents hit real TOML
    out = text if text is not None and not ops and not repeat and suffix == ".toml" else WRITERS[suffix](data)
    accident = draw(ACCIDENT, label="accident")
    return suffix, (garble(out, accident, rnd) if accident else out.encode())


SEED_CHOICE = {kind: st.sampled_from(seeds) for kind, seeds in SEEDS.items()}
MUTATIONS = st.lists(st.sampled_from(OPS), max_size=4)
ACCIDENT = st.one_of(st.none(), st.none(), st.none(), st.sampled_from(ACCIDENTS))
SCHEMA_FILES = {kind: schema_file(kind) for kind in SCHEMAS}


def write(folder: Path, suffix: str, raw: bytes) -> str:
    folder.mkdir(exist_ok=True)
    for old in folder.glob("doc.*"):
        old.unlink()
    path = folder / f"doc{suffix}"
    path.write_bytes(raw)
    return str(path)


# -------------------------------------------------------------------------------------------- schema files


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_seeds_are_valid(kind, workdir):
    """The fuzzers start from valid documents (or the mutations would prove little)."""
    (workdir / "seeds" / "nocs").mkdir(parents=True, exist_ok=True)
    shutil.copy(MINI8, workdir / "seeds" / "nocs")  # small.toml's NoC, relative to the space file
    for data, text in SEEDS[kind]:
        for suffix in (".toml", ".json", ".yaml"):
            code, _, _ = check_cli("validate", write(workdir / "seeds", suffix, WRITERS[suffix](data).encode()))
            assert code == 0, (kind, suffix, data.get("name"))
        if text is not None:
            assert check_cli("validate", write(workdir / "seeds", ".toml", text.encode()))[0] == 0


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
@SCHEMA_FUZZ
@given(data=st.data())
def test_fuzz_schema_file(kind, data, workdir):
    """1,000 mutated, re-formatted, garbled files per schema through ``deepstack validate [--json]``."""
    suffix, raw = data.draw(SCHEMA_FILES[kind], label="file")
    args = ["validate", write(workdir / kind, suffix, raw)]
    check_cli(*args, *(["--json"] if data.draw(st.booleans(), label="--json") else []))


# ------------------------------------------------------------------------------------------------ CLI flags
#
# Each flag is left out, given a valid value, or (about one time in ten) given junk, so that most commands get
# past the parser and into the model, where the interesting failures are.

TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=16)  # shell-passable
BAD_INTEGERS = ["0", "-1", "1048577", "10485761", str(2**31), str(2**63), str(10**30), "nan", "NaN", "inf", "-inf",
                "1.5", "1e3", "", " ", "0x10", "٨", "½", "8 ", "--", "--json"]
BAD_FLOATS = ["0", "-0", "-1", "1e309", "-1e309", "nan", "inf", "-inf", "NaN", "1_000", "", "x", "0x10", "1,5",
              "5e-324"]


def _flag(name: str, valid: list[str], junk: list[str] = (), omitted: int = 10) -> st.SearchStrategy[list[str]]:
    """The flag left out (``omitted`` times in 20), given junk (2 in 20) or a valid value."""

    def pick(roll: int, good: str, bad: str, text: str) -> list[str]:
        if roll < omitted:
            return []
        if roll < 18:
            return [name, good]
        return [name, bad if roll == 18 or not text else text]

    return st.builds(pick, st.integers(0, 19), st.sampled_from(valid), st.sampled_from([*junk, *BAD_INTEGERS]), TEXT)


def _argv(*flags) -> st.SearchStrategy[list[str]]:
    extra = st.sampled_from([[], [], [], [], ["--json"], ["--json"], ["--bogus"], ["--json", "--json"], ["--help"]])
    return st.tuples(*flags, extra).map(lambda parts: [arg for part in parts for arg in part])


MODELS = ["llama-3.2-1b", "llama-3.3-70b", "deepseek-v3", "mixtral-8x7b", "qwen3-30b-a3b", "LLAMA-3.2-1B",
          " llama-3.2-1b ", str(CATALOG / "llms" / "llama-3.2-1b.toml")]
BAD_MODELS = ["gpt-17", str(MINI8), "x.toml", "/no/such.json", "/", "ring"]
CHIPS = ["standard", "h100-star", "strong-l2", str(CATALOG / "chips" / "wgmma.toml")]
BAD_CHIPS = ["gpu", str(MINI8), "tms1"]
# Valid NoCs and device counts stay small: a large valid network is slow, not wrong (see the report).
NOCS = [str(MINI8), "h100-star-32x"]
BAD_NOCS = ["tms9", "standard", str(CATALOG / "llms" / "llama-3.2-1b.toml")]
PHASES = ["decode", "prefill", "DECODE"]
BAD_PHASES = ["train", "", "pre fill"]
PRECISIONS = ["a16w16", "a16w8", "a16w8kv8", "a8w4", "a4w4kv4"]
BAD_PRECISIONS = ["a16", "w8", "a3w3", "a16w16kv64", "A16W8 "]
# Degrees multiplying to the 8 devices of mini8, the 32 of h100-star-32x, the 4 of mi325x-4, and junk.
PARALLEL = ["tp=8", "tp=2,dp=4", "attn:tp=4,dp=2;moe:ep=8", "tp=8,fsdp", "pp=8,microbatches=4", "tp=4,pp=2", "tp=32",
            "dp=4", "tp=4", "tp=1", "all_reduce=ring,tp=8"]
BAD_PARALLEL = ["tp=0", "tp=-1", "tp=nan", "tp=1e3", "tp", "zz=2", "attn:tp=2;moe:tp=4", ";;", ",", "tp=1048577",
                "all_to_all=ring,tp=8", "tp=8,dp=1048576", "attn:tp=2,dp=4;xx:tp=1", "microbatches=0,tp=8"]

EVALUATE = _argv(_flag("--model", MODELS, BAD_MODELS), _flag("--chip", CHIPS, BAD_CHIPS),
                 _flag("--noc", NOCS, BAD_NOCS), _flag("--system", ["dgx-h100", "mi325x-4"], ["dgx-b300"]),
                 _flag("--phase", PHASES, BAD_PHASES), _flag("--batch", ["1", "8", "64", "1024", "1048576"]),
                 _flag("--input-len", ["1", "128", "1024", "10485760"]),
                 _flag("--output-len", ["1", "128", "1024", "10485760"]),
                 _flag("--precision", PRECISIONS, BAD_PRECISIONS), _flag("--stacked-layers", ["1", "4", "8", "16"],
                                                                         ["17"]),
                 _flag("--connected-layers", ["1", "2", "4", "16"], ["17"]), _flag("--parallel", PARALLEL,
                                                                                   BAD_PARALLEL))

# Whole valid topologies (level counts agree across flags), each flag then possibly dropped or spoilt.
TOPOLOGY_SPECS = [("ring", "8", "100", "100"), ("chain", "4", "50", "10"), ("switch", "8", "800", "10"),
                  ("mesh", "2x4", "100", "20"), ("torus", "4x4", "75", "500"), ("fully_connected", "4", "64", "250"),
                  ("switch,ring", "4,2", "800,100", "10,100"), ("switch,torus", "4,2x2", "600,75", "5,500"),
                  ("switch,chain,torus", "2,2,2x2", "800,384,75", "10,20,500")]
BAD_TOPOLOGY = ["hypercube", "ring,", ",", "switch,switch,switch,switch", "mesh", "torus,torus"]
BAD_DIMS = ["0", "-1", "65537", "4x", "x4", "2x2x2", "nan", "1e3", "3x0", "٤", "8,8"]
BAD_PER_LEVEL = ["0", "-5", "nan", "inf", "1e309", "x", "1,", "128,32,8,4", "5e-324"]
OPS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
ALGORITHMS = ["auto", "ring", "halving_doubling", "rabenseifner", "double_tree", "hierarchical", "direct", "pairwise"]
PACKETS = ["1", "256", "1024", "4096,256"]
BAD_PACKETS = ["0", "-1", str(2**31), "1.5", "nan", "1e3", "", "9" * 400, "1,2,3,4"]


@st.composite
def collective_argv(draw) -> list[str]:
    topology, dims, bw, hop = draw(st.sampled_from(TOPOLOGY_SPECS))
    usually = {"omitted": 1}  # the required flags and the topology are given as a user would, mostly
    return draw(_argv(_flag("--op", OPS, ["broadcast", "ALL_REDUCE"], omitted=0),
                      _flag("--bytes", ["1", "1048576", "1e9", "0.5"], BAD_FLOATS, omitted=0),
                      _flag("--topology", [topology], BAD_TOPOLOGY, **usually),
                      _flag("--dims", [dims], BAD_DIMS, **usually),
                      _flag("--link-bw-GBps", [bw], BAD_PER_LEVEL, **usually),
                      _flag("--hop-latency-ns", [hop], BAD_PER_LEVEL, **usually),
                      _flag("--algorithm", ALGORITHMS, ["magic", "AUTO"]),
                      _flag("--packet-bytes", PACKETS, BAD_PACKETS), _flag("--header-bytes", ["0", "16", "82"],
                                                                           BAD_PACKETS),
                      _flag("--noc", [str(MINI8), "h100-star-32x"], ["nope", "standard"], omitted=17)))


COLLECTIVE = collective_argv()

# Valid device counts stay small: the table costs ~2.5 ms a row to render (256 devices = 2,574 rows ≈ 6 s; see
# the report), so valid counts stay ≤ 16, --devices is always given (the default is 256) and many cases ask for
# --count or --json.
STRATEGIES = _argv(_flag("--devices", ["1", "2", "7", "8", "12", "16"], omitted=0),
                   _flag("--model", MODELS, BAD_MODELS), _flag("--phase", PHASES, BAD_PHASES),
                   _flag("--batch", ["1", "8", "64", "1024", "1048576"]),
                   _flag("--input-len", ["1", "1024", "10485760"]), _flag("--output-len", ["1", "1024"]),
                   _flag("--precision", PRECISIONS, BAD_PRECISIONS), _flag("--chip", CHIPS, BAD_CHIPS),
                   _flag("--stacked-layers", ["1", "4", "16"], ["17"]),
                   st.sampled_from([[], ["--count"], ["--count"], ["--json"], ["--count", "--json"]]))


@FLAG_FUZZ
@given(argv=EVALUATE)
def test_fuzz_evaluate_flags(argv):
    check_cli("evaluate", *argv)


@FLAG_FUZZ
@given(argv=COLLECTIVE)
def test_fuzz_collective_flags(argv):
    check_cli("collective", *argv)


@FLAG_FUZZ
@given(argv=STRATEGIES)
def test_fuzz_strategies_flags(argv):
    check_cli("strategies", *argv)


# ------------------------------------------------------------------------------- failed commands and studies


def _trials(storage: str, study: str) -> list[tuple]:
    loaded = optuna.load_study(study_name=study, storage=storage)
    return [(t.number, t.state.name, t.values, t.params) for t in loaded.get_trials(deepcopy=False)]


def _failed_cleanly(result, what) -> None:
    """Exit 2 and the error as the last stderr line, no traceback. (Not "the only line": optimize's progress bar
    precedes it — see test_optimize_error_is_the_only_stderr_line.)"""
    assert result.code == 2, (what, result.err)
    assert "Traceback" not in result.out + result.err, (what, result.err)
    assert result.err.strip().splitlines()[-1].startswith("deepstack: error: "), (what, result.err)


def test_failed_commands_never_change_a_study(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything written to a default location would land here
    space = tmp_path / "tiny.toml"
    space.write_text(to_toml(tiny_space()))
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    common = ["--space", str(space), "--storage", storage, "--out", str(tmp_path / "out")]
    first = cli("optimize", *common, "--study", "s", "--trials", "3", "--refine", "0", "--seed", "1", "--json")
    assert first.code == 0, first.err
    before = _trials(storage, "s")
    assert len(before) == 3 and all(state == "COMPLETE" for _, state, _, _ in before)
    attrs = optuna.load_study(study_name="s", storage=storage).user_attrs
    bad = [
        ["--study", "s", "--objective", "stps,utps"],  # another problem for the same study
        ["--study", "s", "--objective", "stps"],  # another number of objectives
        ["--study", "s", "--batch", "32"],  # another scenario
        ["--study", "s", "--space", "small"],  # another space
        ["--study", "s", "--model", "gpt-17"],
        ["--study", "s", "--trials", "-1"],
        ["--study", "s", "--workers", "0"],
        ["--study", "s", "--sampler", "cmaes"],
        ["--study", "s", "--objective", "speed"],
        ["--study", "s", "--precision", "a3w3"],
        ["--study", "other", "--model", "gpt-17"],  # a new study that fails must not be created either
        ["--study", "other", "--input-len", "-5"],
    ]
    for args in bad:
        _failed_cleanly(cli("optimize", *common, *args), args)
    _failed_cleanly(cli("optimize", "--space", str(tmp_path / "nope.toml"), "--storage", storage, "--study", "s",
                        "--trials", "1"), "missing space")
    _failed_cleanly(cli("compare", "--study", "s", "--storage", storage, "--sweep", str(tmp_path / "no-sweep")),
                    "compare")
    assert _trials(storage, "s") == before
    assert optuna.load_study(study_name="s", storage=storage).user_attrs == attrs
    assert [s.study_name for s in optuna.get_all_study_summaries(storage)] == ["s"]
    assert not (tmp_path / "studies").exists()


# ------------------------------------------------- regression tests of bugs these fuzzers found (all fixed)


@pytest.mark.parametrize("text", ['kind = ["llm"]\n', "kind = {a = 1}\n"])
def test_non_string_kind_is_a_user_error(cli, tmp_path, text):
    path = tmp_path / "k.toml"
    path.write_text(text)
    result = cli("validate", str(path))
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1


@pytest.mark.parametrize("text", ["? [a]\n: b\n", "kind: schedule\n? {a: 1}\n: b\n"])
def test_yaml_complex_key_is_a_user_error(cli, tmp_path, text):
    path = tmp_path / "k.yaml"
    path.write_text(text)
    result = cli("validate", str(path))
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag", ["--packet-bytes", "--header-bytes"])
def test_huge_integer_flag_is_a_user_error(cli, flag):
    result = cli("collective", "--op", "all_reduce", "--bytes", "1", "--topology", "ring", "--dims", "8",
                 "--link-bw-GBps", "100", "--hop-latency-ns", "100", flag, "9" * 400)
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["[/x]", "[bold]x"])
def test_validate_prints_any_name_verbatim(cli, tmp_path, name):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({**SEEDS["llm"][0][0], "name": name}))
    result = cli("validate", str(path))
    assert result.code == 0 and name in result.out


def test_optimize_error_is_the_only_stderr_line(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("optimize", "--objective", "speed", "--trials", "5", "--storage", f"sqlite:///{tmp_path / 'x.db'}")
    assert result.code == 2
    assert len(result.err.strip().splitlines()) == 1, result.err


@pytest.mark.parametrize("flag", ["--batch", "--input-len", "--output-len"])
def test_zero_scenario_flags_are_refused(cli, tmp_path, monkeypatch, flag):
    monkeypatch.chdir(tmp_path)
    space = tmp_path / "tiny.toml"
    space.write_text(to_toml(tiny_space()))
    result = cli("optimize", "--space", str(space), flag, "0", "--trials", "0", "--json",
                 "--storage", f"sqlite:///{tmp_path / 'x.db'}", "--out", str(tmp_path))
    assert result.code == 2 and flag.removeprefix("--").replace("-", "_") in result.err


@pytest.mark.parametrize(("key", "value"), [("l1_KiB", "1"), ("l1_KiB", "8"), ("tdp_W", "1e-30")])
def test_valid_chip_that_cannot_run_is_a_user_error(cli, tmp_path, key, value):
    text = (CATALOG / "chips" / "standard.toml").read_text()
    path = tmp_path / "chip.toml"
    path.write_text("\n".join(f"{key} = {value}" if line.startswith(f"{key} = ") else line
                              for line in text.splitlines()))
    assert cli("validate", str(path)).code == 0
    result = cli("evaluate", "--chip", str(path))
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1
