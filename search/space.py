"""Design spaces: loading, their axes as concrete points, and the raw size (paper §4.2.2)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.models import memo
from deepstack.models.design import DesignPoint
from deepstack.models.parallel.strategies import enumerate_strategies
from deepstack.schema import DesignSpace, Network, Scenario, Schedule, build_scenario, load_file
from deepstack.schema.hardware import ChipArchitecture

MAX_USEFUL_LAYERS = 10  # paper §4.2.3: m > 10 is Pareto-dominated (pruned before any evaluation)


SPACES_DIR = Path(__file__).resolve().parent / "spaces"  # package data, installed beside this module


def space_names() -> tuple[str, ...]:
    folder = SPACES_DIR
    return tuple(sorted(p.name.removesuffix(".toml") for p in folder.iterdir() if p.name.endswith(".toml")))


def load_space(value: str | None) -> DesignSpace:
    """A design space by name (``default``, ``paper``, …) or path; ``None`` is the embedded default. A space file
    is read again when it changed (its size or modification time), so a long-lived process never answers from an
    edited file's old content."""
    value = (value or "default").strip()
    if not value.lower().endswith((".toml", ".yaml", ".yml", ".json")) and "/" not in value:
        return _named_space(value)
    return _space_file(value, catalog.file_stamp(value))  # None: load_file reports the problem, one line


@memo.cached(maxsize=16)
def _named_space(name: str) -> DesignSpace:
    if name not in space_names():
        raise UserInputError(f"--space: unknown space {name!r}; allowed: {', '.join(space_names())} or a file path")
    return _read_space(SPACES_DIR / f"{name}.toml")


@memo.cached(maxsize=64)
def _space_file(value: str, stamp: tuple | None) -> DesignSpace:
    """The space in file ``value`` as it was at ``stamp`` (the memo key: a changed file is another entry)."""
    return _read_space(Path(value))


def _read_space(path: Path) -> DesignSpace:
    return checked_space(load_file(path, expected_kind="space"), path)


def checked_space(space: DesignSpace, path: Path) -> DesignSpace:
    """A space read from ``path`` with its relative preset paths resolved, refused if it names a preset that
    does not exist."""
    space = _resolve_relative(space, path.resolve().parent)
    _check_references(space, path)
    if any(catalog.load("chips", chip).is_3d for chip in space.hardware.chips):
        searched_stackings(space, f"{path}: hardware.stacked_layers")
    return space


def searched(stacked_layers: int) -> bool:
    """Whether a search evaluates a stack of this height (m ≤ 10: paper §4.2.3 prunes deeper stacks as
    Pareto-dominated before any evaluation)."""
    return stacked_layers <= MAX_USEFUL_LAYERS


def searched_stackings(space: DesignSpace, where: str) -> list[int]:
    """The stack heights m a search of ``space`` evaluates: those ≤ 10 (§4.2.3); refused (naming ``where``) when
    there are none, which would leave every 3D chip of the space without a point."""
    stacked = sorted({m for m in space.hardware.stacked_layers if searched(m)})
    if not stacked:
        raise UserInputError(f"{where}: no value ≤ {MAX_USEFUL_LAYERS} (got {list(space.hardware.stacked_layers)}); "
                             f"searches skip deeper stacks (paper §4.2.3: they are Pareto-dominated)")
    return stacked


def _check_references(space: DesignSpace, path: Path) -> None:
    """Refuse, naming the file and its field, a model, chip or NoC the space names that does not exist: a search
    met it only later, without naming where it was, and ``validate`` not at all."""
    for where, kind, names in (("scenarios.models", "llms", space.scenarios.models),
                               ("hardware.chips", "chips", space.hardware.chips),
                               ("hardware.nocs", "nocs", space.hardware.nocs)):
        for name in names:
            try:
                catalog.load(kind, name)
            except UserInputError as exc:
                raise UserInputError(f"{path}: {where}: {exc}") from None


