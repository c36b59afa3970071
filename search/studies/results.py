"""The results page: ``deepstack study report`` builds ``studies/RESULTS.md`` from the studies' run records.

Every finished ``deepstack study run`` leaves ``run.json`` in its output folder (see :func:`run_study`): the
study, its wall time, when it finished, the files it wrote and its key tables as data. This module reads the
record of every recipe in ``studies/*.toml`` (in the order of the table in ``studies/README.md``) and renders one
Markdown page from them alone — no number on the page is typed by hand. A recipe without a finished run gets a
"not run yet" line with the command that runs it.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deepstack.errors import UserInputError
from deepstack.schema import load_file
from deepstack.schema.scenario import ASSUMPTION_SETS
from deepstack.search.files import write_text_atomically
from deepstack.search.studies import (
    RUN_RECORD,
    markdown_table,
    run_folder_name,
    run_parameters,
    utc_now,
)
from deepstack.search.studies.provenance import code_digest, inputs_digest

DEFAULT_RECIPES = "studies"
DEFAULT_OUT_ROOT = "studies/out"
DEFAULT_PAGE = "studies/RESULTS.md"
FIGURE_SUFFIXES = (".png", ".svg", ".html")
MISSING_CELL = "–"  # a null cell of a key table: a value the row lacks, or NaN
CHANGES_FILE = "changes/results.toml"  # under the recipes folder: what moved since the last results, and why
CHANGE_FIELDS = ("study", "figure", "before", "after", "why")


@dataclass
class StudyRun:
    """One recipe and, when it has finished a run into its folder, that run's record."""

    name: str
    recipe: Path
    question: str
    folder: Path
    record: dict[str, Any] | None
    problem: str = ""  # why its record could not be read (``collect`` with ``unreadable_ok``)


def recipe_paths(recipes: Path) -> list[Path]:
    """``recipes/*.toml`` in the order of the recipe table in ``recipes/README.md``; the rest by name after it."""
    if not recipes.is_dir():
        raise UserInputError(f"--recipes {recipes}: no such folder (it holds the study recipes <name>.toml)")
    paths = {p.stem: p for p in sorted(recipes.glob("*.toml"))}
    if not paths:
        raise UserInputError(f"--recipes {recipes}: no study recipes (*.toml) in it")
    readme = recipes / "README.md"
    listed = re.findall(r"^\|\s*`([^`]+)`\s*\|", readme.read_text(), flags=re.M) if readme.is_file() else []
    order = [name for name in dict.fromkeys(listed) if name in paths]
    return [paths[name] for name in order] + [p for name, p in paths.items() if name not in order]


def _bad(path: Path, detail: str) -> UserInputError:
    return UserInputError(f"{path}: not a valid study run record ({detail}); run the study again to rewrite it")


