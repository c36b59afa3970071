"""The feasible hardware choices of a design space and scenario as tables, computed once without a solver: the
space's choices in a fixed order (chips, NoCs, SRAM options, m, n, hop-latency and per-level bandwidth scales),
the (chip, SRAM, n, NoC, bandwidth) tuples whose one PE + L2 + DRAM interface + NoC fit the area budget, the
schedules that fit each DRAM capacity and the (chip, m) pairs that fit at least one. The CP-SAT model of
:class:`deepstack.search.feasibility.Feasibility` is built from these tables (so OR-Tools stays imported by that
module alone), and a point they accept is answered by a look-up (:meth:`FeasibilityTables._hardware_feasible`)."""

from __future__ import annotations

import functools

import numpy as np

from deepstack import catalog
from deepstack.errors import UserInputError
from deepstack.models.hardware import area as area_model
from deepstack.models.parallel.memory import feasible_strategies
from deepstack.models.parallel.strategies import Strategy
from deepstack.schema import DesignSpace, Scenario
from deepstack.search.space import MAX_USEFUL_LAYERS, HardwarePoint, scaled_network, searched_stackings

AREA_UNIT_MM2 = 1e-6  # areas become integers in µm²·(1e6 per mm²) for CP-SAT


class FeasibilityTables:
    """The choices of one space and scenario and the tables of what fits (area budget, memory)."""

    def __init__(self, space: DesignSpace, scenario: Scenario):
        self.space, self.scenario = space, scenario
        hw = space.hardware
        devices = {catalog.load("nocs", noc).devices for noc in hw.nocs}
        if len(devices) != 1:
            raise UserInputError(
                f"space {space.name}: optimize needs NoCs with one device count, got {sorted(devices)}"
            )
        self.n = devices.pop()
        self.levels = max(len(catalog.load("nocs", noc).levels) for noc in hw.nocs)
        self.chips = list(hw.chips)
        self.nocs = list(hw.nocs)
        self.srams = [option.name for option in hw.sram]
        self.stacked = searched_stackings(space, f"space {space.name}: stacked_layers")
        self.connected = "all" if hw.connected_layers == "all" else sorted(set(hw.connected_layers))
        self.hops = list(hw.hop_latency_scale)
        self.bws = list(hw.level_bw_scale)
        self.fsdp = sorted(set(space.schedule.fsdp))
        self._strategy_tables = self._memory_tables()

    def _area_terms(self):
        """Integer areas (µm²) of one PE + L2 (by chip, SRAM), DRAM interface (by chip, n), NoC (by chip, NoC,
        bandwidth choice), and each chip's budget before overhead; fixed-PE chips get an unbounded budget."""
        pe_l2, dram, noc, budget = [], [], [], []
        unit = 1 / AREA_UNIT_MM2
        for chip_name in self.chips:
            chip = catalog.load("chips", chip_name)
            d = chip.device
            for sram_name in self.srams:
                sram = next(o for o in self.space.hardware.sram if o.name == sram_name)
                l1 = sram.l1_KiB or chip.pe.l1_KiB
                l1_bw = chip.pe.l1_bw_B_per_cycle * sram.l1_bw_scale
                l2_MiB = sram.l2_MiB or d.l2_MiB
                pe = area_model.pe_area_mm2(chip.pe, l1, l1_bw)
                l2, _, _ = area_model.fixed_area_mm2(l2_MiB, d.l2_bw_B_per_cycle, 0.0, 0, ())
                pe_l2.append(round((pe + l2) * unit))
            for n in range(0, MAX_USEFUL_LAYERS + 1):
                if chip.is_3d and n >= 1:
                    bw = d.dram.layer_bw_GBps * 1e9 * n
                    _, dram_mm2, _ = area_model.fixed_area_mm2(0, 0, bw, n, ())
                else:
                    dram_mm2 = 0.0
                dram.append(round(dram_mm2 * unit))
            for noc_name in self.nocs:
                for combo in range(len(self.bws) ** self.levels):
                    scales = self._bw_scales(noc_name, combo)
                    net = scaled_network(noc_name, 1.0, scales)
                    noc_bw = tuple(bw * chip.noc_bw_scale for bw in area_model.network_bw_per_level_Bps(net.levels))
                    noc_mm2 = area_model.noc_area_mm2(noc_bw)
                    noc.append(round(noc_mm2 * unit))
            auto = d.pes == "auto"
            budget.append(round(d.area_mm2 / (1 + area_model.AREA_OVERHEAD) * unit) if auto else 10**12)
        return pe_l2, dram, noc, budget

    def _area_feasible_rows(self) -> list[list[int]]:
        pe_l2, dram, noc, budget = self._area_terms()
        srams, nocs, combos = len(self.srams), len(self.nocs), len(self.bws) ** self.levels
        layers = MAX_USEFUL_LAYERS + 1
        pe = np.array(pe_l2).reshape(len(self.chips), srams)
        dr = np.array(dram).reshape(len(self.chips), layers)
        nc = np.array(noc).reshape(len(self.chips), nocs, combos)
        total = pe[:, :, None, None, None] + dr[:, None, :, None, None] + nc[:, None, None, :, :]
        fits = total <= np.array(budget)[:, None, None, None, None]
        return np.argwhere(fits).tolist()

    def _bw_scales(self, noc_name: str, combo: int) -> tuple[float, ...]:
        levels = len(catalog.load("nocs", noc_name).levels)
        digits = []
        for _ in range(self.levels):
            digits.append(combo % len(self.bws))
            combo //= len(self.bws)
        return tuple(self.bws[i] for i in digits[:levels])

    def _capacity_B(self, chip_name: str, m: int) -> float:
        return catalog.load("chips", chip_name).device.dram.capacity_at_B(m)

    def _memory_tables(self) -> dict[float, list[Strategy]]:
        tables = {}
        for chip_name in self.chips:
            for m in self.stacked:
                capacity = self._capacity_B(chip_name, m)
                if capacity not in tables:
                    kept, _ = feasible_strategies(self.scenario, self.n, capacity)
                    tables[capacity] = [s for s in kept if s.fsdp in self.fsdp]
        return tables

    def _stackings(self, chip_name: str) -> list[int]:
        return self.stacked if catalog.load("chips", chip_name).is_3d else [0]

    @functools.cached_property
    def _area_rows(self) -> list[list[int]]:
        """The area-feasible (chip, SRAM, n, NoC, bandwidth) index rows (the model's area table)."""
        return self._area_feasible_rows()

    @functools.cached_property
    def _fitting_pairs(self) -> list[list[int]]:
        """The (chip, m) pairs whose DRAM fits at least one schedule (the model's memory table)."""
        return [[c, m] for c, chip_name in enumerate(self.chips) for m in self._stackings(chip_name)
                if self._strategy_tables[self._capacity_B(chip_name, m)]]

    @functools.cached_property
    def _tables(self) -> tuple[set, set]:
        """The model's two tables as sets, for the look-up of :meth:`_hardware_feasible`."""
        return {tuple(row) for row in self._area_rows}, {tuple(pair) for pair in self._fitting_pairs}

    def _hardware_feasible(self, hw: HardwarePoint) -> bool:
        """Whether ``hw`` satisfies every constraint of the CP-SAT model (the same tables, looked up)."""
        if hw.chip not in self.chips or hw.noc not in self.nocs or hw.sram not in self.srams \
                or hw.hop_latency_scale not in self.hops:
            return False
        chip = self.chips.index(hw.chip)
        m, n = hw.stacked_layers or 0, hw.connected_layers or 0
        if catalog.load("chips", hw.chip).is_3d:
            if m not in self.stacked or not 1 <= n <= m or (self.connected != "all" and n not in self.connected):
                return False
        elif m or n:
            return False
        levels = len(catalog.load("nocs", hw.noc).levels)
        if len(hw.level_bw_scales) != levels or any(b not in self.bws for b in hw.level_bw_scales):
            return False
        combo = sum(self.bws.index(b) * len(self.bws) ** i for i, b in enumerate(hw.level_bw_scales))
        area, fitting = self._tables
        return (chip, self.srams.index(hw.sram), n, self.nocs.index(hw.noc), combo) in area and (chip, m) in fitting
