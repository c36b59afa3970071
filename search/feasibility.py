"""CP-SAT feasibility model (the only module importing OR-Tools; docs/architecture.md §5).

Schedules: TP·EP·SP·CP·DP·PP = N is linear over prime exponents — each degree is a divisor of N chosen by an
index, whose exponent of every prime is looked up with an element constraint, and for each prime the exponents
add up to N's. The pruning rules of the paper (§4.2.3) and the divisibility rules (docs/model.md) are encoded
natively (domains, implications, pairwise products); :func:`enumerate_schedules` lists every solution and is
cross-checked in the tests against the plain enumeration of :mod:`deepstack.models.parallel`.

Hardware: the area budget is linear over the choices (element lookups of precomputed component areas from
:mod:`deepstack.models.hardware.area`: one PE + L2 + DRAM interface of the n connected layers + NoC at the chosen link
bandwidths must fit, so at least one PE fits), m ≤ 10 (§4.2.3), n ≤ m, and memory fit as a table of the
strategies that fit each DRAM capacity. :meth:`Feasibility.repair` returns the feasible point nearest to a
proposal (Optuna's), so no evaluation is spent on an infeasible point.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from deepstack import catalog
from deepstack.errors import InfeasibleError, UserInputError
from deepstack.models import assumptions, memo
from deepstack.models.hardware import area as area_model
from deepstack.models.parallel.memory import feasible_strategies
from deepstack.models.parallel.strategies import (
    Strategy,
    divisors,
    prime_factors,
    prune_tp_heads,
    prune_tp_intermediate,
)
from deepstack.schema import DesignSpace, Scenario
from deepstack.search.space import MAX_USEFUL_LAYERS, HardwarePoint, scaled_network

DIMS = ("tp", "ep", "sp", "cp", "dp", "pp")
AREA_UNIT_MM2 = 1e-6  # areas become integers in µm²·(1e6 per mm²) for CP-SAT
SOLVE_SECONDS = 10.0  # a repair takes milliseconds; the limit only guards against pathological inputs


@dataclass
class _ScheduleVars:
    index: dict[str, cp_model.IntVar]
    value: dict[str, cp_model.IntVar]
    fsdp: cp_model.IntVar
    divisors: list[int]


def _allowed_tp(scenario: Scenario, divs: list[int]) -> list[int]:
    """TP degrees passing the divisibility rules (heads, KV heads, intermediates): the composer's own rules."""
    return [tp for tp in divs if prune_tp_heads(scenario, Strategy(tp=tp)) is None
            and prune_tp_intermediate(scenario, Strategy(tp=tp)) is None]


def _allowed_ep(scenario: Scenario, divs: list[int]) -> list[int]:
    moe = scenario.model.moe
    if moe is None:
        return [1]
    return [ep for ep in divs if moe.routed_experts % ep == 0]


def add_schedule(model: cp_model.CpModel, n: int, scenario: Scenario | None) -> _ScheduleVars:
    """Schedule variables for N devices (and the rules of ``scenario`` if given)."""
    divs = list(divisors(n))
    primes = dict(prime_factors(n))
    index = {d: model.NewIntVar(0, len(divs) - 1, f"{d}_index") for d in DIMS}
    value = {d: model.NewIntVar(1, n, f"{d}") for d in DIMS}
    for d in DIMS:
        model.AddElement(index[d], divs, value[d])
    for p, total in primes.items():
        exponents = [_exponent(v, p) for v in divs]
        parts = []
        for d in DIMS:
            e = model.NewIntVar(0, total, f"{d}_exp_{p}")
            model.AddElement(index[d], exponents, e)
            parts.append(e)
        model.Add(sum(parts) == total)
    fsdp = model.NewBoolVar("fsdp")
    if scenario is not None:
        _add_rules(model, scenario, divs, index, value, fsdp, n)
    return _ScheduleVars(index, value, fsdp, divs)


def _exponent(value: int, p: int) -> int:
    e = 0
    while value % p == 0:
        value //= p
        e += 1
    return e


def _restrict(model, index_var, divs: list[int], allowed: list[int]) -> None:
    model.AddAllowedAssignments([index_var], [[divs.index(v)] for v in allowed if v in divs])


