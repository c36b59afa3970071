"""Eq. 5 (paper §4.1.5): a GEMM's tile waves pipelined with the collective they feed (or are fed by)."""

from __future__ import annotations

import numpy as np


def overlap_time_s(waves, total_comp_s, comm_bw_s, latency_s):
    """Time (s) of ``waves`` tile waves of compute (``total_comp_s`` in all) overlapped with a collective of
    bandwidth time ``comm_bw_s`` and zero-load latency ``latency_s``.

    τ_comp and τ_comm are the per-wave shares of the compute and of the collective's bandwidth time; the
    collective's latency L_net cannot be hidden. One wave (or none) serialises. Eq. 5 as printed adds L_net in
    the epilogue and again in the steady state, which exceeds running serially when the latency is larger than
    the compute it could hide behind; a scheduler would then not pipeline, so the result is capped at the serial
    time. Element-wise when ``waves`` and ``total_comp_s`` are numpy arrays (the tuner ranks every tiling of a
    GEMM at once); floats in, float out otherwise.
    """
    serial = total_comp_s + comm_bw_s + latency_s
    array = isinstance(waves, np.ndarray)
    if array:
        maximum, minimum, w = np.maximum, np.minimum, np.maximum(waves, 1)
    elif waves <= 1:
        return serial
    else:  # the scalar path runs a million times per sweep: no more work than the formula
        maximum, minimum, w = max, min, waves
    tau_comp = total_comp_s / w
    tau_comm = comm_bw_s / w
    steady = maximum((w - 1) * tau_comp, (w - 1) * tau_comm + latency_s)
    pipelined = minimum(serial, tau_comp + (tau_comm + latency_s) + steady)
    return np.where(waves <= 1, serial, pipelined) if array else pipelined
