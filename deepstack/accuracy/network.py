"""Accuracy of the network model against packet-level simulation (``validation/ns3_collectives.csv``).

Every row of the reference file is one collective simulated with ASTRA-sim 2.0's NS-3 backend
(``validation/README.md``). :func:`network_accuracy` turns each row into a call of
:func:`deepstack.models.collectives.collective_time` on the same network, compares the predicted time with the
simulated one and summarises the errors: per topology family the paper's weighted error Σ|model − ref| / Σ ref
and the median per-row error |model − ref| / ref, the same per panel (topology, dims, collective) and per
payload size. The metric functions take plain (reference, model) pairs.

A row becomes a model call as follows.

* **Topology.** ``torus_2d`` with dims ``XxY``: one torus level (X, Y). ``switch_2level`` with dims ``Ax1``: one
  switch of A NPUs; with ``AxB`` (B > 1): that switch as level 1 and a switch of B above it as level 2, with
  ``ports="shared_uplink"``: level 2 is one uplink per group of A NPUs, shared by the group's NPUs. The network
  uses ``completion="acknowledged"``: the simulator reports a message done only when its transfer is
  acknowledged (see :class:`~deepstack.models.network.NetworkTopology`).
* **Units.** ``link_bw_GBps`` × 1e9 → B/s, ``hop_latency_ns`` × 1e-9 → s (the ``l2_`` columns for level 2).
* **Framing.** The simulator cuts a message into packets of :data:`SIMULATOR_PAYLOAD_PER_PACKET_B` (1,000) payload
  bytes; a packet on the wire is the row's ``packet_bytes`` (1,024), so each packet adds 24 bytes
  (:func:`header_bytes_per_packet`). The file's ``header_bytes`` column (36) is the NS-3 data packet's
  PPP + IPv4 + UDP + SeqTs headers; the simulated large-message rate is exactly 1000/1024 of the stated link
  bandwidth, which agrees with 1,024-byte packets carrying 1,000 bytes of payload (docs/calibration.md).
* **Algorithm.** :data:`ALGORITHMS`, per topology family and collective: the model's algorithm that runs what the
  simulator ran (the file's ``algorithm`` column).
* **Bytes per rank** (``collective_time``'s meaning): all-gather the per-node input shard and all-reduce the full
  buffer, both ``payload_bytes_inferred``; all-to-all the whole send buffer, ``payload_bytes_inferred`` × nodes
  (the file gives the message to each destination).

Rows without a simulated time are evaluated but left out of every error (reported as "no reference"); a row
whose model call raises is a failure, listed with its error.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import deepstack
from deepstack.accuracy.files import each, read_csv
from deepstack.errors import UserInputError
from deepstack.models.collectives import collective_time
from deepstack.models.network import NetworkTopology, TopologyLevel

# ASTRA-sim's NS-3 backend, scratch/config/config.txt: PACKET_PAYLOAD_SIZE 1000 (astra-sim/astra-network-ns3)
SIMULATOR_PAYLOAD_PER_PACKET_B = 1000

FAMILIES = {"switch_2level": "switch", "torus_2d": "torus"}

# (family, collective) → the model's algorithm; each comment quotes the file's ``algorithm`` column.
ALGORITHMS = {
    # "halving_doubling (recursive doubling, 3 or 6 stages)": far partners first with the smallest blocks
    ("switch", "all_gather"): "halving_doubling",
    # "rabenseifner (halving-doubling reduce-scatter + all-gather)", run one dimension at a time as ASTRA-sim does
    # (inside each 8-NPU group first): the largest exchanges stay near, which is our halving_doubling (our
    # "rabenseifner" is the classic far-first order, which would put S/2 per NPU on the shared uplink)
    ("switch", "all_reduce"): "halving_doubling",
    # "direct (every node sends bytes to every other node)"
    ("switch", "all_to_all"): "direct",
    # "ring (2(N-1) steps over a snake ring of node ids)": ASTRA-sim runs it one dimension at a time with a ring in
    # each (reduce-scatter along x, all-reduce along y, all-gather along x): the measured latency is 4(X−1) steps
    ("torus", "all_reduce"): "hierarchical_ring",
    # "rs_ag_ag_3stage (RS stage disabled; ring AG over PP dim then ring AG over TP dim)": one dimension, then the other
    ("torus", "all_gather"): "hierarchical_ring",
    # "direct, XY dimension-order routing"
    ("torus", "all_to_all"): "direct",
}

# payload buckets of the per-size table, bytes (upper bounds, inclusive)
SMALL_MAX_B = 64 * 1024
MEDIUM_MAX_B = 16 * 1024 * 1024
SIZE_LABELS = {"small": "≤ 64 KiB", "medium": "64 KiB – 16 MiB", "large": "> 16 MiB"}


class Score(NamedTuple):
    """Errors of a set of rows, in %: the paper's weighted error and the median per-row error."""

    weighted_pct: float
    median_pct: float
    rows: int


