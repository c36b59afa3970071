"""Communication of a parallel strategy (paper §3.3, §4.1.4, §4.1.5): which collectives a schedule needs in
each layer, where its ranks sit on the network, and how long the collectives take.

Collectives per layer (Megatron / DeepSpeed practice, paper §3.3.1), ``T`` tokens per device, ``d`` hidden:

* attention TP: all-reduce of T·d after the output projection (overlappable with it, eq. 5);
* attention SP (Ulysses): all-to-all of q/k/v before the attention core and of its output after;
* attention CP: prefill all-gathers the K/V of the other context chunks; decode all-gathers the queries and
  reduce-scatters the partial outputs (each CP rank holds a slice of every request's cache);
* FFN/MoE TP: all-reduce of T·d after the down projection; MoE EP: all-to-all dispatch of the top-k token
  copies before the experts and the combine after them (both overlappable with the expert GEMMs);
* module boundary: when attention and FFN split tokens differently (per-module schedules), the side that
  needs more tokens all-gathers them from the side that holds fewer;
* FSDP: each layer's weight shards are all-gathered over the DP group, prefetched during the previous layer;
* vocabulary-parallel embedding: all-reduce of T·d; the sampler all-reduces a (max, sum) pair per row;
* PP: a send/recv of T·d between consecutive stages per microbatch.

Rank mapping (§4.1.4): each module's parallel dimensions are ordered by the bytes they move, the heaviest
innermost (on the fastest network level); pipeline stages are outermost. All groups of a collective run at
once, so contention between groups is counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from deepstack.models import collectives, memo, network
from deepstack.models.compute.workload import DeviceShare, device_share, ffn_share
from deepstack.models.hashing import HashedTuple, cached_hash, state_without_hash
from deepstack.schema import LLM, Network, Scenario, Schedule

LOGSUMEXP_BYTES = 8  # a (max, sum) float32 pair per row for distributed softmax / split attention


@dataclass(frozen=True)
class CommOp:
    """One collective of a layer (or of a stage), per microbatch, with what it may overlap with."""

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    name: str
    op: str  # all_reduce, all_gather, reduce_scatter, all_to_all, send_recv
    dim: str  # the parallel dimension whose groups run it
    bytes_per_rank: float
    after: str | None = None  # GEMM whose output it sends (eq. 5)
    before: str | None = None  # GEMM that consumes what it brings (the mirror of eq. 5)


@dataclass(frozen=True)
class Layouts:
    """Rank → device mapping of both modules (innermost first, pipeline stages outermost)."""

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    attention: tuple[tuple[str, int], ...]
    ffn: tuple[tuple[str, int], ...]
    devices: int

    def groups(self, dim: str) -> tuple[tuple[int, ...], ...]:
        layout = self.attention if dim.startswith("a_") or dim == "pp" else self.ffn
        if dim.startswith("reshape"):
            size = int(dim.split(":")[1])
            if self.devices % size:  # a token split that leaves a remainder (batch not a multiple of the replicas):
                # the gather spans the next group size the devices split into
                size = min(n for n in range(size, self.devices + 1) if self.devices % n == 0)
            layout = (("reshape", size), ("rest", self.devices // size))
            dim = "reshape"
        return _groups(layout, dim, self.devices)


@memo.cached(maxsize=16384)
def _groups(layout, dim: str, devices: int) -> tuple[tuple[int, ...], ...]:
    return HashedTuple(network.device_groups(layout, dim, devices))


def attention_comms(model: LLM, scenario: Scenario, schedule: Schedule, share: DeviceShare) -> list[CommOp]:
    a = schedule.attention
    ab = scenario.precision.activation_bytes
    att = model.attention
    d, t = model.hidden, share.tokens
    hq, kv_width = att.heads_per_device(a.tp), att.kv_cache_elements_per_token(a.tp)
    out: list[CommOp] = []
    if a.sp > 1:
        q_width = hq * att.qk_head_dim
        out.append(CommOp("ulysses_qkv", "all_to_all", "a_sp", t * (q_width + kv_width) * ab, after="qkv_proj"))
        out.append(CommOp("ulysses_out", "all_to_all", "a_sp", t * hq * att.v_dim * ab, before="o_proj"))
    if a.cp > 1:
        kv_token_B = kv_width * scenario.precision.kv_bytes
        if share.q_len > 1:
            out.append(CommOp("cp_kv_gather", "all_gather", "a_cp", t * kv_token_B))
        else:
            out.append(CommOp("cp_q_gather", "all_gather", "a_cp", t * hq * att.qk_head_dim * ab))
            out.append(CommOp("cp_partial_reduce", "reduce_scatter", "a_cp",
                              share.requests * hq * (att.v_dim * ab + LOGSUMEXP_BYTES), before="o_proj"))
    if a.tp > 1:
        out.append(CommOp("attn_tp_allreduce", "all_reduce", "a_tp", t * d * ab, after="o_proj"))
    return out


def ffn_comms(model: LLM, scenario: Scenario, schedule: Schedule, share_a: DeviceShare, share_f: DeviceShare,
              moe: bool) -> list[CommOp]:
    f = schedule.ffn
    ab = scenario.precision.activation_bytes
    d = model.hidden
    out: list[CommOp] = []
    on_attention = schedule.dense_on_attention  # dense FFN and shared experts on the attention's TP
    if on_attention and not moe:
        if schedule.attention.tp > 1:
            out.append(CommOp("ffn_tp_allreduce", "all_reduce", "a_tp", share_a.tokens * d * ab, after="down_proj"))
        return out
    if share_f.tokens > share_a.tokens:
        ratio = max(2, round(share_f.tokens / share_a.tokens))
        out.append(CommOp("reshape_to_ffn", "all_gather", f"reshape:{ratio}", share_a.tokens * d * ab))
    if moe and f.ep > 1:
        slots_B = share_f.tokens * model.moe.top_k * d * ab
        out.append(CommOp("moe_dispatch_a2a", "all_to_all", "f_ep", slots_B, before="expert_gate_up"))
        out.append(CommOp("moe_combine_a2a", "all_to_all", "f_ep", slots_B, after="expert_down"))
    if f.tp > 1:
        last = "down_proj" if not moe else ("shared_down" if model.moe.shared_experts and not on_attention else None)
        out.append(CommOp("ffn_tp_allreduce", "all_reduce", "f_tp", share_f.tokens * d * ab, after=last))
    if on_attention and model.moe.shared_experts and schedule.attention.tp > 1:
        out.append(CommOp("shared_tp_allreduce", "all_reduce", "a_tp", share_a.tokens * d * ab, after="shared_down"))
    if share_f.tokens < share_a.tokens:
        ratio = max(2, round(share_a.tokens / share_f.tokens))
        out.append(CommOp("reshape_to_attention", "all_gather", f"reshape:{ratio}", share_f.tokens * d * ab))
    return out


def fsdp_comms(model: LLM, scenario: Scenario, schedule: Schedule, moe: bool) -> list[CommOp]:
    """All-gather of one layer's weights over the DP group (attention and dense weights over DP·EP)."""
    if not schedule.fsdp:
        return []
    a, f = schedule.attention, schedule.ffn
    wb = scenario.precision.weight_bytes
    group = a.replicas  # the "a_dp" groups of the attention layout: DP replicas incl. EP acting as DP
    params = model.attention.parameter_count(model.hidden, a.tp)
    if moe:
        m = model.moe
        params += (m.routed_experts // max(f.ep, 1) + m.shared_experts) * 3 * model.hidden * math.ceil(
            m.expert_intermediate / f.tp)
    else:
        params += 3 * model.hidden * math.ceil(model.dense_intermediate / f.tp)
    if group <= 1:
        return []
    return [CommOp("fsdp_weight_gather", "all_gather", "a_dp", params * wb / group)]


