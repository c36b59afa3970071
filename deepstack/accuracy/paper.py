"""The paper's own 3D results, reproduced under both assumption sets (``deepstack accuracy paper``).

The DeepStack paper's evaluation (its Table 4 ablation and findings R8–R24 of sections 5.4–5.6) is the only
reference there is for 3D-stacked designs. This check evaluates every Table 4 configuration exactly as the
paper's artifact lists it (``validation/paper_table4.csv``: chip, NoC with per-level bandwidth multipliers, m,
n, SM count, L1 option, schedule with ``moe_mode``, minibatch, overlap) under the ``paper`` assumption set and
under ``default`` (docs/model.md §17), and checks the findings this command can compute in seconds; the others
say which study answers them. Nothing here is fitted: a verdict is the model's answer against the paper's figure
within the issue's tolerance (10 % for Table 4 rows and totals, 15 % for speed-ups).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import deepstack
from deepstack import catalog
from deepstack.accuracy.files import read_csv
from deepstack.errors import UserInputError
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate
from deepstack.models.hardware.device import resolve_device
from deepstack.schema import Scenario, Schedule, SramOption
from deepstack.schema.scenario import PAPER_CHOICES
from deepstack.search.space import scaled_network

TABLE4_TOLERANCE = 0.10  # every Table 4 row and the totals within 10 %
SPEEDUP_TOLERANCE = 0.15  # speed-ups over the 2.5D baseline within 15 %
# R21 / R10: at decode b1024, Table 4's step 5 (m = 4, before the stacking search) is 1.30× the best H200* design
# and step 7 (stacking and NoC searched) 1.73×
OVER_H200 = {5: 1.30, 7: 1.73}
ASSUMPTION_SETS = ("paper", "default")  # the two columns of every table
HOLDS, FAILS, NOT_CHECKED = "holds", "fails", "not checked here"


def table4_path() -> Path:
    path = Path(deepstack.__file__).resolve().parents[1] / "validation" / "paper_table4.csv"
    if not path.exists():
        raise UserInputError(f"reference file: {path} is missing; it ships with the repository (validation/)")
    return path


@dataclass(frozen=True)
class Table4Row:
    """One row of the paper's Table 4 with the configuration its artifact evaluated."""

    step: int
    batch: int
    chip: str
    noc: str
    level_bw_scales: tuple[float, float, float]  # L1 die, L2 chip, L3 system
    stacked_layers: int
    connected_layers: int
    pes: int
    l1_KiB: float
    l1_B_per_cycle: float
    schedule: str
    overlap: bool
    paper_stps: float

    @property
    def label(self) -> str:
        return f"b{self.batch} step {self.step}"


def _row(raw: dict[str, str]) -> Table4Row:
    batch = int(raw["batch"])
    degrees = ",".join(f"{k}={raw[k]}" for k in ("tp", "ep", "sp", "cp", "dp", "pp") if int(raw[k]) > 1)
    microbatches = math.ceil(batch / int(raw["minibatch"]))  # minibatch: requests per pipeline micro-batch
    schedule = ",".join(filter(None, (degrees or "tp=1", "fsdp" if raw["fsdp"] == "True" else "",
                                      f"microbatches={microbatches}" if int(raw["pp"]) > 1 else "",
                                      f"moe_mode={raw['moe_mode']}" if raw["moe_mode"] != "none" else "")))
    return Table4Row(int(raw["step"]), batch, raw["chip"], raw["noc"],
                     tuple(float(raw[f"noc_L{i}_bw_mult"]) for i in (1, 2, 3)), int(raw["stacked_layers_m"]),
                     int(raw["connected_layers_n"]), int(raw["sms_per_device"]), float(raw["smem_KiB"]),
                     float(raw["l1_B_per_cycle"]), schedule, raw["overlap"] == "True", float(raw["paper_stps"]))


def table4_rows() -> list[Table4Row]:
    return [_row(raw) for raw in read_csv(table4_path())]


