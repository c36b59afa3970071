"""The library API behind the CLI: parse → compute → plain data. Never prints."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from deepstack import catalog
from deepstack.errors import InfeasibleError, UserInputError
from deepstack.models import collectives, network
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate as run_evaluation
from deepstack.models.hardware.device import resolve_device
from deepstack.models.parallel.memory import feasible_strategies
from deepstack.models.parallel.strategies import enumerate_strategies
from deepstack.models.results import Report
from deepstack.schema import NetworkLevel, Scenario, Schedule, SramOption, build_scenario, load_file, validate
from deepstack.search.schedules import best_schedule


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
    from pathlib import Path

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


def with_flags(scenario: Scenario, **values) -> Scenario:
    """``scenario`` with the scenario fields the command's flags set (``prefill_chunk_tokens``, ``ambient_c``,
    ``max_temp_c``; None keeps the scenario's value), each validated so an error names its flag."""
    for key, value in values.items():
        if value is not None:
            fields = {name: getattr(scenario, name) for name in Scenario.model_fields}
            scenario = validate(Scenario, {**fields, key: value}, origin="--" + key.replace("_", "-"))
    return scenario


def _check_cooling(space: str | None, scenario: Scenario) -> None:
    """Refuse, before a search starts, an ambient at or above a chip's limit (one line naming the flag)."""
    from deepstack.models.design import cooled
    from deepstack.search.space import load_space

    for chip in load_space(space).hardware.chips:
        cooled(catalog.load("chips", chip), scenario.ambient_c, scenario.max_temp_c)


def validate_file(path: str) -> dict[str, Any]:
    """Validate any schema file; returns its kind, name and normalised content."""
    obj = load_file(path)
    return {"valid": True, "kind": obj.kind, "name": getattr(obj, "name", None), "content": obj.model_dump(mode="json")}


def evaluate(*, model: str, phase: str = "decode", batch: int = 1, input_len: int = 1024, output_len: int = 1024,
             precision: str | None = None, chip: str | None = None, noc: str | None = None,
             system: str | None = None, stacked_layers: int | None = None, connected_layers: int | None = None,
             parallel: str | None = None, objective: str = "stps", with_ttft: bool = True, breakdown: bool = True,
             overlap: bool = True, prefill_chunk_tokens: int | None = None, ambient_c: float | None = None,
             max_temp_c: float | None = None, cuda_graphs: bool | None = None, assumptions: str | None = None,
             pes: int | None = None, l1_kib: float | None = None, l1_bw_B_per_cycle: float | None = None,
             hop_latency_scale: float = 1.0, level_bw_scale: str | None = None) -> Report:
    """Evaluate one design point described as the CLI's flags describe it; see :func:`deepstack.evaluate`.

    Without ``parallel`` on a multi-device network the best schedule by ``objective`` is searched (the report
    then carries the search's summary). Raises ``UserInputError`` for bad input and for a request that cannot
    fit (memory), naming the field.
    """
    scenario = with_flags(build_scenario(model, phase, batch, input_len, output_len, precision),
                          prefill_chunk_tokens=prefill_chunk_tokens, ambient_c=ambient_c, max_temp_c=max_temp_c,
                          cuda_graphs=cuda_graphs, assumptions=assumptions)
    if system and (chip or noc):
        raise UserInputError("--system replaces --chip and --noc; give one or the other")
    if system:
        machine = catalog.load("systems", system)
        architecture, network = machine.architecture, machine.network
    else:
        architecture = catalog.load("chips", chip or "standard")
        network = catalog.load("nocs", noc) if noc else None
    architecture, sram, network = _hardware_flags(architecture, network, noc, pes, l1_kib, l1_bw_B_per_cycle,
                                                  hop_latency_scale, level_bw_scale)
    schedule = Schedule.parse(parallel) if parallel else Schedule()
    point = DesignPoint(chip=architecture, scenario=scenario, schedule=schedule, network=network,
                        stacked_layers=stacked_layers, connected_layers=connected_layers, sram=sram)
    options = {"with_ttft": with_ttft, "breakdown": breakdown, "overlap": overlap}
    if parallel is None and network is not None and network.devices > 1:
        search = best_schedule(point, objective)
        report = search.best
        if not (with_ttft and breakdown and overlap):  # the search reports its best with the defaults
            best = Schedule.parse(report.schedule.text).model_copy(update={"collectives": schedule.collectives})
            report = run_evaluation(dataclasses.replace(point, schedule=best), **options)
        report = report.with_search(search.summary())
    else:
        report = run_evaluation(point, **options)
    memory = [v for v in report.violations if v.startswith("memory")]
    if memory:
        raise InfeasibleError(f"{memory[0]}; use more devices (--parallel) or a larger DRAM stack")
    return report


