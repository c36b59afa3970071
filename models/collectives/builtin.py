"""The built-in collective algorithms (registered on import; see :mod:`deepstack.models.collectives` for what
each one does and the papers it follows). Every size here is per byte of the per-rank input S."""

from __future__ import annotations

import numpy as np

from deepstack.models import memo
from deepstack.models.collectives import steps as tm
from deepstack.models.collectives.algorithms import Algorithm, Composite, register_built_in

# Largest chunk count tried for the double-tree pipeline (a search bound, not a hardware constant).
MAX_TREE_CHUNKS = 256
S = 1.0  # plans are built per byte of the per-rank input


class _PowerOfTwo(Algorithm):
    def unavailable(self, op: str, groups: tuple, structure) -> str | None:
        p = len(groups[0])
        return None if tm.is_power_of_two(p) else f"{self.name} needs a power-of-two group size (got {p})"


@register_built_in
class Ring(Algorithm):
    """Around the ring: reduce-scatter and/or all-gather in p−1 steps each."""

    name, ops = "ring", ("all_reduce", "all_gather", "reduce_scatter")

    def steps(self, op, p):
        if op == "all_reduce":
            return [tm.ring("reduce_scatter", p, S / p, p - 1), tm.ring("all_gather", p, S / p, p - 1)]
        if op == "all_gather":
            return [tm.ring("all_gather", p, S, p - 1)]
        return [tm.ring("reduce_scatter", p, S / p, p - 1)]


@register_built_in
class HalvingDoubling(_PowerOfTwo):
    """Recursive halving / doubling ordered for locality: the largest exchanges between the nearest ranks."""

    name, ops = "halving_doubling", ("all_reduce", "all_gather", "reduce_scatter")

    def steps(self, op, p):
        if op == "all_reduce":
            return tm.halving(p, S, near_first=True) + tm.doubling(p, S / p, far_first=True)
        if op == "all_gather":
            return tm.doubling(p, S, far_first=True)
        return tm.halving(p, S, near_first=True)


@register_built_in
class Rabenseifner(_PowerOfTwo):
    """Halving then doubling in the classic order (Thakur, Rabenseifner & Gropp 2005): far partners first."""

    name, ops = "rabenseifner", ("all_reduce",)

    def steps(self, op, p):
        return tm.halving(p, S, near_first=False) + tm.doubling(p, S / p, far_first=False)


def tree_chunk_counts() -> list[int]:
    return [1 << k for k in range(MAX_TREE_CHUNKS.bit_length())]


@register_built_in
class DoubleTree(Algorithm):
    """Two pipelined binary trees, S/2 each: one steady-state step per chunk count C (repeated C + 2h − 1 times,
    S / 2C per edge); the fastest chunk count runs."""

    name, ops, fastest_step = "double_tree", ("all_reduce",), True

    def steps(self, op, p):
        _, height = tm.inorder_tree(p)
        return [tm.double_tree_step(p, S / (2 * chunks), chunks + 2 * height - 1) for chunks in tree_chunk_counts()]

    def choice(self, index: int) -> str:
        return f"chunks={tree_chunk_counts()[index]}"


