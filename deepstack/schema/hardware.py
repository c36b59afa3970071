"""Hardware hierarchy of the paper §3.2, in file units (the unit is in every field name).

PE → device (a 3D-stack cluster with its DRAM, or a 2.5D GPU die with HBM) → die / chip / system, the last three
being the L1 / L2 / L3 levels of a :class:`Network`. SI values are exposed as ``*_Bps``/``*_B``/``*_s``/``*_Hz``
properties computed with :mod:`deepstack.units`, the only place conversions happen.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_serializer, model_validator

from deepstack import units
from deepstack.registry import ALGORITHMS, TOPOLOGIES
from deepstack.schema.base import Frozen, Sourced

MAX_STACKED_LAYERS = 16  # paper §4.2.2 explores m = 1..16


class MinTile(Frozen):
    """Smallest matrix tile the matrix unit executes (M×N×K); tile shapes are multiples of it."""

    m: int = Field(16, ge=1, le=1024)
    n: int = Field(16, ge=1, le=1024)
    k: int = Field(16, ge=1, le=1024)


class PE(Frozen):
    """Processing engine (SM-like): matrix, vector and SFU units, L0 registers, L1 shared memory."""

    matrix_flops_per_cycle: float = Field(gt=0, le=1e7, description="dense FP16 FLOP/cycle (an FMA is 2)")
    vector_flops_per_cycle: float = Field(gt=0, le=1e7, description="FP32 FLOP/cycle")
    sfu_ops_per_cycle: float = Field(gt=0, le=1e7, description="transcendental ops/cycle (exp, rsqrt, ...)")
    l0_KiB: float = Field(gt=0, le=1e5, description="register file")
    l1_KiB: float = Field(gt=0, le=1e5, description="L1 / shared memory capacity")
    l1_bw_B_per_cycle: float = Field(gt=0, le=1e6)
    min_tile: MinTile = MinTile()
    wgmma: bool = Field(False, description="four matrix units share input operands (warp-group MMA)")

    @property
    def l0_B(self) -> float:
        return units.KiB_to_B(self.l0_KiB)

    @property
    def l1_B(self) -> float:
        return units.KiB_to_B(self.l1_KiB)


class DramTiming(Frozen):
    """Bank timing. A bank serves an s-byte transaction in (tRCD + tRP) + s / bank bandwidth (docs/model.md)."""

    tRCD_ns: float = Field(gt=0, le=1e4, description="activate to column command")
    tRP_ns: float = Field(gt=0, le=1e4, description="precharge")
    tRAS_ns: float = Field(gt=0, le=1e5, description="activate to precharge (minimum row open time)")
    tCL_ns: float = Field(gt=0, le=1e4, description="column access (CAS) latency")
    access_latency_ns: float = Field(gt=0, le=1e5, description="idle load-to-use latency seen by a PE")
    # Refresh: every tREFI a bank is unavailable for tRFC. DRAMsim3 HBM2_8Gb_x128.ini: tRFC 260, tREFI 3900 tCK
    # at tCK = 1 ns (docs/calibration.md §4) — 6.7 % of the time
    tRFC_ns: float = Field(260.0, ge=0, le=1e5, description="refresh cycle time")
    tREFI_ns: float = Field(3900.0, gt=0, le=1e7, description="refresh interval (halved above 85 °C)")

    @model_validator(mode="after")
    def _refresh_fits(self) -> DramTiming:
        if self.tRFC_ns >= self.tREFI_ns:
            raise ValueError(f"tRFC_ns ({self.tRFC_ns:g}) must be below tREFI_ns ({self.tREFI_ns:g})")
        return self

    @property
    def refresh_availability(self) -> float:
        """Fraction of time a bank can serve requests between refreshes."""
        return 1.0 - self.tRFC_ns / self.tREFI_ns

    @property
    def row_cycle_overhead_s(self) -> float:
        return units.ns_to_s(self.tRCD_ns + self.tRP_ns)

    @property
    def access_latency_s(self) -> float:
        return units.ns_to_s(self.access_latency_ns)


# DRAM access energy in two parts (docs/calibration.md §3), so a full-row stream pays one activation per row
# while a random access pays one per transaction
TRANSFER_DOC = "energy per bit moved between the banks and the logic die (column access, data path, I/O)"
ACTIVATION_DOC = "energy of opening a row (activate + precharge), per bit of the row; paid once per row opened"


def _reject_single_energy(data):
    """Name the replacement of the former single per-bit figure instead of a bare 'extra input' error."""
    if isinstance(data, dict) and "energy_pJ_per_bit" in data:
        raise ValueError("energy_pJ_per_bit is split into transfer_pJ_per_bit and activation_pJ_per_row_bit "
                         "(docs/calibration.md §3)")
    return data


class DramEnergy(Frozen):
    """The access energy of a DRAM, in two parts (docs/calibration.md §3): every bit moved, every row opened."""

    transfer_pJ_per_bit: float = Field(gt=0, le=1000, description=TRANSFER_DOC)
    activation_pJ_per_row_bit: float = Field(ge=0, le=1000, description=ACTIVATION_DOC)

    @model_validator(mode="before")
    @classmethod
    def _split_energy(cls, data):
        return _reject_single_energy(data)


class Stacked3DDram(DramEnergy):
    """3D-stacked DRAM over the logic die: m stacked layers (capacity, heat), n ≤ m connected (bandwidth)."""

    technology: Literal["3d-stacked"] = "3d-stacked"
    stacked_layers: int = Field(ge=1, le=MAX_STACKED_LAYERS, description="m: DRAM layers on the stack")
    connected_layers: int = Field(ge=1, le=MAX_STACKED_LAYERS, description="n ≤ m: layers with their own TSVs")
    layer_capacity_GiB: float = Field(gt=0, le=1024)
    layer_bw_GBps: float = Field(gt=0, le=1e6, description="peak TSV bandwidth of one connected layer")
    banks_per_layer: int = Field(ge=1, le=65536)
    row_bytes: int = Field(ge=32, le=65536)
    connectivity: Literal["direct", "interleaved"] = "direct"
    interleave_ways: int = Field(4, ge=1, le=64, description="banks sharing one channel when interleaved")
    timing: DramTiming

    @model_validator(mode="after")
    def _n_le_m(self) -> Stacked3DDram:
        if self.connected_layers > self.stacked_layers:
            raise ValueError(
                f"connected_layers (n = {self.connected_layers}) must be ≤ stacked_layers (m = {self.stacked_layers})"
            )
        return self

    @property
    def capacity_B(self) -> float:
        return self.capacity_at_B(self.stacked_layers)

    def capacity_at_B(self, stacked_layers: int) -> float:
        """Capacity with ``stacked_layers`` layers on the stack (a search varies m without building the chip)."""
        return units.GiB_to_B(self.layer_capacity_GiB) * stacked_layers

    @property
    def peak_bw_Bps(self) -> float:
        return units.GBps_to_Bps(self.layer_bw_GBps) * self.connected_layers

    @property
    def banks(self) -> int:
        """Independently addressable banks: every bank of a connected layer (unconnected layers are reached
        through a connected one and add capacity, not parallelism)."""
        return self.banks_per_layer * self.connected_layers


class HBMDram(DramEnergy):
    """2.5D HBM stacks beside the die (the H100*/H200* baselines and the real GPUs)."""

    technology: Literal["hbm"] = "hbm"
    stacks: int = Field(ge=1, le=64)
    stack_capacity_GiB: float = Field(gt=0, le=4096)
    stack_bw_GBps: float = Field(gt=0, le=1e6)
    banks_per_stack: int = Field(ge=1, le=65536, description="channels × pseudo-channels × banks")
    row_bytes: int = Field(ge=32, le=65536)
    banks_per_channel: int = Field(16, ge=1, le=64, description="banks interleaved behind one pseudo-channel, "
                                   "whose activations overlap its transfers (HBM3: 4 bank groups × 4)")
    timing: DramTiming

    @property
    def capacity_B(self) -> float:
        return units.GiB_to_B(self.stack_capacity_GiB) * self.stacks

    def capacity_at_B(self, stacked_layers: int) -> float:
        """The same capacity whatever ``stacked_layers`` (HBM stacks are not layered by the search)."""
        return self.capacity_B

    @property
    def peak_bw_Bps(self) -> float:
        return units.GBps_to_Bps(self.stack_bw_GBps) * self.stacks

    @property
    def banks(self) -> int:
        return self.banks_per_stack * self.stacks


Dram = Annotated[Stacked3DDram | HBMDram, Field(discriminator="technology")]


class Device(Frozen):
    """The unit of parallelism: a 100 mm² 3D-stack cluster, or an 800 mm² GPU die for 2.5D (docs/architecture.md §2)."""

    area_mm2: float = Field(gt=0, le=1e5)
    pes: int | Literal["auto"] = Field("auto", description='PE count, or "auto" to derive it from the area budget')
    l2_MiB: float = Field(gt=0, le=1e5)
    l2_bw_B_per_cycle: float = Field(gt=0, le=1e7)
    dram: Dram
    weight_layout: Literal["tiled", "row_major"] = Field(
        "tiled", description="how weights lie in DRAM: tiled (each GEMM tile's block contiguous, as a compiler lays "
                             "them out: full-row transactions) or row_major (the framework's [out, in] rows: a tile "
                             "access reads tile-K contiguous elements per row; docs/model.md §4, §17)")

    @field_validator("pes")
    @classmethod
    def _positive_pes(cls, value: int | str) -> int | str:
        if value != "auto" and not 1 <= value <= 100_000:
            raise ValueError('must be "auto" or an integer in 1..100000')
        return value

    @property
    def l2_B(self) -> float:
        return units.MiB_to_B(self.l2_MiB)


class Thermal(Frozen):
    """Thermal limits of §4.1.2."""

    ambient_c: float = Field(25.0, ge=-50, le=100)
    target_c: float = Field(85.0, ge=0, le=200, description="design target (DRAM normal range)")
    hard_limit_c: float = Field(95.0, ge=0, le=200)
    dvfs: Literal["static", "boost"] = Field(
        "static", description='how DVFS picks the clock: "static" (paper §4.1.2: first the thermally sustainable '
                              'clock f_th of the stacking, then the power wall) or "boost" (as GPU Boost does: the '
                              'nominal clock, lowered only as far as the power budget min(TDP, P_th) requires)')


class Table2Row(Frozen):
    """The paper's published figures per 800 mm² (Table 2), kept with the preset to check the area model."""

    fp16_tflops: float = Field(gt=0)
    fp32_tflops: float = Field(gt=0)
    sfu_tflops: float = Field(gt=0)
    l2_bw_TBps: float = Field(gt=0)
    l1_bw_TBps: float = Field(gt=0)
    dram_bw_TBps: float = Field(gt=0)
    dram_capacity_GiB: float = Field(gt=0)
    wgmma: bool


