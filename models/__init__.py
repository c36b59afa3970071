"""Evaluators: performance, DRAM, network, collectives, area, power, thermal (pure functions, SI units)."""


def clear_caches() -> int:
    """Forget every memoised result (see :mod:`deepstack.models.memo`); returns the number of tables cleared."""
    from deepstack.models import memo

    return memo.clear_caches()


# Young-generation garbage collections every 50,000 allocations instead of Python's 700: the evaluators create
# many short-lived rows but almost no reference cycles, and each collection walks the memo tables' objects
# (measured: ~10 % of a sweep's time at the default threshold).
GC_GEN0_THRESHOLD = 50_000


def tune_gc() -> None:
    """Collect young garbage less often (for processes that evaluate many design points)."""
    import gc

    gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])
