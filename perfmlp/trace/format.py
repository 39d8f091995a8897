"""The trace format's constants and the rules the trainer and the reader share (the warm-up, which
phase times measure their own work, the trace level), and how a rank's files are found and read,
plain or gzipped (`.gz`, python -m perfmlp.trace.pack). The records are trace/records.py."""
from __future__ import annotations

import gzip
import os
import stat
import zlib
from pathlib import Path

from .. import names as N

# Batches left out at the start of every epoch (the trainer's steady window, the reader's STEADY_RULE): the
# first compiles, allocates and captures a CUDA graph, the next two still carry one-off costs.
WARMUP_BATCHES = 3


def warmup_batches(nbatches: int) -> int:
    """The batches an epoch of `nbatches` leaves out of its steady window: WARMUP_BATCHES, or
    none where it holds no more (the trainer's epoch lines and STEADY_RULE both take it from here)."""
    return WARMUP_BATCHES if nbatches > WARMUP_BATCHES else 0


def per_batch_words(warmup: int) -> str:
    """Which time per batch a figure is, for an epoch that left out `warmup` batches."""
    if warmup:
        return f"synchronised wall time per batch after the epoch's first {warmup} (warm-up) batches"
    return "synchronised wall time per batch of the whole epoch (too short for a warm-up)"


MANIFEST = "manifest.json"


def host_clock_terms(batch_transfer: str, comm: str, parallel: str = N.DATA) -> frozenset:
    """The phase groups whose time on a GPU run's host clock (enqueued work measures its enqueue) is their own
    work's. Only data parallelism's staged exchange has any: its D2H ends in a stream synchronize, after which
    the allreduce is host MPI work, and h2d_grad and h2d_batch from pageable memory block the host (pinned: only
    enqueued). d2h_grad waits for the queued backward pass, model and hybrid parallelism's allreduces for queued
    kernels; nccl's and ps-nccl's collectives are enqueued."""
    if comm not in N.STAGED_COMMS or parallel != N.DATA:
        return frozenset()
    groups = {N.ALLREDUCE}
    if batch_transfer == N.PAGEABLE:
        groups |= {N.H2D_BATCH, N.H2D_GRAD}
    return frozenset(groups)


def comparable_terms(clock: str, on_gpu: bool, batch_transfer: str, comm: str, parallel: str = N.DATA) -> frozenset:
    """The phase groups whose measured time a report may set against the model's term: all where
    the GPU timed them (N.GPU_CLOCKS) or on a CPU run, else host_clock_terms."""
    if clock in N.GPU_CLOCKS or not on_gpu:
        return frozenset(N.GROUPS)
    return host_clock_terms(batch_transfer, comm, parallel)


# The default trace level per execution mode (N.DEFAULT_TRACE_LEVEL) is the richest whose median overhead stays
# under OVERHEAD_TARGET of untraced time per batch (benchmarks/trace_overhead.py; test_timeline holds it to it).
OVERHEAD_TARGET = 0.02


def default_trace_level(exec_mode: str) -> str:
    """The level `--trace-level auto` runs at in an execution mode (unknown modes: eager's)."""
    return N.DEFAULT_TRACE_LEVEL.get(exec_mode, N.DEFAULT_TRACE_LEVEL[N.EAGER])


def resolve_trace_level(level: str | None, exec_mode: str) -> str:
    """A run's level from its manifest's or configuration's `trace_level`: auto the mode's default; none `phases`."""
    if not level:
        return N.PHASES_LEVEL
    return default_trace_level(exec_mode) if level == N.AUTO else level


ACTIVITY_SCHEMA = "perfmlp.activity/1"  # what the `gpu` lines hold: records.GpuRecord arrays
COPY_KINDS = {1: "h2d", 2: "d2h", 8: "d2d"}  # CUPTI's memcpy kinds the trainer issues (others: "other")
PACKED = ".gz"  # a packed rank file's suffix (python -m perfmlp.trace.pack)


def rank_files(folder: Path, suffix: str = ".jsonl") -> dict[int, Path]:
    """rank -> its file rank-<number><suffix> in `folder`, plain or packed. ValueError: a file
    named like a rank file that is not one, or a rank in both forms."""
    out: dict[int, Path] = {}
    for p in sorted([*folder.glob("rank-*" + suffix), *folder.glob("rank-*" + suffix + PACKED)]):
        digits = p.name.removesuffix(PACKED).removesuffix(suffix)[len("rank-"):]
        if not (digits.isdigit() and digits.isascii()):
            raise ValueError(f"{p}: not a rank file (rank-<number>{suffix})")
        rank = int(digits)
        if rank in out:
            raise ValueError(f"{folder}: rank {rank} is there both packed and plain ({out[rank].name}, {p.name})")
        out[rank] = p
    return out


def read_rank_bytes(path: Path) -> bytes:
    """A rank file's bytes, plain or gzipped. OSError naming the file: not a regular file,
    unreadable, or a damaged pack (gzip.BadGzipFile; EOFError for a cut-off one)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from None
    if not stat.S_ISREG(st.st_mode):
        raise OSError(f"{path}: not a regular file")
    try:
        if path.name.endswith(PACKED):
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except zlib.error as e:     # damaged deflate data: not an OSError of its own
        raise gzip.BadGzipFile(str(e)) from None


BYTE_COUNTS = ("bytes_h2d", "bytes_d2h", "bytes_d2d", "bytes_mpi", "bytes_nccl")  # a batch's, as its Shape holds them


class Counts:
    """One batch's byte and collective counters, filled where the copies and collectives are issued."""

    __slots__ = (*BYTE_COUNTS, "collectives")

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.bytes_h2d = self.bytes_d2h = self.bytes_d2d = self.bytes_mpi = self.bytes_nccl = 0
        self.collectives: list[tuple[str, int]] = []

    def byte_counts(self) -> tuple[int, int, int, int, int]:
        """(h2d, d2h, d2d, mpi, nccl) bytes, as a Shape holds them."""
        return self.bytes_h2d, self.bytes_d2h, self.bytes_d2d, self.bytes_mpi, self.bytes_nccl

    def add(self, other: "Counts") -> None:
        """Add another batch's counters (a CUDA graph's, recorded at its capture)."""
        for k in BYTE_COUNTS:
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.collectives.extend(other.collectives)