class GpuExecution(Frozen):
    """How a real GPU runs a serving step (deepstack/models/gpu; docs/model.md §GPU execution): the terms a
    kernel-by-kernel, host-launched device pays and a statically scheduled accelerator does not. Every figure
    is sourced in docs/calibration.md §GPU execution; none is fitted to the reference rows."""

    source: str
    kernel_gap_us: float = Field(gt=0, le=100, description="GPU idle time per kernel boundary inside a CUDA graph")
    hbm_efficiency: float = Field(gt=0, le=1, description="achievable fraction of peak HBM bandwidth (streaming)")
    allreduce_floor_us: float = Field(gt=0, le=1000, description="latency of the smallest custom all-reduce")
    allreduce_us_per_MiB: float = Field(gt=0, le=1e4, description="custom all-reduce time per MiB beyond the floor")
    custom_allreduce_max_MiB: float = Field(ge=0, le=1024, description="largest all-reduce the custom kernel "
                                            "takes at TP8 (larger ones go to NCCL)")
    nccl_bus_efficiency: float = Field(gt=0, le=1, description="NCCL bus bandwidth / link bandwidth")
    graph_max_batch: int = Field(512, ge=0, description="largest decode batch captured in a CUDA graph")
    moe_call_latency_us: float = Field(0.0, ge=0, le=1e4, description="fixed latency of one fused-MoE call (the "
                                       "Triton chain align, quant, grouped GEMM, act, quant, grouped GEMM, sum) "
                                       "beyond its bytes and kernel boundaries; 0: no public figure")
    host_step_us: float = Field(ge=0, le=1e6, description="CPU work per step not hidden (calibrated)")
    eager_op_us: float = Field(ge=0, le=1e4, description="host time per PyTorch call of an eager step (calibrated)")
    idle_W: float | None = Field(None, gt=0, le=1e4, description="board power with nothing running, clocks up "
                                 "(nvidia-smi at P0, 0 % utilisation; docs/calibration.md §GPU power); None: the "
                                 "paper's 10 % of TDP")


