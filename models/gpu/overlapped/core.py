"""What every distributed kernel is built from: the GPU's GEMM, its HBM streams, its NVLink transfers and the
launches and synchronisations on the critical path (docs/model.md, "Distributed kernels").

* **GEMM**: :func:`deepstack.models.compute.gemm.time_tilings` on the system's device (resolved as
  :func:`deepstack.models.evaluate.evaluate` resolves it), with the tile and pipeline depth the kernel was
  launched with (or the tuner's choice without one), on the SMs the kernel leaves to compute (``comm_sms`` taken
  away) and at the tensor-core issue rate a Triton kernel achieves (:attr:`KernelConstants.mma_fraction`, the one
  calibrated constant).
* **HBM streams** (reductions, local copies): :func:`deepstack.models.compute.vector.time_vector`, at least the
  bytes at the system's achievable HBM bandwidth (``gpu.hbm_efficiency``).
* **Transfers**: :func:`deepstack.models.collectives.collective_time` on the system's network with each link
  derated to the payload rate NVLink delivers in practice
  (:func:`deepstack.models.gpu.collectives.achievable_topology`) and a fixed cost per copy/signal step
  (:attr:`KernelConstants.step_overhead_s`).
* **Launches**: a fixed cost per kernel launch or barrier on the critical path
  (:attr:`KernelConstants.launch_overhead_s`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from deepstack.errors import UserInputError
from deepstack.models import memo
from deepstack.models.collectives import CollectiveResult, collective_time
from deepstack.models.compute.gemm import record, time_tilings
from deepstack.models.compute.gemm_tuner import tilings
from deepstack.models.compute.operators import Gemm, Vector
from deepstack.models.compute.timing import NoTilingError
from deepstack.models.compute.vector import time_vector
from deepstack.models.gpu.collectives import SM_PUT_FRACTION, achievable_topology
from deepstack.models.hardware.device import DeviceSpec
from deepstack.schema.hardware import GpuExecution

# NVIDIA H100 datasheet: FP8 dense tensor-core rate 1,979 TFLOPS = 2 × the FP16 rate (989 TFLOPS)
DTYPES = {"fp16": (2.0, 1.0), "bf16": (2.0, 1.0), "fp8": (1.0, 2.0)}  # bytes per element, matrix-rate multiple


@dataclass(frozen=True)
class KernelConstants:
    """The constants of the kernel model. Only ``mma_fraction`` is calibrated (on the AG-GEMM and GEMM-RS rows of
    validation/h100_kernels.csv); the others are public measurements (docs/calibration.md, "Distributed
    kernels").

    Attributes:
        mma_fraction: share of the tensor-core peak a Triton GEMM tile issues at in steady state (clock under
            load, instruction issue, epilogue), applied to the device's matrix rate. Calibrated.
        sm_put_fraction: share of NVLink's achievable payload rate that copies issued by SM warps (NVSHMEM
            ``putmem`` or loads from a peer's memory in a kernel) reach; copy-engine copies reach all of it.
            Source: DeepEP issue #16 (337 of 370 GB/s).
        step_overhead_s: fixed cost of one copy or signal step of a transfer (a copy-engine ``cudaMemcpyAsync``
            with its stream wait/write of the ready flag, or an NVSHMEM put with its fence), s; None: the
            system's launch-and-flag latency (``gpu.allreduce_floor_us``: a copy behind a stream wait on a
            peer's flag is the same launch + flag round trip). Source: sglang #2904.
        launch_overhead_s: fixed cost of one kernel launch or device-wide barrier on the critical path, s;
            None: the system's ``gpu.allreduce_floor_us``. Source: sglang #2904.
    """

    mma_fraction: float = 0.75
    sm_put_fraction: float = SM_PUT_FRACTION
    step_overhead_s: float | None = None
    launch_overhead_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("mma_fraction", "sm_put_fraction"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name}: must be in (0, 1] (got {getattr(self, name)})")
        if any(value is not None and value < 0 for value in (self.step_overhead_s, self.launch_overhead_s)):
            raise ValueError("step_overhead_s and launch_overhead_s must be ≥ 0")

    def on(self, gpu: GpuExecution) -> KernelConstants:
        """These constants with every system-given figure (None) taken from the system's ``gpu`` table."""
        floor_s = gpu.allreduce_floor_us * 1e-6
        return dataclasses.replace(
            self, step_overhead_s=floor_s if self.step_overhead_s is None else self.step_overhead_s,
            launch_overhead_s=floor_s if self.launch_overhead_s is None else self.launch_overhead_s)


DEFAULT_CONSTANTS = KernelConstants()


@dataclass(frozen=True)
class Tile:
    """A GEMM tiling fixed by the kernel's launch: tile m × n × k and software-pipeline stages."""

    m: int
    n: int
    k: int
    stages: int


def parse_tile(text: str | None, stages: int | None) -> Tile | None:
    """``128x256x64`` (and stages, default 3) → :class:`Tile`; None without a tile. Raises UserInputError."""
    if text is None:
        if stages is not None:
            raise UserInputError("--stages: give it with --tile (e.g. --tile 128x256x64 --stages 3)")
        return None
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise UserInputError(f"--tile: must be MxNxK positive integers, e.g. 128x256x64 (got {text!r})")
    stages = 3 if stages is None else stages
    if not 1 <= stages <= 8:
        raise UserInputError(f"--stages: must be in 1..8 (got {stages})")
    m, n, k = (int(part) for part in parts)
    return Tile(m, n, k, stages)


def dtype_info(dtype: str) -> tuple[float, float]:
    """(bytes per element, matrix-rate multiple of FP16) of ``dtype``. Raises UserInputError."""
    if dtype not in DTYPES:
        raise UserInputError(f"--dtype: must be one of {', '.join(DTYPES)} (got {dtype!r})")
    return DTYPES[dtype]


def compute_device(dev: DeviceSpec, comm_sms: int, constants: KernelConstants, dtype: str = "fp16") -> DeviceSpec:
    """The device a kernel's GEMM runs on: ``comm_sms`` SMs taken by communication, the tensor cores at
    ``mma_fraction`` of their rate, times the dtype's rate multiple."""
    if not 0 <= comm_sms < dev.pes:
        raise UserInputError(f"--comm-sms: must be in 0..{dev.pes - 1} on this device (got {comm_sms})")
    _, rate = dtype_info(dtype)
    return dataclasses.replace(dev, pes=dev.pes - comm_sms,
                               matrix_flops_per_cycle=dev.matrix_flops_per_cycle * rate
                               * constants.mma_fraction)


@dataclass(frozen=True)
class GemmTime:
    """One GEMM's time on the compute SMs: total, tile waves, the tiling used."""

    time_s: float
    waves: int
    tiles: int
    config: str
    compute_s: float  # the clock-bound part alone (matrix, L1, L2 of every wave), without DRAM


@memo.cached(maxsize=4096)
def gemm_time(g: Gemm, dev: DeviceSpec, tile: Tile | None) -> GemmTime:
    """The GEMM at the given tiling (split-K 1, grouped rasterisation, as Triton-distributed's persistent
    kernels run), or the tuner's fastest without one."""
    if tile is None:
        try:
            found = tilings(g, dev)
        except NoTilingError as exc:
            raise UserInputError(str(exc)) from None
        i = int(np.argmin(found.time_s))
    else:
        mt, nt, kt = dev.min_tile
        if tile.m % mt or tile.n % nt or tile.k % kt:  # the model would pad each MMA up to the unit's tile
            raise UserInputError(f"--tile {tile.m}x{tile.n}x{tile.k}: M, N and K must be multiples of the matrix "
                                 f"unit's smallest tile, {mt}x{nt}x{kt} on this system (e.g. 128x256x64)")
        if tile.stages * (tile.m * tile.k * g.a_bytes + tile.k * tile.n * g.b_bytes) > dev.l1_B:
            raise UserInputError(f"--tile {tile.m}x{tile.n}x{tile.k} with {tile.stages} stages: the pipeline "
                                 f"needs more than the {dev.l1_B / 1024:g} KiB of shared memory per SM")
        grid = {"gemm": np.array([0]), "tm": np.array([tile.m]), "tn": np.array([tile.n]),
                "tk": np.array([tile.k]), "stages": np.array([tile.stages]), "split": np.array([1]),
                "grouped": np.array([True])}
        found, i = time_tilings([g], dev, True, grid)[0], 0
    config = (f"tile {found.tm[i]}x{found.tn[i]}x{found.tk[i]}, {found.stages[i]} stages, "
              f"split-K {found.split[i]}")
    compute_s = sum(wave.count * wave.clocked_s for wave in record(g, dev, found, i, True).wave_timings)
    return GemmTime(float(found.time_s[i]), int(found.waves[i]), int(found.tiles[i]), config, compute_s)


def stream_time_s(name: str, read_B: float, write_B: float, dev: DeviceSpec, hbm_Bps: float) -> float:
    """An element-wise pass over HBM (a reduction or a local copy) on every SM of the device, at least its bytes at
    the HBM bandwidth a streaming kernel achieves (``hbm_Bps``; the system's ``gpu.hbm_efficiency`` × peak)."""
    time_s = time_vector(Vector(name, elements=(read_B + write_B) / 4, read_bytes=read_B, write_bytes=write_B), dev
                         ).time_s
    return max(time_s, (read_B + write_B) / hbm_Bps)


def transfer(op: str, bytes_per_rank: float, ranks: int, network, algorithm: str, constants: KernelConstants,
             gpu: GpuExecution, sm_issued: bool = False) -> CollectiveResult:
    """A collective over devices 0…ranks−1 of the system at its fabric's achievable payload rate
    (:func:`deepstack.models.gpu.collectives.achievable_topology`; times ``sm_put_fraction`` when SM warps issue
    the puts), each step paying ``step_overhead_s`` (see :func:`deepstack.models.collectives.collective_time` for
    ``bytes_per_rank``)."""
    topology = achievable_topology(network, gpu.nccl_bus_efficiency, constants.sm_put_fraction if sm_issued else 1.0)
    if not 2 <= ranks <= topology.devices:
        raise UserInputError(f"ranks: the system has {topology.devices} devices; a kernel spans 2..{topology.devices}"
                             f" (got {ranks})")
    return collective_time(op, bytes_per_rank, tuple(range(ranks)), topology, algorithm=algorithm,
                           step_overhead_s=constants.step_overhead_s)
