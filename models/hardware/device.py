"""A chip architecture resolved into one device's SI figures: PE count from the area model, bandwidths, DRAM."""

from __future__ import annotations

from dataclasses import dataclass, field

from deepstack.errors import UserInputError
from deepstack.models import memo
from deepstack.models.hardware import area as area_model
from deepstack.models.hashing import cached_hash, state_without_hash
from deepstack.schema import ChipArchitecture, Network, SramOption
from deepstack.schema.hardware import MAX_STACKED_LAYERS

HBM_PHY_MM2_PER_STACK = 10.0  # paper §2.2: 2.5D "PHY macros occupy tens of mm²" (per stack, inferred)


@dataclass(frozen=True)
class DramSpec:
    """DRAM as the performance model sees it (SI)."""

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    technology: str
    stacked_layers: int
    connected_layers: int
    capacity_B: float
    peak_bw_Bps: float
    banks: int
    row_B: int
    row_overhead_s: float  # tRCD + tRP: paid by every row activation
    refresh_availability: float  # 1 − tRFC/tREFI: the share of time banks are not refreshing
    access_latency_s: float
    interleave_ways: int  # 1 = direct-attached banks
    transfer_J_per_B: float  # every byte moved between the banks and the logic die (docs/calibration.md §3)
    activation_J_per_row: float  # every row opened: activate + precharge of row_B bytes of bitlines
    weight_layout: str = "tiled"  # schema Device.weight_layout: how a GEMM's weight tiles sit in the rows

    @property
    def bank_bw_Bps(self) -> float:
        return self.peak_bw_Bps / self.banks


@dataclass(frozen=True)
class DeviceSpec:
    """One device (a 3D-stack cluster or a 2.5D die) at its nominal clock, SI units."""

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    # Fields that do not change an operator's timing are left out of equality and hashing, so operator and
    # collective results are shared by every device that times the same (memoisation, docs/architecture.md).
    name: str = field(compare=False)
    is_3d: bool
    pes: int
    clock_Hz: float
    matrix_flops_per_cycle: float  # per PE, FP16 dense
    vector_flops_per_cycle: float  # per PE, FP32
    sfu_ops_per_cycle: float  # per PE
    l0_B: float  # per PE
    l1_B: float  # per PE
    l1_bw_B_per_cycle: float  # per PE
    l2_B: float
    l2_bw_B_per_cycle: float
    min_tile: tuple[int, int, int]
    wgmma: bool
    dram: DramSpec
    tdp_W: float = field(compare=False)
    area: area_model.AreaBreakdown = field(compare=False)
    ambient_c: float = field(compare=False)
    target_c: float = field(compare=False)
    hard_limit_c: float = field(compare=False)
    device_area_mm2: float = field(compare=False)
    process_nm: int = 7  # sets the energy per operation (models/power.py); compared, as the energies are keyed on it
    dvfs: str = field(default="static", compare=False)  # the clock policy (schema Thermal.dvfs; models/dvfs.py)
    # a real GPU's decode attention backends split a request's KV over up to 128 thread blocks to fill the SMs
    # (models/compute/attention.py GPU_KV_SPLITS); a statically scheduled device searches SPLIT_K's few
    gpu_kv_splits: bool = False
    gpu: bool = field(default=False, compare=False)  # a real GPU (its chip has a ``gpu`` table): models/gpu/power.py
    idle_W: float | None = field(default=None, compare=False)  # a GPU's board power at idle (gpu.idle_W), or None
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def peak_matrix_flops(self) -> float:
        return self.pes * self.matrix_flops_per_cycle * self.clock_Hz

    @property
    def peak_vector_flops(self) -> float:
        return self.pes * self.vector_flops_per_cycle * self.clock_Hz

    @property
    def peak_sfu_ops(self) -> float:
        return self.pes * self.sfu_ops_per_cycle * self.clock_Hz

    @property
    def l1_bw_Bps(self) -> float:
        """Aggregate L1 bandwidth of all PEs."""
        return self.pes * self.l1_bw_B_per_cycle * self.clock_Hz

    @property
    def l2_bw_Bps(self) -> float:
        return self.l2_bw_B_per_cycle * self.clock_Hz


@memo.cached(maxsize=4096)
def timing_device(dev: DeviceSpec) -> DeviceSpec:
    """The first device seen that times like ``dev`` (equal in every field but area, TDP and thermal limits).
    Timing memo tables keyed on it then hit by identity, instead of comparing two equal devices field by field
    on every lookup (the NoC bandwidth variants of a sweep differ in area but often not in PE count)."""
    return dev