def stage_comms(model: LLM, scenario: Scenario, schedule: Schedule, share: DeviceShare) -> list[CommOp]:
    """Collectives outside the transformer layers: vocabulary-parallel embedding and sampler, PP transfers."""
    ab = scenario.precision.activation_bytes
    out: list[CommOp] = []
    # the vocabulary-parallel embedding and head follow the FFN's TP, or the attention's under replace_only
    tp, dim = (schedule.attention.tp, "a_tp") if schedule.dense_on_attention else (schedule.ffn.tp, "f_tp")
    if tp > 1 and share.first_stage:
        out.append(CommOp("embedding_allreduce", "all_reduce", dim, share.tokens * model.hidden * ab))
    if tp > 1 and share.last_stage:
        rows = share.requests if scenario.phase == "prefill" else share.tokens
        out.append(CommOp("sampler_allreduce", "all_reduce", dim, rows * LOGSUMEXP_BYTES))
    if schedule.pp > 1 and not share.last_stage:
        out.append(CommOp("pp_send", "send_recv", "pp", share.tokens * model.hidden * ab))
    return out


@memo.cached(maxsize=16384)
def layouts(model: LLM, scenario: Scenario, schedule: Schedule) -> Layouts:
    """Order each module's dimensions by their traffic (heaviest innermost), stages outermost."""
    a, f = schedule.attention, schedule.ffn
    share_a = device_share(model, scenario, a, schedule.pp)
    share_f = ffn_share(model, scenario, a, f, schedule.pp)
    traffic: dict[str, float] = {}
    comms = attention_comms(model, scenario, schedule, share_a) + ffn_comms(
        model, scenario, schedule, share_a, share_f, model.is_moe) + fsdp_comms(model, scenario, schedule,
                                                                                 model.is_moe)
    for c in comms:
        traffic[c.dim] = traffic.get(c.dim, 0.0) + c.bytes_per_rank
    attention_dims = [("a_tp", a.tp), ("a_sp", a.sp), ("a_cp", a.cp), ("a_dp", a.replicas)]
    ffn_dims = [("f_tp", f.tp), ("f_ep", f.ep), ("f_dp", f.dp * f.sp * f.cp)]
    # TP is innermost in both modules (paper §4.1.4: the most intensive pairs, e.g. TP, are mapped adjacent), so
    # both modules' TP groups are the same devices holding the same tokens; the rest follow their traffic
    attention_layout = (attention_dims[0], *network.order_by_intensity(attention_dims[1:], traffic),
                        ("pp", schedule.pp))
    ffn_layout = (ffn_dims[0], *network.order_by_intensity(ffn_dims[1:], traffic), ("pp", schedule.pp))
    return Layouts(attention_layout, ffn_layout, schedule.devices)


