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