def table4_point(row: Table4Row, assumptions: str) -> DesignPoint:
    """The design point of a Table 4 row: the chip with the row's SM count, L1 option, stacking, scaled NoC and
    schedule, DeepSeek-V3 decode at the row's batch under ``assumptions``."""
    chip = catalog.load("chips", row.chip)
    chip = chip.model_copy(update={"device": chip.device.model_copy(update={"pes": row.pes})})
    sram = SramOption(name=f"l1-{row.l1_KiB:g}KiB-{row.l1_B_per_cycle:g}B",
                      l1_KiB=row.l1_KiB, l1_bw_scale=row.l1_B_per_cycle / chip.pe.l1_bw_B_per_cycle)
    scenario = Scenario(model="deepseek-v3", phase="decode", batch=row.batch, assumptions=assumptions)
    return DesignPoint(chip=chip, scenario=scenario, schedule=Schedule.parse(row.schedule),
                       network=scaled_network(row.noc, 1.0, row.level_bw_scales), stacked_layers=row.stacked_layers,
                       connected_layers=row.connected_layers, sram=sram)


def area_model_pes(row: Table4Row) -> int:
    """The PEs this project's area model fits for the row's hardware (the paper's count is ``row.pes``)."""
    chip = catalog.load("chips", row.chip)
    sram = SramOption(name="row", l1_KiB=row.l1_KiB, l1_bw_scale=row.l1_B_per_cycle / chip.pe.l1_bw_B_per_cycle)
    try:
        return resolve_device(chip, row.stacked_layers, row.connected_layers,
                              scaled_network(row.noc, 1.0, row.level_bw_scales), sram).pes
    except UserInputError:
        return 0


def verdict(ours: float, paper: float, tolerance: float) -> str:
    """Whether ours is within ``tolerance`` (relative) of the paper's figure."""
    return HOLDS if abs(ours / paper - 1) <= tolerance else FAILS


def _evaluate(row: Table4Row, assumptions: str):
    return evaluate(table4_point(row, assumptions), with_ttft=False, breakdown=False, overlap=row.overlap)


def assumption_effects(rows: list[dict]) -> list[dict]:
    """Each choice of the paper set put back to the default alone: Table 4's MAPE and totals then, against the
    whole paper set's, and whether that one assumption flips a conclusion (a total moves by more than the 10 %
    tolerance, or the largest step gain of R21 changes)."""
    rows_of = table4_rows()
    whole = {(r["batch"], r["step"]): r["paper_set_stps"] for r in rows}
    out = []
    for choice in PAPER_CHOICES:
        name = f"paper-without-{choice}"
        stps = {(row.batch, row.step): _evaluate(row, name).metrics.stps for row in rows_of}
        entry = {"assumption back at default": choice, "table4_mape_pct": _mape(
            [{"paper_stps": r.paper_stps, "stps": stps[(r.batch, r.step)]} for r in rows_of], "stps")}
        flips = []
        for batch in sorted({r.batch for r in rows_of}):
            steps = sorted(s for b, s in stps if b == batch)
            total, base = (stps[(batch, steps[-1])] / stps[(batch, steps[0])],
                           whole[(batch, steps[-1])] / whole[(batch, steps[0])])
            entry[f"b{batch}_total"] = total
            lead = _gain_order({s: stps[(batch, s)] for s in steps}).split(" > ")[0]
            lead_whole = _gain_order({s: whole[(batch, s)] for s in steps}).split(" > ")[0]
            if abs(total / base - 1) > TABLE4_TOLERANCE:
                flips.append(f"b{batch} total {base:.2f}× → {total:.2f}×")
            if lead != lead_whole:
                flips.append(f"b{batch} largest gain step {lead_whole} → {lead}")
        entry["flips"] = "; ".join(flips) or "nothing"
        out.append(entry)
    return out


