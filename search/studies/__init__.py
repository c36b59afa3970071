"""Study runners: the paper's design-space experiments (§5) as recipes (``studies/<name>.toml``).

A recipe names a runner and its parameters; ``--quick`` merges the recipe's ``quick`` table over the parameters
to run a reduced version in seconds. Every runner writes, into its output folder, a CSV of every evaluated
point, static PNG figures, an interactive HTML figure where it helps, and ``summary.md`` with the key table and
what it shows. Runners register themselves with :func:`runner`; the registry is filled by importing the runner
modules listed in ``RUNNER_MODULES``.

A runner makes its key table(s) with :meth:`StudyContext.key_table`, which records the table as data as well as
returning its Markdown for ``summary.md``. When the runner returns, :func:`run_study` writes ``run.json`` last
(atomically): the run's record — study, runner, quick flag, wall time, finish time, files, rows and the key
tables. A present ``run.json`` therefore means a finished run; ``deepstack study report`` builds
``studies/RESULTS.md`` from these records alone (:mod:`deepstack.search.studies.results`).
"""

from __future__ import annotations

import csv
import datetime as dt
import importlib
import json
import math
import numbers
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from deepstack.errors import UserInputError
from deepstack.schema import StudyRecipe, load_file
from deepstack.schema.loader import describe_validation_error
from deepstack.schema.scenario import ASSUMPTION_SETS
from deepstack.search.executor import Tally
from deepstack.search.files import check_output_folder, recorded, write_text_atomically
from deepstack.search.studies.provenance import code_digest, inputs_digest

RUNNER_MODULES = ("dram_layers", "stacking", "temperatures", "system", "baseline", "ablation", "noc_sensitivity",
                  "fronts", "paper_findings")
RUN_RECORD = "run.json"  # written last by run_study: its presence means the run finished
RUN_RECORD_VERSION = 1
_RUNNERS: dict[str, Callable[[StudyContext], None]] = {}


def runner(name: str):
    """Register a study runner under ``name`` (the recipe's ``runner`` key)."""

    def register(fn: Callable[[StudyContext], None]):
        _RUNNERS[name] = fn
        return fn

    return register


