"""One design point, its parallel strategies, one collective and one distributed kernel (``deepstack evaluate``,
``strategies``, ``collective``, ``kernel``)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from deepstack import catalog
from deepstack.api.flags import _numbers, _split, with_flags
from deepstack.errors import InfeasibleError, UserInputError
from deepstack.models import collectives, network
from deepstack.models.design import DesignPoint
from deepstack.models.evaluate import evaluate as run_evaluation
from deepstack.models.hardware.device import resolve_device
from deepstack.models.parallel.memory import feasible_strategies, usable_capacity_B
from deepstack.models.parallel.strategies import Strategy, enumerate_strategies, prune_reason
from deepstack.models.results import Report
from deepstack.schema import NetworkLevel, Schedule, SramOption, build_scenario, validate
from deepstack.schema.space import MAX_L1_BW_SCALE
from deepstack.search.schedules import best_schedule


def evaluate(*, model: str, phase: str = "decode", batch: int = 1, input_len: int = 1024, output_len: int = 1024,
             precision: str | None = None, chip: str | None = None, noc: str | None = None,
             system: str | None = None, stacked_layers: int | None = None, connected_layers: int | None = None,
             parallel: str | None = None, objective: str = "stps", with_ttft: bool = True, breakdown: bool = True,
             overlap: bool = True, prefill_chunk_tokens: int | None = None, ambient_c: float | None = None,
             max_temp_c: float | None = None, cuda_graphs: bool | None = None, assumptions: str | None = None,
             steady_state: bool | None = None, pes: int | None = None, l1_kib: float | None = None,
             l1_bw_B_per_cycle: float | None = None, hop_latency_scale: float = 1.0,
             level_bw_scale: str | None = None) -> Report:
    """Evaluate one design point described as the CLI's flags describe it; see :func:`deepstack.evaluate`.

    Without ``parallel`` on a multi-device network the best schedule by ``objective`` is searched (the report
    then carries the search's summary). Raises ``UserInputError`` for bad input and for a request that cannot
    fit (memory), naming the field.
    """
    if steady_state and phase == "prefill":
        raise UserInputError("--steady-state: a server's steady state is a decode (its steps prefill the newcomers "
                             "too); use it with --phase decode")
    scenario = with_flags(build_scenario(model, phase, batch, input_len, output_len, precision),
                          prefill_chunk_tokens=prefill_chunk_tokens, ambient_c=ambient_c, max_temp_c=max_temp_c,
                          cuda_graphs=cuda_graphs, assumptions=assumptions, steady_state=steady_state)
    if system and (chip or noc):
        raise UserInputError("--system replaces --chip and --noc; give one or the other")
    if system:
        machine = catalog.load("systems", system)
        architecture, network = machine.architecture, machine.network
    else:
        architecture = catalog.load("chips", chip or "standard")
        network = catalog.load("nocs", noc) if noc else None
    if architecture.gpu is not None and scenario.assumptions != "default":
        raise UserInputError(f"--assumptions {scenario.assumptions}: the paper's choices describe its 3D designs and "
                             "abstract 2.5D baselines (h100-star, h200-star), not a real GPU server, whose model is "
                             "set on measurements; drop --assumptions")
    template = architecture
    architecture, sram, network = _hardware_flags(architecture, network, noc, pes, l1_kib, l1_bw_B_per_cycle,
                                                  hop_latency_scale, level_bw_scale)
    schedule = Schedule.parse(parallel) if parallel else Schedule()
    point = DesignPoint(chip=architecture, scenario=scenario, schedule=schedule, network=network,
                        stacked_layers=stacked_layers, connected_layers=connected_layers, sram=sram)
    if pes is not None:
        fits = dataclasses.replace(point, chip=template).device.pes
        if pes > fits and template.device.pes != "auto":  # a GPU: its SMs are given
            raise UserInputError(f"--pes: at most the {fits} PEs {template.name} has (got {pes})")
        if pes > fits:
            raise UserInputError(f"--pes: at most {fits} PEs fit {template.name}'s {template.device.area_mm2:g} mm² "
                                 f"with this stack, SRAM and network (the area model's count; got {pes})")
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
        skipped = _search_skips(point) if parallel is not None else None
        if skipped:
            report = report.with_search({"schedule": "given", "search_would_skip": skipped})
    memory = [v for v in report.violations if v.startswith("memory")]
    if memory:
        raise InfeasibleError(f"{memory[0]}; {_memory_hint(system, network, point)}")
    return report


def _search_skips(point: DesignPoint) -> str | None:
    """Why the best-schedule search never considers the point's given (flat) schedule: the first pruning rule it
    breaks (models/parallel/strategies.py), or None. Such a schedule is still evaluated as given."""
    if point.schedule.is_per_module or point.devices == 1:
        return None
    reason = prune_reason(point.scenario, Strategy.from_schedule(point.schedule))
    return reason[1] if reason else None


def _memory_hint(system: str | None, network, point: DesignPoint) -> str:
    """What can make a design point that does not fit in memory fit, given how its machine was named."""
    scenario, devices = point.scenario, point.devices
    spread_B = scenario.model.parameter_count() * scenario.precision.weight_bytes / devices
    usable_B = usable_capacity_B(point.device.dram.capacity_B)
    if system and spread_B > usable_B:  # no schedule or batch helps
        precision = scenario.precision
        narrower = [precision.model_copy(update={"weight_bits": bits}) for bits in (8, 4)
                    if bits < precision.weight_bits and spread_B * bits / precision.weight_bits <= usable_B]
        fewer = f", or store the weights in fewer bits (--precision {narrower[0]})" if narrower else ""
        return (f"its weights alone need {spread_B / 2**30:.1f} GiB per GPU spread evenly over all {devices}: take "
                f"a system with more memory{fewer}")
    if system:  # a fixed server: its GPUs and their memory are given
        return ("shard the model further (--parallel, e.g. tp=8), serve a smaller --batch or take a system with more "
                "memory")
    if network is None or network.devices == 1:
        return "serve a smaller --batch, or shard the model over a network of devices (--noc)"
    return "shard the model further (--parallel: TP, EP, PP), serve a smaller --batch or stack more DRAM layers"


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
        base = architecture.pe.l1_bw_B_per_cycle
        widest = MAX_L1_BW_SCALE * base
        if l1_bw_B_per_cycle is not None and l1_bw_B_per_cycle > widest:
            raise UserInputError(f"--l1-bw-B-per-cycle: at most {widest:g} B/cycle on {architecture.name} "
                                 f"({MAX_L1_BW_SCALE:g} × its {base:g}) (got {l1_bw_B_per_cycle:g})")
        sram = validate(SramOption, {"name": "flags", "l1_KiB": l1_kib,
                                     "l1_bw_scale": (l1_bw_B_per_cycle or base) / base}, origin="--l1-kib")
    scales = tuple(_numbers(level_bw_scale, "--level-bw-scale")) if level_bw_scale else ()
    if hop_latency_scale <= 0 or any(x <= 0 for x in scales):
        raise UserInputError("--hop-latency-scale, --level-bw-scale: multipliers must be > 0")
    if scales or hop_latency_scale != 1.0:
        if not noc:
            raise UserInputError("--hop-latency-scale and --level-bw-scale need --noc (a catalog NoC)")
        network = scaled_network(noc, hop_latency_scale, scales)
    return architecture, sram, network


def strategies(*, devices: int, model: str | None = None, phase: str | None = None, batch: int | None = None,
               input_len: int | None = None, output_len: int | None = None, precision: str | None = None,
               chip: str | None = None, stacked_layers: int | None = None,
               connected_layers: int | None = None, prefill_chunk_tokens: int | None = None) -> dict[str, Any]:
    """Parallel strategies for ``devices`` devices: all of them, or (with a model) those that survive the
    pruning rules, and (with a chip) the memory check. The scenario's fields default to decode, batch 1, 1,024
    tokens in and out; they, the chip and its stacking apply only with a model."""
    if not 1 <= devices <= 1 << 20:
        raise UserInputError(f"--devices: must be an integer in 1..{1 << 20} (got {devices})")
    if model is None:
        given = {"--chip": chip, "--stacked-layers": stacked_layers, "--connected-layers": connected_layers,
                 "--prefill-chunk-tokens": prefill_chunk_tokens, "--phase": phase, "--batch": batch,
                 "--input-len": input_len, "--output-len": output_len, "--precision": precision}
        ignored = [flag for flag, value in given.items() if value is not None]
        if ignored:  # they used to be ignored silently: every strategy listed, no pruning or memory check
            raise UserInputError(f"{', '.join(ignored)}: {'apply' if len(ignored) > 1 else 'applies'} only with "
                                 "--model (the pruning rules and the memory check need the model); add --model")
        kept = enumerate_strategies(devices)
        pruned: dict[str, int] = {}
    else:
        def given_or(value, default):
            return default if value is None else value

        scenario = with_flags(build_scenario(model, given_or(phase, "decode"), given_or(batch, 1),
                                             given_or(input_len, 1024), given_or(output_len, 1024), precision),
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
    for shape in shapes:  # each shape read first: "8,x" is a bad shape before it is a count
        if not all(side.strip().isdigit() for side in shape.lower().split("x")):
            raise UserInputError(f"--dims: {shape!r} is not a level's shape; give 8 or 4x4 (whole numbers), one per "
                                 "level, comma-separated")
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


def evaluate_front_design(*, design: str, front: str) -> Report:
    """Evaluate again the row ``design`` (its id) of a study's front file (``<study>.pareto.csv`` or ``.json``):
    the same hardware point, schedule and scenario, so the report gives the row's numbers."""
    from deepstack.search.front_design import front_design

    point, _ = front_design(front, design)
    return run_evaluation(point, with_ttft=True)


def kernel(*, system: str, kind: str, shape: dict[str, int | None], tile: str | None = None,
           stages: int | None = None, dtype: str = "fp16", comm_sms: int | None = None) -> dict[str, Any]:
    """Time one distributed kernel on a catalog system (``deepstack kernel``); see
    :func:`deepstack.models.gpu.overlapped.kernel_time`. Raises ``UserInputError`` naming the flag for bad input."""
    from deepstack.models.gpu.overlapped import kernel_time, parse_tile

    machine = catalog.load("systems", system)
    result = kernel_time(kind, shape, machine.architecture, machine.network, tile=parse_tile(tile, stages),
                         dtype=dtype, comm_sms=comm_sms)
    return {"system": system, **result.as_dict(), "dtype": dtype}
