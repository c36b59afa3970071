"""The pipeline of one forward pass on the busiest device (paper §4.2, eq. 5).

- :mod:`~deepstack.models.pipeline.rows`: the row kinds (an operator, a collective, a GEMM overlapped with its
  collective by eq. 5) and :class:`~deepstack.models.pipeline.rows.PhaseResult`, their sum, energy and
  re-timing at another clock;
- :mod:`~deepstack.models.pipeline.stages`: the rows of one pipeline stage on a device (stage planning);
- :mod:`~deepstack.models.pipeline.phase`: the microbatch count, the bottleneck stage and the PP bubble, the
  batched GEMM tuning, the phase memo, and the phase without overlap.
"""

from deepstack.models.pipeline.phase import prepare_phases, run_phase, serialised
from deepstack.models.pipeline.rows import CommRow, OpRow, OverlapRow, PhaseResult, Row

__all__ = ["CommRow", "OpRow", "OverlapRow", "PhaseResult", "Row", "prepare_phases", "run_phase", "serialised"]