class ChipArchitecture(Sourced):
    """One row of Table 2: a PE design and a device (cluster or die) template."""

    kind: Literal["chip"] = "chip"
    process_nm: int = Field(7, ge=1, le=250)
    clock_GHz: float = Field(gt=0, le=20)
    tdp_W: float = Field(gt=0, le=1e5, description="per device")
    pe: PE
    device: Device
    noc_bw_scale: float = Field(1.0, gt=0, le=64, description="NoC bandwidth provisioned vs. the NoC preset")
    thermal: Thermal = Thermal()
    paper_table2: Table2Row | None = None
    gpu: GpuExecution | None = Field(None, description="GPU execution figures (real GPUs only; 3D chips: None)")

    @property
    def clock_Hz(self) -> float:
        return units.GHz_to_Hz(self.clock_GHz)

    @property
    def is_3d(self) -> bool:
        return self.device.dram.technology == "3d-stacked"


class NetworkLevel(Frozen):
    """One level of the hierarchical network (L1 die, L2 chip, L3 system)."""

    label: str = ""
    topology: str
    dims: tuple[int, ...] = Field(min_length=1, max_length=2)
    link_bw_GBps: float = Field(gt=0, le=1e6, description="per link and direction")
    hop_latency_ns: float = Field(ge=0, le=1e7)
    packet_bytes: int | None = Field(None, ge=1, le=1 << 30, description="payload per packet (None: no framing)")
    header_bytes: int = Field(0, ge=0, le=1 << 20, description="protocol overhead per packet")
    ports: Literal["per_device", "shared_uplink"] = Field(
        "per_device",
        description="who owns the level's links: per_device (rail-optimised, e.g. one NIC per GPU) or "
        "shared_uplink (one set of ports per group of inner devices, e.g. a leaf switch's uplink, a die's edge)")
    energy_pJ_per_bit: float = Field(gt=0, le=1000)
    algorithm: str = Field(
        "auto", description="the collective algorithm of this level, as ASTRA-sim names one per network "
        "dimension: auto (the fastest applicable), or a registered algorithm, run by every collective it "
        "implements whose groups lie on this level, and by the hierarchical algorithm's phases here")

    @model_serializer(mode="wrap")
    def _without_default_algorithm(self, handler):
        # a level that leaves the algorithm to auto writes what it wrote before levels could name one
        data = handler(self)
        if data.get("algorithm") == "auto":
            del data["algorithm"]
        return data

    @field_validator("algorithm")
    @classmethod
    def _known_algorithm(cls, value: str) -> str:
        if value != "auto" and value not in ALGORITHMS:
            raise ValueError(f"must be auto or one of {', '.join(ALGORITHMS.names())} (got {value!r})")
        return value

    @field_validator("dims", mode="before")
    @classmethod
    def _parse_dims(cls, value):
        if isinstance(value, str):
            try:
                return tuple(int(part) for part in value.lower().split("x"))
            except ValueError:
                raise ValueError(f"dims must look like 4 or 4x4, got {value!r}") from None
        if isinstance(value, int):
            return (value,)
        return value

    @field_validator("topology")
    @classmethod
    def _known_topology(cls, value: str) -> str:
        TOPOLOGIES.get(value)  # ValueError naming the registered kinds
        return value

    @model_validator(mode="after")
    def _dims_match_topology(self) -> NetworkLevel:
        want = TOPOLOGIES.get(self.topology).dimensions
        if len(self.dims) != want:
            raise ValueError(f"dims of a {self.topology} must have {want} value(s), got {len(self.dims)}")
        if any(d < 1 or d > 65536 for d in self.dims):
            raise ValueError("dims must be integers in 1..65536")
        return self

    @property
    def size(self) -> int:
        return math.prod(self.dims)

    @property
    def link_bw_Bps(self) -> float:
        return units.GBps_to_Bps(self.link_bw_GBps)

    @property
    def hop_latency_s(self) -> float:
        return units.ns_to_s(self.hop_latency_ns)


