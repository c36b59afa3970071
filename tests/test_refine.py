"""The main job's local search around the front (issue 20, acceptance 2): the neighbourhood it explores, the table
check that lets it skip CP-SAT for feasible points, and the property it ends with (a Pareto local optimum: every
front design solved exactly, every design within two moves of one tried)."""

from __future__ import annotations

import random

import optuna
import pytest

from deepstack import catalog
from deepstack.models.parallel.strategies import Strategy
from deepstack.search import bilevel
from deepstack.search import optimize as opt
from deepstack.search.feasibility import Proposal, feasibility_of
from deepstack.search.space import HardwarePoint, load_space, scenarios
from deepstack.search.study_record import StudyRecord

OBJECTIVES = ["stps", "tokens_per_joule"]


def _problem(space: str) -> opt.Problem:
    design_space = load_space(space)
    return opt.Problem(design_space, scenarios(design_space)[0], tuple(OBJECTIVES))


def _random_point(f, rnd: random.Random) -> HardwarePoint:
    chip, noc = rnd.choice(f.chips), rnd.choice(f.nocs)
    levels = len(catalog.load("nocs", noc).levels)
    bws = tuple(rnd.choice(f.bws) for _ in range(levels))
    if not catalog.load("chips", chip).is_3d:
        return HardwarePoint(chip, noc, None, None, rnd.choice(f.srams), rnd.choice(f.hops), bws)
    return HardwarePoint(chip, noc, rnd.choice(f.stacked), rnd.randint(1, max(f.stacked)), rnd.choice(f.srams),
                         rnd.choice(f.hops), bws)


@pytest.mark.parametrize("space", ["default", "small", "paper"])
def test_the_table_check_repairs_exactly_as_cp_sat(space, monkeypatch):
    """A feasible point is its own repair; the table look-up that says so must agree with the CP-SAT model on
    every proposal, feasible or not, and give the same schedule."""
    problem = _problem(space)
    f = feasibility_of(problem.space, problem.scenario)
    rnd = random.Random(7)
    proposals = [Proposal(_random_point(f, rnd), Strategy(dp=f.n, tp=rnd.choice((1, 2, 4)))) for _ in range(120)]
    fast = [f.repair(p) for p in proposals]
    monkeypatch.setattr(f, "_hardware_feasible", lambda hw: False)  # every repair through the solver
    solved = [f.repair(p) for p in proposals]
    assert fast == solved
    feasible = sum(p.hardware == r.hardware for p, r in zip(proposals, solved, strict=True))
    assert 0 < feasible < len(proposals)  # both branches were exercised


def test_neighbours_are_one_move_away():
    """standard / TMS1 / m = n = 4 / base / nominal latency and bandwidth on the default space, counted by hand:
    8 other chips + 7 other NoCs + 1 other SRAM option + m 3 or 5 + n 3 (n ≤ m = 4) + hop 0.5 or 2 + each of
    TMS1's three levels at 0.75 or 1.5 = 8 + 7 + 1 + 2 + 1 + 2 + 6 = 27, plus one area step: the 8 PEs per device
    become 9 only with every level at 0.75× (no single level frees enough area), 28 in all."""
    problem = _problem("default")
    levels = len(catalog.load("nocs", "tms1").levels)
    assert levels == 3
    point = HardwarePoint("standard", "tms1", 4, 4, "base", 1.0, (1.0,) * levels)
    near = bilevel.neighbours(problem, point)
    assert len(near) == len(set(near)) == 28
    assert point not in near
    assert near[-1] == HardwarePoint("standard", "tms1", 4, 4, "base", 1.0, (0.75, 0.75, 0.75))  # the area step
    for other in near[:-1]:
        changed = [k for k, v in point.as_dict().items() if other.as_dict()[k] != v]
        if changed == ["stacked_layers", "connected_layers"]:  # m down a step pulls n down with it
            assert other.stacked_layers == 3 and other.connected_layers == 3
        elif changed == ["level_bw_scales"]:
            assert sum(a != b for a, b in zip(point.level_bw_scales, other.level_bw_scales, strict=True)) == 1
        else:
            assert len(changed) == 1 or changed == ["noc", "level_bw_scales"], changed


def test_refinement_ends_at_a_pareto_local_optimum(tmp_path):
    """After the sampled trials, the local search runs until the front stops changing: every front design is
    solved exactly and every design within two moves of one has been tried; the front only improves. The trials
    it did not need go back to the sampler, so the run adds exactly ``trials``."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    plain = opt.optimize(objectives=OBJECTIVES, space="small", scenario=None, trials=12, refine=0, study="plain",
                         storage=url, out=str(tmp_path))
    budget = 400
    refined = opt.optimize(objectives=OBJECTIVES, space="small", scenario=None, trials=12 + budget, refine=budget,
                           study="refined", storage=url, out=str(tmp_path))
    assert 0 < refined.run["refined"] < budget  # it converged before its budget ...
    assert refined.trials == 12 + budget  # ... and the sampler had the rest
    assert refined.run["hypervolume"] >= plain.run["hypervolume"]

    problem = _problem("small")
    f = problem.feasibility
    # the study as it stood when the local search ended
    study = optuna.load_study(study_name="refined", storage=url)
    ended = optuna.create_study(directions=study.directions)
    for key, value in study.user_attrs.items():
        ended.set_user_attr(key, value)
    ended.add_trials(study.get_trials()[:12 + refined.run["refined"]])
    record = StudyRecord.load(ended, OBJECTIVES)
    front = record.front_hardware()
    assert front and all(point in record.solved_exactly for point in front)
    for point in front:
        for near in bilevel.neighbours(problem, point):
            for far in (near, *bilevel.neighbours(problem, near)):
                assert f.repair(Proposal(far, Strategy(dp=f.n))).hardware in record.tried, far


def test_area_steps_jump_to_the_bandwidths_that_fit_more_pes():
    # Large-Matrix / TMS5 at m = 10, n = 4 with per-level bandwidths (2.0, 0.75, 2.0)× fits 12 PEs per device; level 1
    # at 1.0× (or 0.5×) alone fits 13, level 2 at 0.5× alone still 12, both at 0.5× 14. The 1,000-trial main job on
    # the paper space stopped at 12 (its single-level moves reach 14 only through a 13-PE point, which is not on its
    # front); a 3,000-trial study found 14 and a front 11 % higher. area_steps offers each larger PE count at the
    # nearest bandwidths (fewest levels changed, then the smallest steps), so one move reaches it.
    problem = _problem("paper")
    hw = HardwarePoint("large-matrix", "tms5", 10, 4, "base", 0.25, (2.0, 0.75, 2.0))
    steps = bilevel.area_steps(problem, hw)
    pes = {point.level_bw_scales: bilevel.device_of(problem.space, point).pes for point in steps}
    assert pes == {(1.0, 0.75, 2.0): 13, (0.5, 0.5, 2.0): 14}
    assert all(count > bilevel.device_of(problem.space, hw).pes for count in pes.values())
    assert len(set(pes.values())) == len(pes)  # one point per PE count: the nearest bandwidths that give it
    assert set(steps) <= set(bilevel.neighbours(problem, hw))
