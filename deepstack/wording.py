"""Counts in messages and summaries, worded as a reader expects them."""

from __future__ import annotations

from collections.abc import Mapping


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 trial``, ``2 trials``, ``1,024 devices`` (``plural``: for nouns that do not take an s)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def per_rule(counts: Mapping[str, int]) -> str:
    """Counts by rule as text: ``tp_heads 1,024, ep_experts 12``."""
    return ", ".join(f"{rule} {count:,}" for rule, count in counts.items())
