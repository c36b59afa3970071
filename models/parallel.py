"""Parallel-strategy composer, pruning rules and per-device memory footprint (paper §3.3.1, §4.2.3).

A flat strategy is (TP, EP, SP, CP, DP, PP, FSDP) with TP·EP·SP·CP·DP·PP = N (paper eq. 2). The composer
enumerates every ordered factorization of N (prime factorization + stars and bars per prime), doubles it with
FSDP on/off (2,574 strategies for N = 256, CALIBRATION.md §1), drops invalid or dominated strategies with named
rules (each says *why*), and checks that weights + KV cache + peak activations fit in DRAM with a 10 % reserve.

Semantics (paper §3.3.1, Megatron/DeepSpeed practice):

- TP splits attention heads and the FFN / expert intermediate dimension; embeddings and LM head are
  vocab-parallel; norms, the router and MLA's latent down-projections are replicated.
- EP partitions routed experts; for attention, dense FFNs and shared experts it acts as extra DP.
- SP and CP split the sequence (SP only in prefill); CP also splits the KV cache in decode.
- DP splits the batch; PP splits layers into stages; FSDP shards weights over the data-parallel group.

``memory_footprint`` also accepts per-module :class:`~deepstack.schema.schedule.Schedule` objects (attention
and FFN with different layouts); the composer itself only enumerates flat strategies.

Everything is a pure function of frozen inputs and is memoised. Sizes are in bytes (SI, DESIGN.md §2).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from deepstack.errors import UserInputError
from deepstack.models import memo
from deepstack.schema.llm import LLM
from deepstack.schema.scenario import Scenario
from deepstack.schema.schedule import ModuleParallel, Schedule

DEGREES = ("tp", "ep", "sp", "cp", "dp", "pp")
"""Order of the factors of eq. 2 in a factorization tuple and in :class:`Strategy`."""

MEMORY_RESERVE = 0.10
"""Fraction of DRAM kept free for CUDA graphs and fragmentation (paper §4.2.3; CALIBRATION.md §1)."""

ACTIVATION_BUFFERS = 2
"""Live copies of the peak activation. Under the tile-wave compute–communication overlap of eq. 5
(paper §4.1.5) an operator's output coexists with the collective's send/receive copy of it (double
buffering), so the peak working set is counted twice."""

FSDP_GATHERED_LAYERS = 1
"""Fully gathered layers an FSDP device holds on top of its shards: layers are all-gathered one at a time
and freed after use (paper §3.3.1: FSDP all-gathers layer by layer). Prefetching the next layer to overlap
the gather with compute would make this 2 (PyTorch FSDP's ``limit_all_gathers`` caps in-flight gathers at 2)."""

_FACTORIZATION_CACHE = 256  # distinct (n, parts) pairs kept; a design space uses a handful of device counts
_SCENARIO_CACHE = 4096  # (scenario, layout) footprints kept: > 2,574 strategies of one scenario at N = 256


# --------------------------------------------------------------------------------------------------------
# Enumeration
# --------------------------------------------------------------------------------------------------------


def _prime_factors(n: int) -> tuple[tuple[int, int], ...]:
    """(prime, exponent) pairs of ``n`` by trial division (n is a device count, at most ~10⁶)."""
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
    for prime, exponent in _prime_factors(n):
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
# Pruning rules (paper §4.2.3 and DESIGN.md §5): each returns why the strategy is dropped, or None.
# --------------------------------------------------------------------------------------------------------

Rule = Callable[[Scenario, Strategy], str | None]


def _replicas(s: Strategy) -> int:
    """Attention data-parallel replicas: DP·EP (EP acts as DP outside the routed experts, paper §3.3.1)."""
    return s.dp * s.ep


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
    if _replicas(s) > scenario.batch:
        return f"dp·ep={_replicas(s)} > batch={scenario.batch}: idle attention replicas"
    return None


def prune_pp_exceeds_microbatches(scenario: Scenario, s: Strategy) -> str | None:
    """Decode: more pipeline stages than requests per replica cannot fill the pipeline (paper §4.2.3,
    "infeasible PP"): with at most ⌈batch / (DP·EP)⌉ single-token microbatches, stages sit idle every step,
    so the strategy is dominated by moving those devices to another dimension. Prefill is exempt: a prompt
    can be cut into sequence chunks that pipeline on their own."""
    if scenario.phase != "decode":
        return None
    microbatches = math.ceil(scenario.batch / _replicas(s))
    if s.pp > microbatches:
        return f"pp={s.pp} > {microbatches} microbatches available in decode: pipeline never fills"
    return None


def prune_pp_exceeds_layers(scenario: Scenario, s: Strategy) -> str | None:
    """More stages than layers leaves stages empty. Uneven stages are allowed (DeepSeek-V3's 61 layers are
    prime): they are split as vLLM does (:func:`pipeline_stage_layers`) and costed on the largest."""
    if s.pp > scenario.model.layers:
        return f"pp={s.pp} > {scenario.model.layers} layers: empty pipeline stages"
    return None


def prune_tp_heads(scenario: Scenario, s: Strategy) -> str | None:
    """TP must divide the attention heads (DESIGN.md §5), and for GQA/MQA either divide the KV heads or be a
    multiple of them (KV heads are then replicated), as vLLM's ``QKVParallelLinear`` requires."""
    att = scenario.model.attention
    if att.heads % s.tp:
        return f"tp={s.tp} does not divide {att.heads} attention heads"
    if att.kind != "mla" and att.kv_heads % s.tp and s.tp % att.kv_heads:
        return f"tp={s.tp} neither divides nor is a multiple of {att.kv_heads} kv heads"
    return None


def prune_tp_intermediate(scenario: Scenario, s: Strategy) -> str | None:
    """TP must divide the dense FFN intermediate and the expert intermediate (DESIGN.md §5). The vocabulary
    is exempt: vocab-parallel embeddings pad it to a multiple of TP (Megatron-LM)."""
    model = scenario.model
    if model.dense_layers and model.dense_intermediate % s.tp:
        return f"tp={s.tp} does not divide the dense FFN intermediate {model.dense_intermediate}"
    if model.moe is not None and model.moe.expert_intermediate % s.tp:
        return f"tp={s.tp} does not divide the expert intermediate {model.moe.expert_intermediate}"
    return None


def prune_ep_experts(scenario: Scenario, s: Strategy) -> str | None:
    """EP must divide the routed experts (DESIGN.md §5); on a dense model EP > 1 is DP under another name,
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
"""The rules in the order they are tried: the paper's three first (§4.2.3), then divisibility (DESIGN.md §5).
A dropped strategy is counted under the first rule that fires."""

MEMORY_RULE = "memory"
"""Key under which :func:`feasible_strategies` counts strategies that pass the rules but do not fit."""


def prune_reason(scenario: Scenario, strategy: Strategy) -> tuple[str, str] | None:
    """The first pruning rule that drops ``strategy``, as (rule name, explanation), or None if it is kept."""
    for name, rule in PRUNING_RULES:
        reason = rule(scenario, strategy)
        if reason is not None:
            return name, reason
    return None


# --------------------------------------------------------------------------------------------------------
# Memory footprint
# --------------------------------------------------------------------------------------------------------


class _Module(NamedTuple):
    """Degrees of one module inside a pipeline stage (hashable, for the memo)."""

    tp: int
    ep: int
    sp: int
    cp: int
    dp: int


class _Layout(NamedTuple):
    """A strategy or schedule reduced to plain integers: the memo key of :func:`_footprint` (microbatches and
    collective choices do not change the footprint)."""

    attention: _Module
    ffn: _Module
    pp: int
    fsdp: bool


def _layout(plan: Strategy | Schedule) -> _Layout:
    if isinstance(plan, Strategy):
        module = _Module(plan.tp, plan.ep, plan.sp, plan.cp, plan.dp)
        return _Layout(module, module, plan.pp, plan.fsdp)
    a, f = plan.attention, plan.ffn
    return _Layout(_Module(a.tp, a.ep, a.sp, a.cp, a.dp), _Module(f.tp, f.ep, f.sp, f.cp, f.dp), plan.pp, plan.fsdp)


@dataclass(frozen=True, slots=True)
class MemoryFootprint:
    """DRAM one device needs, in bytes: that of the most loaded device (the pipeline stage ``stage``).

    Attributes:
        weights_B: Parameters held (with FSDP: shards plus one gathered layer), bytes.
        kv_cache_B: KV cache at its largest (decode: end of generation; prefill: the prompt), bytes.
        activations_B: Peak live activations including MoE dispatch buffers and logits, bytes.
        stage: Index of the pipeline stage these figures belong to.
        total_B: Sum of the three, bytes.
    """

    weights_B: float
    kv_cache_B: float
    activations_B: float
    stage: int = 0
    total_B: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total_B", self.weights_B + self.kv_cache_B + self.activations_B)


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


def attention_parameters(model: LLM, tp: int) -> int:
    """Attention weights on one device under TP (per layer, parameters).

    Heads are split by TP; a GQA/MQA device holds ⌈kv_heads / tp⌉ KV heads (replicated when tp > kv_heads).
    MLA: the query and KV down-projections (``q_a``, ``kv_a`` and their norms) are replicated across TP, and
    the up-projections (``q_b``, ``kv_b``) and the output projection are split by heads, as in vLLM's
    ``deepseek_v2.py`` (``ReplicatedLinear`` for the ``*_a_proj`` layers).
    """
    att, hidden = model.attention, model.hidden
    heads = math.ceil(att.heads / tp)
    if att.kind == "mla":
        if att.q_lora_rank:
            q = hidden * att.q_lora_rank + att.q_lora_rank + att.q_lora_rank * heads * att.qk_head_dim
        else:
            q = hidden * heads * att.qk_head_dim
        kv_a = hidden * (att.kv_lora_rank + att.qk_rope_head_dim) + att.kv_lora_rank
        kv_b = att.kv_lora_rank * heads * (att.qk_nope_head_dim + att.v_head_dim)
        return q + kv_a + kv_b + heads * att.v_head_dim * hidden
    kv_heads = math.ceil(att.kv_heads / tp)
    norms = 2 * att.head_dim if att.qk_norm else 0
    return 2 * hidden * heads * att.head_dim + 2 * hidden * kv_heads * att.head_dim + norms


def kv_elements_per_token(model: LLM, tp: int) -> int:
    """KV-cache elements one device stores per token and layer: GQA/MQA/MHA keep ⌈kv_heads / tp⌉ heads;
    MLA's latent and RoPE key are shared by all heads, so every TP rank keeps all of them."""
    att = model.attention
    if att.kind == "mla":
        return att.kv_cache_elements_per_token()
    return 2 * math.ceil(att.kv_heads / tp) * att.head_dim


def _attention_activation_width(model: LLM, tp: int) -> int:
    """Elements per token live inside attention on one device, beyond the normed input: queries, keys and
    values, the attention output and the output projection. Scores are never materialised (flash-style
    prefill, KV-streaming decode; DESIGN.md §4). MLA counts the query latent, the KV latent and the larger of
    the non-absorbed (decompressed K/V) and absorbed (queries in latent space) paths."""
    att, hidden = model.attention, model.hidden
    heads = math.ceil(att.heads / tp)
    if att.kind == "mla":
        latent = att.kv_lora_rank + att.qk_rope_head_dim
        expanded = heads * max(att.qk_nope_head_dim + att.v_head_dim, latent)
        return (att.q_lora_rank or 0) + heads * att.qk_head_dim + latent + expanded + heads * att.v_head_dim + hidden
    kv_heads = math.ceil(att.kv_heads / tp)
    return 2 * heads * att.head_dim + 2 * kv_heads * att.head_dim + hidden


def _requests(scenario: Scenario, module: _Module) -> int:
    """Requests one device serves: the batch over the module's data replicas (DP·EP)."""
    return math.ceil(scenario.batch / (module.dp * module.ep))


def _tokens(scenario: Scenario, module: _Module) -> int:
    """Tokens one device processes at once: one per request in decode, the prompt shard in prefill. The
    whole local batch is one microbatch (conservative: PP microbatching only lowers the peak)."""
    if scenario.phase == "decode":
        return _requests(scenario, module)
    return _requests(scenario, module) * math.ceil(scenario.input_len / (module.sp * module.cp))


def _representative_stages(sizes: tuple[int, ...], starts: tuple[int, ...], dense_layers: int) -> tuple[int, ...]:
    """Stage indices, ascending, that cover every distinct stage composition (so ties go to the earliest).

    A stage's footprint depends only on its layer count, how many of them are dense (the leading
    ``dense_layers``) and whether it is the first or the last. Besides those two and the stages touching the
    dense prefix, every stage holds MoE layers only and has one of vLLM's two sizes (the larger ones form one
    block just before the last stage), so one stage of each size suffices.
    """
    pp = len(sizes)
    stages = {0, pp - 1}
    middle = 1
    while middle < pp - 1 and starts[middle] < dense_layers:
        stages.add(middle)
        middle += 1
    if middle < pp - 1:
        stages.add(middle)
        larger = pp - 1 - (sum(sizes) % pp)  # first stage of the larger size (vLLM split)
        if middle < larger < pp - 1:
            stages.add(larger)
    return tuple(sorted(stages))


@memo.cached(maxsize=_SCENARIO_CACHE)
def _footprint(scenario: Scenario, layout: _Layout) -> MemoryFootprint:
    model, precision = scenario.model, scenario.precision
    att, ffn = layout.attention, layout.ffn
    hidden, moe = model.hidden, model.moe

    # Weights per layer on one device, in parameters, in three FSDP shard groups: attention side (attention,
    # norms, embeddings) over the attention replicas, FFN non-expert (dense FFN, shared experts, router) over
    # the FFN replicas, routed experts over the FFN DP group.
    attention_layer = attention_parameters(model, att.tp) + 2 * hidden  # + the two RMSNorms (replicated)
    dense_layer = 3 * hidden * math.ceil((model.dense_intermediate or 0) / ffn.tp)
    moe_shared = moe_routed = 0
    if moe:
        expert = 3 * hidden * math.ceil(moe.expert_intermediate / ffn.tp)  # one SwiGLU expert's TP shard
        router = hidden * moe.routed_experts + (moe.routed_experts if moe.router_bias else 0)  # replicated
        moe_shared = moe.shared_experts * expert + router
        moe_routed = math.ceil(moe.routed_experts / ffn.ep) * expert
    vocab_shard = math.ceil(model.vocab / att.tp) * hidden  # vocab-parallel embedding / LM head

    # KV cache per layer (bytes) and activation peak per block (elements).
    kv_tokens = scenario.input_len + (scenario.output_len if scenario.phase == "decode" else 0)
    kv_layer_B = (
        _requests(scenario, att) * math.ceil(kv_tokens / (att.sp * att.cp)) * kv_elements_per_token(model, att.tp)
        * precision.kv_bytes
    )
    t_att, t_ffn = _tokens(scenario, att), _tokens(scenario, ffn)
    residual = t_att * hidden
    attention_peak = t_att * (hidden + _attention_activation_width(model, att.tp))
    dense_peak = t_ffn * (hidden + 2 * math.ceil((model.dense_intermediate or 0) / ffn.tp))  # SwiGLU gate + up
    if moe:
        # Each token goes to top-k experts: dispatch send + receive copies, gate + up per routed copy, the
        # shared experts' gate + up and the router logits. Balanced routing: EP·T tokens × top-k spread over EP
        # devices leaves T × top-k per device on average (load imbalance is the timing model's concern).
        up = 2 * math.ceil(moe.expert_intermediate / ffn.tp)
        moe_peak = t_ffn * (hidden + moe.top_k * (2 * hidden + up) + moe.shared_experts * up + moe.routed_experts)
    else:
        moe_peak = 0
    logits_peak = _requests(scenario, att) * math.ceil(model.vocab / att.tp)  # last position of each request

    sizes = pipeline_stage_layers(model.layers, layout.pp)
    starts = tuple(itertools.accumulate(sizes, initial=0))
    worst: tuple[float, int, float, float, float] | None = None  # (total, stage, weights, KV, activations)
    for stage in _representative_stages(sizes, starts, model.dense_layers):
        count = sizes[stage]
        n_dense = max(0, min(starts[stage + 1], model.dense_layers) - starts[stage])
        n_moe = count - n_dense
        first, last = stage == 0, stage == layout.pp - 1
        side = count * attention_layer + (vocab_shard if first else 0)
        if last:
            side += hidden  # final norm
            # LM head. Tied embeddings are one tensor on a single stage; with PP the last stage keeps a copy.
            side += vocab_shard if layout.pp > 1 or not model.tied_embeddings else 0
        ffn_shared = n_dense * dense_layer + n_moe * moe_shared
        routed = n_moe * moe_routed
        if layout.fsdp:
            units = [vocab_shard] if first or last else []
            units += [attention_layer + dense_layer] if n_dense else []
            units += [attention_layer + moe_shared + moe_routed] if n_moe else []
            gathered = FSDP_GATHERED_LAYERS * max(units, default=0)
            weights = side / (att.dp * att.ep) + ffn_shared / (ffn.dp * ffn.ep) + routed / ffn.dp + gathered
        else:
            weights = side + ffn_shared + routed
        weights_B = weights * precision.weight_bytes

        peaks = [attention_peak] if count else []
        peaks += [dense_peak] if n_dense else []
        peaks += [moe_peak] if n_moe else []
        peaks += [logits_peak] if last else []
        activations_B = (residual + max(peaks, default=0)) * ACTIVATION_BUFFERS * precision.activation_bytes

        kv_B = count * kv_layer_B
        total_B = weights_B + kv_B + activations_B
        if worst is None or total_B > worst[0]:
            worst = (total_B, stage, weights_B, kv_B, activations_B)
    _, stage, weights_B, kv_B, activations_B = worst
    return MemoryFootprint(weights_B=weights_B, kv_cache_B=kv_B, activations_B=activations_B, stage=stage)


def memory_footprint(scenario: Scenario, plan: Strategy | Schedule) -> MemoryFootprint:
    """DRAM needed by the most loaded device (paper §4.2.3 memory-footprint check), in bytes.

    - Weights: the stage's layers (vLLM split, :func:`pipeline_stage_layers`); attention / TP, dense FFN / TP,
      routed experts / (EP·TP), shared experts / TP; router, norms and MLA down-projections replicated;
      vocab-parallel embeddings on the first stage and LM head + final norm on the last. With FSDP, weights
      are sharded over DP (DP·EP for non-expert weights) plus one fully gathered layer. Every parameter is
      stored at ``precision.weight_bytes`` (norms and router kept wider in practice are a rounding error).
    - KV cache: ⌈batch / (DP·EP)⌉ requests × ⌈tokens / (SP·CP)⌉ × per-token elements per layer (split by TP
      for GQA/MQA/MHA, MLA latent replicated) × layers × ``precision.kv_bytes``; tokens = input + output in
      decode, input in prefill. Ring-style SP keeps each rank's own K/V shard like CP does.
    - Activations: tokens in flight × (residual + the largest block's live elements: attention, SwiGLU FFN,
      MoE with dispatch buffers, or the last stage's logits) × :data:`ACTIVATION_BUFFERS` ×
      ``precision.activation_bytes``.

    Args:
        scenario: The workload (model, phase, batch, lengths, precision).
        plan: A flat :class:`Strategy` or a (possibly per-module) :class:`Schedule`.

    Returns:
        The footprint of the pipeline stage with the largest total.
    """
    return _footprint(scenario, _layout(plan))


def _check_capacity(capacity_B: float, reserve: float) -> None:
    if not capacity_B > 0:
        raise UserInputError(f"capacity_B: must be > 0 bytes (got {capacity_B})")
    if not 0 <= reserve < 1:
        raise UserInputError(f"reserve: must be in [0, 1) (got {reserve})")


def usable_capacity_B(capacity_B: float, reserve: float = MEMORY_RESERVE) -> float:
    """DRAM a schedule may use: (1 − reserve) × capacity, in bytes (paper §4.2.3: 10 % kept free)."""
    _check_capacity(capacity_B, reserve)
    return (1 - reserve) * capacity_B


def fits(scenario: Scenario, plan: Strategy | Schedule, capacity_B: float, reserve: float = MEMORY_RESERVE) -> bool:
    """Whether the most loaded device's footprint fits in ``(1 − reserve) × capacity_B``.

    Args:
        scenario: The workload.
        plan: A flat strategy or a schedule.
        capacity_B: DRAM per device, bytes.
        reserve: Fraction kept free (default 10 %, CALIBRATION.md §1).
    """
    return memory_footprint(scenario, plan).total_B <= usable_capacity_B(capacity_B, reserve)


# --------------------------------------------------------------------------------------------------------
# Composer
# --------------------------------------------------------------------------------------------------------


@memo.cached(maxsize=64)  # (scenario, N, capacity) triples: one search touches a few
def _feasible(
    scenario: Scenario, n: int, capacity_B: float | None, reserve: float
) -> tuple[tuple[Strategy, ...], tuple[tuple[str, int], ...]]:
    limit = None if capacity_B is None else usable_capacity_B(capacity_B, reserve)
    kept: list[Strategy] = []
    dropped = dict.fromkeys([name for name, _ in PRUNING_RULES] + [MEMORY_RULE], 0)
    for strategy in enumerate_strategies(n):
        pruned = prune_reason(scenario, strategy)
        if pruned is not None:
            dropped[pruned[0]] += 1
        elif limit is not None and memory_footprint(scenario, strategy).total_B > limit:
            dropped[MEMORY_RULE] += 1
        else:
            kept.append(strategy)
    return tuple(kept), tuple((name, count) for name, count in dropped.items() if count)


def feasible_strategies(
    scenario: Scenario, n: int, capacity_B: float | None, reserve: float = MEMORY_RESERVE
) -> tuple[tuple[Strategy, ...], dict[str, int]]:
    """The strategies on ``n`` devices that survive every pruning rule and, if given a capacity, fit in DRAM.

    Args:
        scenario: The workload.
        n: Number of devices.
        capacity_B: DRAM per device in bytes, or None to apply the rules only.
        reserve: Fraction of DRAM kept free (default 10 %).

    Returns:
        (kept strategies in enumeration order, {rule name: strategies it dropped}); each dropped strategy is
        counted once, under the first rule of :data:`PRUNING_RULES` that fires, or under ``"memory"``.
        Rules that dropped nothing are left out.
    """
    kept, dropped = _feasible(scenario, n, capacity_B, reserve)
    return kept, dict(dropped)


def cache_clear() -> None:
    """Forget every memoised result (for benchmarks that time cold runs)."""
    for cached in (ordered_factorizations, enumerate_strategies, _footprint, _feasible):
        cached.cache_clear()


def representative_stages(layers: int, pp: int, dense_layers: int) -> tuple[int, ...]:
    """Pipeline stages whose composition differs (first, last, dense-prefix, each MoE stage size)."""
    sizes = pipeline_stage_layers(layers, pp)
    starts = tuple(itertools.accumulate(sizes, initial=0))
    return _representative_stages(sizes, starts, dense_layers)