def table4() -> list[dict]:
    """Every Table 4 row: the paper's STPS and ours under each assumption set."""
    out = []
    for row in table4_rows():
        entry = {"row": row.label, "step": row.step, "batch": row.batch,
                 "design": f"{row.chip}/{row.noc} m{row.stacked_layers}n{row.connected_layers} "
                           f"{row.pes} SMs, L1 {row.l1_KiB:g} KiB × {row.l1_B_per_cycle:g} B/cycle, "
                           f"bw {'x'.join(f'{s:g}' for s in row.level_bw_scales)}",
                 "schedule": row.schedule, "overlap": row.overlap, "paper_stps": row.paper_stps,
                 "area_model_pes": area_model_pes(row)}
        for name in ASSUMPTION_SETS:
            report = _evaluate(row, name)
            entry[f"{name}_set_stps"] = report.metrics.stps
            entry[f"{name}_set_feasible"] = report.feasible
            entry[f"{name}_set_violations"] = "; ".join(report.violations)  # the paper's rows break none
        entry["ratio"] = entry["paper_set_stps"] / row.paper_stps  # ours under the paper set over the paper's
        entry["verdict"] = verdict(entry["paper_set_stps"], row.paper_stps, TABLE4_TOLERANCE)
        out.append(entry)
    return out


def _by_step(rows: list[dict], batch: int, key: str) -> dict[int, float]:
    return {r["step"]: r[key] for r in rows if r["batch"] == batch}


def totals(rows: list[dict]) -> list[dict]:
    """Step 7 over step 1 per batch (the paper's 2.8× and 9.5×), and R21: the order of the step gains."""
    out = []
    for batch in sorted({r["batch"] for r in rows}):
        paper = _by_step(rows, batch, "paper_stps")
        ours = {name: _by_step(rows, batch, f"{name}_set_stps") for name in ASSUMPTION_SETS}
        first, last = min(paper), max(paper)
        total = {f"{name}_set": v[last] / v[first] for name, v in ours.items()}
        out.append({"finding": "Table 4 total", "what": f"b{batch}: step {last} over step {first}",
                    "paper": paper[last] / paper[first], **total,
                    "verdict": verdict(total["paper_set"], paper[last] / paper[first], TABLE4_TOLERANCE)})
        order = {f"{name}_set": _gain_order(v) for name, v in ours.items()}
        out.append({"finding": "R21", "what": f"b{batch}: steps by gain, largest first",
                    "paper": _gain_order(paper), **order,
                    "verdict": HOLDS if order["paper_set"][:5] == _gain_order(paper)[:5] else FAILS})
    return out


def _gain_order(stps: dict[int, float]) -> str:
    steps = sorted(stps)
    gains = {s: stps[s] / stps[p] for p, s in itertools.pairwise(steps)}
    return " > ".join(str(s) for s in sorted(gains, key=lambda s: -gains[s]))


def r24_area_anchors() -> dict:
    """R24: 7 connected layers leave 6 SMs, 8 leave 5, 10 leave 4 per 100 mm² cluster (Standard on TMS1)."""
    chip, network = catalog.load("chips", "standard"), catalog.load("nocs", "tms1")
    paper = {7: 6, 8: 5, 10: 4}
    ours = {m: resolve_device(chip, m, m, network).pes for m in paper}
    text = ", ".join(f"m={m}: {n}" for m, n in paper.items())
    found = ", ".join(f"m={m}: {n}" for m, n in ours.items())
    # the area model is not an assumption: both sets share it
    return {"finding": "R24", "what": "SMs per 100 mm² at m = n = 7, 8, 10", "paper": text, "paper_set": found,
            "default_set": found, "verdict": HOLDS if ours == paper else FAILS}