def _hardware_flags(architecture, network, noc, pes, l1_kib, l1_bw_B_per_cycle, hop_latency_scale, level_bw_scale):
    """The chip, SRAM option and network as ``evaluate``'s hardware flags change them: a fixed PE count (the
    paper's SM count for a design), an L1 option, and hop-latency and per-level bandwidth multipliers (the
    hardware axes of a sweep row or of the paper's Table 4)."""
    from deepstack.search.space import scaled_network

    if pes is not None:
        if pes < 1:
            raise UserInputError(f"--pes: must be ≥ 1 (got {pes})")
        architecture = architecture.model_copy(update={"device": architecture.device.model_copy(
            update={"pes": pes})})
    sram = None
    if l1_kib is not None or l1_bw_B_per_cycle is not None:
        for flag, value in (("--l1-kib", l1_kib), ("--l1-bw-B-per-cycle", l1_bw_B_per_cycle)):
            if value is not None and value <= 0:
                raise UserInputError(f"{flag}: must be > 0 (got {value:g})")
        width = l1_bw_B_per_cycle or architecture.pe.l1_bw_B_per_cycle
        sram = validate(SramOption, {"name": "flags", "l1_KiB": l1_kib,
                                     "l1_bw_scale": width / architecture.pe.l1_bw_B_per_cycle}, origin="--l1-kib")
    scales = tuple(_numbers(level_bw_scale, "--level-bw-scale")) if level_bw_scale else ()
    if hop_latency_scale <= 0 or any(x <= 0 for x in scales):
        raise UserInputError("--hop-latency-scale, --level-bw-scale: multipliers must be > 0")
    if scales or hop_latency_scale != 1.0:
        if not noc:
            raise UserInputError("--hop-latency-scale and --level-bw-scale need --noc (a catalog NoC)")
        network = scaled_network(noc, hop_latency_scale, scales)
    return architecture, sram, network


def strategies(*, devices: int, model: str | None = None, phase: str = "decode", batch: int = 1,
               input_len: int = 1024, output_len: int = 1024, precision: str | None = None,
               chip: str | None = None, stacked_layers: int | None = None,
               connected_layers: int | None = None, prefill_chunk_tokens: int | None = None) -> dict[str, Any]:
    """Parallel strategies for ``devices`` devices: all of them, or (with a model) those that survive the
    pruning rules, and (with a chip) the memory check."""
    if not 1 <= devices <= 1 << 20:
        raise UserInputError(f"--devices: must be an integer in 1..{1 << 20} (got {devices})")
    if model is None:
        kept = enumerate_strategies(devices)
        pruned: dict[str, int] = {}
    else:
        scenario = with_flags(build_scenario(model, phase, batch, input_len, output_len, precision),
                              prefill_chunk_tokens=prefill_chunk_tokens)
        capacity = None
        if chip is not None:
            dev = resolve_device(catalog.load("chips", chip), stacked_layers, connected_layers)
            capacity = dev.dram.capacity_B
        kept, pruned = feasible_strategies(scenario, devices, capacity)
    rows = [{"tp": s.tp, "ep": s.ep, "sp": s.sp, "cp": s.cp, "dp": s.dp, "pp": s.pp, "fsdp": s.fsdp,
             "label": s.label} for s in kept]
    return {"devices": devices, "count": len(rows), "total": len(enumerate_strategies(devices)),
            "pruned": dict(pruned), "strategies": rows}


