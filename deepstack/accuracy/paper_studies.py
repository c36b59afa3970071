"""The paper's findings that need a search, read from the study runs that answer them.

``deepstack accuracy paper`` computes Table 4 and a few findings itself; the others take minutes to an hour of
best-schedule and hardware searches, so it reads them from the last run of the study that answers each
(``studies/out/<study>`` under the default set, ``<study>-paper`` under the paper set: their tables titled
"The paper's findings"). A full run (not ``--quick``) computed by the code now running (``run.json``'s
``code_digest``) gives the verdict; a run made by other code is shown but marked stale, with the command that
brings it up to date, and is not counted as checked; without a run the finding names the command that answers it.
"""

from __future__ import annotations

from pathlib import Path

from deepstack.errors import UserInputError
from deepstack.search.studies import RUN_RECORD, run_folder_name
from deepstack.search.studies.common import FINDINGS_TITLE
from deepstack.search.studies.provenance import code_digest
from deepstack.search.studies.results import DEFAULT_RECIPES, load_record, run_status

DEFAULT_STUDIES = Path("studies") / "out"
BOTH_SETS = "paper-findings"  # its one run evaluates both assumption sets; the others run once per set


def _folder(out_root: Path, study: str, assumptions: str) -> Path:
    return out_root / run_folder_name(study, "default" if study == BOTH_SETS else assumptions, quick=False)


def _command(study: str, assumptions: str) -> str:
    flag = "" if study == BOTH_SETS or assumptions == "default" else f" --assumptions {assumptions}"
    return f"deepstack study run studies/{study}.toml{flag}"


STALE = "stale"


def placeholders(without: str | None = None) -> list[dict]:
    """A row per finding a study answers (``BY_STUDY``), its verdict naming the commands that answer it under the
    paper set; ``without``: that study left out (and a finding only it answers with it)."""
    from deepstack.accuracy.paper import BY_STUDY, NOT_CHECKED

    out = []
    for finding, what, paper, studies in BY_STUDY:
        studies = tuple(s for s in studies if s != without)
        if studies:
            out.append({"finding": finding, "what": what, "paper": paper, "paper_set": None, "default_set": None,
                        "verdict": f"{NOT_CHECKED}: " + " and ".join(_command(s, "paper") for s in studies),
                        "studies": studies})
    return out


def _recipe(out_root: Path, study: str) -> Path:
    """The recipe a run is held to (a run made before its recipe changed is stale): beside the run folders'
    parent (``studies/`` for ``studies/out``), else under ``studies/`` here."""
    beside = out_root.parent / f"{study}.toml"
    return beside if beside.is_file() else Path(DEFAULT_RECIPES) / f"{study}.toml"


def _record(out_root: Path, study: str, assumptions: str) -> tuple[dict | None, str, str]:
    """The run's record (None if there is none to read), what is wrong with it ("" if it is current; "not run
    yet", "unreadable" or "stale": then with the command that brings it up to date) and where it came from."""
    folder = _folder(out_root, study, assumptions)
    path = folder / RUN_RECORD
    if not path.exists():
        return None, f"not run yet: {_command(study, assumptions)}", ""
    try:
        record = load_record(path, study)
    except UserInputError as exc:
        return None, f"unreadable ({exc}): {_command(study, assumptions)}", ""
    source = f"{folder} (finished {record['finished_at']}, code {record.get('code_digest', 'unrecorded')})"
    status, why = run_status(record, _recipe(out_root, study), code_digest())
    if record["quick"] or status != "current":
        why = "a --quick run" if record["quick"] else why
        return record, f"{STALE}, {why}: {_command(study, assumptions)}", source
    return record, "", source


def _rows(record: dict) -> list[dict]:
    """The rows of the record's findings tables, as dicts."""
    return [dict(zip(table["columns"], row, strict=True)) for table in record["tables"]
            if table["title"].startswith(FINDINGS_TITLE) for row in table["rows"]]


def study_findings(placeholders: list[dict], out_root: Path = DEFAULT_STUDIES) -> list[dict]:
    """``placeholders`` (rows with ``finding`` and ``studies``: the studies that answer it) replaced by the rows
    those studies' current runs give: each with the paper's value, ours under each set, the verdict under the
    paper set and ``source`` (the run, or why none is used)."""
    out = []
    for placeholder in placeholders:
        found = []
        for study in placeholder["studies"]:
            found += _from_study(out_root, study, placeholder)
        out += found or [placeholder]
    return out


def _from_study(out_root: Path, study: str, placeholder: dict) -> list[dict]:
    finding = placeholder["finding"]
    paper, problem, source = _record(out_root, study, "paper")
    if paper is None:
        return [{**placeholder, "verdict": problem, "source": source}]
    rows = [r for r in _rows(paper) if r["finding"] == finding]
    if study != BOTH_SETS:
        default, default_problem, default_source = _record(out_root, study, "default")
        default_rows = {r["what"]: r["ours"] for r in _rows(default)} if default else {}
        rows = [{"finding": finding, "what": r["what"], "paper": r["paper"], "paper_set": r["ours"],
                 "default_set": default_rows.get(r["what"]), "verdict": r["verdict"]} for r in rows]
        source += "; default set: " + " — ".join(filter(None, (default_source, default_problem)))
    # a stale run's figures are shown, its verdict is not: it was reached by other code
    return [{**r, "verdict": f"{r['verdict']} ({problem})" if problem else r["verdict"], "source": source}
            for r in rows]


def assumption_effects_3d(out_root: Path = DEFAULT_STUDIES) -> dict:
    """Which paper choice moves 3D against 2.5D (R8–R10): the table the paper-set run of ``3d-vs-2.5d`` writes,
    with ``source`` (the run, and "stale, …" when other code made it) or, without a run, the command to make it."""
    from deepstack.search.studies.baseline import EFFECTS_TITLE

    record, problem, source = _record(out_root, "3d-vs-2.5d", "paper")
    tables = [t for t in record["tables"] if t["title"] == EFFECTS_TITLE] if record else []
    if not tables:
        return {"rows": [], "source": problem or f"{source}: no such table (run before it was added)"}
    rows = [dict(zip(tables[0]["columns"], row, strict=True)) for row in tables[0]["rows"]]
    return {"rows": rows, "source": " — ".join(filter(None, (source, problem)))}


def every_finding(out_root: Path = DEFAULT_STUDIES) -> dict:
    """Every finding under both sets, read from the study runs' records alone (the results page's "paper vs
    default" table): the rows the paper-findings run computes itself, then each finding another study answers,
    from that study's runs. ``sources``: the runs read, and what is wrong with any of them."""
    from deepstack.accuracy.paper import NOT_CHECKED

    record, problem, source = _record(out_root, BOTH_SETS, "paper")
    own = [{**r, "verdict": f"{r['verdict']} ({problem})" if problem else r["verdict"]}
           for r in (_rows(record) if record else []) if not str(r["verdict"]).startswith(NOT_CHECKED)]
    answered = study_findings(placeholders(without=BOTH_SETS), out_root)
    sources = [" — ".join(filter(None, (source, problem))) or problem]
    sources += [r["source"] for r in answered if r.get("source")]
    rows = [{k: v for k, v in r.items() if k not in ("studies", "source")} for r in own + answered]
    return {"rows": rows, "sources": list(dict.fromkeys(sources))}
