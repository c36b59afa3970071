"""Power of a real GPU serving a model (docs/model.md §GPU power; figures in docs/calibration.md §GPU power).

Applied only to chips with a ``gpu`` table (``DeviceSpec.gpu``); every other device keeps the paper's law
(static power 10 % of TDP, energy counted per operation and per byte; models/power.py, models/dvfs.py). Two
terms differ on a GPU:

* **Idle power.** A GPU with nothing to run still draws its board's idle power with its clocks up (P0): the
  HBM kept refreshed, the PHYs, NVLink and the uncore powered, leakage. Measured with nvidia-smi it is
  115–145 W on Hopper and Blackwell boards, 16–21 % of their TDP, twice the paper's 10 % (the system's
  ``gpu.idle_W``, sourced in docs/calibration.md §GPU power; without a figure the paper's 10 % is kept). The
  GPU draws it all the time: between steps, while the host works, at kernel boundaries.
* **Clocked, waiting SMs.** The matrix engine's calibrated energy per FLOP (models/power.py,
  ``MATRIX_PJ_PER_FLOP_7NM``) includes the SMs' clocking and control, charged per FLOP because the engine was
  calibrated at full rate. An SM running a kernel pays them every cycle, whether its tensor cores work or wait
  on HBM (a memory-bound decode GEMM keeps every SM resident and stalled). So a GPU also draws, while an
  operator runs and its tensor cores are idle, the per-cycle share of the engine's full-rate power:
  ``SM_CLOCK_SHARE`` × matrix energy per FLOP × peak FLOP rate. At full compute utilisation the term is zero
  and the engine costs what it was calibrated at; collectives (a few SMs of a custom all-reduce) and the host's
  and launch rows (no kernel resident) do not pay it.
"""

from __future__ import annotations

from deepstack.models import thermal
from deepstack.models.pipeline.rows import COMPUTE_ROWS

# Calibrated (docs/calibration.md §GPU power): the share of the matrix engine's full-rate power that is per-cycle
# clocking and control of its SMs (the rest is per FLOP: datapath, operand delivery, accumulation). Set on ONE
# anchor, Llama-3.3-70B at 8 concurrent requests on 4× H100 (ML.ENERGY Leaderboard v3.0, vLLM 0.11.1; the most
# memory-bound point of the file): the modelled W per GPU equals the measured 447 W. Every other row of
# validation/mlenergy_power.csv is held out (deepstack accuracy power).
SM_CLOCK_SHARE = 0.54

# rows a GPU adds that run no kernel on the SMs (models/gpu/host.py: host work, kernel boundaries, the fused-MoE
# chain's fixed latency): the timing kind of models/gpu/host.py fixed_timing
_NO_KERNEL = "gpu"


def idle_power_w(dev) -> float:
    """What ``dev`` draws with nothing to run: a GPU's sourced idle power (``gpu.idle_W``), else the paper's
    static power, 10 % of TDP."""
    if dev.gpu and dev.idle_W is not None:
        return dev.idle_W
    return thermal.static_power_w(dev.tdp_W)


def sm_clock_power_w(dev, coefficients) -> float:
    """The per-cycle power of ``dev``'s SMs while a kernel runs and the tensor cores wait, at the nominal clock:
    ``SM_CLOCK_SHARE`` × the matrix engine's power at its peak FLOP rate."""
    return SM_CLOCK_SHARE * coefficients.matrix_J_per_flop * dev.peak_matrix_flops


def waiting_s(phase, dev, scale: float) -> float:
    """Time of one step (its microbatches) at ``scale`` × the nominal clock in which an operator's kernel runs
    but its tensor cores are idle: Σ count × (operator time − matrix FLOPs at the peak rate), operators only."""
    peak = dev.peak_matrix_flops * scale
    total = 0.0
    for r in phase.rows:
        if isinstance(r, COMPUTE_ROWS) and r.timing.kind != _NO_KERNEL:
            total += r.count * max(0.0, r.time_at(scale) - r.timing.matrix_flops / peak)
    return total * phase.microbatches


def waiting_energy_J(phase, dev, coefficients, scale: float) -> float:
    """Energy of the clocked, waiting SMs in one step of ``phase`` on ``dev`` (0 on a device that is no GPU). The
    power scales as f·V² ∝ f³ (V ∝ f, as the core energy of models/dvfs.py)."""
    if not dev.gpu:
        return 0.0
    return sm_clock_power_w(dev, coefficients) * scale**3 * waiting_s(phase, dev, scale)

