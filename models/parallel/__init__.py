"""Parallel strategies of a design point (paper §3.3.1, §4.1.4, §4.2).

- :mod:`~deepstack.models.parallel.strategies`: device-count arithmetic (``prime_factors``, ``divisors``), the
  ordered factorizations of eq. 2, :class:`~deepstack.models.parallel.strategies.Strategy`, enumeration and the
  named pruning rules;
- :mod:`~deepstack.models.parallel.chunks`: chunked prefill, a replica's prompts in steps of a token budget;
- :mod:`~deepstack.models.parallel.memory`: the DRAM footprint of the most loaded device and the feasible
  strategies of a scenario (rules + memory);
- :mod:`~deepstack.models.parallel.prefill_budget`: the one place the prefill budget of a schedule is settled;
- :mod:`~deepstack.models.parallel.communication`: the collectives a schedule needs, the rank → device layouts
  and the memoised collective times on a topology.

Import from the submodule that owns a name (this package re-exports nothing: ``communication`` depends on the
workload model, which itself needs ``strategies``).
"""
