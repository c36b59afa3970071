"""A front row an architect can read and reproduce: every row of a study's Pareto files gets a short design id,
the PEs per device its chip resolves to, and the command that evaluates it again
(``deepstack evaluate --design ID --front FILE``); :func:`design_point_of` rebuilds the design point from the
row and the file's scenario, so that command prints the row's numbers."""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from pathlib import Path

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.models.design import DesignPoint
from deepstack.schema import Network, Scenario, Schedule
from deepstack.schema.loader import SUFFIXES
from deepstack.schema.space import SramOption
from deepstack.search.space import scaled_network

# the unit of each front column, for the CSV headers, the table and the JSON's "units"
UNITS = {"stps": "tokens/s", "utps": "tokens/s per user", "tokens_per_joule": "tokens/J", "ttft_s": "s",
         "ttft": "s", "power_w": "W", "temperature_c": "°C", "power_density_W_per_mm2": "W/mm²",
         "memory_gib": "GiB", "pes_per_device": "PEs", "frequency_ghz": "GHz", "hop_latency_scale": "×",
         "level_bw_scales": "× per level, innermost first"}
DESIGN_KEYS = ("chip", "noc", "stacked_layers", "connected_layers", "sram", "hop_latency_scale", "level_bw_scales",
               "schedule")


def _noc_name(noc: str) -> str:
    return Path(noc).stem if str(noc).endswith((".toml", ".yaml", ".yml", ".json")) else str(noc)


def design_id(row: dict) -> str:
    """A short id of the design (hardware point + schedule), the same wherever the row is written: ``d`` and ten
    hex digits of a SHA-256 over the design's fields (the NoC by its name, not its file's folder)."""
    design = [_noc_name(row.get(k)) if k == "noc" else row.get(k) for k in DESIGN_KEYS]
    return "d" + hashlib.sha256(json.dumps(design, default=float).encode()).hexdigest()[:10]


def front_sram_option(options: dict, name: str) -> SramOption | None:
    """The row's SRAM option as the evaluator takes it (None: the chip's own SRAM)."""
    if name not in options:
        if name == "base":
            return None
        raise UserInputError(f"--front: the file does not define SRAM option {name!r} (written by an older deepstack?)")
    return SramOption.model_validate(options[name]).override()


def design_point_of(scenario: Scenario, options: dict, row: dict, nocs: dict | None = None) -> DesignPoint:
    """The design point of a front row (its hardware axes and schedule) for ``scenario``; ``nocs``: the
    definitions a front file carries of the NoCs its rows name (NoC files, not catalog presets)."""
    bws = row.get("level_bw_scales") or []
    if isinstance(bws, str):
        bws = json.loads(bws)
    noc = Network.model_validate(nocs[row["noc"]]) if row["noc"] in (nocs or {}) else row["noc"]
    return DesignPoint(chip=catalog.load("chips", row["chip"]), scenario=scenario,
                       schedule=Schedule.parse(row["schedule"]),
                       network=scaled_network(noc, float(row["hop_latency_scale"]), tuple(map(float, bws))),
                       stacked_layers=_int(row.get("stacked_layers")),
                       connected_layers=_int(row.get("connected_layers")),
                       sram=front_sram_option(options, row["sram"]))


def _int(value) -> int | None:
    return None if value in (None, "", "None") else int(value)


def enrich(rows: list[dict], scenario: Scenario | None, options: dict, front_file: str) -> list[dict]:
    """Each row with its ``id`` first, ``pes_per_device`` (the area model's PE count for its chip, stacking, SRAM
    and NoC) and the ``command`` that reproduces it; NaN metrics (e.g. an untimed TTFT) are dropped."""
    out = []
    for row in rows:
        extra = {"id": design_id(row)}
        try:
            point = design_point_of(scenario, options, row) if scenario is not None else None
            if point is not None:
                extra["pes_per_device"] = point.device.pes
        except (UserInputError, KeyError, ValueError):
            pass
        extra["command"] = f"deepstack evaluate --design {extra['id']} --front {front_file}"
        clean = {k: v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))}
        out.append({**extra, **clean})
    return out


def header(column: str) -> str:
    """A CSV header with its unit, e.g. ``stps [tokens/s]``."""
    unit = UNITS.get(column)
    return f"{column} [{unit}]" if unit else column


def load_front(path: str) -> dict:
    """A front's JSON: a study's ``<name>.pareto.json`` or a sweep's ``pareto.json`` (given it, or the ``.csv``
    beside it)."""
    file = Path(path)
    if not file.is_file():
        raise UserInputError(f"--front: {path}: no such file; give the pareto.csv or pareto.json that optimize "
                             "or sweep wrote")
    if file.suffix == ".csv":
        file = file.with_suffix(".json")
        if not file.is_file():
            raise UserInputError(f"--front: {path} is read with the {file.name} written beside it (the rows' "
                                 f"scenario and SRAM options), and {file} does not exist")
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8 (a database given) or not JSON
        raise UserInputError(f"--front: cannot read {file} ({exc.__class__.__name__}); give the pareto.csv or "
                             "pareto.json that optimize or sweep wrote") from None
    if not isinstance(data, dict) or "pareto" not in data or "scenario" not in data:
        raise UserInputError(f"--front: {file} is not a front written by deepstack optimize or sweep (no scenario)")
    return data


def front_design(path: str, wanted: str) -> tuple[DesignPoint, dict]:
    """The design point of row ``wanted`` (its id) of a front file, and the row."""
    data = load_front(path)
    rows = data["pareto"]
    # a row, or a design listed as equivalent to one (the same objectives): the row with its differing fields
    every = [(r, r) for r in rows] + [(r, other) for r in rows for other in r.get("equivalent", ())]
    found = next(((r, other) for r, other in every if other.get("id") == wanted), None)
    if found is None:
        ids = ", ".join(other.get("id", "?") for _, other in every[:8])
        raise UserInputError(f"--design: no row {wanted!r} in {path}; its ids: {ids}{' …' if len(every) > 8 else ''}")
    shown, other = found
    row = shown if other is shown else {**{k: v for k, v in shown.items() if k != "equivalent"}, **other}
    scenario = Scenario.model_validate(data["scenario"])
    return design_point_of(scenario, data.get("sram_options", {}), row, data.get("nocs")), row


def named_nocs(rows: list[dict]) -> tuple[list[dict], dict[str, dict]]:
    """The front rows with each NoC file named as the catalog names its presets, by the file's stem (as the design
    ids do), instead of its path; and those NoCs' definitions, which pareto.json carries so that ``evaluate
    --front`` rebuilds a row wherever the file has gone. Two files of one stem keep their paths."""
    files = {r["noc"] for r in rows if str(r["noc"]).lower().endswith(SUFFIXES)}
    stems = Counter(Path(f).stem for f in files)
    names = {f: Path(f).stem for f in files if stems[Path(f).stem] == 1}
    definitions = {names[f]: catalog.load("nocs", f).model_dump(mode="json") for f in sorted(names)}
    return [{**r, "noc": names.get(r["noc"], r["noc"])} for r in rows], definitions
