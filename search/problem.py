"""What a study optimises (:class:`Problem`: a design space, one scenario, the objectives), the feasibility model
it is searched under, and one proposal to check that anything in it is feasible before a run starts."""

from __future__ import annotations

from dataclasses import dataclass

from deepstack.models.parallel.strategies import Strategy
from deepstack.schema import DesignSpace, Scenario
from deepstack.search.ask_tell import _noc_levels
from deepstack.search.feasibility import Proposal, feasibility_of
from deepstack.search.space import HardwarePoint


@dataclass(frozen=True)
class Problem:
    """What a study optimises: a space, one scenario, the objectives."""

    space: DesignSpace
    scenario: Scenario
    objectives: tuple[str, ...]

    @property
    def feasibility(self):
        return feasibility_of(self.space, self.scenario)


def any_proposal(problem: Problem) -> Proposal:
    """A proposal from the first value of every choice; repairing it fails fast (one line) if nothing is feasible."""
    f = problem.feasibility
    hw = problem.space.hardware
    return Proposal(HardwarePoint(f.chips[0], f.nocs[0], f.stacked[0], 1, f.srams[0], hw.hop_latency_scale[0],
                                  (hw.level_bw_scale[0],) * _noc_levels(f.nocs[0])), Strategy(dp=f.n))
