"""Physical laws of the model that a mutation run (thermal, power, DVFS, eq. 5 overlap, the rows of a phase and the
pipeline's microbatches) found unchecked: each test below fails with the code mutated as its docstring says.

- a 2.5D die (HBM beside it) takes m = 0 in the thermal fit, whatever its DRAM;
- the pipeline runs at its slowest stage;
- a slower clock stretches an overlapped GEMM too (eq. 5 is re-timed at the clock);
- a stage's time is Σ count × time over its rows, whether they come alone or in runs;
- a step's energy is its microbatches' (core, DRAM and network alike), and each network level's bytes cost that
  level's energy per byte;
- the PP microbatch options: pp, 2·pp and 4·pp up to the requests a replica holds (⌈batch / replicas⌉), never
  fewer than a prefill's chunks; a microbatch holds ⌈batch / m⌉ requests.
"""

from __future__ import annotations

import pytest
from conftest import MINI8
from hypothesis import given, settings
from hypothesis import strategies as st

from deepstack import catalog
from deepstack.models import dvfs, power
from deepstack.models.compute.gemm_tuner import tune_gemm
from deepstack.models.compute.operators import Gemm
from deepstack.models.design import DesignPoint, cooled
from deepstack.models.hardware.device import resolve_device
from deepstack.models.parallel import communication
from deepstack.models.parallel.prefill_budget import budgeted
from deepstack.models.pipeline import phase as phase_model
from deepstack.models.pipeline import run_phase
from deepstack.models.pipeline.rows import OpRow, OverlapRow, PhaseResult, RowRun
from deepstack.models.pipeline.stages import stage_parts
from deepstack.schema import Scenario, Schedule

STANDARD = catalog.load("chips", "standard")
NETWORK = catalog.load("nocs", str(MINI8))
DEV = resolve_device(STANDARD, 4, 4, NETWORK)  # m = n = 4 on mini8


def _phase(phase: str, batch: int, schedule: str, **scenario) -> tuple[DesignPoint, PhaseResult]:
    """One step of Llama-3.2-1B (16 layers) on the 8 Standard devices of mini8 at m = n = 4."""
    point = DesignPoint(chip=STANDARD, network=NETWORK, stacked_layers=4, connected_layers=4,
                        scenario=Scenario(model="llama-3.2-1b", phase=phase, batch=batch, **scenario),
                        schedule=Schedule.parse(schedule))
    return point, run_phase(point, DEV, point.scenario)


# --- DVFS: a 2.5D die in the thermal fit ---------------------------------------------------------------------

def test_a_die_with_hbm_beside_it_is_m_0_in_the_thermal_fit():
    """H100* (700 W, 800 mm², HBM beside the die) at 45 °C: R = 0.56 °C/W × 100/800 = 0.07 °C/W (m = 0), so the
    package removes 40 / 0.07 = 571.43 W < 700 W, and f_th = ((571.43 − 70) / 630)^(1/3) = (39/49)^(1/3) = 0.9267.
    (Were its HBM counted as m = 4 layers: R = 0.075, 533.3 W and a lower clock.)"""
    dev = resolve_device(cooled(catalog.load("chips", "h100-star"), 45.0, None))
    assert (dev.tdp_W, dev.device_area_mm2, dev.is_3d) == (700.0, 800.0, False)
    assert dvfs.power_budget_w(dev) == pytest.approx(4000 / 7, rel=1e-12)
    assert dvfs.thermal_scale(dev) == pytest.approx((39 / 49) ** (1 / 3), rel=1e-12)


# --- the pipeline runs at its slowest stage ------------------------------------------------------------------

def test_the_step_runs_at_the_slowest_pipeline_stage():
    """Decode b8, TP 4 × PP 2: stage 0 holds 8 layers, stage 1 the other 8 and the LM head (2,048 × 128,256), so
    the stages differ. Every microbatch crosses every stage and the pipeline advances at its slowest one: the step's
    stage time is the largest of the stages' times, the stage it reports is that one, and the step is
    max(m, pp) of them."""
    point, phase = _phase("decode", 8, "tp=4,pp=2")
    s = point.schedule
    scenario = budgeted(point.scenario, s, DEV)
    stages, options, micros, context = phase_model._phase_shape(scenario, s)
    micro = micros[options.index(phase.microbatches)]
    layout = communication.layouts(scenario.model, scenario, s)
    topology = communication.topology_of(NETWORK)
    times = {stage: stage_parts(s, DEV, micro, stage, layout, topology, context)[1] for stage in stages}
    assert len(times) == 2 and min(times.values()) < max(times.values())  # the stages do differ
    assert phase.nominal_stage_s == max(times.values())
    assert phase.stage == max(times, key=times.get)
    assert phase.time_at(1.0) == pytest.approx(max(phase.microbatches, 2) * max(times.values()), rel=1e-12)


# --- rows: DVFS re-times overlapped GEMMs, stage time sums every row --------------------------------------------

def test_a_slower_clock_stretches_an_overlapped_gemm():
    """Prefill b4 with TP 8: o_proj and down_proj overlap their all-reduces (eq. 5) and are compute-bound (at half
    the clock they take about twice as long), so the overlapped rows stretch too, by far more than 20 %; eq. 5 is
    never faster than its compute side at any clock."""
    _, phase = _phase("prefill", 4, "tp=8")
    rows = [r for r in phase.rows if isinstance(r, OverlapRow)]
    assert rows
    for r in rows:
        assert r.time_at(0.5) >= r.timing.time_at(0.5) * (1 - 1e-12)
    assert any(r.time_at(0.5) > r.time_at(1.0) * 1.2 for r in rows)
    assert phase.time_at(0.5) > phase.time_at(1.0)


