"""The accuracy checks against the reference data in validation/ (``deepstack accuracy``), and the headline rows
of ``accuracy all``. Each check's module is imported when the check runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deepstack.errors import UserInputError


def network_accuracy(*, plot: str | None = None, reference: str | None = None, progress=None) -> dict[str, Any]:
    """The network model against the packet-level reference (``validation/ns3_collectives.csv``, or the file
    ``reference`` in its format); with ``plot``, also a PNG of every panel written there (its folder must
    exist). ``progress(done, total)``, when given, is told after each reference row (so are the other checks')."""
    from deepstack.accuracy import network as accuracy

    _check_plot_folder(plot)
    result = accuracy.network_accuracy(_reference_file(reference), progress)
    return _with_plot(result.as_dict(), plot, lambda path: accuracy.plot(result, path))


def _check_plot_folder(plot: str | None) -> None:
    """An accuracy command's ``--plot`` file must be in an existing folder (checked before any work)."""
    from pathlib import Path

    if plot is not None and not Path(plot).parent.is_dir():
        folder = Path(plot).parent
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise UserInputError(f"--plot: folder {folder} {what}; give a file in an existing folder")


def _reference_file(reference: str | None):
    """An accuracy command's ``--reference`` file (None: the shipped one), checked to exist before any work."""
    from pathlib import Path

    if reference is None:
        return None
    if not Path(reference).is_file():
        raise UserInputError(f"--reference: {reference} is not a file; give a CSV in the shipped file's format "
                             "(validation/README.md)")
    return Path(reference)


def _with_plot(data: dict[str, Any], plot: str | None, draw) -> dict[str, Any]:
    """``data`` with the path of the PNG ``draw(plot)`` wrote, when a plot was asked for."""
    if plot is not None:
        data["plot"] = str(draw(plot))
    return data


def accuracy_summary(progress=None) -> list[dict[str, Any]]:
    """One row per check and family: weighted and median error, rows scored, rows the model failed on;
    ``progress(done, total)`` after each of the six parts (five checks and the cross-validations)."""
    from deepstack.accuracy.files import each

    parts = (_network_summary, _serving_summary, _power_summary, _kernels_summary, _paper_summary,
             _cross_validation_summary)
    return [row for rows in each(lambda part: part(), parts, progress) for row in rows]


def _network_summary() -> list[dict[str, Any]]:
    """The network check's rows of ``accuracy all``: weighted and median error per topology family."""
    network = network_accuracy()
    return [{"check": "network", "family": family, **score, "failures": len(network["failures"])}
            for family, score in network["families"].items()]


def paper_accuracy(progress=None, studies: str | Path | None = "studies/out") -> dict[str, Any]:
    """The paper's Table 4 and findings under both assumption sets (``deepstack accuracy paper``);
    ``progress(done, total)`` after each of its three parts. The findings that need a search are read from the
    current study runs under ``studies`` (None: not read)."""
    from deepstack.accuracy.paper import paper_accuracy as check

    return check(progress, None if studies is None else Path(studies))


def _paper_summary() -> list[dict[str, Any]]:
    """The paper check's row of ``accuracy all``: MAPE of Table 4 under the paper set, findings that hold."""
    result = paper_accuracy()
    held = [f for f in result["findings"] if f["verdict"] == "holds"]
    checked = [f for f in result["findings"] if f["verdict"] in ("holds", "fails")]
    return [{"check": "paper", "family": f"Table 4 (paper set); findings held {len(held)}/{len(checked)} checked",
             "weighted_pct": None, "median_pct": None, "mape_pct": result["summary"]["table4_mape_pct"],
             "rows": result["summary"]["table4_rows"], "failures": 0}]


def _serving_summary() -> list[dict[str, Any]]:
    """The serving check's rows of ``accuracy all``: MAPE per model and mode of the decode rate, and per model of
    the prefill rate."""
    result = serving_accuracy()
    rows = [{"check": "serving", "family": key, "weighted_pct": None, "median_pct": None,
             "mape_pct": score["mape_pct"], "rows": score["rows"], "failures": 0}
            for key, score in result["scores"].items() if " " in key or key in ("graphs", "eager")]
    prefill = result.get("prefill", {"scores": {}, "failures": []})
    return rows + [{"check": "serving", "family": f"prefill {key}", "weighted_pct": None, "median_pct": None,
                    "mape_pct": score["mape_pct"], "rows": score["rows"], "failures": len(prefill["failures"])}
                   for key, score in prefill["scores"].items()
                   if key not in ("all", "graphs", "eager") and not key.endswith((" graphs", " eager"))]


def _power_summary() -> list[dict[str, Any]]:
    """The GPU power check's rows of ``accuracy all``: MAPE of W per GPU per GPU and model over the held-out rows,
    of W per GPU and of tokens per joule over all of them, and the anchor row (named, not in the held-out score)."""
    result = power_accuracy()
    scores = result["scores"]

    def row(family: str, mape: float, rows: int) -> dict[str, Any]:
        return {"check": "power", "family": family, "weighted_pct": None, "median_pct": None, "mape_pct": mape,
                "rows": rows, "failures": 0}

    families = [row(f"W per GPU, {key.replace('meta-llama/', '')}", score["power_mape_pct"], score["rows"])
                for key, score in scores.items() if key not in ("held out", "anchor")]
    held, anchor = scores.get("held out"), scores.get("anchor")
    if held:
        families += [row("W per GPU, held out", held["power_mape_pct"], held["rows"]),
                     row("tokens/J, held out", held["tokens_per_J_mape_pct"], held["rows"])]
    if anchor:
        named = next(r for r in result["rows"] if r["anchor"])
        name = named["model"].replace("meta-llama/", "")
        families.append(row(f"W per GPU, anchor (sets SM_CLOCK_SHARE; not held out): {name}, "
                            f"max_num_seqs {named['max_num_seqs']}, {named['gpus']}×{named['gpu']}",
                            anchor["power_mape_pct"], anchor["rows"]))
    return families


def power_accuracy(*, reference: str | None = None, progress=None) -> dict[str, Any]:
    """The GPU power model against measured vLLM serving power (``validation/mlenergy_power.csv``, ML.ENERGY
    Leaderboard v3.0, or the file ``reference`` in its format): W per GPU and tokens per joule per row, their MAPE
    per GPU and model over the held-out rows, and the anchor row apart."""
    from deepstack.accuracy import power

    return power.power_accuracy(_reference_file(reference), progress)


def serving_accuracy(*, plot: str | None = None, reference: str | None = None, progress=None) -> dict[str, Any]:
    """The GPU serving model against measured vLLM decode and prefill on 8×B200 (``validation/vllm_b200.csv``, or
    the file ``reference`` in its format: any catalog GPU system and model); with ``plot``, also a PNG of predicted
    vs measured throughput written there (its folder must exist)."""
    from deepstack.accuracy import serving

    _check_plot_folder(plot)
    data = serving.serving_accuracy(_reference_file(reference), progress)
    return _with_plot(data, plot, lambda path: serving.plot(data, path))


def cross_validation(progress=None, family: str | None = None) -> list[dict[str, Any]]:
    """Every registered generalisation check (deepstack.accuracy.CROSS_VALIDATIONS), or those of one ``family``
    (``serving``, ``kernels``), rows of plain data; ``progress(done, total)`` after each check."""
    from deepstack.accuracy import CROSS_VALIDATIONS
    from deepstack.accuracy.files import each

    checks = [entry for entry in CROSS_VALIDATIONS if family is None or entry[0].startswith(f"{family}:")]
    return [row for rows in each(lambda entry: entry[1](), checks, progress) for row in rows]


def _cross_validation_summary() -> list[dict[str, Any]]:
    """The generalisation rows of ``accuracy all``: each held-out part's MAPE with what the constants were set on
    (serving: one model's decode predicted from the other's; kernels: one kind predicted from the other four)."""
    rows = []
    for row in cross_validation():
        check = row["check"].split(":")[0]
        family = f"{check}: {row['predicted']} held out, set on {row['calibrated_on']}"
        rows.append({"check": "cross-validation", "family": family, "weighted_pct": row.get("weighted_pct"),
                     "median_pct": None, "mape_pct": row["mape_pct"], "rows": row.get("rows"), "failures": 0})
    return rows


def kernels_accuracy(*, plot: str | None = None, reference: str | None = None, progress=None) -> dict[str, Any]:
    """The distributed-kernel model against measurements on 8×H100 (``validation/h100_kernels.csv``, or the file
    ``reference`` in its format); with ``plot``, also a PNG of predicted vs measured time written there (its
    folder must exist)."""
    from deepstack.accuracy import kernels

    _check_plot_folder(plot)
    result = kernels.kernel_accuracy(path=_reference_file(reference), progress=progress)
    return _with_plot(result.as_dict(), plot, lambda path: kernels.plot(result, path))


def _kernels_summary() -> list[dict[str, Any]]:
    """The kernel check's rows of ``accuracy all``: weighted error and MAPE per kind and overall."""
    data = kernels_accuracy()
    scores = {**data["kinds"], "all kinds": data["overall"]}
    return [{"check": "kernels", "family": kind, "weighted_pct": score["weighted_pct"], "median_pct": None,
             "mape_pct": score["mape_pct"], "rows": score["rows"], "failures": len(data["failures"])}
            for kind, score in scores.items()]
