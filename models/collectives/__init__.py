"""Stage 1 of the dual-stage network abstraction: collectives as sequences of traffic matrices (paper §3.3.3).

Every algorithm is a sequence of steps; a step is one traffic matrix (TM) over the participating devices whose
flows start together, timed with eq. 4 by :mod:`deepstack.models.network` (all steps of an algorithm are
routed in one vectorised batch). A collective's time is the sum of its steps' times. Consecutive identical
steps (the p−1 steps of a ring) are routed once and counted ``count`` times. Several groups of the same
collective run concurrently (e.g. the 64 TP groups of 4 on 256 devices): their TMs are summed step by step, so
contention between groups on shared links shows up — this is how DeepStack aggregates the traffic of all
parallel dimensions (§4.1.4, Stage 1).

Sizes: ``bytes_per_rank`` is each rank's *input*: the shard for all-gather, the full vector for
reduce-scatter and all-reduce, the whole send buffer for all-to-all (split evenly over the p destinations,
the rank's own part staying local), the message for send/recv. ``S`` below is that size, ``p`` the group size.

Algorithms (p ranks in group order; ring neighbours are consecutive ranks):

* ``all_reduce``
    - ``ring``: reduce-scatter then all-gather around the ring, 2(p−1) steps of S/p per rank.
    - ``halving_doubling``: reduce-scatter by recursive halving, then all-gather by recursive doubling
      (power-of-two p only), ordered for locality: the reduce-scatter's partner distance *doubles* (1, 2, …,
      p/2) while the exchanged half shrinks (S/2, …, S/p), and the all-gather mirrors it — the largest
      exchanges stay between nearby ranks, i.e. on the innermost, fastest level.
    - ``rabenseifner``: the same two phases in the classic order of Thakur, Rabenseifner & Gropp (IJHPCA
      2005): reduce-scatter partners at distance p/2 first (exchanging S/2), all-gather at distance 1 first.
      Same bytes and step count as ``halving_doubling``; the largest exchanges go to the farthest partners.
    - ``double_tree``: two binary trees, each carrying S/2 (Sanders, Speck & Träff, Parallel Computing 2009;
      NCCL's double binary tree). Tree A is the in-order binary tree over the ranks, tree B the same tree
      shifted by one rank, so most interior ranks of one tree are leaves of the other. Chunk model: each
      tree's half is cut into C chunks and reduce (up) and broadcast (down) are pipelined, so after a fill of
      2h−1 steps (h = tree height) every step moves one chunk up and one chunk down every edge of both
      trees; the collective takes C + 2h − 1 such steps, each timed as the steady-state TM (a slight
      over-estimate during fill and drain). C is the power of two in 1…256 that minimises the time.
    - ``hierarchical``: reduce-scatter inside the innermost network level the group spans, all-reduce of the
      S/a shard across the outer levels (a = ranks per inner sub-group), all-gather back inside. Each phase
      uses the fastest algorithm for its sub-groups (so the outer all-reduce may itself be hierarchical, one
      level further out). Needs groups that are a full product of inner positions × outer positions.
* ``all_gather`` / ``reduce_scatter``: ``ring`` (p−1 steps), ``halving_doubling`` (recursive doubling /
  halving, power-of-two p; all-gather goes to far partners first with the smallest blocks, reduce-scatter to
  near partners first with the largest) and ``direct`` (one step: every rank sends its part to every other).
* ``all_to_all``: ``direct`` (one TM, every pair S/p) and ``pairwise`` (p−1 steps; in step k rank i sends
  S/p to rank i+k mod p).
* ``send_recv``: ``direct``, one TM in which rank i sends S to rank i+1 (a 2-rank group is one transfer; a
  longer group is a chain of pipeline-stage boundaries).

``step_overhead_s`` is a fixed software/synchronisation cost added to every step (kernel launch, flag
polling). It defaults to 0 because eq. 4 has no such term; set it to study launch-bound small collectives.

Extension: every algorithm is an :class:`Algorithm` behind a registry (:mod:`.algorithms`; the built-ins are in
:mod:`.builtin`); :func:`register_algorithm` adds one without a library edit. Modules: :mod:`.steps` (traffic
matrices in rank space), :mod:`.plan` (steps routed once per network structure, eq. 4 per step), :mod:`.engine`
(execute, rank, :func:`collective_time`) and :mod:`.results`. This package re-exports their public names.
"""

from deepstack.models.collectives import builtin as _builtin  # noqa: F401  (registers the built-in algorithms)
from deepstack.models.collectives.algorithms import (
    OPS,
    Algorithm,
    CollectiveError,
    Composite,
    algorithms,
    register_algorithm,
    unregister_algorithm,
)
from deepstack.models.collectives.engine import collective_time, level_algorithm, time_on_groups
from deepstack.models.collectives.results import CollectiveResult, StepResult
from deepstack.models.collectives.steps import Step, step

__all__ = [
    "OPS",
    "Algorithm",
    "CollectiveError",
    "CollectiveResult",
    "Composite",
    "Step",
    "StepResult",
    "algorithms",
    "collective_time",
    "level_algorithm",
    "register_algorithm",
    "step",
    "time_on_groups",
    "unregister_algorithm",
]
