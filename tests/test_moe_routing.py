"""The MoE routing law (models/compute/workload.py): which experts a step's tokens pick, uniform or by a model's
measured expert popularity."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from deepstack.catalog import load
from deepstack.models.compute.workload import expected_active_experts, expert_pick_probabilities
from deepstack.schema.llm import MoE


def test_two_experts_by_hand():
    # E = 2, k = 1, hottest expert 1.5 × the mean: 2 / (1 + 2^−s) = 1.5 → 2^−s = 1/3 → p = (3/4, 1/4).
    # Two tokens touch expert 1 with 1 − (1/4)², expert 2 with 1 − (3/4)²: 15/16 + 7/16 = 1.375 experts
    assert expert_pick_probabilities(2, 1, 1.5) == pytest.approx((0.75, 0.25))
    assert expected_active_experts(2, 1, 2, 1.5) == pytest.approx(1.375)


def test_uniform_routing_is_the_closed_form():
    # E·(1 − (1 − k/E)^T): 256 experts, top-8, 64 tokens → 256·(1 − (31/32)^64) = 222.36
    assert expected_active_experts(256, 8, 64) == pytest.approx(256 * (1 - (31 / 32) ** 64))
    assert expected_active_experts(256, 8, 64, 1.0) == expected_active_experts(256, 8, 64)


@given(experts=st.integers(2, 512), top_k=st.integers(1, 16), skew=st.floats(0.0, 1.0))
def test_pick_probabilities_sum_to_k_with_the_measured_hottest_expert(experts, top_k, skew):
    top_k = min(top_k, experts)
    hot = 1.0 + skew * (experts / top_k - 1.0)
    p = expert_pick_probabilities(experts, top_k, hot)
    assert sum(p) == pytest.approx(top_k)
    assert p[0] * experts / top_k == pytest.approx(hot, rel=1e-6)
    assert all(a >= b for a, b in itertools.pairwise(p))  # most popular first


@given(tokens=st.integers(1, 4096), hot=st.floats(1.0, 32.0), hotter=st.floats(0.0, 31.0))
def test_popular_experts_leave_fewer_distinct_experts(tokens, hot, hotter):
    """More concentrated popularity never touches more distinct experts; every law stays between k and E and
    grows with the tokens."""
    hotter = min(hot + hotter, 32.0)
    skewed = expected_active_experts(256, 8, tokens, hot)
    assert 8.0 - 1e-9 <= skewed <= 256.0
    assert expected_active_experts(256, 8, tokens, hotter) <= skewed + 1e-9
    assert skewed <= expected_active_experts(256, 8, tokens) + 1e-9
    assert expected_active_experts(256, 8, tokens + 1, hot) >= skewed - 1e-9


def test_deepseek_routes_to_fewer_experts_than_uniform_at_small_batch():
    moe = load("llms", "deepseek-v3").moe
    assert moe.hot_expert_load == pytest.approx(11.948)  # TensorRT-LLM tech blog 4, Table 1
    # 16 tokens: 256·(1 − (31/32)^16) = 101.96 distinct experts if uniform, 89 with the measured popularity;
    # at 512 tokens both read all
    assert expected_active_experts(256, 8, 16) == pytest.approx(101.96, abs=0.01)
    assert expected_active_experts(256, 8, 16, moe.hot_expert_load) == pytest.approx(89.2, abs=0.5)
    assert expected_active_experts(256, 8, 512, moe.hot_expert_load) > 255.0
    assert load("llms", "qwen3-235b-a22b").moe.hot_expert_load == 1.0  # no public figure: uniform


def test_a_hotter_expert_than_every_token_is_refused():
    with pytest.raises(ValidationError, match="hot_expert_load must be ≤ routed_experts / top_k"):
        MoE(routed_experts=64, top_k=8, expert_intermediate=128, hot_expert_load=9.0)