@memo.cached(maxsize=4096)
def resolve_device(chip: ChipArchitecture, stacked_layers: int | None = None, connected_layers: int | None = None,
                   network: Network | None = None, sram: SramOption | None = None,
                   noc_bw_scale: float = 1.0) -> DeviceSpec:
    """Resolve a Table 2 architecture with optional stacking, SRAM and NoC overrides into a :class:`DeviceSpec`.

    ``network`` sets the NoC area (aggregate link bandwidth per device); without it the TMS1 baseline is assumed
    for 3D chips (the paper's calibration point). ``noc_bw_scale`` multiplies the chip's own NoC scale.
    """
    d = chip.device
    dram = d.dram
    if dram.technology == "3d-stacked":
        m = stacked_layers if stacked_layers is not None else dram.stacked_layers
        n = connected_layers if connected_layers is not None else min(dram.connected_layers, m)
        if not 1 <= m <= MAX_STACKED_LAYERS:
            raise UserInputError(f"stacked_layers (m): must be in 1..{MAX_STACKED_LAYERS} (got {m})")
        if not 1 <= n <= MAX_STACKED_LAYERS:
            raise UserInputError(f"connected_layers (n): must be in 1..{MAX_STACKED_LAYERS} (got {n})")
        if n > m:
            raise UserInputError(f"connected_layers (n = {n}) must be ≤ stacked_layers (m = {m})")
        dram = dram.model_copy(update={"stacked_layers": m, "connected_layers": n})
        interleave_ways = dram.interleave_ways if dram.connectivity == "interleaved" else 1  # 1: direct-attached
    else:
        if stacked_layers is not None or connected_layers is not None:
            raise UserInputError(f"stacked/connected layers apply to 3D-stacked chips only; {chip.name} uses HBM")
        m = n = 0
        # HBM: the banks of a pseudo-channel (HBM3: 4 bank groups × 4) interleave behind it (docs/calibration.md §4)
        interleave_ways = dram.banks_per_channel
    dram_spec = DramSpec(
        technology=dram.technology, stacked_layers=m, connected_layers=n, capacity_B=dram.capacity_B,
        peak_bw_Bps=dram.peak_bw_Bps, banks=dram.banks, row_B=dram.row_bytes,
        row_overhead_s=dram.timing.row_cycle_overhead_s, access_latency_s=dram.timing.access_latency_s,
        refresh_availability=dram.timing.refresh_availability, interleave_ways=interleave_ways,
        transfer_J_per_B=dram.transfer_pJ_per_bit * 8e-12,
        activation_J_per_row=dram.activation_pJ_per_row_bit * dram.row_bytes * 8e-12,
        weight_layout=d.weight_layout,
    )
    l1_KiB = sram.l1_KiB if sram and sram.l1_KiB else chip.pe.l1_KiB
    l1_bw = chip.pe.l1_bw_B_per_cycle * (sram.l1_bw_scale if sram else 1.0)
    l2_MiB = sram.l2_MiB if sram and sram.l2_MiB else d.l2_MiB
    if network is not None:
        noc_bw = area_model.network_bw_per_level_Bps(network.levels)
    else:
        noc_bw = area_model.TMS1_LEVEL_BW_Bps if dram_spec.technology == "3d-stacked" else ()
    noc_bw = tuple(bw * chip.noc_bw_scale * noc_bw_scale for bw in noc_bw)
    fixed_pes = None if d.pes == "auto" else d.pes
    breakdown = area_model.device_area(
        pe=chip.pe, pes=fixed_pes, budget_mm2=d.area_mm2, l1_KiB=l1_KiB, l1_bw_B_per_cycle=l1_bw, l2_MiB=l2_MiB,
        l2_bw_B_per_cycle=d.l2_bw_B_per_cycle, dram_peak_bw_Bps=dram_spec.peak_bw_Bps,
        connected_layers=dram_spec.connected_layers, noc_level_bw_Bps=noc_bw,
        extra_dram_mm2=dram.stacks * HBM_PHY_MM2_PER_STACK if dram_spec.technology == "hbm" else 0.0,
    )
    if breakdown.pes < 1:
        raise UserInputError(
            f"{chip.name}: no PE fits in {d.area_mm2:g} mm² after DRAM interface, SRAM and NoC "
            f"({breakdown.dram_interface_mm2 + breakdown.l2_mm2 + breakdown.noc_mm2:.1f} mm²); "
            "use fewer connected layers or less NoC bandwidth"
        )
    return DeviceSpec(
        name=chip.name, is_3d=dram_spec.technology == "3d-stacked", pes=breakdown.pes, clock_Hz=chip.clock_Hz,
        matrix_flops_per_cycle=chip.pe.matrix_flops_per_cycle, vector_flops_per_cycle=chip.pe.vector_flops_per_cycle,
        sfu_ops_per_cycle=chip.pe.sfu_ops_per_cycle, l0_B=chip.pe.l0_B, l1_B=l1_KiB * 1024,
        l1_bw_B_per_cycle=l1_bw, l2_B=l2_MiB * 1024**2, l2_bw_B_per_cycle=d.l2_bw_B_per_cycle,
        min_tile=(chip.pe.min_tile.m, chip.pe.min_tile.n, chip.pe.min_tile.k), wgmma=chip.pe.wgmma, dram=dram_spec,
        tdp_W=chip.tdp_W, area=breakdown, ambient_c=chip.thermal.ambient_c, target_c=chip.thermal.target_c,
        hard_limit_c=chip.thermal.hard_limit_c, device_area_mm2=d.area_mm2, process_nm=chip.process_nm,
        dvfs=chip.thermal.dvfs, gpu_kv_splits=chip.gpu is not None, gpu=chip.gpu is not None,
        idle_W=chip.gpu.idle_W if chip.gpu is not None else None,
    )