def _split_at(groups: tuple, radix: int):
    """Split every group into inner sub-groups (same outer position) and rails (same inner position)."""
    inner_groups, rails, shape = [], [], None
    for group in groups:
        inner_keys = list(dict.fromkeys(d % radix for d in group))
        outer_keys = list(dict.fromkeys(d // radix for d in group))
        a, b = len(inner_keys), len(outer_keys)
        if a < 2 or b < 2 or a * b != len(group) or shape not in (None, (a, b)):
            return None
        shape = (a, b)
        inner_groups += [tuple(d for d in group if d // radix == o) for o in outer_keys]
        rails += [tuple(d for d in group if d % radix == i) for i in inner_keys]
    return tuple(inner_groups), tuple(rails), shape[0]


def _boundaries(structure) -> tuple[int, ...]:
    """Device-id radices at which the routing dimensions split, innermost first: after every dimension of every
    level (between levels, and between the X and Y of a mesh or torus), the whole network excluded."""
    radices, radix = [], 1
    for _, dims, _ in structure:
        for size in dims:
            radix *= size
            radices.append(radix)
    return tuple(dict.fromkeys(radices[:-1]))


@memo.cached(maxsize=1024)
def hierarchy(groups: tuple, structure):
    """(inner sub-groups, rails, inner size) at the innermost dimension boundary that splits the groups, or None."""
    for radix in _boundaries(structure):
        split = _split_at(groups, radix)
        if split is not None:
            return split
    return None


@register_built_in
class Direct(Algorithm):
    """One step: every rank sends its part to every other (send/recv: rank i to rank i+1)."""

    name, ops = "direct", ("all_gather", "reduce_scatter", "all_to_all", "send_recv")

    def steps(self, op, p):
        if op == "all_gather":
            return [tm.all_pairs("all_gather", p, S)]
        if op == "reduce_scatter":
            return [tm.all_pairs("reduce_scatter", p, S / p)]
        if op == "all_to_all":
            return [tm.all_pairs("all_to_all", p, S / p)]
        ranks = np.arange(p - 1)
        return [tm.step("send_recv", ranks, ranks + 1, S)]


@register_built_in
class Pairwise(Algorithm):
    """All-to-all in p−1 steps; in step k rank i sends S/p to rank i+k mod p.

    Not ranked by "auto": its steps partition the direct algorithm's flows, so under eq. 4 each link's bytes
    are spread over steps (Σ of per-step maxima ≥ the maximum of the sum) and it pays p−1 latencies instead of
    one — it can never be faster than direct here, and it is the costliest to route.
    """

    name, ops, ranked = "pairwise", ("all_to_all",), False

    def steps(self, op, p):
        ranks = np.arange(p)
        return [tm.step("all_to_all", ranks, (ranks + k) % p, S / p) for k in range(1, p)]


@register_built_in
class Hierarchical(Composite):
    """One routing dimension at a time (as ASTRA-sim runs a collective on a multi-dimensional network): the
    groups are split at the innermost dimension boundary (between levels, or the X and Y of a torus) into inner
    sub-groups of a ranks and rails of b ranks (same inner position), and

    * all-reduce: reduce-scatter inside, all-reduce of the S/a shard across, all-gather back inside;
    * reduce-scatter: inside first (S → S/a), then across (S/a → S/ab): the slow outer links carry the least;
    * all-gather: across first (b shards), then inside with the b-shard bundle — the mirror image.

    The outer phase is itself split again where the rails span more dimensions. Each phase runs
    :attr:`within` ("auto": the fastest applicable algorithm for its groups)."""

    name, ops = "hierarchical", ("all_reduce", "all_gather", "reduce_scatter")
    within = "auto"

    def unavailable(self, op, groups, structure):
        if hierarchy(groups, structure) is None:
            return ("hierarchical needs groups spanning more than one routing dimension, each a full product of "
                    "inner and outer positions of equal shape")
        return None

    def _outer(self, rails: tuple, structure) -> str:
        """The algorithm of the outer phase: this one again where the rails still span several dimensions."""
        if self.within == "auto" or hierarchy(rails, structure) is None:
            return self.within
        return self.name

    def phases(self, op, S, groups, structure):
        inner_groups, rails, a = hierarchy(groups, structure)
        outer = self._outer(rails, structure)
        if op == "all_gather":
            b = len(rails[0])
            return (("outer", "all_gather", S, rails, outer), ("inner", "all_gather", S * b, inner_groups, self.within))
        if op == "reduce_scatter":
            return (("inner", "reduce_scatter", S, inner_groups, self.within),
                    ("outer", "reduce_scatter", S / a, rails, outer))
        return (("inner", "reduce_scatter", S, inner_groups, self.within), ("outer", "all_reduce", S / a, rails, outer),
                ("inner", "all_gather", S / a, inner_groups, self.within))


@register_built_in
class HierarchicalRing(Hierarchical):
    """:class:`Hierarchical` with a ring in every dimension (ASTRA-sim's default per-dimension algorithm). Not
    ranked by "auto": the hierarchical algorithm that picks the fastest per phase is never slower."""

    name, ranked, within = "hierarchical_ring", False, "ring"


@register_built_in
class TwoShot(Algorithm):
    """All-reduce as a direct reduce-scatter then a direct all-gather: two steps, each rank sending S/p to
    every other (vLLM's two-shot custom all-reduce; what NCCL/RCCL's rings, one per channel, move over every
    peer link of a fully connected platform).

    Not ranked by "auto", although under eq. 4 it can beat the ranked ones where latency dominates (two steps
    instead of 2(p − 1)): "auto" keeps choosing from the set that `deepstack accuracy network` checks against
    ASTRA-sim's NS-3 runs, and letting it choose this one too would be a model change to check against that
    data first. It is named where a runtime is known to run it (models/gpu/collectives.py)."""

    name, ops, ranked = "two_shot", ("all_reduce",), False

    def steps(self, op, p):
        return [tm.all_pairs("reduce_scatter", p, S / p), tm.all_pairs("all_gather", p, S / p)]
