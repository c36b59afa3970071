"""3D-stacked DRAM and HBM bandwidth model (paper §2.3.1, §4.1.3, eq. 1 and 3; docs/model.md).

Derivation of the transaction-size curve. The vendor curve of the paper's Fig. 2 is not public, so it is
derived from bank timing: a bank serves an s-byte transaction (s ≤ one row) in

    t(s) = (tRCD + tRP) + s / bank_BW

— the row must be activated and precharged around every transaction, and the data then streams at the bank's
share of the TSV bandwidth (peak / banks). A transaction of s > row bytes opens ⌈s/row⌉ rows. Direct-attached
banks therefore reach an efficiency of transfer / (transfer + overhead), highest for full-row transactions.
With w-way interleaving, w banks share one channel and activate while another bank transfers, hiding the
overhead up to w × transfer (efficiency min(1, w·transfer / (transfer + overhead))).

Refresh takes every bank away for tRFC once per tREFI, so every sustained figure is scaled by
1 − tRFC/tREFI (6.7 % with DRAMsim3's HBM2 timing).

On top of the curve: Little's law (eq. 1, 3) bounds bandwidth by in-flight bytes / access latency, and data
fills L1 no faster than the PEs' L1 write bandwidth. At the bank level (§4.1.3 (iii), (iv)), each access of a
memory wave is mapped to banks by address; the busiest bank sets the wave's service time. That one mechanism
models both too few banks for small operators and layout-induced conflicts.
"""

from __future__ import annotations

import math

import numpy as np

from deepstack.models.hardware.device import DramSpec


def transaction_efficiency(dram: DramSpec, transaction_B: float) -> float:
    """Fraction of peak bandwidth a stream of ``transaction_B``-byte transactions achieves (0 < e ≤ 1)."""
    if transaction_B <= 0:
        return 0.0
    rows = math.ceil(transaction_B / dram.row_B)
    channel_bw = dram.bank_bw_Bps * dram.interleave_ways  # direct: one bank per channel
    transfer_s = transaction_B / channel_bw
    overhead_s = rows * dram.row_overhead_s
    return min(1.0, dram.interleave_ways * transfer_s / (transfer_s + overhead_s)) * dram.refresh_availability


def curve_bw_Bps(dram: DramSpec, transaction_B: float) -> float:
    """Bandwidth–transaction-size curve (the paper's Fig. 2, derived from timing)."""
    return dram.peak_bw_Bps * transaction_efficiency(dram, transaction_B)


def little_bw_Bps(in_flight_B: float, latency_s: float) -> float:
    """Little's law (eq. 1): sustained bandwidth ≤ bytes in flight / latency."""
    return in_flight_B / latency_s


def effective_bw_Bps(dram: DramSpec, transaction_B: float, in_flight_B: float, l1_fill_Bps: float) -> float:
    """Eq. 3 with the transaction curve and the L1 fill bound: min(curve(s), buffer / latency, L1 fill)."""
    return min(curve_bw_Bps(dram, transaction_B), little_bw_Bps(in_flight_B, dram.access_latency_s), l1_fill_Bps)