class Network(Sourced):
    """A hierarchical network, innermost level first (L1 → L3); N devices = product of the level sizes."""

    kind: Literal["noc"] = "noc"
    levels: tuple[NetworkLevel, ...] = Field(min_length=1, max_length=3)
    device_area_mm2: float = Field(gt=0, le=1e5, description="area of one endpoint (100 mm² cluster or 800 mm² die)")
    completion: Literal["delivery", "acknowledged"] = Field(
        "delivery",
        description="when a collective's next step may start: at delivery of the last byte, or when the "
        "transport has it acknowledged (two path latencies per step, as RDMA completions report it)")

    @property
    def devices(self) -> int:
        return math.prod(level.size for level in self.levels)


def _resolve(kind: str, value):
    """Preset name or path → its data (resolved lazily: the catalog depends on these schemas)."""
    if isinstance(value, str):
        from deepstack.catalog import load_data

        return load_data(kind, value)
    return value


class System(Sourced):
    """A complete machine: an architecture replicated over a network (real GPU systems, or a 3D design)."""

    kind: Literal["system"] = "system"
    architecture: ChipArchitecture
    network: Network

    @field_validator("architecture", mode="before")
    @classmethod
    def _architecture(cls, value):
        return _resolve("chips", value)

    @field_validator("network", mode="before")
    @classmethod
    def _network(cls, value):
        return _resolve("nocs", value)

    @property
    def devices(self) -> int:
        return self.network.devices
