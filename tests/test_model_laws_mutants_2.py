"""Laws of the memory check, the prefill budget, the collectives and the DRAM model that a second mutation run
found unchecked: each test below fails with the code mutated as its docstring says.

- the KV cache is split over SP ranks as over CP ranks (each keeps its own K/V shard);
- a device serves ⌈batch / (DP·EP)⌉ requests: a remainder request still needs a device;
- pipeline stages that tie on footprint report the earliest one;
- the automatic prefill budget honours the reserve it is asked for;
- the double binary tree's second tree is the first shifted by one rank, not the same tree twice;
- a DRAM transaction of s bytes opens ⌈s / row⌉ rows and pays an activation for each;
- under interleaving a channel carries one transfer at a time.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepstack import catalog
from deepstack.models.collectives import collective_time
from deepstack.models.hardware import dram
from deepstack.models.hardware.device import resolve_device
from deepstack.models.network import NetworkTopology
from deepstack.models.parallel.chunks import AUTO_PREFILL_BUDGETS
from deepstack.models.parallel.memory import memory_footprint
from deepstack.models.parallel.prefill_budget import with_prefill_budget
from deepstack.models.parallel.strategies import Strategy
from deepstack.schema import Scenario

# --- memory check ----------------------------------------------------------------------------------------------

# Llama-3.2-1B: 16 layers, 8 KV heads × 64 → 2 · 8 · 64 = 1,024 KV elements per token and layer, a16w16 (2 B).
KV_B_PER_TOKEN = 16 * 2 * 8 * 64 * 2  # 32,768 B per token over the 16 layers


@pytest.mark.parametrize("layout", [Strategy(sp=2), Strategy(cp=2)], ids=["sp2", "cp2"])
def test_sequence_parallel_ranks_keep_their_own_kv_shard(layout):
    """Prefill of one 1,024-token prompt (budget 1,024): one device keeps 1 × 1,024 × 32,768 B = 33,554,432 B of
    KV cache; split over 2 sequence ranks (ring-style SP, like CP) each keeps its 512 tokens: 16,777,216 B.
    (Were SP not to split the cache: 33,554,432 B.)"""
    scenario = Scenario(model="llama-3.2-1b", phase="prefill", batch=1, input_len=1024, prefill_chunk_tokens=1024)
    assert memory_footprint(scenario, Strategy()).kv_cache_B == 1024 * KV_B_PER_TOKEN == 33_554_432
    assert memory_footprint(scenario, layout).kv_cache_B == 512 * KV_B_PER_TOKEN == 16_777_216


@pytest.mark.parametrize(("dp", "requests"), [(1, 5), (2, 3), (4, 2)])
def test_a_remainder_request_still_needs_a_device(dp, requests):
    """Decode batch 5 at 1,024 + 1,024 tokens over DP replicas: a replica serves ⌈5 / DP⌉ requests (5, 3, 2 for
    DP 1, 2, 4), each caching 2,048 tokens × 32,768 B = 67,108,864 B: 335,544,320, 201,326,592 and 134,217,728 B.
    (Rounding down would leave 2 and 1 requests, and the fifth request nowhere.)"""
    scenario = Scenario(model="llama-3.2-1b", phase="decode", batch=5, input_len=1024, output_len=1024)
    fp = memory_footprint(scenario, Strategy(dp=dp))
    assert fp.kv_cache_B == requests * 2048 * KV_B_PER_TOKEN
    assert requests * dp >= 5 > (requests - 1) * dp


def test_stages_that_tie_report_the_earliest():
    """Llama-3.1-405B (126 dense layers) on PP 4 splits 31, 32, 32, 31 (vLLM). A layer holds q and o 16,384²
    each = 536,870,912, k and v 2 · 16,384 · 1,024 = 33,554,432, norms 32,768 and the SwiGLU 3 · 16,384 · 53,248 =
    2,617,245,696: 3,187,703,808 parameters, more than the embedding (128,256 · 16,384 = 2,101,346,304) the first
    stage and the LM head the last add to 31 layers. So stages 1 and 2 (32 layers each, the same KV cache and
    activations) tie as the most loaded: 32 · 3,187,703,808 · 2 B = 204,013,043,712 B of weights, and ties go to
    the earliest stage, 1. (Replacing ``>`` by ``>=`` in the worst-stage scan reports stage 2.)"""
    scenario = Scenario(model="llama-3.1-405b", phase="decode", batch=8, input_len=1024, output_len=1024)
    fp = memory_footprint(scenario, Strategy(pp=4))
    assert fp.weights_B == 32 * 3_187_703_808 * 2 == 204_013_043_712
    assert fp.stage == 1


# --- the automatic prefill budget and the reserve ------------------------------------------------------------

def test_the_automatic_prefill_budget_honours_the_reserve():
    """Llama-3.2-1B prefill, 8 prompts of 1,024 tokens, on 4 GB of DRAM. Weights 2,471,628,800 B and KV
    8 · 1,024 · 32,768 = 268,435,456 B are fixed; one chunk of b tokens holds b · (2,048 residual + 18,432 FFN)
    · 2 buffers · 2 B = 81,920 · b B of activations. The budget is the largest of 8,192, 4,096, … 64 whose total
    fits in (1 − reserve) · 4 GB:
      reserve 0.1 → 3.6 GB: 8,192 (2,740,064,256 + 671,088,640 = 3,411,152,896 B);
      reserve 0.2 → 3.2 GB: 4,096 (3,075,608,576 B; 8,192 does not fit);
      reserve 0.3 → 2.8 GB: 512 (2,782,007,296 B; 1,024 needs 2,823,950,336 B).
    (A ``with_prefill_budget`` that dropped its reserve would answer 8,192 every time.)"""
    scenario = Scenario(model="llama-3.2-1b", phase="prefill", batch=8, input_len=1024)
    capacity = 4e9
    fixed = 2_471_628_800 + 8 * 1024 * KV_B_PER_TOKEN
    assert fixed == 2_740_064_256

    def total(budget: int) -> float:
        return memory_footprint(scenario.model_copy(update={"prefill_chunk_tokens": budget}), Strategy()).total_B

    for budget in AUTO_PREFILL_BUDGETS:
        assert total(budget) == fixed + 81_920 * budget
    for reserve, expected in ((0.1, 8192), (0.2, 4096), (0.3, 512)):
        largest = next(b for b in AUTO_PREFILL_BUDGETS if total(b) <= (1 - reserve) * capacity)
        assert largest == expected
        assert with_prefill_budget(scenario, Strategy(), capacity, reserve).prefill_chunk_tokens == expected


# --- the double binary tree ---------------------------------------------------------------------------------

def test_double_tree_second_tree_is_the_first_shifted():
    """All-reduce of S = 1 MB on a switch of 8 (2 hops of δ = 1 µs, B = 10 GB/s per port). Tree A is the in-order
    tree over ranks 0..7: root 3; 3–1, 1–0, 1–2, 3–5, 5–4, 5–6, 6–7 (height h = 3). Tree B is A shifted by one
    rank, so rank r has the degree rank r − 1 has in A. Per rank, degree in A + degree in B:
    0: 1+1, 1: 3+1, 2: 1+3, 3: 2+1, 4: 1+2, 5: 3+1, 6: 2+3, 7: 1+2 → rank 6 sends (and receives) 5 chunks of
    S/(2C) per step over its one port. With C chunks: C + 2h − 1 = C + 5 steps of 2δ + 5 · S/(2C · B):
      C = 16: 21 · (2 + 15.625) µs = 370.125 µs; C = 32: 37 · (2 + 7.8125) µs = 363.0625 µs (the best);
      C = 64: 69 · (2 + 3.90625) µs = 407.53 µs.
    (Were B the same tree as A, ranks 1 and 5 would carry 2 · 3 = 6 chunks a step: at best, C = 32,
    37 · (2 + 9.375) µs = 420.875 µs.)"""
    S, B, delta = 1e6, 10e9, 1e-6
    topo = NetworkTopology.single("switch", 8, B, delta)
    result = collective_time("all_reduce", S, [tuple(range(8))], topo, "double_tree")
    expected = {c: (c + 5) * (2 * delta + 5 * S / (2 * c * B)) for c in (1 << k for k in range(9))}
    assert min(expected, key=expected.get) == 32
    assert expected[32] == pytest.approx(363.0625e-6, rel=1e-12)
    assert result.detail == "chunks=32"
    assert result.time_s == pytest.approx(363.0625e-6, rel=1e-9)
    assert result.num_steps == 37
    assert result.max_link_bytes == pytest.approx(37 * 5 * S / (2 * 32))  # 5 chunks on rank 6's port, 37 steps


# --- DRAM -----------------------------------------------------------------------------------------------------

def _dram(interleaved: bool):
    chip = catalog.load("chips", "standard")
    if interleaved:
        memory = chip.device.dram.model_copy(update={"connectivity": "interleaved"})
        chip = chip.model_copy(update={"device": chip.device.model_copy(update={"dram": memory})})
    return resolve_device(chip).dram


# Standard chip at m = n = 4: 128 banks, 2 KiB rows, peak 1.6375 TB/s → a bank streams 12.793 GB/s; tRCD + tRP =
# 28 ns; refresh availability 1 − 260/3900.
DIRECT, INTERLEAVED = _dram(False), _dram(True)
ROW_B = 2048
BANK_Bps = 1.6375e12 / 128
OVERHEAD_s = 28e-9
REFRESH = 1 - 260 / 3900


def test_a_transaction_of_a_row_and_a_half_opens_two_rows():
    """Direct-attached banks, s = 3,072 B = 1.5 rows: ⌈1.5⌉ = 2 activations. Transfer 3,072 / 12.793 GB/s =
    240.13 ns, overhead 2 · 28 = 56 ns: efficiency 240.13 / 296.13 · 0.9333 = 0.7568. (Counting one row, or
    charging one activation for both rows: 240.13 / 268.13 · 0.9333 = 0.8359.)"""
    transfer = 3072 / BANK_Bps
    assert transfer == pytest.approx(240.13e-9, rel=1e-4)
    expected = transfer / (transfer + 2 * OVERHEAD_s) * REFRESH
    assert dram.transaction_efficiency(DIRECT, 3072) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.75684, rel=1e-4)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 32))
def test_whole_rows_amortise_one_activation_each_and_a_partial_row_pays_another(rows):
    """A transaction of k whole rows pays k activations for k rows of data: the same efficiency as one full row.
    One byte more opens a (k+1)-th row: it pays one more activation for one more byte, so it is less efficient."""
    full = dram.transaction_efficiency(DIRECT, ROW_B)
    assert dram.transaction_efficiency(DIRECT, rows * ROW_B) == pytest.approx(full, rel=1e-12)
    assert dram.transaction_efficiency(DIRECT, rows * ROW_B + 1) < full * (1 - 1e-6)


def test_a_channel_carries_one_transfer_at_a_time():
    """4-way interleaving: 128 banks in 32 channels (bank mod 32). Four full rows on banks 0, 32, 64, 96 (rows 0,
    32, 64, 96; all channel 0): every bank alone needs 2,048 B / (4 · 12.793 GB/s) + 28 ns = 68.02 ns, but the
    channel moves the four transfers one after another: 4 · 40.02 ns = 160.09 ns, / 0.9333 = 171.52 ns. The same
    four rows on banks 0–3 (four channels) overlap: 68.02 / 0.9333 = 72.88 ns."""
    channel_bw = 4 * BANK_Bps
    same_channel, banks = dram.bank_service_time_s(INTERLEAVED, [r * ROW_B for r in (0, 32, 64, 96)], [ROW_B] * 4)
    assert banks == 4
    assert same_channel == pytest.approx(4 * ROW_B / channel_bw / REFRESH, rel=1e-12)
    assert same_channel == pytest.approx(171.52e-9, rel=1e-4)
    spread, _ = dram.bank_service_time_s(INTERLEAVED, [r * ROW_B for r in range(4)], [ROW_B] * 4)
    assert spread == pytest.approx((ROW_B / channel_bw + OVERHEAD_s) / REFRESH, rel=1e-12)
    assert same_channel > 2 * spread
