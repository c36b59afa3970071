"""The assumption sets (docs/model.md §17): ``default``, this project's choices, and ``paper``, the DeepStack
paper's and its public artifact's stated choices wherever they differ. Every difference is decided here, so a
law elsewhere asks one question of this module instead of spelling out the paper's rule itself."""

from __future__ import annotations

from deepstack.models import memo
from deepstack.schema import ChipArchitecture, Scenario

PAPER = "paper"

# Paper §4.1.2 with the artifact's evaluation notes: junction temperature T = 35 °C + R(m)·P for each 100 mm²
# device (the paper's fit R(m) = 0.56 + 0.01·m °C/W; this project's default coolant is 25 °C, docs/calibration.md §10).
PAPER_AMBIENT_C = 35.0

# The artifact's decode evaluation: STPS is the mean over cached KV lengths 1,024, 1,365, 1,707 and 2,048 for
# 1,024 → 1,024 tokens, i.e. the prompt plus 0, 1/3, 2/3 and all of the generated tokens.
PAPER_DECODE_POINTS = 4


def uses(scenario: Scenario, choice: str) -> bool:
    """Whether the scenario's assumption set makes the paper's ``choice`` (one of ``PAPER_CHOICES``)."""
    return set_uses(scenario.assumptions, choice)


def set_uses(assumptions: str, choice: str) -> bool:
    """Whether the assumption set named ``assumptions`` makes the paper's ``choice``."""
    return assumptions.startswith(PAPER) and assumptions != f"{PAPER}-without-{choice}"


def decode_kv_lengths(scenario: Scenario) -> tuple[int, ...]:
    """The cached lengths a paper-set decode step is averaged over: input + j/3 of the output, j = 0…3."""
    last = PAPER_DECODE_POINTS - 1
    return tuple(scenario.input_len + round(j * scenario.output_len / last) for j in range(PAPER_DECODE_POINTS))


def averaged_steps(scenario: Scenario) -> tuple[Scenario, ...] | None:
    """The decode steps (one per cached length) a paper-set decode point is the mean of, or None where a point
    is timed as it is (the default set, prefill, or a step at a length of its own)."""
    if not (uses(scenario, "kv_average") and scenario.phase == "decode" and scenario.decode_kv_len is None):
        return None
    return tuple(scenario.model_copy(update={"decode_kv_len": kv}) for kv in decode_kv_lengths(scenario))


@memo.cached(maxsize=16384)
def without_kv_length(scenario: Scenario) -> Scenario:
    """``scenario`` without the cached length its decode step is timed at (``decode_kv_len``), one object per
    input so that memo tables keyed on it hit by identity: what laws that never read that length (the memory
    check, which counts the cache at the end of generation; the collectives) key on, so that the steps of
    :func:`averaged_steps` share them."""
    return scenario if scenario.decode_kv_len is None else scenario.model_copy(update={"decode_kv_len": None})


def chip_under(scenario: Scenario, chip: ChipArchitecture) -> ChipArchitecture:
    """``chip`` as the scenario's assumption set sees it: under the paper set its weights lie in the framework's
    row-major layout, so a GEMM tile access is a transaction of tile-K contiguous elements per weight row (paper
    §4.1.3: "for each tile access, our method computes the effective transaction size and queries this curve");
    by default the chip's own layout (tiled: every tile's block contiguous, full-row transactions)."""
    if uses(scenario, "row_major_weights"):
        chip = _row_major(chip)
    if uses(scenario, "one_dram_curve") and chip.device.dram.technology == "hbm" and chip.gpu is None:
        chip = _on_the_3d_curve(chip)  # the paper's 2.5D baselines; a real GPU keeps its measured behaviour
    return chip


# The reference DRAM of the paper's one transaction-size curve (§4.1.3: measured on its in-house 3D design): the
# 3D stack of Table 2's designs, a layer of 409.4 GB/s over 32 banks of 2 KiB rows, banks attached directly
PAPER_CURVE_CHIP = "standard"


@memo.cached(maxsize=1024)
def _on_the_3d_curve(chip: ChipArchitecture) -> ChipArchitecture:
    """A 2.5D baseline die (H100*/H200*) as the paper's design-space tool sees it: Table 2 gives every design's
    DRAM as bandwidth and capacity alone (H200*: 4.8 TB/s, 141 GiB; the 3D designs 13.1 TB/s, 64 GiB per
    800 mm²) and keeps H100*/H200* "unchanged" otherwise, so its one transaction-size curve serves their HBM too
    (inferred: R9's 2.79× at batch 1 is the bandwidth ratio, both sides on one curve). Here: the HBM's stacks
    organised as the 3D stack's banks (the reference's bank bandwidth and row, no pseudo-channel interleaving),
    each stack's bandwidth and capacity, its timing and latency unchanged. By default HBM keeps HBM3's
    organisation (docs/calibration.md §4); real GPUs (a ``gpu`` table, checked against measurements) always do."""
    from deepstack import catalog  # the catalog reads presets; the models import it only here

    reference = catalog.load("chips", PAPER_CURVE_CHIP).device.dram
    bank_bw_GBps = reference.layer_bw_GBps / reference.banks_per_layer
    dram = chip.device.dram
    dram = dram.model_copy(update={"banks_per_stack": max(1, round(dram.stack_bw_GBps / bank_bw_GBps)),
                                   "row_bytes": reference.row_bytes, "banks_per_channel": 1})
    return chip.model_copy(update={"device": chip.device.model_copy(update={"dram": dram})})


