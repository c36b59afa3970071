"""The one entry point that times any compute operator on a device."""

from __future__ import annotations

from deepstack.models.compute.attention import tune_attention
from deepstack.models.compute.gemm_tuner import tune_gemm
from deepstack.models.compute.operators import Attention, Gemm, Vector
from deepstack.models.compute.timing import OpTiming
from deepstack.models.compute.vector import time_vector
from deepstack.models.hardware.device import DeviceSpec


def time_op(op, dev: DeviceSpec) -> OpTiming:
    """The timing of ``op`` (:class:`Gemm`: its fastest tiling; :class:`Attention`: its fastest layout;
    :class:`Vector`: its one stream) on ``dev`` at the nominal clock."""
    if isinstance(op, Gemm):
        return tune_gemm(op, dev)
    if isinstance(op, Attention):
        return tune_attention(op, dev)
    if isinstance(op, Vector):
        return time_vector(op, dev)
    raise TypeError(f"unknown operator {op!r}")