def r12_bandwidth_peak() -> dict:
    """R12: effective DRAM bandwidth against m = n peaks below 10 layers (≈ 9), over the L1 grid the paper swept
    (128/256/512 KiB × 128/256/512/1024 B/cycle, Standard on TMS1). Holds when the best option's envelope peaks
    at 8–10 layers and at least half of the options do."""
    from deepstack.search.studies.dram_layers import dram_bandwidth_row

    chip, network = catalog.load("chips", "standard"), catalog.load("nocs", "tms1")
    peaks, envelope = [], {}
    for kib in (128, 256, 512):
        for width in (128, 256, 512, 1024):
            sram = SramOption(name=f"{kib}-{width}", l1_KiB=kib, l1_bw_scale=width / chip.pe.l1_bw_B_per_cycle)
            rows = [dram_bandwidth_row(chip, network, sram, m) for m in range(1, 17)]
            peaks.append(max(rows, key=lambda r: r["effective_bw_GBps"])["stacked_layers"])
            for r in rows:
                m = r["stacked_layers"]
                envelope[m] = max(envelope.get(m, 0.0), r["effective_bw_GBps"])
    inside = sum(8 <= m <= 10 for m in peaks)
    best_m = max(envelope, key=envelope.get)
    found = (f"per L1 option at m = {min(peaks)}–{max(peaks)} ({inside} of {len(peaks)} at 8–10); "
             f"the best option's envelope at m = {best_m}")
    return {"finding": "R12", "what": "m = n of peak effective DRAM bandwidth over the L1 grid",
            "paper": "≈ 9 (below 10)", "paper_set": found, "default_set": found,
            "verdict": HOLDS if 8 <= best_m <= 10 and inside * 2 >= len(peaks) else FAILS}


# Findings this command does not compute (a search each, minutes to an hour): the study that answers each.
BY_STUDY = (
    ("R8", "3D over the best 2.5D, decode b1024", "1.30–1.48×", ("3d-vs-2.5d",)),
    ("R9", "3D over the best 2.5D, decode b1", "up to 2.79×", ("3d-vs-2.5d",)),
    ("R10", "DeepSeek-V3 decode b1024, stacking and NoC searched, over H200*", "1.73×", ("3d-vs-2.5d",)),
    ("R11", "prefill, 3D against H200*", "comparable", ("3d-vs-2.5d",)),
    ("R13", "best m = n for DeepSeek-V3 decode b4 / b1024 / prefill b4 / b1024", "≈ 9 / 6–7 / ≈ 7 / 2",
     ("paper-findings",)),
    ("R14", "batch divides the hardware into three groups (shallow / moderate / deep stacks)", "as stated",
     ("paper-findings",)),
    ("R15", "prefill's throughput-optimal (m, n): (6, 6) at b4, (2, 2) at b1024", "as stated", ("paper-findings",)),
    ("R16", "energy-optimal designs: m > n at 0.5–0.7 W/mm²", "as stated", ("paper-findings",)),
    ("R17", "large-batch decode hottest, designs above 85 °C", "as stated", ("paper-findings", "thermal")),
    ("R18", "every thermally feasible design ≤ 0.8 W/mm²", "as stated", ("thermal",)),
    ("R19", "NoC bandwidth (traded against SMs) and hop latency, b4 / b1024", "as stated", ("paper-findings",)),
    ("R20", "one NoC level's bandwidth alone: L2 shrinks at no loss, L3 gains", "as stated", ("paper-findings",)),
    ("R22", "full parallelism over TP/PP/DP, decode b1024: DeepSeek-V3 / Qwen3-235B", "5.03× / 2.31×",
     ("paper-findings",)),
    ("R23", "the chip the search picks with and without EP", "as stated", ("paper-findings",)),
)