def test_a_stage_time_sums_rows_alone_and_in_runs():
    """A row of count 2 followed by a run holding a row of count 3 (the same 4,096 × 2,048 × 2,048 GEMM, time t)
    take 2t + 3t = 5t at any clock; a run between two rows: t + 3t + 2t = 6t."""
    timing = tune_gemm(Gemm("down_proj", 4096, 2048, 2048), DEV)
    t, t_half = timing.time_s, timing.time_at(0.5)
    assert t_half > t > 0
    first = PhaseResult([OpRow("a", 2, timing), RowRun([OpRow("b", 3, timing)])])
    assert first.nominal_stage_s == pytest.approx(5 * t, rel=1e-12)
    assert first.stage_time_at(0.5) == pytest.approx(5 * t_half, rel=1e-12)
    between = PhaseResult([OpRow("a", 1, timing), RowRun([OpRow("b", 3, timing)]), OpRow("c", 2, timing)],
                          time_multiplier=3)
    assert between.nominal_stage_s == pytest.approx(6 * t, rel=1e-12)
    assert between.time_at(1.0) == pytest.approx(18 * t, rel=1e-12)


# --- energy of a step -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tp8_decode() -> PhaseResult:
    """Decode b8 with TP 8 on mini8: its collectives move bytes on both network levels."""
    return _phase("decode", 8, "tp=8")[1]


def test_a_steps_energy_is_its_microbatches(tp8_decode):
    """The device runs ``microbatches`` of the stage's parts per step: three microbatches cost three times one in
    core, DRAM and network energy alike (and at any clock)."""
    c, noc = power.coefficients(DEV), dvfs.noc_J_per_B(NETWORK)
    p = tp8_decode
    one = PhaseResult(p.parts, p.time_multiplier, 1, p.stage, p.nominal_stage_s)
    three = PhaseResult(p.parts, p.time_multiplier, 3, p.stage, p.nominal_stage_s)
    for scale in (1.0, 0.7):
        e1, e3 = one.energy_J(c, scale, noc, 8), three.energy_J(c, scale, noc, 8)
        assert all(x > 0 for x in e1)
        assert e3 == pytest.approx(tuple(3 * x for x in e1), rel=1e-12, abs=0)


def test_each_network_level_charges_its_own_energy_per_byte(tp8_decode):
    """Network energy is Σ over levels of the bytes on that level × its J/B: it is additive over the levels'
    prices, and a step that moves bytes on the outer level costs energy when only that level is priced."""
    c = power.coefficients(DEV)
    inner, outer = 8e-12, 2.4e-12  # mini8: 1.0 and 0.3 pJ/bit
    assert dvfs.noc_J_per_B(NETWORK) == pytest.approx((inner, outer), rel=1e-12, abs=0)

    def net(prices):
        return tp8_decode.energy_J(c, 1.0, prices, 8)[2]

    only_inner, only_outer, both = net((inner, 0.0)), net((0.0, outer)), net((inner, outer))
    assert only_inner > 0 and only_outer > 0
    assert both == pytest.approx(only_inner + only_outer, rel=1e-12, abs=0)
    assert net((inner, 2 * outer)) == pytest.approx(only_inner + 2 * only_outer, rel=1e-12, abs=0)


# --- the pipeline's microbatch options ---------------------------------------------------------------------------

def _decode(batch: int) -> Scenario:
    return Scenario(model="llama-3.2-1b", phase="decode", batch=batch)


def test_microbatch_options_reach_the_requests_a_replica_holds():
    # PP 2, batch 8: pp, 2·pp and 4·pp = 2, 4, 8 microbatches, 8 being exactly one request each
    assert phase_model.microbatch_options(_decode(8), Schedule.parse("pp=2")) == [2, 4, 8]
    # DP 2 × PP 3, batch 11: a replica holds ⌈11 / 2⌉ = 6 requests, so 3 and 6 (12 would leave microbatches empty)
    assert phase_model.microbatch_options(_decode(11), Schedule.parse("dp=2,pp=3")) == [3, 6]
    # PP 4, batch 2: not even pp microbatches fill: the replica's 2 requests, one each
    assert phase_model.microbatch_options(_decode(2), Schedule.parse("pp=4")) == [2]


def test_a_prefill_runs_at_least_its_chunks():
    """8 prompts of 1,024 tokens under a 2,048-token budget: 2 whole prompts per step, 4 chunks. With PP 2 the
    options 2, 4, 8 become 4 and 8 (a microbatch holds at most one chunk), and a schedule asking for 1 gets 4."""
    scenario = Scenario(model="llama-3.2-1b", phase="prefill", batch=8, input_len=1024, prefill_chunk_tokens=2048)
    assert phase_model.microbatch_options(scenario, Schedule.parse("pp=2")) == [4, 8]
    assert phase_model.microbatch_options(scenario, Schedule.parse("pp=2,microbatches=1")) == [4]


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 300), microbatches=st.integers(2, 64))
def test_microbatches_hold_every_request(batch, microbatches):
    """m microbatches of a batch hold ⌈batch / m⌉ requests each: together at least the batch, and one fewer
    request each would not hold it (10 requests in 4 microbatches: 3 each, not 2)."""
    micro = phase_model._microbatch_scenario(_decode(batch), microbatches, 1024)
    assert micro.batch * microbatches >= batch
    assert (micro.batch - 1) * microbatches < batch
    assert phase_model._microbatch_scenario(_decode(10), 4, 1024).batch == 3
