"""End-to-end evaluation of one design point (docs/architecture.md): area → DRAM → workload → operator tuner →
collectives on the mapped network with tile-level overlap → pipeline → power/thermal/DVFS → report.

This module only orchestrates; each step lives in its own module:

- :mod:`~deepstack.models.design`: the :class:`DesignPoint` and the schedule check;
- :mod:`~deepstack.models.pipeline`: rows, stages, microbatches and the PP bubble, eq. 5 overlap;
- :mod:`~deepstack.models.dvfs`: thermal clock, then the power wall;
- :mod:`~deepstack.models.power` and :mod:`~deepstack.models.thermal`: energy and temperature;
- :mod:`~deepstack.models.reporting` and :mod:`~deepstack.models.results`: the typed :class:`Report`.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from deepstack.models import assumptions, dvfs, reporting, thermal
from deepstack.models import power as power_model
from deepstack.models.design import DesignPoint, check_microbatches, check_schedule
from deepstack.models.gpu import gpu_phase
from deepstack.models.gpu import power as gpu_power
from deepstack.models.gpu.admission import admitted_batch, prefill_in_waves, resident
from deepstack.models.gpu.prefill import SteadyCycle, Wave, prefill_wave, steady_state
from deepstack.models.hardware.device import timing_device
from deepstack.models.parallel.memory import MEMORY_RESERVE, memory_footprint
from deepstack.models.parallel.prefill_budget import budgeted
from deepstack.models.pipeline import run_phase, serialised
from deepstack.models.reporting import GiB, hardware_summary, scenario_summary, schedule_summary
from deepstack.models.results import Metrics, Report
from deepstack.schema import Schedule

THERMAL_SLACK_C = 1e-9  # rounding slack on the temperature limit


def evaluate(point: DesignPoint, with_ttft: bool = True, breakdown: bool = True, overlap: bool = True) -> Report:
    """Evaluate one design point (see :func:`_evaluate`); under the paper assumption set a decode step is the mean
    over the artifact's four cached lengths (docs/model.md §17): STPS, UTPS and power averaged, tokens/J their
    ratio, the hottest temperature and slowest clock kept, feasible only if every length is, and the breakdown
    of the longest."""
    steps = assumptions.averaged_steps(point.scenario)
    if steps is None:
        return _evaluate(point, with_ttft, breakdown, overlap)
    return _mean_report([_evaluate(dataclasses.replace(point, scenario=step), with_ttft, breakdown, overlap)
                         for step in steps])


def _mean_report(reports: list[Report]) -> Report:
    mean = statistics.fmean
    ms = [r.metrics for r in reports]
    stps, power = mean(m.stps for m in ms), mean(m.power_w for m in ms)
    metrics = Metrics(ms[0].ttft_s, mean(m.utps for m in ms), stps, stps / power, power,
                      max(m.temperature_c for m in ms), min(m.frequency_ghz for m in ms), ms[0].area_mm2,
                      max(m.memory_gib for m in ms))
    violations = tuple(dict.fromkeys(v for r in reports for v in r.violations))
    return dataclasses.replace(reports[-1], feasible=not violations, violations=violations, metrics=metrics)


def _evaluate(point: DesignPoint, with_ttft: bool, breakdown: bool, overlap: bool) -> Report:
    """Evaluate one design point.

    Args:
        point: the design point.
        with_ttft: also time the prefill of a decode scenario (its TTFT); otherwise a decode report's
            ``ttft_s`` is NaN.
        breakdown: include the per-operator breakdown (searches rank on the metrics alone).
        overlap: overlap each collective with the GEMM it feeds or is fed by (eq. 5) and prefetch FSDP weight
            gathers behind the layer; ``False`` serialises them (the GEMM alone at its best stand-alone tiling,
            then the whole collective), keeping the overlapped phase's microbatch count and bottleneck stage.

    Returns:
        The typed, immutable :class:`~deepstack.models.results.Report`.

    Raises:
        UserInputError: the schedule does not match the machine, or the device cannot run within its TDP.
    """
    check_schedule(point)
    dev = point.device
    timed_on = timing_device(dev)
    usable = dev.dram.capacity_B * (1 - MEMORY_RESERVE)
    scenario, asked_batch = point.scenario, point.scenario.batch
    if point.chip.gpu is not None and scenario.phase == "decode":  # vLLM runs the requests whose KV cache fits
        running = admitted_batch(scenario, point.schedule, usable)
        if 0 < running < asked_batch:
            scenario = scenario.model_copy(update={"batch": running})
            check_microbatches(point.schedule, scenario, admitted=True)  # of the requests that run
    places = None  # a GPU prefill whose batch does not fit: the requests it holds at once, the others waiting
    if point.chip.gpu is not None and scenario.phase == "prefill":
        scenario, places = prefill_in_waves(scenario, point.schedule, timed_on.dram.capacity_B)
    else:
        scenario = budgeted(scenario, point.schedule, timed_on)  # the prefill budget settled for this schedule
    coefficients = power_model.coefficients(timed_on)
    devices = point.devices
    noc_J_per_B = dvfs.noc_J_per_B(point.network)
    main = _on_device(point, timed_on, scenario, overlap, places)
    scale, step_s, power_w = dvfs.clock_scale(main, dev, coefficients, noc_J_per_B, devices)
    if isinstance(main, SteadyCycle) and with_ttft:  # a newcomer's first token at a server's steady state
        ttft_s = main.ttft(scale)
    elif scenario.phase == "decode" and with_ttft:
        prefill = scenario.model_copy(update={"phase": "prefill"})
        phase = _on_device(point, timed_on, prefill, overlap)
        # a GPU runs the prefill at the clock the prefill's own power allows (its waiting SMs and idle power,
        # models/gpu/power.py, can put a prefill at the TDP where the decode step is below it), as a prefill
        # evaluation does; a 3D chip keeps the paper's one clock per device
        ttft_s = (dvfs.clock_scale(phase, dev, coefficients, noc_J_per_B, devices)[1] if dev.gpu
                  else phase.time_at(scale))
    elif scenario.phase == "decode":
        ttft_s = math.nan
    else:
        ttft_s = step_s
    s = point.schedule
    requests = scenario.batch  # real requests only: a replica's padding serves no one (docs/model.md §13)
    if scenario.phase == "decode":  # a steady state's phase is a cycle of steps giving each request its tokens
        tokens = main.tokens_per_request if isinstance(main, SteadyCycle) else 1
        stps, utps = requests * tokens / step_s, tokens / step_s
    else:  # a GPU's prefill is a wave of vLLM steps: per user, the mean over requests of input tokens / TTFT
        stps = requests * scenario.input_len / step_s
        utps = main.user_tps(scale) if isinstance(main, Wave) else scenario.input_len / step_s
    idle = idle_devices(s, scenario.batch, devices)
    system_power_w = power_w * (devices - idle) + gpu_power.idle_power_w(dev) * idle
    layers = dev.dram.stacked_layers if dev.is_3d else 0
    ambient_c = point.judged_ambient_c
    temperature = thermal.temperature_c(ambient_c, layers, power_w, dev.device_area_mm2)
    held = scenario.model_copy(update={"batch": places}) if places else scenario  # a wave's: its places'
    memory = memory_footprint(resident(held) if dev.gpu else held, s)
    violations = []
    if memory.total_B > usable:
        violations.append(
            f"memory: needs {memory.total_B / GiB:.2f} GiB per device but {usable / GiB:.2f} GiB is usable "
            f"({dev.dram.capacity_B / GiB:.2f} GiB less the {MEMORY_RESERVE:.0%} reserve)"
        )
    if temperature > dev.target_c + THERMAL_SLACK_C:
        violations.append(f"thermal: {temperature:.1f} °C exceeds the {dev.target_c:g} °C limit")
    metrics = Metrics(ttft_s, utps, stps, stps / system_power_w, system_power_w, temperature,
                      dev.clock_Hz * scale / 1e9, dev.device_area_mm2 * devices, memory.total_B / GiB)
    return Report(
        feasible=not violations, violations=tuple(violations), metrics=metrics,
        hardware=_judged_at(hardware_summary(point.chip, point.network, point.stacked_layers, point.connected_layers,
                                             point.sram, point.noc_bw_scale, devices), ambient_c),
        schedule=schedule_summary(s, devices, main.microbatches),
        scenario=_summary(scenario, asked_batch, places),
        breakdown=reporting.breakdown(main, dev, scale, step_s, power_w, temperature, memory, coefficients,
                                      noc_J_per_B, devices, point.network) if breakdown else None,
    )


def _summary(scenario, asked_batch: int, places: int | None):
    """The scenario as asked, with the requests that ran at once when fewer than asked fit (a GPU decode runs
    only those; a GPU prefill runs them all, that many at a time)."""
    if places:
        return scenario_summary(scenario, running_batch=places)
    if scenario.batch == asked_batch:
        return scenario_summary(scenario)
    return scenario_summary(scenario.model_copy(update={"batch": asked_batch}), running_batch=scenario.batch)


def _judged_at(hardware, ambient_c: float):
    """The hardware summary with the ambient its temperature was judged at (the paper set's 35 °C; usually the
    chip's own, and then the summary as it is)."""
    return hardware if hardware.ambient_c == ambient_c else dataclasses.replace(hardware, ambient_c=ambient_c)


def idle_devices(schedule: Schedule, batch: int, devices: int) -> int:
    """Devices with nothing to do in a step: those of whole model copies that get no request.

    A copy is independent only when it shares no collective with the others: the FFN's DP copies (each holds a
    full set of experts and serves its own attention replicas) when they split the attention's replicas evenly.
    Requests go one per attention replica, spread over the copies, so ``min(copies, batch)`` copies are busy and
    the rest draw static power alone. Replicas of an EP or TP group are never idle: their devices hold experts
    (or shards) the group's real tokens are routed to.
    """
    copies = schedule.ffn.dp
    if copies <= 1 or schedule.attention.replicas % copies:
        return 0
    return (copies - min(copies, batch)) * (devices // copies)


def _on_device(point: DesignPoint, dev, scenario, overlap: bool, places: int | None = None):
    """The phase as the device runs it. On a real GPU (a chip with a ``gpu`` table; docs/model.md §GPU execution)
    a decode step is serialised and pays the GPU's execution terms, and a prefill is the wave of vLLM steps that
    serves the batch (:func:`~deepstack.models.gpu.prefill.prefill_wave`), each step timed so; a decode at a
    server's steady state is the cycle of such steps (:func:`~deepstack.models.gpu.prefill.steady_state`).
    Otherwise the phase as timed, serialised without overlap."""
    if point.chip.gpu is None:
        phase = run_phase(point, dev, scenario)
        return phase if overlap else serialised(phase, point.schedule, dev, scenario)
    if scenario.phase == "prefill":
        return prefill_wave(point, dev, scenario, lambda step: _gpu_step(point, dev, step), places)
    if scenario.steady_state:
        return steady_state(point, dev, scenario, lambda step: _gpu_step(point, dev, step))
    return _gpu_step(point, dev, scenario)


def _gpu_step(point: DesignPoint, dev, scenario):
    """One step of ``scenario`` on a real GPU: serialised, with the GPU's execution terms."""
    phase = run_phase(point, dev, scenario)
    return gpu_phase(serialised(phase, point.schedule, dev, scenario), point, dev, scenario)