class SizeScore(NamedTuple):
    """Errors of the rows of one payload bucket, in %: the median and the worst per-row error (absolute)."""

    rows: int
    median_pct: float
    worst_pct: float


@dataclass(frozen=True)
class RowResult:
    """One reference row and the model's prediction; ``error`` is signed, (model − ref) / ref."""

    topology: str
    dims: str
    nodes: int
    collective: str
    algorithm: str
    payload_B: int
    ref_ns: float | None
    model_ns: float | None
    error: float | None

    @property
    def family(self) -> str:
        return FAMILIES[self.topology]

    @property
    def panel(self) -> tuple[str, str, str]:
        return self.topology, self.dims, self.collective


@dataclass(frozen=True)
class NetworkAccuracy:
    """The comparison: every row, the scores per family, panel and payload bucket, and the failed rows."""

    reference: str
    rows: tuple[RowResult, ...]
    families: dict[str, Score]
    panels: dict[tuple[str, str, str], Score]
    sizes: dict[tuple[str, str], SizeScore]
    failures: tuple[tuple[RowResult, str], ...]

    @property
    def no_reference(self) -> tuple[RowResult, ...]:
        return tuple(row for row in self.rows if row.ref_ns is None)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {
            "reference": self.reference,
            "rows_total": len(self.rows),
            "rows_with_reference": len(self.rows) - len(self.no_reference),
            "families": {family: score._asdict() for family, score in self.families.items()},
            "panels": [{"topology": t, "dims": d, "collective": c, "algorithm": ALGORITHMS.get((FAMILIES[t], c), "?"),
                        **score._asdict()} for (t, d, c), score in self.panels.items()],
            "sizes": [{"family": family, "size": size, "payload": SIZE_LABELS[size], **score._asdict()}
                      for (family, size), score in self.sizes.items()],
            "rows": [asdict(row) for row in self.rows],
            "no_reference": [_brief(row) for row in self.no_reference],
            "failures": [{**_brief(row), "error": message} for row, message in self.failures],
        }


def _brief(row: RowResult) -> dict[str, Any]:
    return {"topology": row.topology, "dims": row.dims, "collective": row.collective, "payload_B": row.payload_B}


# ---------------------------------------------------------------------------------------------- metrics


def weighted_error_pct(pairs: Iterable[tuple[float, float]]) -> float:
    """The paper's metric: 100 · Σ|model − ref| / Σ ref over (ref, model) pairs (NaN without pairs)."""
    pairs = list(pairs)
    total = sum(ref for ref, _ in pairs)
    return 100 * sum(abs(model - ref) for ref, model in pairs) / total if total else math.nan


def median_error_pct(pairs: Iterable[tuple[float, float]]) -> float:
    """100 · the median of |model − ref| / ref over (ref, model) pairs (NaN without pairs)."""
    errors = [abs(model - ref) / ref for ref, model in pairs]
    return 100 * statistics.median(errors) if errors else math.nan


def worst_error_pct(pairs: Iterable[tuple[float, float]]) -> float:
    """100 · the largest |model − ref| / ref over (ref, model) pairs (NaN without pairs)."""
    errors = [abs(model - ref) / ref for ref, model in pairs]
    return 100 * max(errors) if errors else math.nan


def score(pairs: Sequence[tuple[float, float]]) -> Score:
    return Score(weighted_error_pct(pairs), median_error_pct(pairs), len(pairs))


def size_score(pairs: Sequence[tuple[float, float]]) -> SizeScore:
    return SizeScore(len(pairs), median_error_pct(pairs), worst_error_pct(pairs))


def size_bucket(payload_B: float) -> str:
    """``small`` up to 64 KiB, ``medium`` up to 16 MiB, ``large`` above."""
    if payload_B <= SMALL_MAX_B:
        return "small"
    return "medium" if payload_B <= MEDIUM_MAX_B else "large"