def _split(value: str | None, what: str) -> list[str]:
    if value is None:
        return []
    parts = [part.strip() for part in str(value).split(",")]
    if not all(parts):
        raise UserInputError(f"{what}: empty value in {value!r}; give one value per level, innermost first")
    return parts


def _numbers(value: str | None, what: str, kind=float) -> list:
    out = []
    for part in _split(value, what):
        try:
            number = kind(part)
            finite = math.isfinite(number)
        except (ValueError, OverflowError):
            raise UserInputError(f"{what}: {part[:20]!r}… is not a usable number") from None
        if not finite:
            raise UserInputError(f"{what}: must be finite (got {part!r})")
        out.append(number)
    return out


def collective(*, op: str, bytes_per_rank: float, topology: str | None = None, dims: str | None = None,
               link_bw_GBps: str | None = None, hop_latency_ns: str | None = None, algorithm: str = "auto",
               packet_bytes: str | None = None, header_bytes: str | None = None, ports: str | None = None,
               completion: str = "delivery", noc: str | None = None) -> dict[str, Any]:
    """One collective over every device of a flat or hierarchical topology (or a catalog NoC)."""
    if op not in collectives.OPS:
        raise UserInputError(f"--op: must be one of {', '.join(collectives.OPS)} (got {op!r})")
    if not (math.isfinite(bytes_per_rank) and bytes_per_rank > 0):
        raise UserInputError(f"--bytes: must be a positive number of bytes per rank (got {bytes_per_rank!r})")
    if completion not in network.COMPLETIONS:
        raise UserInputError(f"--completion: must be one of {', '.join(network.COMPLETIONS)} (got {completion!r})")
    if noc is not None:
        if topology is not None or ports is not None:
            raise UserInputError("--noc replaces --topology/--dims/--link-bw-GBps/--hop-latency-ns/--ports; give one")
        topo = network.NetworkTopology.from_schema(catalog.load("nocs", noc))
        topo = network.NetworkTopology(topo.levels, completion) if completion != "delivery" else topo
    else:
        topo = _topology_from_flags(topology, dims, link_bw_GBps, hop_latency_ns, packet_bytes, header_bytes,
                                    ports, completion)
    result = collectives.collective_time(op, bytes_per_rank, tuple(range(topo.devices)), topo, algorithm)
    return {
        "op": op, "algorithm": result.algorithm, "detail": result.detail, "bytes_per_rank": bytes_per_rank,
        "devices": topo.devices, "time_s": result.time_s, "latency_s": result.latency_s,
        "congestion_s": result.congestion_s, "max_link_bytes": result.max_link_bytes,
        "steps": [{"phase": s.phase, "count": s.count, "time_s": s.time_s, "latency_s": s.latency_s,
                   "congestion_s": s.congestion_s, "max_link_bytes": s.max_link_bytes} for s in result.steps],
        "levels": [{"level": f"L{load.level + 1}", "label": load.label, "links": load.links,
                    "total_bytes": load.total_bytes, "max_link_bytes": load.max_link_bytes,
                    "max_busy_fraction": load.max_busy_fraction, "mean_busy_fraction": load.mean_busy_fraction}
                   for load in result.level_utilization],
        "candidates": [{"algorithm": name, "time_s": t} for name, t in result.candidates],
    }


