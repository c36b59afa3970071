"""CP-SAT feasibility model (the only module importing OR-Tools; docs/architecture.md §5).

Schedules: TP·EP·SP·CP·DP·PP = N is linear over prime exponents — each degree is a divisor of N chosen by an
index, whose exponent of every prime is looked up with an element constraint, and for each prime the exponents
add up to N's. The pruning rules of the paper (§4.2.3) and the divisibility rules (docs/model.md) are encoded
natively (domains, implications, pairwise products); :func:`enumerate_schedules` lists every solution and is
cross-checked in the tests against the plain enumeration of :mod:`deepstack.models.parallel`.

Hardware: the area budget as a table of the area-feasible (chip, SRAM, n, NoC, bandwidth) tuples (component areas
from :mod:`deepstack.models.hardware.area`: one PE + L2 + DRAM interface of the n connected layers + NoC at the chosen
link bandwidths must fit, so at least one PE fits), m ≤ 10 (§4.2.3), n ≤ m, and memory fit as a table of the
strategies that fit each DRAM capacity (the tables: :mod:`deepstack.search.feasibility_tables`).
:meth:`Feasibility.repair` returns the feasible point nearest to a proposal (Optuna's), so no evaluation is spent
on an infeasible point.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ortools.sat.python import cp_model

from deepstack import catalog
from deepstack.errors import InfeasibleError
from deepstack.models import assumptions, memo
from deepstack.models.parallel.strategies import (
    Strategy,
    divisors,
    prime_factors,
    prune_tp_heads,
    prune_tp_intermediate,
)
from deepstack.schema import DesignSpace, Scenario
from deepstack.search.feasibility_tables import FeasibilityTables
from deepstack.search.space import MAX_USEFUL_LAYERS, HardwarePoint, named_presets

DIMS = ("tp", "ep", "sp", "cp", "dp", "pp")
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


class Feasibility(FeasibilityTables):
    """Feasible hardware × schedule points of one space and scenario, with nearest-point repair (the tables it is
    built from: :class:`~deepstack.search.feasibility_tables.FeasibilityTables`)."""

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


def feasibility_of(space: DesignSpace, scenario: Scenario) -> Feasibility:
    """The feasibility model of a space and scenario, built once per process (building it solves tables) and
    again if a chip or NoC file the space names has been edited since."""
    return _feasibility_of(space, scenario, tuple(named_presets(space).values()))


@memo.cached(maxsize=16)
def _feasibility_of(space: DesignSpace, scenario: Scenario, presets: tuple) -> Feasibility:
    return Feasibility(space, scenario)


def log2_floor(value: int) -> int:
    return int(math.log2(value))