# ---------------------------------------------------------------------------------------------- rows → calls


def reference_path() -> Path:
    """The repository's ``validation/ns3_collectives.csv`` (DeepStack is installed editable from the repository)."""
    path = Path(deepstack.__file__).resolve().parents[1] / "validation" / "ns3_collectives.csv"
    if not path.is_file():
        raise UserInputError(f"reference file: {path} is missing; it ships with the repository (validation/)")
    return path


def read_reference(path: Path) -> list[dict[str, str]]:
    """The rows of a reference file, as strings."""
    return read_csv(path)


def header_bytes_per_packet(row: dict[str, str]) -> int:
    """Bytes a packet adds to its payload on the wire: the packet (``packet_bytes``) minus the simulator's payload."""
    return int(row["packet_bytes"]) - SIMULATOR_PAYLOAD_PER_PACKET_B


def _dims(row: dict[str, str]) -> tuple[int, int]:
    x, y = (int(part) for part in row["dims"].lower().split("x"))
    return x, y


def _level(topology: str, dims: tuple[int, ...], bw_GBps: str, latency_ns: str, header_B: int,
           ports: str = "per_device") -> TopologyLevel:
    return TopologyLevel(topology, dims, float(bw_GBps) * 1e9, float(latency_ns) * 1e-9,
                         packet_bytes=SIMULATOR_PAYLOAD_PER_PACKET_B, header_bytes=header_B, ports=ports)


def row_topology(row: dict[str, str]) -> NetworkTopology:
    """The network a row was simulated on (see the module docstring)."""
    x, y = _dims(row)
    header_B = header_bytes_per_packet(row)
    l1 = (row["link_bw_GBps"], row["hop_latency_ns"], header_B)
    if row["topology"] == "torus_2d":
        levels = (_level("torus", (x, y), *l1),)
    elif row["topology"] == "switch_2level":
        levels = (_level("switch", (x,), *l1),)
        if y > 1:  # one uplink per group of x NPUs, shared by the group
            levels += (_level("switch", (y,), row["l2_link_bw_GBps"], row["l2_hop_latency_ns"], header_B,
                              ports="shared_uplink"),)
    else:
        raise ValueError(f"topology {row['topology']!r}: expected one of {', '.join(FAMILIES)}")
    return NetworkTopology(levels, completion="acknowledged")


def bytes_per_rank(row: dict[str, str]) -> int:
    """``collective_time``'s per-rank input: the shard (all-gather), the buffer (all-reduce), the whole send buffer
    (all-to-all: the per-destination message × nodes)."""
    payload = int(row["payload_bytes_inferred"])
    return payload * int(row["nodes"]) if row["collective"] == "all_to_all" else payload


def model_time_ns(row: dict[str, str]) -> float:
    """The model's time for a row, ns."""
    algorithm = ALGORITHMS[(FAMILIES[row["topology"]], row["collective"])]
    result = collective_time(row["collective"], bytes_per_rank(row), tuple(range(int(row["nodes"]))),
                             row_topology(row), algorithm=algorithm)
    return result.time_s * 1e9


def _evaluate(row: dict[str, str]) -> tuple[RowResult, str | None]:
    """The row's result, and the model's error message if it raised."""
    ref_ns = float(row["ns3_time_ns"]) if row["ns3_time_ns"].strip() else None
    model_ns, failure = None, None
    try:
        model_ns = model_time_ns(row)
    except Exception as exc:  # a report, not a crash: every failing row is listed with its error
        failure = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    error = (model_ns - ref_ns) / ref_ns if model_ns is not None and ref_ns is not None else None
    algorithm = ALGORITHMS.get((FAMILIES[row["topology"]], row["collective"]), "?")
    result = RowResult(row["topology"], row["dims"], int(row["nodes"]), row["collective"], algorithm,
                       int(row["payload_bytes_inferred"]), ref_ns, model_ns, error)
    return result, failure


# ---------------------------------------------------------------------------------------------- the report