def _check(path: Path, ok: bool, detail: str) -> None:
    if not ok:
        raise _bad(path, detail)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def load_record(path: Path, study: str) -> dict[str, Any]:
    """Read and check one ``run.json``; anything unreadable or malformed is a one-line user error naming it."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _bad(path, str(exc)) from None
    _check(path, isinstance(data, dict), "not a JSON object")
    for key, kind in (("study", str), ("runner", str), ("quick", bool), ("finished_at", str), ("files", list),
                      ("tables", list)):
        _check(path, isinstance(data.get(key), kind), f"{key}: missing or not a {kind.__name__}")
    for key in ("wall_s", "rows"):
        _check(path, _is_number(data.get(key)) and data[key] >= 0, f"{key}: missing or not a number ≥ 0")
    _check(path, data["study"] == study, f"study: it records {data['study']!r}, expected {study!r}")
    _check(path, all(isinstance(f, str) and f and not Path(f).is_absolute() and ".." not in Path(f).parts
                     for f in data["files"]), "files: must be paths relative to the run folder")
    for i, table in enumerate(data["tables"]):
        where = f"tables[{i}]"
        _check(path, isinstance(table, dict), f"{where}: not an object")
        _check(path, isinstance(table.get("title"), str), f"{where}.title: missing or not a string")
        columns = table.get("columns")
        _check(path, isinstance(columns, list) and all(isinstance(c, str) for c in columns),
               f"{where}.columns: missing or not a list of strings")
        _check(path, isinstance(table.get("digits"), int) and not isinstance(table["digits"], bool)
               and 1 <= table["digits"] <= 17, f"{where}.digits: missing or not an integer in 1…17")
        rows = table.get("rows")
        _check(path, isinstance(rows, list) and all(isinstance(r, list) and len(r) == len(columns) for r in rows),
               f"{where}.rows: missing or not a list of rows of {len(columns)} cells")
        _check(path, all(c is None or isinstance(c, bool | int | float | str) for r in rows for c in r),
               f"{where}.rows: a cell is not a number, string, boolean or null")
    return data


def collect(recipes: str | Path = DEFAULT_RECIPES, out_root: str | Path = DEFAULT_OUT_ROOT,
            quick: bool = False, need_out_root: bool = True, unreadable_ok: bool = False) -> list[StudyRun]:
    """Every recipe with the record of its run in ``out_root/<name>`` (``<name>-quick`` with ``quick``), each
    followed by its finished runs under another assumption set (``<name>-paper``, ...), named "<name> (paper
    set)": the findings the paper-findings study leaves to those runs are on the page beside the default's.
    A missing ``out_root`` is refused with ``need_out_root``, else no study has run; a record that cannot be read
    is refused, or with ``unreadable_ok`` its run has no record and says why in ``problem``."""
    recipes, out_root = Path(recipes), Path(out_root)
    if need_out_root and not out_root.is_dir():
        raise UserInputError(f"--out-root {out_root}: no such folder; run a study first "
                             f"(deepstack study run {recipes / '<name>.toml'}{' --quick' if quick else ''})")
    runs = []
    for path in recipe_paths(recipes):
        recipe = load_file(str(path), expected_kind="study")
        for chosen in ASSUMPTION_SETS:
            folder = out_root / run_folder_name(recipe.name, chosen, quick)
            record_path = folder / RUN_RECORD
            record, problem = None, ""
            if record_path.exists():
                try:
                    record = load_record(record_path, recipe.name)
                except UserInputError as exc:
                    if not unreadable_ok:
                        raise
                    problem = str(exc)
            if record or problem or chosen == "default":
                name = recipe.name if chosen == "default" else f"{recipe.name} ({chosen} set)"
                runs.append(StudyRun(name, path, recipe.question, folder, record, problem))
    return runs


# --- rendering -------------------------------------------------------------------------------------------------

def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _slug(title: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def relative(path: Path, page_dir: Path) -> str:
    """``path`` relative to the page's folder, as the page links it."""
    return Path(os.path.relpath(path.resolve(), page_dir.resolve())).as_posix()


def _link(path: Path, page_dir: Path) -> str:
    rel = relative(path, page_dir)
    note = "" if path.exists() else " (missing)"
    return f"[`{rel}`](<{rel}>){note}"


def _cell(value: Any) -> Any:
    if value is None:
        return MISSING_CELL
    if isinstance(value, str):
        return " ".join(value.split()).replace("|", "\\|")
    return value


def render_table(table: dict[str, Any]) -> str:
    """A recorded key table in Markdown, with the same number formatting as the study's ``summary.md``."""
    columns = table["columns"]
    rows = [{c: _cell(v) for c, v in zip(columns, row, strict=True)} for row in table["rows"]]
    return markdown_table(rows, columns, table["digits"])


def _run_command(run: StudyRun, out_root: Path, quick: bool) -> str:
    command = f"deepstack study run {run.recipe}"
    if out_root != Path(DEFAULT_OUT_ROOT):
        command += f" --out {run.folder}"
    return command + (" --quick" if quick else "")


def load_changes(path: Path, studies: list[str]) -> tuple[str, list[dict[str, str]]]:
    """``(since, entries)`` of a changes file: what moved since the previous results page, per study.

    Its figures are typed, from the two runs' key tables (the page says so); a missing file is no changes. Every
    entry names a recipe and gives ``figure``, ``before``, ``after`` and ``why``.
    """
    if not path.is_file():
        return "", []
    import tomllib

    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UserInputError(f"{path}: not a readable changes file ({exc})") from None
    entries = data.get("change", [])
    if not isinstance(data.get("since", ""), str) or not isinstance(entries, list):
        raise UserInputError(f"{path}: needs since = \"...\" and [[change]] tables")
    for number, entry in enumerate(entries, 1):
        bad = [f for f in CHANGE_FIELDS if not isinstance(entry.get(f), str) or not entry.get(f).strip()]
        if bad:
            raise UserInputError(f"{path}: change {number}: {', '.join(bad)} must be non-empty text")
        if entry["study"] not in studies:
            raise UserInputError(f"{path}: change {number}: study must be one of {', '.join(studies)} "
                                 f"(got {entry['study']!r})")
    return data.get("since", ""), entries


def render_changes(since: str, entries: list[dict[str, str]], source: str) -> list[str]:
    """The "what changed since the last results" section (empty without entries)."""
    if not entries:
        return []
    lines = ["## What changed since the last results", "",
             f"Since {since}. The figures are typed from the two runs' key tables in `{source}`; the tables "
             "below are the current runs'.", "",
             "| study | key figure | before | after | why |", "|---|---|---|---|---|"]
    lines += [f"| [{e['study']}](#{_slug(e['study'])}) | {e['figure']} | {e['before']} | {e['after']} | {e['why']} |"
              for e in entries]
    return [*lines, ""]