def _add_rules(model, scenario: Scenario, divs, index, value, fsdp, n: int) -> None:
    """The pruning rules of models.parallel, as constraints (same names, same order)."""
    batch, layers = scenario.batch, scenario.model.layers
    if scenario.phase == "decode":  # sp_in_decode
        model.Add(value["sp"] == 1)
    model.Add(value["dp"] >= 2).OnlyEnforceIf(fsdp)  # fsdp_without_dp
    replicas = model.NewIntVar(1, n, "replicas")  # as assumptions.data_replicas_for_pruning counts them
    if assumptions.uses(scenario, "dp_only_pruning"):
        model.Add(replicas == value["dp"])
    else:
        model.AddMultiplicationEquality(replicas, [value["dp"], value["ep"]])
    model.Add(replicas <= batch)  # replicas_exceed_batch
    if scenario.phase == "decode":  # pp_exceeds_microbatches: pp ≤ ceil(batch / replicas) ⇔ (pp−1)·replicas < batch
        pp_minus_one = model.NewIntVar(0, n, "pp_minus_one")
        model.Add(pp_minus_one == value["pp"] - 1)
        product = model.NewIntVar(0, n * n, "pp_replicas")
        model.AddMultiplicationEquality(product, [pp_minus_one, replicas])
        model.Add(product <= batch - 1)
    model.Add(value["pp"] <= layers)  # pp_exceeds_layers
    _restrict(model, index["tp"], divs, _allowed_tp(scenario, divs))  # tp_heads, tp_intermediate
    _restrict(model, index["ep"], divs, _allowed_ep(scenario, divs))  # ep_experts
    if scenario.phase == "prefill":  # sequence_overpartitioned
        shards = model.NewIntVar(1, n * n, "sequence_shards")
        model.AddMultiplicationEquality(shards, [value["sp"], value["cp"]])
        model.Add(shards <= scenario.input_len)
    else:
        model.Add(value["cp"] <= scenario.input_len + scenario.output_len)


class _Collector(cp_model.CpSolverSolutionCallback):
    def __init__(self, vars_: _ScheduleVars):
        super().__init__()
        self.vars = vars_
        self.found: list[Strategy] = []

    def on_solution_callback(self) -> None:
        v = self.vars
        self.found.append(Strategy(*(self.Value(v.value[d]) for d in DIMS), fsdp=bool(self.Value(v.fsdp))))


def enumerate_schedules(n: int, scenario: Scenario | None = None) -> list[Strategy]:
    """Every flat strategy of N devices (passing the rules of ``scenario`` if given), from CP-SAT.

    Enumerates single-worker: with several workers CP-SAT may report a solution twice.
    """
    model = cp_model.CpModel()
    vars_ = add_schedule(model, n, scenario)
    solver = cp_model.CpSolver()
    solver.parameters.enumerate_all_solutions = True
    solver.parameters.num_workers = 1
    solver.parameters.catch_sigint_signal = False  # keep the process's SIGINT handler (see repair)
    collector = _Collector(vars_)
    solver.Solve(model, collector)
    return sorted(collector.found, key=lambda s: (s.tp, s.ep, s.sp, s.cp, s.dp, s.pp, s.fsdp))


# ---------------------------------------------------------------------------------------------- hardware

@dataclass(frozen=True)
class Proposal:
    """A point proposed by the optimizer: hardware choices as values, schedule degrees, FSDP."""

    hardware: HardwarePoint
    strategy: Strategy


