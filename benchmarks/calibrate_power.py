"""Check the energy model against board-level power anchors (run by hand: `python benchmarks/calibrate_power.py`).

Not a speed benchmark: the calibration behind models/power.py. Every anchor runs a compute-bound step (dense
GEMMs: Llama-3.3-70B prefill of 1024-token prompts, ≥ 95 % compute utilisation where the chip allows it) through
the evaluator and compares the device's power with a public figure. A TDP is the power a board draws under its
heaviest sustained load, which for these GPUs is dense GEMM.

- calibration (sets ``MATRIX_PJ_PER_FLOP_7NM``, the one calibrated energy): the paper's two 2.5D baselines,
  H100* and H200* (7 nm, 800 mm², paper Table 2) on their 32-GPU cluster, rated at the 700 W TDP of the H100 /
  H200 SXM they are scaled from (NVIDIA datasheets). The constant puts the mean of their power at the nominal
  clock at 700 W; the script prints the committed value and the one the anchors give. Both must then draw
  85–105 % of 700 W.
- checks (not fitted): an A100 SXM (TSMC N7: 400 W, 312 TFLOPS; NVIDIA A100 datasheet and whitepaper), the GPUs
  of the dgx-h100 and dgx-b200 systems (4N / 4NP: 700 W and 1000 W; NVIDIA H100 datasheet, DGX B200 datasheet),
  each within 85–105 % of its TDP; a Standard 100 mm² 3D cluster (m = n = 4, TMS1) at full load within
  0.5–0.9 W/mm² (H100 SXM: 700 W on 814 mm² ≈ 0.86 W/mm²; B200: 1000 W on two ≈ 800 mm² dies ≈ 0.6 W/mm²).

"power" is what the model reports (after DVFS: the power wall never lets a device exceed its TDP); "at nominal"
is what the same step would draw at the nominal clock, and "clock" the share of nominal DVFS settled on. The
script exits with status 1 if an anchor is outside its range (tests/test_power.py runs the same checks).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass

import deepstack
from deepstack import catalog
from deepstack.api import build_scenario
from deepstack.models import dvfs, thermal
from deepstack.models import power as power_model
from deepstack.models.design import DesignPoint
from deepstack.models.hardware.device import resolve_device, timing_device
from deepstack.models.pipeline import run_phase
from deepstack.schema import Schedule

MODEL = "llama-3.3-70b"
INPUT_LEN = 1024
H100_W_PER_MM2 = 700 / 814  # H100 SXM: 700 W TDP on an 814 mm² die (NVIDIA H100 datasheet, Hopper whitepaper)


@dataclass(frozen=True)
class Anchor:
    label: str
    source: str
    point: DesignPoint
    low: float  # allowed range of the checked figure: share of TDP, or W/mm² with ``per_mm2``
    high: float
    calibration: bool = False  # the matrix energy is set on this anchor (with the other calibration anchors)
    per_mm2: bool = False


@dataclass(frozen=True)
class Measured:
    anchor: Anchor
    power_w: float  # reported (after DVFS)
    nominal_w: float  # the same step at the nominal clock
    clock_scale: float
    compute_utilization: float
    matrix_share: float  # matrix-engine energy / all dynamic energy, at the nominal clock
    tdp_w: float
    area_mm2: float

    @property
    def figure(self) -> float:
        """The checked figure: W/mm², or the share of the TDP."""
        return self.power_w / self.area_mm2 if self.anchor.per_mm2 else self.power_w / self.tdp_w

    @property
    def ratio(self) -> float:
        """Model / anchor: against the H100 SXM's W/mm², or the TDP."""
        return self.figure / H100_W_PER_MM2 if self.anchor.per_mm2 else self.figure

    @property
    def holds(self) -> bool:
        return self.anchor.low <= self.figure <= self.anchor.high


