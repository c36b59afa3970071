"""Evaluators: performance, DRAM, network, collectives, area, power, thermal (pure functions, SI units)."""