def r10_over_h200(rows: list[dict]) -> list[dict]:
    """R10 and R21: Table 4's b1024 steps 5 and 7 over the best H200* design (32 dies, the 2.5D cluster of each
    set, every schedule searched), and that baseline itself: the paper's figure is implied by its two ratios."""
    from deepstack.models import assumptions
    from deepstack.search.schedules import best_schedule

    best = {}
    for name in ASSUMPTION_SETS:
        network = catalog.load("nocs", assumptions.cluster_network(name, "h100-star-32x"))
        scenario = Scenario(model="deepseek-v3", phase="decode", batch=1024, assumptions=name)
        best[name] = best_schedule(DesignPoint(chip=catalog.load("chips", "h200-star"), scenario=scenario,
                                               network=network)).best
    stps = {name: _by_step(rows, 1024, f"{name}_set_stps") for name in ASSUMPTION_SETS}
    paper = _by_step(rows, 1024, "paper_stps")
    implied = [paper[step] / ratio for step, ratio in OVER_H200.items()]
    out = [{"finding": "R10 baseline", "what": "the best H200* design, DeepSeek-V3 decode b1024 (STPS, schedule)",
            "paper": f"{min(implied):,.0f}–{max(implied):,.0f} (implied by R21)",
            **{f"{n}_set": f"{b.metrics.stps:,.0f} ({b.schedule['text']})" for n, b in best.items()},
            "stps": {f"{n}_set": b.metrics.stps for n, b in best.items()},
            "verdict": verdict(best["paper"].metrics.stps, sum(implied) / len(implied), SPEEDUP_TOLERANCE)}]
    for step, ratio in OVER_H200.items():
        ours = {f"{n}_set": stps[n][step] / best[n].metrics.stps for n in ASSUMPTION_SETS}
        out.append({"finding": "R10" if step == 7 else "R21", "what": f"b1024 Table 4 step {step} over the best "
                    "H200*", "paper": ratio, **ours,
                    "verdict": verdict(ours["paper_set"], ratio, SPEEDUP_TOLERANCE)})
    return out


def findings(rows: list[dict], studies: Path | None = None) -> list[dict]:
    """The findings this check computes, then those a study answers: read from the studies' current runs under
    ``studies`` (:mod:`.paper_studies`), or, without it, each saying which study to run."""
    from deepstack.accuracy.paper_studies import placeholders, study_findings

    out = [*totals(rows), *r10_over_h200(rows), r12_bandwidth_peak(), r24_area_anchors()]
    answered = placeholders() if studies is None else study_findings(placeholders(), studies)
    return out + [{k: v for k, v in p.items() if k != "studies"} for p in answered]


def paper_accuracy(progress=None, studies: Path | None = None) -> dict:
    """Table 4 row by row and the findings, under both assumption sets; ``progress(done, total)`` after each of
    the three parts (Table 4, the findings, each assumption's effect). ``studies``: the folder of study runs the
    findings that need a search are read from (none: they say which study answers them)."""
    tell = progress or (lambda done, total: None)
    rows = table4()
    tell(1, 3)
    found = findings(rows, studies)
    tell(2, 3)
    effects = assumption_effects(rows)
    tell(3, 3)
    within = sum(r["verdict"] == HOLDS for r in rows)
    # §5.6: every Table 4 design is within the paper's limits; a row that breaks one of ours says where they differ
    beyond = {r["row"]: r["paper_set_violations"] for r in rows if r["paper_set_violations"]}
    effects_3d = None
    if studies is not None:
        from deepstack.accuracy.paper_studies import assumption_effects_3d
        effects_3d = assumption_effects_3d(studies)
    return {"reference": str(table4_path()), "table4": rows, "findings": found,
            "assumption_effects": effects, "assumption_effects_3d_vs_2p5d": effects_3d,
            "summary": {"table4_rows": len(rows), "table4_within_10pct": within,
                        "table4_mape_pct": _mape(rows, "paper_set_stps"),
                        "table4_default_set_mape_pct": _mape(rows, "default_set_stps"),
                        "table4_beyond_limits_paper_set": beyond}}


def _mape(rows: list[dict], key: str) -> float:
    return 100 * sum(abs(r[key] / r["paper_stps"] - 1) for r in rows) / len(rows)
