"""Evaluators: performance, DRAM, network, collectives, area, power, thermal (pure functions, SI units)."""


def clear_caches() -> int:
    """Forget every memoised result of the evaluators (for cold timings and memoisation-identity checks).

    Returns the number of caches cleared.
    """
    import importlib
    import pkgutil

    cleared = 0
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            if not isinstance(value, type) and callable(getattr(value, "cache_clear", None)):
                value.cache_clear()
                cleared += 1
    from deepstack.models.evaluate import clear_phase_memo

    clear_phase_memo()
    return cleared


# Young-generation garbage collections every 50,000 allocations instead of Python's 700: the evaluators create
# many short-lived rows but almost no reference cycles, and each collection walks the memo tables' objects
# (measured: ~10 % of a sweep's time at the default threshold).
GC_GEN0_THRESHOLD = 50_000


def tune_gc() -> None:
    """Collect young garbage less often (for processes that evaluate many design points)."""
    import gc

    gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])