def network_accuracy(reference: str | Path | None = None, progress=None) -> NetworkAccuracy:
    """Compare the network model with every row of the reference file (default: :func:`reference_path`);
    ``progress(done, total)`` after each row."""
    path = Path(reference) if reference is not None else reference_path()
    if not path.is_file():
        raise UserInputError(f"reference file: {path} does not exist")
    evaluated = each(_evaluate, _checked(read_reference(path), path), progress)
    rows = tuple(row for row, _ in evaluated)
    compared = [row for row in rows if row.error is not None]
    return NetworkAccuracy(
        reference=str(path),
        rows=rows,
        families=_grouped(compared, lambda row: row.family, score),
        panels=_grouped(compared, lambda row: row.panel, score),
        sizes=_grouped(compared, lambda row: (row.family, size_bucket(row.payload_B)), size_score,
                       order=lambda key: (key[0], list(SIZE_LABELS).index(key[1]))),
        failures=tuple((row, failure) for row, failure in evaluated if failure is not None),
    )


def _grouped(rows: list[RowResult], key, summarise, order=None) -> dict:
    """``summarise`` of the (ref, model) pairs of each group of rows, groups in first-seen (or ``order``) order."""
    groups: dict = {}
    for row in rows:
        groups.setdefault(key(row), []).append((row.ref_ns, row.model_ns))
    keys = sorted(groups, key=order) if order else list(groups)
    return {k: summarise(groups[k]) for k in keys}


REQUIRED_COLUMNS = ("topology", "dims", "nodes", "collective", "payload_bytes_inferred", "link_bw_GBps",
                    "hop_latency_ns", "l2_link_bw_GBps", "l2_hop_latency_ns", "packet_bytes", "ns3_time_ns")


def _checked(rows: list[dict[str, str]], path: Path) -> list[dict[str, str]]:
    """The rows, once the columns this module reads are there and every row names a known topology and numbers."""
    if not rows:
        raise UserInputError(f"reference file: {path} has no rows")
    missing = [column for column in REQUIRED_COLUMNS if column not in rows[0]]
    if missing:
        raise UserInputError(f"reference file: {path} lacks the column(s) {', '.join(missing)}")
    for line, row in enumerate(rows, start=2):  # line 1 is the header
        if row["topology"] not in FAMILIES:
            raise UserInputError(f"reference file: {path} line {line}: topology must be one of "
                                 f"{', '.join(FAMILIES)} (got {row['topology']!r})")
        numbers = [row["nodes"], row["payload_bytes_inferred"], row["ns3_time_ns"].strip() or "0"]
        if not all(_is_number(text) for text in numbers):
            raise UserInputError(f"reference file: {path} line {line}: nodes, payload_bytes_inferred and "
                                 "ns3_time_ns must be numbers")
    return rows


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------------------------- the figure


def plot(accuracy: NetworkAccuracy, path: str | Path) -> Path:
    """A PNG with one log-log panel per (topology + dims, collective): the reference as markers, the model as a
    line, the panel's weighted and median errors in its title. Returns the path written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layouts = list(dict.fromkeys((row.topology, row.dims) for row in accuracy.rows))
    collectives = list(dict.fromkeys(row.collective for row in accuracy.rows))
    fig, axes = plt.subplots(len(layouts), len(collectives), squeeze=False,
                             figsize=(4.2 * len(collectives), 3.2 * len(layouts)))
    for i, (topology, dims) in enumerate(layouts):
        for j, collective in enumerate(collectives):
            _panel(axes[i][j], accuracy, (topology, dims, collective))
    fig.suptitle(f"network model vs NS-3 ({Path(accuracy.reference).name})")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=90)
    plt.close(fig)
    return Path(path)


def _panel(ax, accuracy: NetworkAccuracy, panel: tuple[str, str, str]) -> None:
    rows = sorted((row for row in accuracy.rows if row.panel == panel), key=lambda row: row.payload_B)
    if not rows:
        ax.set_axis_off()
        return
    reference = [row for row in rows if row.ref_ns is not None]
    model = [row for row in rows if row.model_ns is not None]
    ax.plot([r.payload_B for r in reference], [r.ref_ns for r in reference], "o", label="NS-3")
    ax.plot([r.payload_B for r in model], [r.model_ns for r in model], "-", label=f"model ({rows[0].algorithm})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.minorticks_off()  # log minor ticks cost most of the drawing time and add little here
    ax.set_xlabel("payload bytes")
    ax.set_ylabel("time, ns")
    s = accuracy.panels.get(panel)
    errors = f"weighted {s.weighted_pct:.1f} %, median {s.median_pct:.1f} %" if s else "no comparison"
    ax.set_title(f"{panel[0]} {panel[1]} {panel[2]}\n{errors}", fontsize=9)
    ax.legend(fontsize=7)
