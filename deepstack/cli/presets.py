"""``deepstack catalog`` and ``deepstack validate``: the presets, templates to start from, and any schema file
checked. Registered on the app by deepstack/cli/__init__.py, in the order --help lists them."""

from __future__ import annotations

from typing import Annotated

import typer

from deepstack import api, report
from deepstack.cli.common import JsonFlag
from deepstack.errors import UserInputError

_CATALOG_COLUMNS = {
    "llms": ["name", "architecture", "attention", "layers", "hidden", "parameters_B", "published_params_B",
             "active_parameters_B", "precision"],
    "chips": ["name", "pes_per_device", "device_area_mm2", "dram", "wgmma", "noc_bw_scale", "description"],
    "nocs": ["name", "devices", "L1", "L2", "L3"],
    "systems": ["name", "devices", "fp16_tflops_per_device", "dram_GiB_per_device", "dram_TBps_per_device",
                "network"],
}


def catalog(
    what: Annotated[str, typer.Argument(help="llms, chips, nocs, systems, 'show' or 'template'.")] = "all",
    name: Annotated[str | None, typer.Argument(
        help="With 'show': the preset name. With 'template': chip, noc, llm, system, space or a preset name.")
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """List presets, show one, or print a template file to start your own from (the shipped TOML of a preset,
    with its comments and sources; --json gives the same as a JSON file): deepstack validate accepts either.

    Examples: deepstack catalog chips; deepstack catalog show deepseek-v3 --json;
    deepstack catalog template chip > my-chip.toml
    """
    if what == "template":
        if not name:
            raise UserInputError("catalog template: KIND is required: chip, noc, llm, system, space or a preset name, "
                                 "e.g. deepstack catalog template chip > my-chip.toml")
        found = api.template(name)
        if json_out:
            report.print_json(found["content"])
        else:
            print(found["toml"], end="" if found["toml"].endswith("\n") else "\n")
        return
    if what == "show":
        if not name:
            raise UserInputError("catalog show: NAME is required, e.g. deepstack catalog show tms1")
        kind, data = api.show_preset(name)
        if json_out:
            report.print_json(data)
        else:
            report.key_values(f"{data['kind']} preset {name}", data["preset"])
        return
    if name is not None:
        raise UserInputError(f"catalog: unexpected argument {name!r}; use 'deepstack catalog show NAME'")
    kinds = list(_CATALOG_COLUMNS) if what == "all" else [what]
    if what != "all" and what not in _CATALOG_COLUMNS:
        raise UserInputError(f"catalog: must be one of llms, chips, nocs, systems, show, template (got {what!r})")
    rows = {kind: api.catalog_rows(kind) for kind in kinds}
    if json_out:
        report.print_json(rows if what == "all" else rows[what])
        return
    for kind in kinds:
        report.table(kind, rows[kind], _CATALOG_COLUMNS[kind])


def validate(
    file: Annotated[str, typer.Argument(help="A schema file (.toml, .yaml, .json) with a 'kind' key.")],
    json_out: JsonFlag = False,
) -> None:
    """Check any schema file (llm, chip, noc, system, scenario, schedule, space, study).

    Example: deepstack validate my-chip.toml
    """
    result = api.validate_file(file)
    if json_out:
        report.print_json(result)
    else:
        named = f" ({result['name']})" if result["name"] else ""
        report.console.print(f"ok: {file} is a valid {result['kind']}{named}", markup=False, highlight=False)