def _topology_from_flags(topology, dims, link_bw_GBps, hop_latency_ns, packet_bytes, header_bytes, ports,
                         completion):
    kinds = _split(topology, "--topology")
    if not kinds:
        raise UserInputError("--topology: required (e.g. ring, torus, or switch,switch) unless --noc is given")
    shapes = _split(dims, "--dims")
    bws = _numbers(link_bw_GBps, "--link-bw-GBps")
    lats = _numbers(hop_latency_ns, "--hop-latency-ns")
    packets = _numbers(packet_bytes, "--packet-bytes", int)
    headers = _numbers(header_bytes, "--header-bytes", int)
    owners = _split(ports, "--ports")
    n = len(kinds)
    for i, kind in enumerate(kinds):
        if kind not in network.topology_names():
            raise UserInputError(f"--topology: level {i + 1} must be one of {', '.join(network.topology_names())} "
                                 f"(got {kind!r})")
    for what, values in (("--dims", shapes), ("--link-bw-GBps", bws), ("--hop-latency-ns", lats)):
        if len(values) != n:
            raise UserInputError(f"{what}: give {n} value(s), one per --topology level (got {len(values)})")
    for what, values in (("--packet-bytes", packets), ("--header-bytes", headers), ("--ports", owners)):
        if values and len(values) not in (1, n):
            raise UserInputError(f"{what}: give 1 or {n} value(s)")
    levels = []
    for i in range(n):
        data = {"topology": kinds[i], "dims": shapes[i], "link_bw_GBps": bws[i], "hop_latency_ns": lats[i],
                "energy_pJ_per_bit": 1.0}  # energy is not reported by this command
        if packets:
            data["packet_bytes"] = packets[i if len(packets) == n else 0]
        if headers:
            data["header_bytes"] = headers[i if len(headers) == n else 0]
        if owners:
            data["ports"] = owners[i if len(owners) == n else 0]
        level = validate(NetworkLevel, data, origin=f"level {i + 1}")
        levels.append(network.TopologyLevel(level.topology, level.dims, level.link_bw_Bps, level.hop_latency_s,
                                            level.packet_bytes, level.header_bytes, ports=level.ports))
    return network.NetworkTopology(tuple(levels), completion)


def run_optimize(*, objective: str, model: str | None, phase: str | None, batch: int | None,
                 input_len: int | None, output_len: int | None, precision: str | None, space: str | None,
                 sampler: str, trials: int, study: str, storage: str | None, seed: int | None, workers: int,
                 out: str | None, progress=None, prefill_chunk_tokens: int | None = None,
                 ambient_c: float | None = None, max_temp_c: float | None = None, batch_size: int | None = None,
                 until_stall: int | None = None, log=None, inner: str = "screen",
                 refine: int | None = None, assumptions: str | None = None) -> dict[str, Any]:
    """Run (or resume) a study; the scenario comes from the flags, else from the space's first scenario.
    ``result["run"]`` says what this run did (counts, hypervolume, evaluations, ``interrupted``: the signal)."""
    from deepstack.search import optimize as opt

    objectives = opt.parse_objectives(objective)
    scenario = with_flags(_scenario_or_space(space, model, phase, batch, input_len, output_len, precision),
                          prefill_chunk_tokens=prefill_chunk_tokens, ambient_c=ambient_c, max_temp_c=max_temp_c,
                          assumptions=assumptions)
    _check_cooling(space, scenario)
    result = opt.optimize(objectives=objectives, space=space, scenario=scenario, sampler=sampler, trials=trials,
                          study=study, storage=storage, seed=seed, workers=workers, out=out, progress=progress,
                          batch=opt.DEFAULT_BATCH if batch_size is None else batch_size, until_stall=until_stall,
                          log=log, inner=inner, refine=refine)
    return {"study": result.study, "storage": result.storage, "trials": result.trials, "added": result.added,
            "run": result.run,
            "objectives": result.objectives, "wall_s": result.wall_s, "files": result.files,
            "scenario": {"model": scenario.model.name, "phase": scenario.phase, "batch": scenario.batch,
                         "input_len": scenario.input_len, "output_len": scenario.output_len,
                         "precision": str(scenario.precision), "ambient_c": scenario.ambient_c,
                         "max_temp_c": scenario.max_temp_c, "assumptions": scenario.assumptions},
            "pareto": result.pareto}


def space_size(space: str | None) -> dict[str, Any]:
    from deepstack.search.space import load_space, raw_size

    s = load_space(space)
    size = raw_size(s)
    return {"space": s.name, "raw_size": size, "log10": math.log10(size)}


def _scenario_or_space(space: str | None, model, phase, batch, input_len, output_len, precision) -> Scenario:
    from deepstack.search.space import load_space, scenarios

    first = scenarios(load_space(space))[0]

    def given(value, default):  # a flag set to 0 or "" is still set: the schema then refuses it
        return default if value is None else value

    return build_scenario(given(model, first.model.name), given(phase, first.phase), given(batch, first.batch),
                          given(input_len, first.input_len), given(output_len, first.output_len),
                          given(precision, str(first.precision) if model is None else None),
                          assumptions=first.assumptions).with_cooling(first.ambient_c, first.max_temp_c)