def _resolve_relative(space: DesignSpace, folder: Path) -> DesignSpace:
    """Preset references that are relative file paths are taken relative to the space file."""

    def fix(ref: str) -> str:
        if ref.lower().endswith((".toml", ".yaml", ".yml", ".json")) and not Path(ref).is_absolute():
            return str(folder / ref)
        return ref

    hardware = space.hardware.model_copy(update={"chips": tuple(map(fix, space.hardware.chips)),
                                                  "nocs": tuple(map(fix, space.hardware.nocs))})
    scenarios_ = space.scenarios.model_copy(update={"models": tuple(map(fix, space.scenarios.models))})
    return space.model_copy(update={"hardware": hardware, "scenarios": scenarios_})


@dataclass(frozen=True, order=True)
class HardwarePoint:
    """One hardware choice of a space (file units: scales are multipliers)."""

    chip: str
    noc: str
    stacked_layers: int | None  # None for 2.5D (HBM) chips
    connected_layers: int | None
    sram: str
    hop_latency_scale: float = 1.0
    level_bw_scales: tuple[float, ...] = ()

    @property
    def label(self) -> str:
        stack = f"m{self.stacked_layers}n{self.connected_layers}" if self.stacked_layers else "hbm"
        bw = "x".join(f"{s:g}" for s in self.level_bw_scales)
        return f"{self.chip}/{self.noc}/{stack}/{self.sram}/lat{self.hop_latency_scale:g}/bw{bw}"

    def as_dict(self) -> dict:
        return {"chip": self.chip, "noc": self.noc, "stacked_layers": self.stacked_layers,
                "connected_layers": self.connected_layers, "sram": self.sram,
                "hop_latency_scale": self.hop_latency_scale, "level_bw_scales": list(self.level_bw_scales)}


def scenarios(space: DesignSpace) -> list[Scenario]:
    """Every scenario of a space's axes (models × phases × batches × sequence lengths), in the space's cooling
    environment (``ambient_c``, ``max_temp_c``; unset: each chip's)."""
    axes = space.scenarios
    return [build_scenario(model, phase, batch, input_len, output_len, axes.precision,
                           origin=f"space {space.name} scenario", assumptions=axes.assumptions
                           ).with_cooling(axes.ambient_c, axes.max_temp_c)
            for model in axes.models for phase in axes.phases for batch in axes.batches
            for input_len, output_len in axes.sequence_lengths]


def stacking_pairs(space: DesignSpace, chip: ChipArchitecture, prune: bool = True) -> list[tuple]:
    """(m, n) pairs of a 3D chip: every listed m (≤ 10 when pruning, §4.2.3) with n ≤ m."""
    if not chip.is_3d:
        return [(None, None)]
    hw = space.hardware
    pairs = []
    for m in hw.stacked_layers:
        if prune and not searched(m):
            continue
        ns = range(1, m + 1) if hw.connected_layers == "all" else [n for n in hw.connected_layers if n <= m]
        pairs.extend((m, n) for n in ns)
    return pairs


def base_points(space: DesignSpace, prune: bool = True) -> list[HardwarePoint]:
    """Tier-1 hardware: chip × NoC × stacking × SRAM at nominal hop latency and link bandwidth."""
    hw = space.hardware
    out = []
    for chip_name in hw.chips:
        chip = catalog.load("chips", chip_name)
        for noc in hw.nocs:
            for m, n in stacking_pairs(space, chip, prune):
                for sram in hw.sram:
                    levels = len(catalog.load("nocs", noc).levels)
                    out.append(HardwarePoint(chip_name, noc, m, n, sram.name, 1.0, (1.0,) * levels))
    return out


def named_presets(space: DesignSpace) -> dict:
    """Every chip and NoC the space names, as loaded now (``chips:<name or path>``, ``nocs:…`` → the preset)."""
    return {f"{kind}:{ref}": catalog.load(kind, ref)
            for kind, refs in (("chips", space.hardware.chips), ("nocs", space.hardware.nocs)) for ref in refs}