@memo.cached(maxsize=1024)
def _row_major(chip: ChipArchitecture) -> ChipArchitecture:
    if chip.device.weight_layout == "row_major":
        return chip
    return chip.model_copy(update={"device": chip.device.model_copy(update={"weight_layout": "row_major"})})


def fsdp_counts_gathered_layer(scenario: Scenario) -> bool:
    """Whether the memory check holds an FSDP device's one fully gathered layer beside its shards. The paper's
    check counts "model weights, KV cache, and peak activations" (§4.2.3), FSDP's weights as its shards (§3.3.1:
    FSDP "further shards weights on top of DP"): under the paper set the layer being used is not counted
    (inferred from the list, not stated). By default it is: a device must hold the whole layer it computes."""
    return not uses(scenario, "fsdp_shards_only")


def reads_all_local_experts(scenario: Scenario) -> bool:
    """Under the paper set a device's MoE step streams the weights of every expert it holds: routing (the
    recorded trace, paper §4.2.1) sets how many tokens each expert and device gets and what the all-to-all moves,
    not which weights are read. By default only the experts the step's tokens are expected to activate are read
    (a grouped GEMM skips experts without tokens). The two differ only where some local experts get no token:
    small-batch decode (at batch 1,024 every expert of DeepSeek-V3 is active)."""
    return uses(scenario, "all_local_experts")


def junction_ambient_c(scenario: Scenario, chip_ambient_c: float, named_ambient_c: float | None = None) -> float:
    """The ambient of the temperature a design is judged by: a coolant the scenario named (``named_ambient_c``),
    else, under the paper set, 35 °C, else the chip's. The paper's DVFS rule is anchored at its thermal fit
    (P_dyn(m) = TDP·R(4)/R(m) − P_static, independent of the coolant), while its artifact judges the junction at
    T = 35 °C + R(m)·P: so under the paper set the clock follows the chip's anchor environment and the temperature
    is 35 °C + R(m)·P, and a design drawing more than (85 − 35) / R(m) W is above the limit, infeasible (paper
    §5.5: many large-batch decode designs exceed 85 °C). A named coolant sets both the clock and the judgement."""
    if named_ambient_c is not None:
        return named_ambient_c
    return PAPER_AMBIENT_C if uses(scenario, "junction_35c") else chip_ambient_c


def coolant_to_name(scenario: Scenario, chip_ambient_c: float, ambient_c: float) -> float | None:
    """The coolant a study row at ``ambient_c`` names for a chip whose own environment is ``chip_ambient_c``:
    none when the assumption set already judges the junction at that ambient without a name. Naming the paper
    set's own 35 °C would set the clock from it too and let DVFS hold a hot design at the limit, where the
    paper's rule keeps the anchor's clock and finds the design infeasible (docs/model.md §17)."""
    return None if ambient_c == junction_ambient_c(scenario, chip_ambient_c) else ambient_c


def pipeline_microbatches(scenario: Scenario, pp: int) -> int | None:
    """The paper's decode minibatch is ⌈batch / pp⌉ requests, so a decode step runs exactly ``pp``
    micro-batches; None: this project tunes the count (docs/model.md §11)."""
    if uses(scenario, "pp_microbatches") and scenario.phase == "decode" and pp > 1:
        return pp
    return None


def data_replicas_for_pruning(scenario: Scenario, dp: int, ep: int) -> int:
    """The replicas the 'more replicas than requests' rule counts: DP·EP by default (EP ranks' attention serves
    requests too); DP alone under the paper set (§4.2.3 prunes infeasible DP; its Table 4 picks tp16·ep16 for
    four requests)."""
    return dp if uses(scenario, "dp_only_pruning") else dp * ep


def tp_may_exceed_heads(scenario: Scenario) -> bool:
    """Under the paper set TP may be a multiple of the attention heads (heads replicated, its Table 4 baseline
    runs tp=256 on DeepSeek-V3's 128 heads); by default TP must divide them."""
    return uses(scenario, "tp_beyond_heads")


def cluster_network(assumptions: str, noc: str) -> str:
    """The 2.5D cluster's network under an assumption set (by name): the paper set reads Table 3 as printed,
    200 GB/s per GPU between nodes (``h100-star-32x-table3``); the default reads a DGX's one 400 Gb/s NIC per GPU
    (``h100-star-32x``, docs/calibration.md §11)."""
    if set_uses(assumptions, "table3_cluster_bw") and noc == "h100-star-32x":
        return "h100-star-32x-table3"
    return noc
