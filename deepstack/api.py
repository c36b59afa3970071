"""The library API behind the CLI: parse → compute → plain data. Never prints."""

from __future__ import annotations

from typing import Any

from deepstack import catalog
from deepstack.errors import InfeasibleError, UserInputError
from deepstack.models.evaluate import DesignPoint
from deepstack.models.evaluate import evaluate as run_evaluation
from deepstack.schema import Scenario, Schedule, load_file, validate


def _llm_row(m) -> dict[str, Any]:
    params = m.parameter_count()
    return {
        "name": m.name,
        "architecture": "MoE" if m.is_moe else "dense",
        "attention": m.attention.kind.upper(),
        "layers": m.layers,
        "hidden": m.hidden,
        "parameters": params,
        "parameters_B": round(params / 1e9, 3),
        "active_parameters_B": round(m.active_parameter_count() / 1e9, 3),
        "published_params_B": m.published_params_B,
        "precision": m.default_precision,
        "source": m.source,
    }


def _chip_row(c) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": c.name,
        "description": c.description,
        "device_area_mm2": c.device.area_mm2,
        "pes_per_device": c.device.pes,
        "clock_GHz": c.clock_GHz,
        "dram": c.device.dram.technology,
        "wgmma": c.pe.wgmma,
        "noc_bw_scale": c.noc_bw_scale,
        "source": c.source,
    }
    if c.paper_table2 is not None:
        row["paper_table2_per_800mm2"] = c.paper_table2.model_dump()
    return row


def _level_text(level) -> str:
    return f"{level.topology} {'x'.join(map(str, level.dims))} @ {level.link_bw_GBps:g} GB/s"


def _noc_row(n) -> dict[str, Any]:
    row: dict[str, Any] = {"name": n.name, "devices": n.devices, "device_area_mm2": n.device_area_mm2}
    for index, level in enumerate(n.levels, start=1):
        row[f"L{index}"] = _level_text(level)
    row["source"] = n.source
    return row


def _system_row(s) -> dict[str, Any]:
    a = s.architecture
    pes = a.device.pes
    flops = a.pe.matrix_flops_per_cycle * pes * a.clock_Hz if pes != "auto" else None
    return {
        "name": s.name,
        "description": s.description,
        "devices": s.devices,
        "fp16_tflops_per_device": round(flops / 1e12, 1) if flops else None,
        "dram_GiB_per_device": round(a.device.dram.capacity_B / 2**30, 1),
        "dram_TBps_per_device": round(a.device.dram.peak_bw_Bps / 1e12, 2),
        "network": ", ".join(_level_text(level) for level in s.network.levels),
        "source": s.source,
    }


_ROWS = {"llms": _llm_row, "chips": _chip_row, "nocs": _noc_row, "systems": _system_row}


def catalog_rows(kind: str) -> list[dict[str, Any]]:
    """One summary row per preset of ``kind`` (llms, chips, nocs, systems)."""
    catalog.names(kind)  # validates the kind with a clear error
    return [_ROWS[kind](catalog.load(kind, name)) for name in catalog.names(kind)]


def show_preset(name: str) -> tuple[str, dict[str, Any]]:
    """Full validated content of a preset, and its summary row, by name."""
    kind, obj = catalog.find(name)
    return kind, {"kind": catalog.KINDS[kind], "summary": _ROWS[kind](obj), "preset": obj.model_dump(mode="json")}


def validate_file(path: str) -> dict[str, Any]:
    """Validate any schema file; returns its kind, name and normalised content."""
    obj = load_file(path)
    return {"valid": True, "kind": obj.kind, "name": getattr(obj, "name", None), "content": obj.model_dump(mode="json")}


def build_scenario(model: str, phase: str, batch: int, input_len: int, output_len: int,
                   precision: str | None) -> Scenario:
    """A validated scenario from CLI-style arguments (field names match the flags)."""
    data = {"model": model, "phase": phase, "batch": batch, "input_len": input_len, "output_len": output_len}
    if precision:
        data["precision"] = precision
    return validate(Scenario, data, origin="scenario")


def evaluate(*, model: str, phase: str = "decode", batch: int = 1, input_len: int = 1024, output_len: int = 1024,
             precision: str | None = None, chip: str | None = None, noc: str | None = None,
             system: str | None = None, stacked_layers: int | None = None, connected_layers: int | None = None,
             parallel: str | None = None) -> dict[str, Any]:
    """Evaluate one design point and return the report of DESIGN.md §6 as plain data.

    Raises ``UserInputError`` for bad input and for a request that cannot fit (memory), naming the field.
    """
    scenario = build_scenario(model, phase, batch, input_len, output_len, precision)
    if system and (chip or noc):
        raise UserInputError("--system replaces --chip and --noc; give one or the other")
    if system:
        machine = catalog.load("systems", system)
        architecture, network = machine.architecture, machine.network
    else:
        architecture = catalog.load("chips", chip or "standard")
        network = catalog.load("nocs", noc) if noc else None
    schedule = Schedule.parse(parallel) if parallel else Schedule()
    if network is not None and schedule.devices != network.devices:
        raise UserInputError(
            f"--parallel: the schedule uses {schedule.devices} devices but {network.name} has {network.devices}"
        )
    point = DesignPoint(chip=architecture, scenario=scenario, schedule=schedule, network=network,
                        stacked_layers=stacked_layers, connected_layers=connected_layers)
    report = run_evaluation(point)
    memory = [v for v in report.violations if v.startswith("memory")]
    if memory:
        raise InfeasibleError(f"{memory[0]}; use more devices (--parallel) or a larger DRAM stack")
    return report.as_dict()
