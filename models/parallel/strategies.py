"""Parallel strategies: enumeration and pruning rules (paper §3.3.1, §4.2.2, §4.2.3).

A flat strategy is (TP, EP, SP, CP, DP, PP, FSDP) with TP·EP·SP·CP·DP·PP = N (paper eq. 2). The composer
enumerates every ordered factorization of N (prime factorization + stars and bars per prime), doubles it with
FSDP on/off (2,574 strategies for N = 256, docs/calibration.md §1) and drops invalid or dominated strategies
with named rules (each says *why*); :mod:`deepstack.models.parallel.memory` adds the DRAM check.

Semantics (paper §3.3.1, Megatron/DeepSpeed practice):

- TP splits attention heads and the FFN / expert intermediate dimension; embeddings and LM head are
  vocab-parallel; norms, the router and MLA's latent down-projections are replicated.
- EP partitions routed experts; for attention, dense FFNs and shared experts it acts as extra DP.
- SP and CP split the sequence (SP only in prefill); CP also splits the KV cache in decode.
- DP splits the batch; PP splits layers into stages; FSDP shards weights over the data-parallel group.

Everything is a pure function of frozen inputs and is memoised.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from deepstack.errors import UserInputError
from deepstack.models import assumptions, memo
from deepstack.schema.scenario import Scenario
from deepstack.schema.schedule import ModuleParallel, Schedule

DEGREES = ("tp", "ep", "sp", "cp", "dp", "pp")
"""Order of the factors of eq. 2 in a factorization tuple and in :class:`Strategy`."""

_FACTORIZATION_CACHE = 256  # distinct (n, parts) pairs kept; a design space uses a handful of device counts


# --------------------------------------------------------------------------------------------------------
# Integer arithmetic of device counts
# --------------------------------------------------------------------------------------------------------


def prime_factors(n: int) -> tuple[tuple[int, int], ...]:
    """(prime, exponent) pairs of ``n``, primes ascending, by trial division (n is a device count, ≤ ~10⁶).

    ``prime_factors(1)`` is empty.

    Raises:
        UserInputError: If ``n`` is below 1.
    """
    if n < 1:
        raise UserInputError(f"devices: must be ≥ 1 (got {n})")
    factors = []
    p = 2
    while p * p <= n:
        exponent = 0
        while n % p == 0:
            n //= p
            exponent += 1
        if exponent:
            factors.append((p, exponent))
        p += 1
    if n > 1:
        factors.append((n, 1))
    return tuple(factors)


def divisors(n: int) -> tuple[int, ...]:
    """Every positive divisor of ``n``, ascending (built from :func:`prime_factors`, so large n are cheap).

    Raises:
        UserInputError: If ``n`` is below 1.
    """
    out = [1]
    for prime, exponent in prime_factors(n):
        out = [d * prime**k for d in out for k in range(exponent + 1)]
    return tuple(sorted(out))


# --------------------------------------------------------------------------------------------------------
# Enumeration
# --------------------------------------------------------------------------------------------------------

@memo.cached(maxsize=_FACTORIZATION_CACHE)
def _compositions(total: int, parts: int) -> tuple[tuple[int, ...], ...]:
    """All ways to write ``total`` as an ordered sum of ``parts`` non-negative integers (stars and bars:
    C(total + parts − 1, parts − 1) of them), in lexicographic order."""
    if parts == 1:
        return ((total,),)
    return tuple((k, *rest) for k in range(total + 1) for rest in _compositions(total - k, parts - 1))


@memo.cached(maxsize=_FACTORIZATION_CACHE)
def ordered_factorizations(n: int, parts: int = 6) -> tuple[tuple[int, ...], ...]:
    """All ordered ``parts``-tuples of positive integers whose product is ``n`` (paper §3.3.1, eq. 2).

    Each prime's exponent is split over the parts independently (stars and bars), and the per-prime splits
    are combined, so the count is ∏ C(e_p + parts − 1, parts − 1): 1,287 for n = 256 = 2⁸ and six parts.

    Args:
        n: Number of devices, ≥ 1.
        parts: Number of factors, ≥ 1 (six for TP, EP, SP, CP, DP, PP).

    Returns:
        The factorizations in lexicographic order.

    Raises:
        UserInputError: If ``n`` or ``parts`` is below 1.
    """
    if n < 1:
        raise UserInputError(f"devices: must be ≥ 1 (got {n})")
    if parts < 1:
        raise UserInputError(f"parts: must be ≥ 1 (got {parts})")
    result: list[tuple[int, ...]] | None = None
    for prime, exponent in prime_factors(n):
        powers = [prime**k for k in range(exponent + 1)]
        splits = [tuple(map(powers.__getitem__, c)) for c in _compositions(exponent, parts)]
        if result is None:
            result = splits
        else:
            result = [tuple(a * b for a, b in zip(r, s, strict=True)) for r in result for s in splits]
    if result is None:  # n = 1
        return ((1,) * parts,)
    return tuple(sorted(result))


@dataclass(frozen=True, slots=True)
class Strategy:
    """A flat parallel strategy: one layout for attention and FFN/MoE, plus PP and FSDP (paper §3.3.1)."""

    tp: int = 1
    ep: int = 1
    sp: int = 1
    cp: int = 1
    dp: int = 1
    pp: int = 1
    fsdp: bool = False

    def __post_init__(self) -> None:
        values = (self.tp, self.ep, self.sp, self.cp, self.dp, self.pp)
        if all(type(v) is int for v in values) and min(values) >= 1:  # fast path: 2,574 of these per scenario
            return
        for name, value in zip(DEGREES, values, strict=True):
            if type(value) is not int or value < 1:  # bool is excluded on purpose: tp=True is a bug
                raise UserInputError(f"{name}: must be an integer ≥ 1 (got {value!r})")

    @property
    def degrees(self) -> tuple[int, int, int, int, int, int]:
        """(tp, ep, sp, cp, dp, pp), the factors of eq. 2."""
        return (self.tp, self.ep, self.sp, self.cp, self.dp, self.pp)

    @property
    def devices(self) -> int:
        """Devices the strategy occupies: TP·EP·SP·CP·DP·PP."""
        return math.prod(self.degrees)

    @property
    def label(self) -> str:
        """Compact text like ``"tp=8,ep=32"`` (degrees of 1 omitted, ``fsdp`` appended when on).

        The single-device strategy reads ``"tp=1"``. Every label parses back with ``Schedule.parse``.
        """
        items = [f"{name}={value}" for name, value in zip(DEGREES, self.degrees, strict=True) if value > 1]
        if self.fsdp:
            items.append("fsdp")
        return ",".join(items) or "tp=1"

    def __str__(self) -> str:
        return self.label

    def module(self) -> ModuleParallel:
        """The per-stage layout shared by attention and FFN/MoE."""
        return ModuleParallel(tp=self.tp, ep=self.ep, sp=self.sp, cp=self.cp, dp=self.dp)

    def to_schedule(self) -> Schedule:
        """The equivalent :class:`Schedule` (attention = ffn; microbatches and collectives left to tuning).

        One shared object per strategy: a sweep evaluates each strategy on many hardware points, and memo
        lookups keyed on the same object compare by identity instead of field by field."""
        return _schedule_of(self)

    @classmethod
    def from_schedule(cls, schedule: Schedule) -> Strategy:
        """The flat strategy of a schedule whose attention and FFN layouts agree.

        Raises:
            UserInputError: If the schedule is per-module (it has no flat equivalent).
        """
        if schedule.is_per_module:
            raise UserInputError(f"schedule {schedule}: attention and ffn differ, so it is not a flat strategy")
        m = schedule.attention
        return cls(m.tp, m.ep, m.sp, m.cp, m.dp, schedule.pp, schedule.fsdp)


@memo.cached(maxsize=65536)
def _schedule_of(strategy: Strategy) -> Schedule:
    module = strategy.module()
    return Schedule(attention=module, ffn=module, pp=strategy.pp, fsdp=strategy.fsdp)


@memo.cached(maxsize=65536)
def expert_folded(scenario: Scenario, strategy: Strategy) -> Schedule | None:
    """``strategy`` as vLLM runs tensor parallelism with expert parallelism (``moe_mode = replace_only``): the
    routed experts spread over all TP·EP ranks of a stage with no TP inside an expert, while attention, dense FFN
    layers, shared experts and the vocabulary-parallel head keep the strategy's TP (vLLM's
    ``--enable-expert-parallel`` sets the MoE's EP size to TP × DP). None where that is the strategy itself (no
    TP, a dense model) or where TP·EP does not divide the routed experts."""
    if scenario.model.moe is None or strategy.tp == 1:
        return None
    schedule = Schedule.parse(f"{strategy.label},moe_mode=replace_only")  # the fold rule lives in Schedule.parse
    if prune_ep_experts(scenario, Strategy(ep=schedule.ffn.ep)):
        return None
    return schedule


@memo.cached(maxsize=_FACTORIZATION_CACHE)
def enumerate_strategies(n: int) -> tuple[Strategy, ...]:
    """Every flat strategy on ``n`` devices: each ordered factorization with FSDP off, then on.

    Args:
        n: Number of devices, ≥ 1.

    Returns:
        2 × ``len(ordered_factorizations(n))`` strategies (2,574 for n = 256, paper §4.2.2).
    """
    return tuple(Strategy(*f, fsdp=fsdp) for f in ordered_factorizations(n) for fsdp in (False, True))


# --------------------------------------------------------------------------------------------------------
# Pruning rules (paper §4.2.3; divisibility rules: docs/model.md): each returns why the strategy is dropped, or None.
# --------------------------------------------------------------------------------------------------------

Rule = Callable[[Scenario, Strategy], str | None]


def prune_sp_in_decode(scenario: Scenario, s: Strategy) -> str | None:
    """SP > 1 in decode: a decode step has one token per request, so there is no sequence to split
    (paper §4.2.3; splitting the cached context is CP's job)."""
    if scenario.phase == "decode" and s.sp > 1:
        return f"sp={s.sp} in decode: one new token per request per step, nothing to split"
    return None


def prune_fsdp_without_dp(scenario: Scenario, s: Strategy) -> str | None:
    """FSDP with DP = 1: no data-parallel group to shard the weights over (paper §4.2.3).

    EP replicas could host shards of the non-expert weights, but the paper prunes on DP alone and the
    routed experts — the bulk of an MoE model — would stay unsharded, so we follow it.
    """
    if s.fsdp and s.dp == 1:
        return "fsdp with dp=1: no data-parallel group to shard weights over"
    return None


def prune_replicas_exceed_batch(scenario: Scenario, s: Strategy) -> str | None:
    """More attention replicas (DP·EP) than requests leaves replicas idle (paper §4.2.3, "infeasible DP").

    DP splits whole requests, and EP acts as DP for attention in both phases, so the same bound applies in
    prefill and decode; splitting one long prompt is SP's and CP's job.
    """
    replicas = assumptions.data_replicas_for_pruning(scenario, s.dp, s.ep)
    if replicas > scenario.batch:
        what = "dp" if replicas == s.dp and s.ep > 1 else "dp·ep"
        return f"{what}={replicas} > batch={scenario.batch}: idle attention replicas"
    return None


def prune_pp_exceeds_microbatches(scenario: Scenario, s: Strategy) -> str | None:
    """Decode: more pipeline stages than requests per replica cannot fill the pipeline (paper §4.2.3,
    "infeasible PP"): with at most ⌈batch / (DP·EP)⌉ single-token microbatches, stages sit idle every step,
    so the strategy is dominated by moving those devices to another dimension. Prefill is exempt: a prompt
    can be cut into sequence chunks that pipeline on their own."""
    if scenario.phase != "decode":
        return None
    microbatches = math.ceil(scenario.batch / assumptions.data_replicas_for_pruning(scenario, s.dp, s.ep))
    if s.pp > microbatches:
        return f"pp={s.pp} > {microbatches} microbatches available in decode: pipeline never fills"
    return None


def prune_pp_exceeds_layers(scenario: Scenario, s: Strategy | Schedule) -> str | None:
    """More stages than layers leaves stages empty (an evaluation refuses such a schedule too). Uneven stages are
    allowed (DeepSeek-V3's 61 layers are prime): they are split as vLLM does (:func:`pipeline_stage_layers`) and
    costed on the largest."""
    if s.pp > scenario.model.layers:
        return f"pp={s.pp} > {scenario.model.layers} layers: empty pipeline stages"
    return None


def prune_tp_heads(scenario: Scenario, s: Strategy) -> str | None:
    """TP must divide the attention heads (docs/model.md), and for GQA/MQA either divide the KV heads or be a
    multiple of them (KV heads are then replicated), as vLLM's ``QKVParallelLinear`` requires."""
    att = scenario.model.attention
    if assumptions.tp_may_exceed_heads(scenario) and s.tp > att.heads and s.tp % att.heads == 0:
        return None
    if att.heads % s.tp:
        return f"tp={s.tp} does not divide {att.heads} attention heads"
    if att.kind != "mla" and att.kv_heads % s.tp and s.tp % att.kv_heads:
        return f"tp={s.tp} neither divides nor is a multiple of {att.kv_heads} kv heads"
    return None


def prune_tp_intermediate(scenario: Scenario, s: Strategy) -> str | None:
    """TP must divide the dense FFN intermediate and the expert intermediate (docs/model.md). The vocabulary
    is exempt: vocab-parallel embeddings pad it to a multiple of TP (Megatron-LM)."""
    model = scenario.model
    if model.dense_layers and model.dense_intermediate % s.tp:
        return f"tp={s.tp} does not divide the dense FFN intermediate {model.dense_intermediate}"
    if model.moe is not None and model.moe.expert_intermediate % s.tp:
        return f"tp={s.tp} does not divide the expert intermediate {model.moe.expert_intermediate}"
    return None


def prune_ep_experts(scenario: Scenario, s: Strategy) -> str | None:
    """EP must divide the routed experts (docs/model.md); on a dense model EP > 1 is DP under another name,
    a duplicate of the strategy with DP·EP as DP (paper §3.3.1: EP defaults to DP for non-MoE layers)."""
    moe = scenario.model.moe
    if s.ep == 1:
        return None
    if moe is None:
        return f"ep={s.ep} on a dense model: duplicate of dp={s.dp * s.ep}"
    if moe.routed_experts % s.ep:
        return f"ep={s.ep} does not divide {moe.routed_experts} routed experts"
    return None


def prune_sequence_overpartitioned(scenario: Scenario, s: Strategy) -> str | None:
    """A sequence split into more shards than tokens leaves devices empty: prefill needs SP·CP ≤ input
    length; decode needs CP ≤ input + output length (the cache at the end of generation). Lengths need not
    divide evenly: uneven shards are costed on the largest (ceil)."""
    if scenario.phase == "prefill":
        if s.sp * s.cp > scenario.input_len:
            return f"sp·cp={s.sp * s.cp} > input_len={scenario.input_len}: empty sequence shards"
        return None
    context = scenario.input_len + scenario.output_len
    if s.cp > context:
        return f"cp={s.cp} > {context} cached tokens: empty KV-cache shards"
    return None


PRUNING_RULES: tuple[tuple[str, Rule], ...] = (
    ("sp_in_decode", prune_sp_in_decode),
    ("fsdp_without_dp", prune_fsdp_without_dp),
    ("replicas_exceed_batch", prune_replicas_exceed_batch),
    ("pp_exceeds_microbatches", prune_pp_exceeds_microbatches),
    ("pp_exceeds_layers", prune_pp_exceeds_layers),
    ("tp_heads", prune_tp_heads),
    ("tp_intermediate", prune_tp_intermediate),
    ("ep_experts", prune_ep_experts),
    ("sequence_overpartitioned", prune_sequence_overpartitioned),
)
"""The rules in the order they are tried: the paper's three first (§4.2.3), then divisibility (docs/model.md).
A dropped strategy is counted under the first rule that fires."""


def prune_reason(scenario: Scenario, strategy: Strategy) -> tuple[str, str] | None:
    """The first pruning rule that drops ``strategy``, as (rule name, explanation), or None if it is kept."""
    for name, rule in PRUNING_RULES:
        reason = rule(scenario, strategy)
        if reason is not None:
            return name, reason
    return None


def pipeline_stage_layers(layers: int, pp: int) -> tuple[int, ...]:
    """Layers per pipeline stage, split as vLLM's ``get_pp_indices`` does (``vllm/distributed/utils.py``).

    Every stage gets ⌊layers / pp⌋; the remainder goes one each to the stages just before the last (the last
    already holds the final norm and LM head): 61 layers on 4 stages → (15, 15, 16, 15).
    """
    base, remainder = divmod(layers, pp)
    sizes = [base] * pp
    for i in range(2, remainder + 2):
        sizes[-i] += 1
    return tuple(sizes)