def _chunk_counts(starts: np.ndarray, lengths: np.ndarray, row_B: int) -> np.ndarray:
    return ((starts + lengths - 1) // row_B - starts // row_B + 1).astype(np.int64)


def _row_chunks(starts: np.ndarray, lengths: np.ndarray, row_B: int,
                counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split accesses [start, start+length) at row boundaries: (row index, bytes) of every chunk."""
    first = np.repeat(starts // row_B, counts)
    offset = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    rows = first + offset
    chunk_start = np.maximum(rows * row_B, np.repeat(starts, counts))
    chunk_end = np.minimum((rows + 1) * row_B, np.repeat(starts + lengths, counts))
    return rows, chunk_end - chunk_start


def _service_times_s(dram: DramSpec, owner: np.ndarray, windows: int, starts: np.ndarray, lengths: np.ndarray,
                     bank_offsets: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The bank model's core: service time of each of ``windows`` sets of concurrent accesses (access i belongs
    to set ``owner[i]``), and the bytes each set puts on each bank (windows × banks).

    Rows are interleaved across banks (bank = row mod banks); a swizzled layout rotates each access's banks by
    its offset (the compiler staggers concurrently streamed blocks so they start on different banks). Every
    chunk costs its bank one activation + precharge plus its bytes at the channel bandwidth. With
    w-way interleaving, the w banks of a channel (bank mod channels) overlap activations with each other's
    transfers, but the channel carries one transfer at a time and a bank cannot overlap with itself. The busiest
    bank (or channel) sets the time; refresh stretches it.
    """
    counts = _chunk_counts(starts, lengths, dram.row_B)
    rows, chunk_bytes = _row_chunks(starts, lengths, dram.row_B, counts)
    if bank_offsets is not None:
        rows = rows + np.repeat(bank_offsets, counts)
    cell = np.repeat(owner, counts) * dram.banks + rows % dram.banks
    size = windows * dram.banks
    bytes_per_bank = np.bincount(cell, weights=chunk_bytes, minlength=size)
    activations = np.bincount(cell, minlength=size)
    ways = dram.interleave_ways
    channel_bw = dram.bank_bw_Bps * ways
    # the busiest bank of each window, over the banks its accesses touch (an untouched bank's time is 0): a
    # window touches a few banks of many, and arrays of every window's every bank cost more than the sums
    touched = np.flatnonzero(activations)
    per_bank = bytes_per_bank[touched] / channel_bw + activations[touched] * dram.row_overhead_s
    window_of = touched // dram.banks
    first = np.flatnonzero(np.diff(window_of, prepend=-1))
    busy = np.zeros(windows)
    if len(touched):
        busy[window_of[first]] = np.maximum.reduceat(per_bank, first)
    bytes_per_bank = bytes_per_bank.reshape(windows, dram.banks)
    if ways > 1:
        channels = dram.banks // ways
        channel_cell = (np.arange(windows)[:, None] * channels + np.arange(dram.banks) % channels).ravel()
        transfers = np.bincount(channel_cell, weights=(bytes_per_bank / channel_bw).ravel(),
                                minlength=windows * channels)
        busy = np.maximum(busy, transfers.reshape(windows, channels).max(axis=1))
    return busy / dram.refresh_availability, bytes_per_bank


def bank_service_time_s(dram: DramSpec, starts, lengths, bank_offsets=None) -> tuple[float, int]:
    """Service time (s) of one set of concurrent accesses ``[start, start + length)`` (bytes), and the number of
    banks they touch; ``bank_offsets`` rotates each access's banks (a swizzled layout). See
    :func:`_service_times_s` for the bank model."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = None if bank_offsets is None else np.asarray(bank_offsets, dtype=np.int64)
    times, bytes_per_bank = _service_times_s(dram, np.zeros(len(starts), dtype=np.int64), 1, starts, lengths, offsets)
    return float(times[0]), int((bytes_per_bank[0] > 0).sum())


def window_service_times_s(dram: DramSpec, blocks, stride_B, window_B, swizzle: bool) -> np.ndarray:
    """Service times (s) of many weight windows at once (the GEMM tuner's candidates): window i is ``blocks[i]``
    concurrent streams of ``window_B[i]`` contiguous bytes whose starts are ``stride_B[i]`` apart; a swizzled
    layout staggers stream j by j windows' worth of rows so concurrent streams start on different banks."""
    blocks = np.asarray(blocks, dtype=np.int64)
    stride = np.asarray(stride_B, dtype=np.int64)
    window = np.asarray(window_B, dtype=np.int64)
    owner = np.repeat(np.arange(len(blocks)), blocks)  # window of every stream
    block = np.arange(len(owner)) - np.repeat(np.cumsum(blocks) - blocks, blocks)  # stream index in its window
    lengths = window[owner]
    offsets = block * -(-lengths // dram.row_B) if swizzle else None
    return _service_times_s(dram, owner, len(blocks), block * stride[owner], lengths, offsets)[0]


def row_pieces(dram: DramSpec, total_B, segment_B):
    """(bytes per piece, pieces) of ``total_B`` bytes read as ``segment_B``-byte transactions, each piece opening
    a row of its own: a transaction of at most a row is one piece; a longer one is its rows, each in the next bank
    (rows interleave across banks). The one count of row openings the stream law's time and the DRAM energy
    share. Element-wise on numpy arrays."""
    total = np.asarray(total_B, dtype=float)
    piece = np.maximum(1.0, np.minimum(np.minimum(segment_B, dram.row_B), total))
    return piece, np.ceil(total / piece)


def stream_time_s(dram: DramSpec, total_B, segment_B):
    """Time (s) to stream ``total_B`` bytes laid out contiguously, issued as ``segment_B``-byte transactions
    spread round-robin over the banks (the best case of a well-laid-out tensor); a transaction longer than a
    row is served as its rows by successive banks. Element-wise on numpy arrays; on floats it returns a numpy
    float."""
    total = np.asarray(total_B, dtype=float)
    piece, pieces = row_pieces(dram, total, segment_B)
    per_bank = np.ceil(pieces / dram.banks)
    bytes_per_bank = np.minimum(per_bank * piece, total)
    busy = bytes_per_bank / dram.bank_bw_Bps + per_bank * dram.row_overhead_s
    if dram.interleave_ways > 1:
        busy = np.maximum(bytes_per_bank / dram.bank_bw_Bps, busy / dram.interleave_ways)
    return (np.where(total > 0, np.maximum(busy, total / dram.peak_bw_Bps), 0.0) / dram.refresh_availability)[()]


def wave_dram_time_s(dram: DramSpec, bytes_B, in_flight_B, l1_fill_Bps, bank_s):
    """The DRAM time (s) of one wave (§4.1.3): the banks' service time ``bank_s``, bounded below by the wave's
    ``bytes_B`` at the least of peak bandwidth, Little's law on the bytes in flight (eq. 1, 3) and the PEs' L1
    fill bandwidth. 0 for a wave that moves nothing; a wave with nothing in flight reads nothing from DRAM (its
    inputs stay in L2) and only writes, which are posted: Little's law does not bound it. Element-wise on numpy
    arrays; on floats it returns a numpy float. The one place GEMMs, attention and vector operators take their
    DRAM time from."""
    in_flight = np.asarray(in_flight_B, dtype=float)
    little = np.where(in_flight > 0, little_bw_Bps(np.maximum(in_flight, 1.0), dram.access_latency_s), np.inf)
    bounded = np.maximum(bank_s, bytes_B / np.minimum(np.minimum(dram.peak_bw_Bps, little), l1_fill_Bps))
    return np.where(np.asarray(bytes_B) > 0, bounded, 0.0)[()]


def access_energy_J(dram: DramSpec, bytes_B: float, transaction_B: float) -> float:
    """Energy (J) of moving ``bytes_B`` in ``transaction_B``-byte transactions (docs/calibration.md §3): every byte
    pays the transfer, every row piece (:func:`row_pieces`) opens its row. A full-row stream opens one row per
    row of data (row-buffer hits amortise the activation); a random 32-byte access opens a whole row for 32 bytes."""
    if bytes_B <= 0:
        return 0.0
    rows = float(row_pieces(dram, bytes_B, transaction_B)[1])
    return bytes_B * dram.transfer_J_per_B + rows * dram.activation_J_per_row


def extra_rows_opened(dram: DramSpec, bytes_B: float, transaction_B: float) -> float:
    """Row openings of ``bytes_B`` read in ``transaction_B``-byte transactions beyond a full-row stream's one per
    row of data (:func:`stream_energy_J_per_B` charges those): the partial-row transactions' own activations."""
    if bytes_B <= 0:
        return 0.0
    return float(row_pieces(dram, bytes_B, transaction_B)[1]) - bytes_B / dram.row_B  # ⌈bytes/piece⌉ ≥ bytes/row


def stream_energy_J_per_B(dram: DramSpec) -> float:
    """Energy per byte of a full-row stream: the transfer plus one activation per row."""
    return dram.transfer_J_per_B + dram.activation_J_per_row / dram.row_B