def render(runs: list[StudyRun], page: Path, out_root: Path, quick: bool, generated_at: str,
           changes: list[str] = ()) -> str:
    page_dir = page.parent
    finished = [r for r in runs if r.record]
    root = relative(out_root, page_dir)
    lines = [
        "# Study results",
        "",
        "<!-- Generated by `deepstack study report`: do not edit by hand. -->",
        f"_Generated by `deepstack study report` at {generated_at} from the run records (`{RUN_RECORD}`) under "
        f"`{root}`{' (quick runs)' if quick else ''}. Do not edit by hand: run a study with "
        "`deepstack study run studies/<name>.toml`, then regenerate this page with `deepstack study report`._",
        "",
        f"{len(finished)} of {len(runs)} studies have a finished run; the last column says whether each was made "
        "by the code that wrote this page, from its recipe as it was then (`deepstack study list` says the same "
        "for the code checked out now). The tables below are each study's key "
        "tables as its run recorded them; its `summary.md` says what they show. Figures, summaries and data "
        f"live in the run folders under `{root}`, which are not committed: run the studies to see them.",
        "",
        "| study | wall time | rows | quick? | finished (UTC) | when this page was made |",
        "|---|---|---|---|---|---|",
    ]
    digest = code_digest()
    for run in runs:
        name = f"[{run.name}](#{_slug(run.name)})"
        if run.record:
            rec = run.record
            status, why = run_status(rec, run.recipe, digest)
            lines.append(f"| {name} | {duration(rec['wall_s'])} | {rec['rows']} | "
                         f"{'yes' if rec['quick'] else 'no'} | {rec['finished_at']} | "
                         f"{status}{f' ({why})' if why else ''} |")
        else:
            lines.append(f"| {name} | not run yet | | | | |")
    if finished:
        total = sum(r.record["wall_s"] for r in finished)
        lines.append(f"| total | {duration(total)} | {sum(r.record['rows'] for r in finished)} | | | |")
    lines.append("")
    lines += changes
    lines += _paper_vs_default(runs, out_root, quick)

    for run in runs:
        lines += [f"## {run.name}", "", f"**Question.** {run.question}", ""]
        rec = run.record
        if not rec:
            lines += [f"not run yet: `{_run_command(run, out_root, quick)}`", ""]
            continue
        lines += [f"Recipe `{run.recipe.name}`, runner `{rec['runner']}`"
                  f"{', quick mode (a reduced version, not the real answer)' if rec['quick'] else ''}: "
                  f"{rec['rows']} rows in {duration(rec['wall_s'])}, finished {rec['finished_at']}.", ""]
        for table in rec["tables"]:
            lines += [f"**{table['title']}**", "", render_table(table)]
        if not rec["tables"]:
            lines += ["(this run recorded no key table)", ""]
        files = [run.folder / f for f in rec["files"]]
        figures = [f for f in files if f.suffix.lower() in FIGURE_SUFFIXES]
        data = [f for f in files if f.suffix.lower() == ".csv"]
        summary = [f for f in files if f.name == "summary.md"]
        for label, group in (("Figures", figures), ("Summary", summary), ("Data", data)):
            if group:
                lines.append(f"- {label}: " + ", ".join(_link(f, page_dir) for f in group))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


PAPER_VS_DEFAULT = "Paper vs default: every finding under each assumption set"
FINDING_COLUMNS = {"finding": "finding", "what": "what", "paper": "paper", "paper_set": "ours, paper set",
                   "default_set": "ours, default set", "verdict": "verdict (paper set)"}


def _paper_vs_default(runs: list[StudyRun], out_root: Path, quick: bool) -> list[str]:
    """Every paper finding with its value under both sets, from the runs' records (the paper-findings run's own
    findings and those the other studies' runs answer); nothing when paper-findings has no (full) run."""
    from deepstack.accuracy.paper_studies import BOTH_SETS, every_finding

    if quick or not any(r.record and r.name == BOTH_SETS for r in runs):
        return []

    found = every_finding(out_root)
    rows = [{label: _cell(row.get(key)) for key, label in FINDING_COLUMNS.items()} for row in found["rows"]]
    return [f"## {PAPER_VS_DEFAULT}", "",
            "Each of the paper's findings (its Table 4 totals and R-findings): the paper's value, ours under the "
            "`paper` assumption set and under the default, and the verdict under the paper set (docs/model.md "
            "§17 lists where the sets differ; `deepstack accuracy paper --studies studies/out` prints the same "
            "with Table 4 row by row). The tables of each paper choice put back at the default alone are in the "
            "paper-findings section (Table 4) and the 3d-vs-2.5d (paper set) section (R8–R10).", "",
            markdown_table(rows, list(FINDING_COLUMNS.values())),
            "Read from: " + "; ".join(f"`{s}`" for s in found["sources"]) + ".", ""]