class Route:
    """A collective as the network sees it: op, bytes per rank, device groups and algorithm. Interned (see
    :func:`route`), so the per-topology result tables key on it by identity: a search looks results up millions
    of times, and hashing and comparing the groups (up to 256 ids) each time cost more than the lookups."""

    __slots__ = ("algorithm", "bytes_per_rank", "groups", "op")

    def __init__(self, op: str, bytes_per_rank: float, groups: tuple, algorithm: str):
        self.op, self.bytes_per_rank, self.groups, self.algorithm = op, bytes_per_rank, groups, algorithm


@memo.cached(maxsize=65536)
def route(op: str, bytes_per_rank: float, groups: tuple, algorithm: str) -> Route:
    """The one :class:`Route` object of these figures (a new one after eviction: a lookup miss, never a wrong
    result)."""
    return Route(op, bytes_per_rank, groups, algorithm)


# topology → {route: result}; read with a plain get (hundreds of thousands of reads per sweep), so when full it
# drops the topology that entered first
_RESULTS = memo.Table("collective results per topology", maxsize=16, lru=True)
RESULTS_PER_TOPOLOGY = 65536  # routes kept per topology (a search sweeps one topology's schedules at a time)


def route_times(routes, topology: network.NetworkTopology) -> list[collectives.CollectiveResult]:
    """The results of several routes on a topology (memoised per topology and route)."""
    kept = _RESULTS.get(topology)
    if kept is None:
        kept = {}
        _RESULTS.put(topology, kept)
    elif len(kept) > RESULTS_PER_TOPOLOGY:
        kept.clear()
    out = []
    for r in routes:
        result = kept.get(r)
        if result is None:
            result = kept[r] = collectives.time_on_groups(r.op, r.bytes_per_rank, r.groups, topology, r.algorithm)
        out.append(result)
    return out


def comm_route(comm: CommOp, layout: Layouts, schedule: Schedule) -> Route | None:
    """The route a collective takes: its device groups and algorithm (None when its groups have one rank or it
    moves no bytes: nothing crosses the network)."""
    groups = layout.groups(comm.dim)
    if len(groups[0]) < 2 or comm.bytes_per_rank <= 0:
        return None
    return route(comm.op, comm.bytes_per_rank, groups, schedule.algorithm(comm.op))


def time_comm(comm: CommOp, layout: Layouts, topology: network.NetworkTopology,
              schedule: Schedule) -> collectives.CollectiveResult | None:
    """Time one collective on the mapped topology (None when nothing moves, see :func:`comm_route`)."""
    r = comm_route(comm, layout, schedule)
    return None if r is None else route_times((r,), topology)[0]


def topology_of(net: Network) -> network.NetworkTopology:
    return network.NetworkTopology.from_schema(net)