def runners() -> dict[str, Callable]:
    for module in RUNNER_MODULES:
        try:
            importlib.import_module(f"{__name__}.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{module}":
                raise
    return dict(_RUNNERS)


class ReadParameters(dict):
    """A run's parameters that remember which of them the runner read (``read``): a recipe's parameter no runner
    reads is most likely a typo (``chp`` for ``chip``), which would otherwise leave the default in force silently."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read: set[str] = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key) -> bool:
        self.read.add(key)
        return super().__contains__(key)

    def unread(self) -> list[str]:
        """The parameters the runner never read (the assumption set is every run's, read or not)."""
        return sorted(set(self) - self.read - {"assumptions"})


@dataclass
class StudyContext:
    """What a runner gets: the recipe, its (quick-merged) parameters, and where and how to write."""

    recipe: StudyRecipe
    params: dict[str, Any]
    quick: bool
    out: Path
    folder: Path  # the recipe's folder: relative paths in parameters resolve against it
    files: list[str] = field(default_factory=list)
    rows_written: int = 0
    tables: list[dict] = field(default_factory=list)  # the key tables, as recorded by key_table
    tally: Tally = field(default_factory=Tally)  # the run's progress, in the runner's tasks

    def planned(self, tasks: int):
        """Count ``tasks`` more units of work (points, cells, rows: whatever the runner is about to run) on the
        run's progress; returns the ``done()`` to call as each finishes (``executor.map_in_order``'s ``done``).
        A runner that plans a stage from the last one's results adds it then, so the total grows."""
        self.tally.plan(tasks)
        return self.tally.finish

    def param(self, key: str, default: Any = None) -> Any:
        if key not in self.params and default is None:
            raise UserInputError(f"study {self.recipe.name}: parameters.{key} is required by runner "
                                 f"{self.recipe.runner!r}")
        return self.params.get(key, default)

    def path(self, ref: str) -> str:
        """A preset name stays a name; a relative file path resolves against the recipe's folder."""
        if ref.lower().endswith((".toml", ".yaml", ".yml", ".json")) and not Path(ref).is_absolute():
            return str(self.folder / ref)
        return ref

    def write_csv(self, name: str, rows: list[dict]) -> Path:
        path = self.out / name
        columns: list[str] = []
        for row in rows:
            columns.extend(k for k in row if k not in columns)
        with open(path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns or ["empty"])
            writer.writeheader()
            for row in rows:
                writer.writerow({k: (json.dumps(v) if isinstance(v, list | tuple | dict) else v)
                                 for k, v in row.items()})
        self.files.append(str(path))
        self.rows_written += len(rows)
        return path

    def save_png(self, name: str, figure) -> Path:
        path = self.out / name
        figure.tight_layout()
        figure.savefig(path, dpi=110)
        import matplotlib.pyplot as plt

        plt.close(figure)
        self.files.append(str(path))
        return path

    def save_html(self, name: str, figure) -> Path:
        path = self.out / name
        figure.write_html(path, include_plotlyjs=True)  # self-contained: readable offline
        self.files.append(str(path))
        return path

    def key_table(self, title: str, rows: list[dict], columns: list[str] | None = None, digits: int = 4) -> str:
        """Record a key table for ``run.json`` (and so for RESULTS.md) and return its Markdown for the summary.

        ``columns`` defaults to every key of the rows in first-seen order. Cells are stored as plain JSON values:
        a cell a row lacks, NaN and ±inf become null.
        """
        columns = list(columns) if columns else list(dict.fromkeys(k for row in rows for k in row))
        self.tables.append({"title": title, "columns": columns, "digits": digits,
                            "rows": [[plain(row.get(c)) for c in columns] for row in rows]})
        return markdown_table(rows, columns, digits)

    def write_summary(self, text: str) -> Path:
        path = self.out / "summary.md"
        header = f"# {self.recipe.name}\n\n**Question.** {self.recipe.question}\n\n"
        if self.quick:
            header += "_Quick mode: a reduced version for tests; the full recipe gives the real answer._\n\n"
        path.write_text(header + text.strip() + "\n")
        self.files.append(str(path))
        return path


def figure(width: float = 7.0, height: float = 4.5):
    """A matplotlib figure on the non-interactive backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height))


def markdown_table(rows: list[dict], columns: list[str] | None = None, digits: int = 4) -> str:
    if not rows:
        return "(no rows)\n"
    columns = columns or list(rows[0])

    def cell(value) -> str:
        if isinstance(value, float):
            return f"{value:.{digits}g}"
        return str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def plain(value: Any) -> Any:
    """A table cell as a plain JSON value: bool, int, finite float, str or null (NaN, ±inf and missing → null)."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return value if math.isfinite(value) else None
    return str(value)


def _jsonable(value: Any) -> Any:
    """Parameters as plain JSON: lists and tables kept, every leaf through :func:`plain`."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return plain(value)


def _json(value: Any, indent: str = "") -> str:
    """Indented JSON with every list of plain values (a table row, a parameter list) on one line."""
    inner = indent + "  "
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(str(k))}: {_json(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    if isinstance(value, list) and any(isinstance(v, dict | list) for v in value):
        return "[\n" + ",\n".join(inner + _json(v, inner) for v in value) + f"\n{indent}]"
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def utc_now() -> str:
    """Now, in UTC, as ISO 8601 to the second."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def run_folder_name(study: str, assumptions: str, quick: bool) -> str:
    """The folder a run goes to under ``studies/out``: ``<study>``, ``-<set>`` unless the default set, ``-quick``."""
    return study + ("" if assumptions == "default" else f"-{assumptions}") + ("-quick" if quick else "")


def _refuse_another_run(folder: Path, study: str, assumptions: str, quick: bool) -> None:
    """Refuse a folder holding another run's record (another study, assumption set or size): this run would
    replace its record and summary and leave the other's figures and tables beside them. A run of the same
    study, set and size is the one to replace; a record that cannot be read vouches for nothing."""
    theirs = recorded(folder / RUN_RECORD,
                      lambda run: (run["study"], run.get("assumptions", "default"), bool(run["quick"])))
    if theirs is not None and theirs != (study, assumptions, quick):
        name, chosen, small = theirs
        raise UserInputError(f"--out: {folder} holds a finished run of {name} ({chosen} set"
                             f"{', quick' if small else ''}; its {RUN_RECORD}), not of {study} ({assumptions} set"
                             f"{', quick' if quick else ''}): give another folder, or remove that one first")


def runner_of(recipe: StudyRecipe, where: str) -> Callable[[StudyContext], None]:
    """The recipe's runner; an unknown one is refused naming ``where`` (the recipe's file) and the runners."""
    available = runners()
    if recipe.runner not in available:
        raise UserInputError(f"{where}: runner: must be one of {', '.join(sorted(available))} "
                             f"(got {recipe.runner!r})")
    return available[recipe.runner]


def run_parameters(recipe: StudyRecipe, quick: bool, assumptions: str | None) -> dict[str, Any]:
    """A run's parameters: the recipe's, its ``[quick]`` table over them for a quick run, and its assumption set
    (``assumptions``, else the recipe's, else ``default``). The runner's own plain copy (lists and dicts, as the
    file wrote them): the recipe itself is read-only."""
    params = {**recipe.parameters.as_dict(), **(recipe.quick.as_dict() if quick else {})}
    params["assumptions"] = assumptions if assumptions is not None else params.get("assumptions", "default")
    return params


def run_study(recipe_path: str, out: str | None = None, quick: bool = False,
              assumptions: str | None = None, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Run one recipe; returns where its files went and how long it took (and writes it to ``run.json``).
    ``assumptions`` (default: the recipe's ``assumptions`` parameter, else ``default``) names the assumption set
    every scenario of the run is evaluated under (docs/model.md §17); a paper-set run goes to ``<name>-paper``.
    ``progress(done, total)`` is told the runner's tasks finished of those planned so far (StudyContext.planned)."""
    named = Path("studies") / f"{recipe_path}.toml"
    if not Path(recipe_path).exists() and named.is_file():  # a study's name where its recipe file goes
        raise UserInputError(f"{recipe_path}: no such file; the study's recipe is {named} "
                             f"(deepstack study run {named})")
    recipe = load_file(recipe_path, expected_kind="study")
    run = runner_of(recipe, recipe_path)
    params = run_parameters(recipe, quick, assumptions)
    chosen = params["assumptions"]  # run_parameters always sets it
    if chosen not in ASSUMPTION_SETS:
        raise UserInputError(f"--assumptions: must be one of {', '.join(ASSUMPTION_SETS)} (got {chosen!r})")
    folder = Path(out or Path("studies") / "out" / run_folder_name(recipe.name, chosen, quick))
    check_output_folder(folder)
    _refuse_another_run(folder, recipe.name, chosen, quick)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    record_path = folder / RUN_RECORD
    record_path.unlink(missing_ok=True)  # a stale record would vouch for files this run is about to replace
    context = StudyContext(recipe, ReadParameters(params), quick, folder, Path(recipe_path).resolve().parent,
                           tally=Tally(progress))
    started_at, started = utc_now(), time.perf_counter()
    try:
        run(context)
    except ValidationError as exc:  # a parameter the runner builds a model from (a chip, an SRAM option) is wrong
        raise UserInputError(f"{recipe_path}: the parameters{' with [quick]' if quick else ''} give an invalid "
                             f"{exc.title}: {describe_validation_error(BaseModel, exc)}") from None
    finally:
        if created and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()  # a run refused before it wrote anything leaves no folder behind
    wall_s = time.perf_counter() - started
    write_text_atomically(record_path, _json({
        "version": RUN_RECORD_VERSION, "study": recipe.name, "runner": recipe.runner, "quick": quick,
        "assumptions": chosen, "code_digest": code_digest(),
        "inputs_digest": inputs_digest(Path(recipe_path).resolve().parent, params),
        "question": recipe.question, "parameters": _jsonable(params), "started_at": started_at,
        "finished_at": utc_now(), "wall_s": wall_s, "rows": context.rows_written,
        "files": [Path(f).relative_to(folder).as_posix() for f in dict.fromkeys(context.files)],
        "tables": context.tables,
    }) + "\n")
    return {"study": recipe.name, "runner": recipe.runner, "quick": quick, "out": str(folder),
            "files": context.files, "rows": context.rows_written, "wall_s": wall_s, "record": str(record_path),
            "unread_parameters": context.params.unread()}