def a100_system():
    """A DGX A100 (8 × A100 SXM 80 GB on NVSwitch) from NVIDIA's A100 datasheet and whitepaper: 108 SMs at
    1.41 GHz, 312 TFLOPS dense FP16 (2048 FLOP/cycle per SM), 19.5 TFLOPS FP32 (128 FLOP/cycle per SM), 40 MB
    L2, 192 KB L1 per SM, mma.sync (m16n8k16, no warp-group MMA), 5 HBM2e stacks at 2039 GB/s, NVLink 3 at
    300 GB/s per direction, 826 mm² in TSMC N7, 400 W. What the spec does not give (L1/L2 bytes per cycle,
    banks, timing, energies) is kept from the dgx-h100 preset."""
    h100 = catalog.load("systems", "dgx-h100")
    arch, net = h100.architecture, h100.network
    tile = arch.pe.min_tile.model_copy(update={"m": 16, "n": 8})
    pe = arch.pe.model_copy(update={"matrix_flops_per_cycle": 2048, "vector_flops_per_cycle": 128, "l1_KiB": 192,
                                    "wgmma": False, "min_tile": tile})
    dram = arch.device.dram.model_copy(update={"stack_bw_GBps": 2039 / 5})
    device = arch.device.model_copy(update={"area_mm2": 826.0, "pes": 108, "l2_MiB": 40, "dram": dram})
    chip = arch.model_copy(update={"name": "a100-sxm", "process_nm": 7, "clock_GHz": 1.41, "tdp_W": 400.0,
                                   "pe": pe, "device": device, "gpu": None})  # dense GEMM, not a serving wave
    level = net.levels[0].model_copy(update={"link_bw_GBps": 300.0})
    network = net.model_copy(update={"name": "dgx-a100-fabric", "device_area_mm2": 826.0, "levels": (level,)})
    return chip, network


def prefill_point(chip, network, batch: int, schedule: str, **hardware) -> DesignPoint:
    """Prefill of ``batch`` prompts on this hardware under ``schedule`` (data-parallel replicas, each running
    whole-layer GEMMs: the best-STPS schedules ``deepstack evaluate`` finds for these points). A GPU's ``gpu``
    table is dropped: an anchor is the board under sustained dense GEMM, the operator model's pass, not vLLM's
    prefill wave (docs/model.md §GPU prefill), whose first steps, host launches and kernel gaps leave the GPU idle
    part of the time."""
    if getattr(chip, "gpu", None) is not None:
        chip = chip.model_copy(update={"gpu": None})
    scenario = build_scenario(MODEL, "prefill", batch, INPUT_LEN, 1, None)
    return DesignPoint(chip=chip, scenario=scenario, network=network, schedule=Schedule.parse(schedule), **hardware)


def anchors() -> list[Anchor]:
    chip, noc, system = (lambda n: catalog.load("chips", n)), (lambda n: catalog.load("nocs", n)), (
        lambda n: catalog.load("systems", n))
    rated = "700 W TDP of the H100/H200 SXM (NVIDIA datasheets); paper Table 2"
    out = [Anchor(f"{name} b1024", rated, prefill_point(chip(name), noc("h100-star-32x"), 1024, "dp=32,fsdp"),
                  0.85, 1.05, calibration=True) for name in ("h100-star", "h200-star")]
    out.append(Anchor("A100 SXM b64", "400 W TDP (NVIDIA A100 datasheet)",
                      prefill_point(*a100_system(), 64, "dp=8,fsdp"), 0.85, 1.05))
    for name, source in (("dgx-h100", "700 W TDP (NVIDIA H100 datasheet)"),
                         ("dgx-b200", "1000 W per B200 (NVIDIA DGX B200 datasheet)")):
        machine = system(name)
        out.append(Anchor(f"{name} GPU b64", source,
                          prefill_point(machine.architecture, machine.network, 64, "dp=8,fsdp"), 0.85, 1.05))
    out.append(Anchor("standard m=n=4 TMS1 b1024", "0.5–0.9 W/mm² (H100 SXM 0.86 W/mm²)",
                      prefill_point(chip("standard"), noc("tms1"), 1024, "sp=2,dp=128,fsdp", stacked_layers=4,
                                    connected_layers=4), 0.5, 0.9, per_mm2=True))
    return out


