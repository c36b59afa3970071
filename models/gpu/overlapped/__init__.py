"""Distributed kernels on a GPU system (paper Fig. 8): one communication-overlapped kernel timed from the
existing models — the GEMM model on the system's device, the collective model on its network, eq. 5 for the
overlap — and the kernel's own mechanics (:mod:`.kinds`; constants in :mod:`.core`).

``kernel_time(kind, shape, architecture, network)`` times one kernel; :data:`KINDS` lists the kinds and the shape
fields each takes. docs/model.md ("Distributed kernels") says what each time is made of.
"""

from __future__ import annotations

from deepstack.errors import UserInputError
from deepstack.models.gpu.overlapped.core import (
    DEFAULT_CONSTANTS,
    DTYPES,
    KernelConstants,
    Tile,
    dtype_info,
    parse_tile,
)
from deepstack.models.gpu.overlapped.kinds import KINDS, Context, KernelTime, expected_blocks
from deepstack.models.hardware.device import resolve_device
from deepstack.models.network import as_topology

__all__ = ["DEFAULT_CONSTANTS", "DTYPES", "KINDS", "KernelConstants", "KernelTime", "Tile", "expected_blocks",
           "kernel_time", "parse_tile"]


def kernel_time(kind: str, shape: dict[str, int], architecture, network, *, tile: Tile | None = None,
                dtype: str = "fp16", comm_sms: int | None = None,
                constants: KernelConstants = DEFAULT_CONSTANTS) -> KernelTime:
    """Time one distributed kernel.

    Args:
        kind: one of :data:`KINDS` (``ag-gemm``, ``gemm-rs``, ``moe-gemm-ar``, ``ep-dispatch``, ``ulysses``).
        shape: the kind's shape fields (``KINDS[kind][1]``), positive integers, per GPU as
            ``validation/h100_kernels.csv``'s ``shape_notes`` say.
        architecture: the system's chip (schema ``ChipArchitecture``), resolved as the evaluator resolves it.
        network: the system's network (schema ``Network``); the kernel spans its first devices.
        tile: the GEMM tiling the kernel was launched with (None: the tuner's fastest).
        dtype: ``fp16``, ``bf16`` or ``fp8``.
        comm_sms: SMs taken from compute by communication (None: the kind's default, 0 where copy engines move
            the data, 16 for Ulysses).
        constants: the model's constants (default: docs/calibration.md, "Distributed kernels": mma_fraction
            calibrated, the others sourced; the fixed costs the system's ``gpu`` table gives).

    Raises:
        UserInputError: unknown kind or dtype, a missing or non-positive shape field, a shape the kind cannot
            run, a tile that does not fit, more ranks than the system has, or a system that is not a GPU's.
    """
    if kind not in KINDS:
        raise UserInputError(f"--kind: must be one of {', '.join(KINDS)} (got {kind!r})")
    model, fields, default_sms = KINDS[kind]
    missing = [field for field in fields if shape.get(field) is None]
    if missing:
        flags = ", ".join("--" + field.replace("_", "-") for field in missing)
        raise UserInputError(f"{kind}: needs {flags} (shape flags: "
                             f"{' '.join('--' + f.replace('_', '-') for f in fields)})")
    for field in fields:
        if int(shape[field]) != shape[field] or shape[field] < 1:
            raise UserInputError(f"--{field.replace('_', '-')}: must be a positive integer (got {shape[field]!r})")
    dtype_info(dtype)
    gpu = getattr(architecture, "gpu", None)
    if gpu is None:
        raise UserInputError("--system: distributed kernels run on a GPU system, one whose chip has a gpu table "
                             "(every system of `deepstack catalog systems`)")
    dev = resolve_device(architecture, network=network)
    devices = as_topology(network).devices
    hbm_Bps = dev.dram.peak_bw_Bps * gpu.hbm_efficiency
    ctx = Context(dev, network, devices, tile, dtype, default_sms if comm_sms is None else comm_sms,
                  constants.on(gpu), gpu, hbm_Bps)
    try:
        return model({field: int(shape[field]) for field in fields}, ctx)
    except ValueError as exc:
        raise UserInputError(f"{kind}: {exc}") from None