_FINISHED = re.compile(r"^(\d+) of (\d+) studies have a finished run[.;]", re.MULTILINE)


def _refuse_fewer_runs(page: Path, finished: int, out_root: Path) -> None:
    """Refuse to replace a results page that reports more finished runs than ``out_root`` holds: their results
    would be lost from it."""
    try:
        found = _FINISHED.search(page.read_text())
    except OSError:
        return
    if found and int(found.group(1)) > finished:
        raise UserInputError(f"--to {page}: it reports {found.group(1)} finished studies and {out_root} holds "
                             f"{finished}, so their results would be lost from it; run the studies first, write "
                             "another page with --to, or replace it anyway with --force")


def build_report(recipes: str | Path = DEFAULT_RECIPES, out_root: str | Path = DEFAULT_OUT_ROOT,
                 to: str | Path = DEFAULT_PAGE, quick: bool = False, force: bool = False) -> dict[str, Any]:
    """Write the results page ``to`` from the run records under ``out_root``; returns what it wrote. A page that
    reports more finished runs than ``out_root`` holds (a clone's committed page: the run folders are not
    committed) is replaced only with ``force``."""
    out_root, page = Path(out_root), Path(to)
    if page.is_dir():
        raise UserInputError(f"--to {page}: is a folder; give the Markdown file to write, e.g. {DEFAULT_PAGE}")
    runs = collect(recipes, out_root, quick)
    if not force:
        _refuse_fewer_runs(page, sum(1 for r in runs if r.record), out_root)
    changes_path = Path(recipes) / CHANGES_FILE
    since, entries = load_changes(changes_path, [r.name for r in runs]) if not quick else ("", [])
    generated_at = utc_now()
    text = render(runs, page, out_root, quick, generated_at,
                  render_changes(since, entries, relative(changes_path, page.parent)))
    try:
        page.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(page, text)
    except OSError as exc:
        raise UserInputError(f"--to {page}: cannot write it ({exc.strerror or exc})") from None
    return {
        "to": str(page), "generated_at": generated_at, "out_root": str(out_root), "quick": quick,
        "finished": sum(1 for r in runs if r.record), "studies": [
            {"study": r.name, "recipe": str(r.recipe), "folder": str(r.folder),
             "status": "finished" if r.record else "not run",
             **({"wall_s": r.record["wall_s"], "rows": r.record["rows"], "quick": r.record["quick"],
                 "finished_at": r.record["finished_at"], "tables": len(r.record["tables"]),
                 "files": [str(r.folder / f) for f in r.record["files"]]} if r.record else {})}
            for r in runs],
    }


def run_status(record: dict[str, Any] | None, recipe: Path, digest: str) -> tuple[str, str]:
    """Whether a run's results are those the code now running would give on its recipe as it is now: (``current``,
    ""), (``stale``, why: other code made them, or the recipe's parameters or a file they name changed since) or
    (``not run``, ""). A recipe that cannot be read never makes a run stale by itself."""
    if record is None:
        return "not run", ""
    if record.get("code_digest") != digest:
        return "stale", "run on other code"
    try:
        params = run_parameters(load_file(str(recipe), expected_kind="study"), bool(record["quick"]),
                                record.get("assumptions"))
    except (UserInputError, OSError):
        return "current", ""
    recorded = record.get("inputs_digest")  # a record without one predates it, so other code made it
    if recorded is not None and recorded != inputs_digest(recipe.resolve().parent, params):
        return "stale", f"run before {recipe} (its parameters or a file they name) changed"
    return "current", ""


def list_runs(recipes: str | Path = DEFAULT_RECIPES, out_root: str | Path = DEFAULT_OUT_ROOT,
              quick: bool = False) -> list[dict[str, Any]]:
    """Every recipe's last run under ``out_root`` (and its other assumption sets' runs): its status against the
    code now running (:func:`run_status`), when it finished, how long it took, and the command that (re-)runs it."""
    digest = code_digest()
    out = []
    for run in collect(recipes, out_root, quick, need_out_root=False, unreadable_ok=True):
        rec = run.record or {}
        chosen = rec.get("assumptions", "default")
        command = _run_command(run, Path(out_root), quick) + ("" if chosen == "default" else f" --assumptions {chosen}")
        status, why = ("unreadable", run.problem) if run.problem else run_status(run.record, run.recipe, digest)
        out.append({"study": run.name, "status": status, "why": why, "finished_at": rec.get("finished_at"),
                    "wall_s": rec.get("wall_s"), "code_digest": rec.get("code_digest"), "folder": str(run.folder),
                    "command": command})
    return out