def with_hop_latency(point: HardwarePoint, scale: float) -> HardwarePoint:
    return HardwarePoint(**{**point.__dict__, "hop_latency_scale": scale})


def with_level_bw(point: HardwarePoint, scales: tuple[float, ...]) -> HardwarePoint:
    return HardwarePoint(**{**point.__dict__, "level_bw_scales": tuple(scales)})


def scaled_network(noc: str | Network, hop_latency_scale: float, level_bw_scales: tuple[float, ...]) -> Network:
    """A catalog NoC (by name or file, or one already loaded) with every hop latency and each level's link
    bandwidth scaled."""
    if isinstance(noc, Network):
        return _scaled_network(noc, noc.name, hop_latency_scale, level_bw_scales)
    # keyed on the loaded NoC, not its name: an edited NoC file is loaded anew (catalog.load), so never answered
    # from its old content
    return _scaled_network(catalog.load("nocs", noc), noc, hop_latency_scale, level_bw_scales)


@memo.cached(maxsize=4096)
def _scaled_network(base: Network, label: str, hop_latency_scale: float,
                    level_bw_scales: tuple[float, ...]) -> Network:
    scales = level_bw_scales or (1.0,) * len(base.levels)
    if len(scales) != len(base.levels):
        raise UserInputError(f"level bandwidth scales: {label} has {len(base.levels)} levels, got {len(scales)}")
    levels = tuple(level.model_copy(update={"hop_latency_ns": level.hop_latency_ns * hop_latency_scale,
                                            "link_bw_GBps": level.link_bw_GBps * s})
                   for level, s in zip(base.levels, scales, strict=True))
    if hop_latency_scale == 1.0 and all(s == 1.0 for s in scales):
        return base
    return base.model_copy(update={"levels": levels, "name": f"{label}*"})


def sram_option(space: DesignSpace, hw: HardwarePoint):
    """The hardware point's SRAM option of the space, or None for the chip's own SRAM (the option "base" that
    changes nothing)."""
    return next(option for option in space.hardware.sram if option.name == hw.sram).override()


def design_point(space: DesignSpace, hw: HardwarePoint, scenario: Scenario,
                 schedule: Schedule | None = None) -> DesignPoint:
    return DesignPoint(
        chip=catalog.load("chips", hw.chip), scenario=scenario, schedule=schedule or Schedule(),
        network=scaled_network(hw.noc, hw.hop_latency_scale, hw.level_bw_scales),
        stacked_layers=hw.stacked_layers, connected_layers=hw.connected_layers, sram=sram_option(space, hw),
    )


def raw_size(space: DesignSpace) -> int:
    """Points of the unpruned space (paper §4.2.2): scenarios × Σ over chip × NoC of stacking × SRAM × hop
    latencies × bandwidth scales per level × (strategies of N × collective algorithms × single-chip schedules)."""
    hw, sched = space.hardware, space.schedule
    total = 0
    for chip_name in hw.chips:
        chip = catalog.load("chips", chip_name)
        for noc_name in hw.nocs:
            noc = catalog.load("nocs", noc_name)
            # enumerate_strategies pairs every factorization with FSDP off and on
            strategies = len(enumerate_strategies(noc.devices)) // 2 * len(set(sched.fsdp))
            hardware = (len(stacking_pairs(space, chip, prune=False)) * len(hw.sram) * len(hw.hop_latency_scale)
                        * len(hw.level_bw_scale) ** len(noc.levels))
            total += hardware * strategies * len(sched.collective_algorithms) * sched.single_chip_schedules
    scenario_count = (len(space.scenarios.models) * len(space.scenarios.phases) * len(space.scenarios.batches)
                      * len(space.scenarios.sequence_lengths))
    return total * scenario_count


def devices_of(space: DesignSpace) -> set[int]:
    return {catalog.load("nocs", noc).devices for noc in space.hardware.nocs}


def log10(value: float) -> float:
    return math.log10(value) if value > 0 else float("-inf")