def _step(point: DesignPoint):
    """(device, step, energy coefficients) of ``point``, as the evaluator makes them."""
    dev = resolve_device(point.chip, point.stacked_layers, point.connected_layers, point.network, point.sram,
                         point.noc_bw_scale)
    timed_on = timing_device(dev)
    return dev, run_phase(point, timed_on, point.scenario), power_model.coefficients(timed_on)


def nominal_power_w(point: DesignPoint, matrix_pj_per_flop_7nm: float | None = None) -> float:
    """The device's power running ``point``'s step at the nominal clock (static + counted energy / time), with
    the committed matrix energy or ``matrix_pj_per_flop_7nm``."""
    dev, phase, coefficients = _step(point)
    if matrix_pj_per_flop_7nm is not None:
        scaled = matrix_pj_per_flop_7nm / power_model.MATRIX_PJ_PER_FLOP_7NM
        coefficients = dataclasses.replace(coefficients, matrix_J_per_flop=coefficients.matrix_J_per_flop * scaled)
    energy = phase.energy_J(coefficients, 1.0, dvfs.noc_J_per_B(point.network), point.devices)
    return thermal.static_power_w(dev.tdp_W) + sum(energy) / phase.time_at(1.0)


def calibrated_matrix_pj(points: list[DesignPoint]) -> float:
    """The matrix energy per FLOP at 7 nm that puts the mean of the devices' nominal-clock power / TDP at 1
    (power is linear in it)."""
    tdp = [_step(p)[0].tdp_W for p in points]
    fixed = [nominal_power_w(p, 0.0) / t for p, t in zip(points, tdp, strict=True)]
    per_pj = [nominal_power_w(p, 1.0) / t - f for p, t, f in zip(points, tdp, fixed, strict=True)]
    return (len(points) - sum(fixed)) / sum(per_pj)


def measure(anchor: Anchor) -> Measured:
    report = deepstack.evaluate(anchor.point)
    dev = _step(anchor.point)[0]
    nominal = nominal_power_w(anchor.point)
    static = thermal.static_power_w(dev.tdp_W)
    matrix = nominal - nominal_power_w(anchor.point, 0.0)
    b = report.breakdown
    return Measured(anchor, b.power_w_per_device, nominal, b.clock_scale, b.utilization.compute,
                    matrix / (nominal - static), dev.tdp_W, dev.device_area_mm2)


def main() -> int:
    found = anchors()
    measured = [measure(a) for a in found]
    fitted = calibrated_matrix_pj([a.point for a in found if a.calibration])
    datapath = power_model.matrix_datapath_J_per_flop() / power_model.PJ
    print(f"matrix engine: {power_model.MATRIX_PJ_PER_FLOP_7NM:.3f} pJ/FLOP at 7 nm committed, {fitted:.3f} from the "
          f"calibration anchors; Horowitz's datapath alone {datapath:.3f}")
    print(f"{'anchor':27} {'role':11} {'power W':>8} {'nominal W':>9} {'clock':>6} {'util':>5} {'matrix':>6} "
          f"{'model':>11} {'anchor':>11} {'ratio':>6}  holds  source")
    for m in measured:
        a = m.anchor
        model = f"{m.figure:.2f} W/mm²" if a.per_mm2 else f"{m.power_w:.0f} W"
        target = f"{H100_W_PER_MM2:.2f} W/mm²" if a.per_mm2 else f"{m.tdp_w:.0f} W"
        print(f"{a.label:27} {'calibration' if a.calibration else 'check':11} {m.power_w:8.1f} {m.nominal_w:9.1f} "
              f"{m.clock_scale:6.3f} {m.compute_utilization:5.2f} {m.matrix_share:6.0%} {model:>11} {target:>11} "
              f"{m.ratio:6.2f}  {'yes' if m.holds else 'NO':5}  {a.source}")
    failed = [m.anchor.label for m in measured if not m.holds]
    if failed:
        print(f"outside the range: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
