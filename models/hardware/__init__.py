"""One device's hardware: the area model (how many PEs fit), the resolved device spec, and the DRAM laws
(transaction curve, Little's law, bank model, stream time, the per-wave DRAM time)."""