class Feasibility:
    """Feasible hardware × schedule points of one space and scenario, with nearest-point repair."""

    def __init__(self, space: DesignSpace, scenario: Scenario):
        self.space, self.scenario = space, scenario
        hw = space.hardware
        devices = {catalog.load("nocs", noc).devices for noc in hw.nocs}
        if len(devices) != 1:
            raise UserInputError(
                f"space {space.name}: optimize needs NoCs with one device count, got {sorted(devices)}"
            )
        self.n = devices.pop()
        self.levels = max(len(catalog.load("nocs", noc).levels) for noc in hw.nocs)
        self.chips = list(hw.chips)
        self.nocs = list(hw.nocs)
        self.srams = [option.name for option in hw.sram]
        self.stacked = sorted({m for m in hw.stacked_layers if m <= MAX_USEFUL_LAYERS})
        if not self.stacked:
            raise UserInputError(f"space {space.name}: stacked_layers has no value ≤ {MAX_USEFUL_LAYERS}")
        self.connected = "all" if hw.connected_layers == "all" else sorted(set(hw.connected_layers))
        self.hops = list(hw.hop_latency_scale)
        self.bws = list(hw.level_bw_scale)
        self.fsdp = sorted(set(space.schedule.fsdp))
        self._strategy_tables = self._memory_tables()

    # -- precomputed tables --

    def _area_terms(self):
        """Integer areas (µm²) of one PE + L2 (by chip, SRAM), DRAM interface (by chip, n), NoC (by chip, NoC,
        bandwidth choice), and each chip's budget before overhead; fixed-PE chips get an unbounded budget."""
        pe_l2, dram, noc, budget = [], [], [], []
        unit = 1 / AREA_UNIT_MM2
        for chip_name in self.chips:
            chip = catalog.load("chips", chip_name)
            d = chip.device
            for sram_name in self.srams:
                sram = next(o for o in self.space.hardware.sram if o.name == sram_name)
                l1 = sram.l1_KiB or chip.pe.l1_KiB
                l1_bw = chip.pe.l1_bw_B_per_cycle * sram.l1_bw_scale
                l2_MiB = sram.l2_MiB or d.l2_MiB
                pe = area_model.pe_area_mm2(chip.pe, l1, l1_bw)
                l2, _, _ = area_model.fixed_area_mm2(l2_MiB, d.l2_bw_B_per_cycle, 0.0, 0, ())
                pe_l2.append(round((pe + l2) * unit))
            for n in range(0, MAX_USEFUL_LAYERS + 1):
                if chip.is_3d and n >= 1:
                    bw = d.dram.layer_bw_GBps * 1e9 * n
                    _, dram_mm2, _ = area_model.fixed_area_mm2(0, 0, bw, n, ())
                else:
                    dram_mm2 = 0.0
                dram.append(round(dram_mm2 * unit))
            for noc_name in self.nocs:
                for combo in range(len(self.bws) ** self.levels):
                    scales = self._bw_scales(noc_name, combo)
                    net = scaled_network(noc_name, 1.0, scales)
                    noc_bw = tuple(bw * chip.noc_bw_scale for bw in area_model.network_bw_per_level_Bps(net.levels))
                    noc_mm2 = area_model.noc_area_mm2(noc_bw)
                    noc.append(round(noc_mm2 * unit))
            auto = d.pes == "auto"
            budget.append(round(d.area_mm2 / (1 + area_model.AREA_OVERHEAD) * unit) if auto else 10**12)
        return pe_l2, dram, noc, budget

    def _area_feasible_rows(self) -> list[list[int]]:
        pe_l2, dram, noc, budget = self._area_terms()
        srams, nocs, combos = len(self.srams), len(self.nocs), len(self.bws) ** self.levels
        layers = MAX_USEFUL_LAYERS + 1
        pe = np.array(pe_l2).reshape(len(self.chips), srams)
        dr = np.array(dram).reshape(len(self.chips), layers)
        nc = np.array(noc).reshape(len(self.chips), nocs, combos)
        total = pe[:, :, None, None, None] + dr[:, None, :, None, None] + nc[:, None, None, :, :]
        fits = total <= np.array(budget)[:, None, None, None, None]
        return np.argwhere(fits).tolist()

    def _bw_scales(self, noc_name: str, combo: int) -> tuple[float, ...]:
        levels = len(catalog.load("nocs", noc_name).levels)
        digits = []
        for _ in range(self.levels):
            digits.append(combo % len(self.bws))
            combo //= len(self.bws)
        return tuple(self.bws[i] for i in digits[:levels])

    def _capacity_B(self, chip_name: str, m: int) -> float:
        dram = catalog.load("chips", chip_name).device.dram
        if dram.technology == "3d-stacked":
            return dram.layer_capacity_GiB * 2**30 * m
        return dram.capacity_B

    def _memory_tables(self) -> dict[float, list[Strategy]]:
        tables = {}
        for chip_name in self.chips:
            for m in self.stacked:
                capacity = self._capacity_B(chip_name, m)
                if capacity not in tables:
                    kept, _ = feasible_strategies(self.scenario, self.n, capacity)
                    tables[capacity] = [s for s in kept if s.fsdp in self.fsdp]
        return tables

    # -- the model --

    def _build(self):
        model = cp_model.CpModel()
        chips, nocs, srams = len(self.chips), len(self.nocs), len(self.srams)
        v = {
            "chip": model.NewIntVar(0, chips - 1, "chip"),
            "noc": model.NewIntVar(0, nocs - 1, "noc"),
            "sram": model.NewIntVar(0, srams - 1, "sram"),
            "m": model.NewIntVar(0, MAX_USEFUL_LAYERS, "m"),
            "n": model.NewIntVar(0, MAX_USEFUL_LAYERS, "n"),
            "hop": model.NewIntVar(0, len(self.hops) - 1, "hop"),
            "bw": model.NewIntVar(0, len(self.bws) ** self.levels - 1, "bw"),
        }
        # stacking: 3D chips take a listed m ≤ 10 and 1 ≤ n ≤ m (a listed n); 2.5D chips m = n = 0
        is_3d = [1 if catalog.load("chips", c).is_3d else 0 for c in self.chips]
        chip_3d = model.NewBoolVar("chip_is_3d")
        model.AddElement(v["chip"], is_3d, chip_3d)
        model.AddAllowedAssignments([v["m"]], [[m] for m in [0, *self.stacked]])
        model.Add(v["m"] >= 1).OnlyEnforceIf(chip_3d)
        model.Add(v["n"] >= 1).OnlyEnforceIf(chip_3d)
        model.Add(v["m"] == 0).OnlyEnforceIf(chip_3d.Not())
        model.Add(v["n"] == 0).OnlyEnforceIf(chip_3d.Not())
        model.Add(v["n"] <= v["m"])
        if self.connected != "all":
            model.AddAllowedAssignments([v["n"]], [[n] for n in [0, *self.connected]])
        # area: one PE + L2 + DRAM interface + NoC within the budget (so at least one PE fits), as the table of
        # area-feasible (chip, SRAM, n, NoC, bandwidth) tuples — a sum of element lookups presolves slowly
        rows = self._area_rows
        if not rows:
            raise InfeasibleError(f"space {self.space.name}: no hardware choice fits the area budget")
        model.AddAllowedAssignments([v["chip"], v["sram"], v["n"], v["noc"], v["bw"]], rows)
        # memory: the (chip, m) pairs whose DRAM fits at least one schedule (the schedule is chosen after)
        fitting = self._fitting_pairs
        if not fitting:
            raise InfeasibleError(f"space {self.space.name}: no schedule fits the memory of any chip and stacking")
        model.AddAllowedAssignments([v["chip"], v["m"]], fitting)
        return model, v

    def _stackings(self, chip_name: str) -> list[int]:
        return self.stacked if catalog.load("chips", chip_name).is_3d else [0]

    @functools.cached_property
    def _model(self):
        return self._build()

    def repair(self, proposal: Proposal) -> Proposal:
        """The feasible point nearest to ``proposal``. Hardware first (CP-SAT): categorical choices cost 1 when
        changed, ordered ones (m, n, latency and bandwidth scale indices) by how far they move. Then the schedule
        nearest in log-degrees among those fitting that hardware's memory (a table lookup). A feasible hardware
        point is its own nearest (cost 0): the table check answers it without the solver."""
        hw = proposal.hardware
        point = hw if self._hardware_feasible(hw) else self._nearest_hardware(hw)
        table = self._strategy_tables[self._capacity_B(point.chip, point.stacked_layers or 0)]
        return Proposal(point, min(table, key=lambda s: _schedule_distance(s, proposal.strategy)))

    def _nearest_hardware(self, hw: HardwarePoint) -> HardwarePoint:
        """The feasible hardware point nearest to ``hw`` (CP-SAT, the cost of :meth:`repair`)."""
        base, v = self._model
        model = base.Clone()
        wanted = {
            "chip": self.chips.index(hw.chip), "noc": self.nocs.index(hw.noc), "sram": self.srams.index(hw.sram),
            "m": hw.stacked_layers or 0, "n": hw.connected_layers or 0, "hop": self.hops.index(hw.hop_latency_scale),
        }
        x = {name: model.GetIntVarFromProtoIndex(var.Index()) for name, var in v.items()}
        cost = []
        for name in ("chip", "noc", "sram"):
            changed = model.NewBoolVar(f"{name}_changed")
            model.Add(x[name] == wanted[name]).OnlyEnforceIf(changed.Not())
            cost.append(changed)
        for name in ("m", "n", "hop"):
            cost.append(_distance(model, x[name], wanted[name], MAX_USEFUL_LAYERS + len(self.hops)))
        for level, digit in enumerate(self._bw_digits(model, x["bw"])):
            target = self.bws.index(hw.level_bw_scales[level]) if level < len(hw.level_bw_scales) else 0
            cost.append(_distance(model, digit, target, len(self.bws)))
        model.Minimize(sum(cost))
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        # CP-SAT would otherwise install its own C-level SIGINT handler and leave SIG_DFL behind: Ctrl-C would then
        # kill the process outright instead of reaching search/interrupt.py's clean stop
        solver.parameters.catch_sigint_signal = False
        solver.parameters.max_time_in_seconds = SOLVE_SECONDS
        if solver.Solve(model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            raise InfeasibleError(f"space {self.space.name}: no feasible hardware for {self.scenario.model.name} "
                                  f"{self.scenario.phase} at batch {self.scenario.batch}")
        chip = self.chips[solver.Value(x["chip"])]
        noc = self.nocs[solver.Value(x["noc"])]
        return HardwarePoint(chip, noc, solver.Value(x["m"]) or None, solver.Value(x["n"]) or None,
                             self.srams[solver.Value(x["sram"])], self.hops[solver.Value(x["hop"])],
                             self._bw_scales(noc, solver.Value(x["bw"])))

    @functools.cached_property
    def _area_rows(self) -> list[list[int]]:
        """The area-feasible (chip, SRAM, n, NoC, bandwidth) index rows (the model's area table)."""
        return self._area_feasible_rows()

    @functools.cached_property
    def _fitting_pairs(self) -> list[list[int]]:
        """The (chip, m) pairs whose DRAM fits at least one schedule (the model's memory table)."""
        return [[c, m] for c, chip_name in enumerate(self.chips) for m in self._stackings(chip_name)
                if self._strategy_tables[self._capacity_B(chip_name, m)]]

    @functools.cached_property
    def _tables(self) -> tuple[set, set]:
        """The model's two tables as sets, for the look-up of :meth:`_hardware_feasible`."""
        return {tuple(row) for row in self._area_rows}, {tuple(pair) for pair in self._fitting_pairs}

    def _hardware_feasible(self, hw: HardwarePoint) -> bool:
        """Whether ``hw`` satisfies every constraint of the CP-SAT model (the same tables, looked up)."""
        if hw.chip not in self.chips or hw.noc not in self.nocs or hw.sram not in self.srams \
                or hw.hop_latency_scale not in self.hops:
            return False
        chip = self.chips.index(hw.chip)
        m, n = hw.stacked_layers or 0, hw.connected_layers or 0
        if catalog.load("chips", hw.chip).is_3d:
            if m not in self.stacked or not 1 <= n <= m or (self.connected != "all" and n not in self.connected):
                return False
        elif m or n:
            return False
        levels = len(catalog.load("nocs", hw.noc).levels)
        if len(hw.level_bw_scales) != levels or any(b not in self.bws for b in hw.level_bw_scales):
            return False
        combo = sum(self.bws.index(b) * len(self.bws) ** i for i, b in enumerate(hw.level_bw_scales))
        area, fitting = self._tables
        return (chip, self.srams.index(hw.sram), n, self.nocs.index(hw.noc), combo) in area and (chip, m) in fitting

    def is_feasible(self, proposal: Proposal) -> bool:
        return self.repair(proposal) == proposal

    def _bw_digits(self, model, combo_var) -> list:
        """Per-level digits of the bandwidth-combination index (base = number of scale choices)."""
        base = len(self.bws)
        digits = [model.NewIntVar(0, base - 1, f"bw_digit_{i}") for i in range(self.levels)]
        model.Add(combo_var == sum(d * base**i for i, d in enumerate(digits)))
        return digits


def _schedule_distance(a: Strategy, b: Strategy) -> float:
    """Moves in log-degree space between two strategies (FSDP counts one)."""
    dims = sum(abs(math.log2(getattr(a, d)) - math.log2(getattr(b, d))) for d in DIMS)
    return dims + (a.fsdp != b.fsdp)


def _distance(model, var, target: int, bound: int):
    """|var − target| as a new variable."""
    gap = model.NewIntVar(0, bound + abs(target) + MAX_USEFUL_LAYERS, "gap")
    model.AddAbsEquality(gap, var - target)
    return gap


def nearest_feasible(space: DesignSpace, scenario: Scenario, proposal: Proposal) -> Proposal:
    return feasibility_of(space, scenario).repair(proposal)


@memo.cached(maxsize=16)
def feasibility_of(space: DesignSpace, scenario: Scenario) -> Feasibility:
    """The feasibility model of a space and scenario, built once per process (building it solves tables)."""
    return Feasibility(space, scenario)


def log2_floor(value: int) -> int:
    return int(math.log2(value))