def run_sweep(*, mode: str, objective: str, model: str | None, phase: str | None, batch: int | None,
              input_len: int | None, output_len: int | None, precision: str | None, space: str | None,
              workers: int | None, out: str | None, backend: str = "local",
              scheduler: str | None = None, prefill_chunk_tokens: int | None = None, ambient_c: float | None = None,
              max_temp_c: float | None = None, assumptions: str | None = None, progress=None) -> dict[str, Any]:
    """Run (or resume) a sweep (``deepstack sweep``); ``progress(done, total)``, when given, is told the hardware
    points finished of those planned so far after each chunk (the total grows as a hierarchical sweep plans its
    next tier)."""
    from deepstack.search import optimize as opt
    from deepstack.search import sweep as sw

    objectives = opt.parse_objectives(objective)
    scenario = with_flags(_scenario_or_space(space, model, phase, batch, input_len, output_len, precision),
                          prefill_chunk_tokens=prefill_chunk_tokens, ambient_c=ambient_c, max_temp_c=max_temp_c,
                          assumptions=assumptions)
    _check_cooling(space, scenario)
    folder = out or f"studies/sweep-{mode}"
    result = sw.sweep(mode=mode, space=space, scenario=scenario, objectives=objectives, out=folder,
                      workers=workers, with_ttft="ttft" in objectives, backend=backend, scheduler=scheduler,
                      progress=progress)
    return {"mode": result.mode, "evaluations": result.evaluations, "hardware_points": result.hardware_points,
            "evaluated_now": result.evaluations - result.read_back, "read_back": result.read_back,
            "wall_s": result.wall_s, "out": result.out, "objectives": result.objectives, "tiers": result.tiers,
            "pareto": result.pareto,
            "files": {"points": f"{folder}/points.csv", "pareto": f"{folder}/pareto.csv",
                      "summary": f"{folder}/summary.json"}}


def evaluate_front_design(*, design: str, front: str) -> Report:
    """Evaluate again the row ``design`` (its id) of a study's front file (``<study>.pareto.csv`` or ``.json``):
    the same hardware point, schedule and scenario, so the report gives the row's numbers."""
    from deepstack.search.front_design import front_design

    point, _ = front_design(front, design)
    return run_evaluation(point, with_ttft=True)


def run_compare(*, study: str, storage: str | None, sweep_dir: str) -> dict[str, Any]:
    from deepstack.search.compare import compare

    return compare(study=study, storage=storage or f"sqlite:///studies/{study}.db", sweep_dir=sweep_dir)


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
    ``progress(done, total)`` after each of the five checks."""
    from deepstack.accuracy.files import each

    parts = (_network_summary, _serving_summary, _power_summary, _kernels_summary, _paper_summary)
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


def cross_validation(progress=None) -> list[dict[str, Any]]:
    """Every registered generalisation check (deepstack.accuracy.CROSS_VALIDATIONS), rows of plain data;
    ``progress(done, total)`` after each check."""
    from deepstack.accuracy import CROSS_VALIDATIONS
    from deepstack.accuracy.files import each

    return [row for rows in each(lambda entry: entry[1](), CROSS_VALIDATIONS, progress) for row in rows]


def kernel(*, system: str, kind: str, shape: dict[str, int | None], tile: str | None = None,
           stages: int | None = None, dtype: str = "fp16", comm_sms: int | None = None) -> dict[str, Any]:
    """Time one distributed kernel on a catalog system (``deepstack kernel``); see
    :func:`deepstack.models.kernels.kernel_time`. Raises ``UserInputError`` naming the flag for bad input."""
    from deepstack.models.kernels import kernel_time, parse_tile

    machine = catalog.load("systems", system)
    result = kernel_time(kind, shape, machine.architecture, machine.network, tile=parse_tile(tile, stages),
                         dtype=dtype, comm_sms=comm_sms)
    return {"system": system, **result.as_dict(), "dtype": dtype}


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
