"""The catalog's presets as plain data: summary rows, one preset in full, template files, any schema file checked
(``deepstack catalog``, ``deepstack validate``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.schema import load_file


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


# the preset each kind's template starts from (``deepstack catalog template KIND``)
TEMPLATES = {"chip": ("chips", "standard"), "noc": ("nocs", "tms1"), "llm": ("llms", "llama-3.2-1b"),
             "model": ("llms", "llama-3.2-1b"), "system": ("systems", "dgx-h100"), "space": (None, "default")}


def template(what: str) -> dict[str, Any]:
    """A file to start one's own from: the shipped TOML of a kind's reference preset (``chip``, ``noc``,
    ``llm``/``model``, ``system``, ``space``) or of the preset named ``what``, comments and sources included
    (``toml``), and the same content as plain data (``content``, a valid JSON file); ``deepstack validate``
    accepts either."""
    from importlib import resources

    from deepstack.search.space import SPACES_DIR, load_space

    key = what.strip().lower()
    if key in TEMPLATES:
        group, name = TEMPLATES[key]
    elif any(key in catalog.names(kind) for kind in catalog.KINDS):
        group, name = catalog.find(key)[0], key
    else:
        raise UserInputError(f"catalog template: must be one of {', '.join(TEMPLATES)} or a preset name "
                             f"(deepstack catalog) (got {what!r})")
    if group is None:
        path, content = SPACES_DIR / f"{name}.toml", load_space(name).model_dump(mode="json")
    else:
        path = Path(str(resources.files(catalog.__name__) / group / f"{name}.toml"))
        content = catalog.load(group, name).model_dump(mode="json")
    return {"kind": content["kind"], "name": name, "toml": path.read_text(encoding="utf-8"), "content": content}


def validate_file(path: str) -> dict[str, Any]:
    """Validate any schema file; returns its kind, name and normalised content."""
    obj = load_file(path)
    if obj.kind == "space":  # the models, chips and NoCs it names must exist too
        from deepstack.search.space import checked_space

        checked_space(obj, Path(path))
    elif obj.kind == "study":  # its runner must exist
        from deepstack.search.studies import runner_of

        runner_of(obj, path)
    return {"valid": True, "kind": obj.kind, "name": getattr(obj, "name", None), "content": obj.model_dump(mode="json")}
