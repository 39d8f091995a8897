"""The trace format's constants: the only contract between a run and its
report. The records themselves are trace/records.py, the names they use
(phases, their groups, trace levels, clocks) perfmlp/names.py;
docs/trace-format.md is generated from them.

A run writes `<trace-dir>/<run-id>/manifest.json` (rank 0) and per rank
`rank-<r>.jsonl` (JSON lines) and `rank-<r>.batches` (the batch records); a
committed set may hold the rank files gzipped (`.gz`: rank_files,
read_rank_bytes).
"""
from __future__ import annotations

import gzip
import os
import stat
import zlib
from pathlib import Path

from .. import names as N

# Batches left out at the start of every epoch by the trainer's steady window (the epoch line's
# `warmup_batches`) and the reader's STEADY_RULE: the first compiles, allocates and captures a CUDA graph, the
# next two still carry one-off costs (a graph's first replays, an eager run's first pinned copies).
WARMUP_BATCHES = 3


def warmup_batches(nbatches: int) -> int:
    """The batches an epoch of `nbatches` leaves out of its steady window:
    WARMUP_BATCHES, or none where the epoch holds no batch beyond them (its
    time per batch is then the whole epoch's). The trainer's epoch lines and
    the reader (STEADY_RULE) both take it from here."""
    return WARMUP_BATCHES if nbatches > WARMUP_BATCHES else 0


def per_batch_words(warmup: int) -> str:
    """Which time per batch a figure is, for an epoch that left out `warmup`
    batches (the epoch line's `warmup_batches`)."""
    if warmup:
        return f"synchronised wall time per batch after the epoch's first {warmup} (warm-up) batches"
    return "synchronised wall time per batch of the whole epoch (too short for a warm-up)"
MANIFEST = "manifest.json"

# A measured phase time is its work's time (what the model's term means) where the GPU timed it (N.GPU_CLOCKS:
# CUDA events at `phases`, the reader's `cupti` at `timeline` and `kernels`). On a GPU run's host clock a phase
# is the host's time between its hooks: enqueued kernels, NCCL collectives, pinned copies and graph replays
# measure the enqueue (a graph replay's "compute" is the cudaGraphLaunch call), and only a phase whose call
# blocks the host with the GPU idle, or behind no more than the one update kernel, times its own work.


def host_clock_terms(batch_transfer: str, comm: str, parallel: str = N.DATA) -> frozenset:
    """The phase groups whose time on a GPU run's host clock is the time of
    their own work. Data parallelism with the staged exchange only (with
    nccl nothing blocks the host), in either execution mode (a CUDA graph
    holds only forward, loss and backward there: perfmlp/gpu/graph.py): its
    D2H ends in a stream synchronize, after which
    - allreduce (MPI_Allreduce on the host buffer) is host work;
    - h2d_grad, from pageable memory (pageable batches stage the gradients
      through pageable memory too: model.predict.staging_memory), blocks
      the host with the GPU idle; from pinned it is only enqueued;
    - h2d_batch, from pageable memory, blocks the host behind only the
      update kernel (the staged exchange and the update end every step);
      from pinned it is enqueued.
    The staged d2h_grad blocks the host too, but from the end of the
    enqueued backward pass: it waits for the GPU's backlog before its copy,
    so it is never its own time (docs/trace-format.md gives the measurement).
    The other strategies are left out: model and hybrid parallelism's staged
    allreduces (in forward, backward and `combine`) wait for the kernels
    queued ahead of them, and ps-nccl's collectives are enqueued."""
    if comm not in N.STAGED_COMMS or parallel != N.DATA:
        return frozenset()
    groups = {N.ALLREDUCE}
    if batch_transfer == N.PAGEABLE:
        groups |= {N.H2D_BATCH, N.H2D_GRAD}
    return frozenset(groups)


def comparable_terms(clock: str, on_gpu: bool, batch_transfer: str, comm: str, parallel: str = N.DATA) -> frozenset:
    """The phase groups (N.GROUPS) whose measured time a report may set
    against the model's term: every group where the phases were timed on the
    GPU (N.GPU_CLOCKS) or where the work is the host's own (a CPU run); on a
    GPU run's host clock, host_clock_terms."""
    if clock in N.GPU_CLOCKS or not on_gpu:
        return frozenset(N.GROUPS)
    return host_clock_terms(batch_transfer, comm, parallel)


# How much a run records (`--trace-level`, N.TRACE_LEVELS, cheapest first); where a level cannot run (no GPU, no
# CUPTI, a profiler owning CUPTI) the tracer takes the richest level below it that can, and the manifest says so.
# The default level per execution mode (N.DEFAULT_TRACE_LEVEL) is the richest whose median overhead stays under
# OVERHEAD_TARGET of untraced time per batch, as measured in OVERHEAD_EVIDENCE (benchmarks/timeline_overhead.py;
# tests/test_timeline.py holds the table to it).
OVERHEAD_TARGET = 0.02
OVERHEAD_EVIDENCE = "reports/h200-x2/benchmarks/overhead"


def default_trace_level(exec_mode: str) -> str:
    """The level `--trace-level auto` runs at in an execution mode (eager
    or graph; anything else runs eagerly)."""
    return N.DEFAULT_TRACE_LEVEL.get(exec_mode, N.DEFAULT_TRACE_LEVEL[N.EAGER])


def resolve_trace_level(level: str | None, exec_mode: str) -> str:
    """The level a run ran (or will run) at, from its manifest's record or
    its configuration's `trace_level`: auto is default_trace_level of the
    execution mode. A manifest made before --trace-level existed has none:
    that tracer timed every phase (CUDA events on a GPU), so `phases`."""
    if not level:
        return N.PHASES_LEVEL
    return default_trace_level(exec_mode) if level == N.AUTO else level


ACTIVITY_SCHEMA = "perfmlp.activity/1"  # what the `gpu` lines hold: records.GpuRecord arrays
COPY_KINDS = {1: "h2d", 2: "d2h", 8: "d2d"}  # CUPTI's memcpy kinds the trainer issues (others: "other")


def rank_file(rank: int) -> str:
    return f"rank-{rank}.jsonl"


def batch_file(rank: int) -> str:
    return f"rank-{rank}.batches"


# A committed trace set may hold its rank files gzipped (python -m perfmlp.trace.pack):
# every reader takes either form of a rank's files through these
PACKED = ".gz"


def rank_files(folder: Path, suffix: str = ".jsonl") -> dict[int, Path]:
    """rank -> its file rank-<number><suffix> in `folder`, plain or packed.
    ValueError: a file named like a rank file that is not one (rank-x.jsonl),
    or a rank in both forms."""
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
    """A rank file's bytes, plain or gzipped. OSError naming the file: not a
    regular file (a FIFO, a link to a device), unreadable, or a damaged
    pack (gzip.BadGzipFile; EOFError for a cut-off one)."""
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
    """The byte and collective counters of one batch, filled where the
    copies and collectives are issued (the batch source and the reducer) and
    handed to the tracer by the training loop."""

    __slots__ = (*BYTE_COUNTS, "collectives")

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.bytes_h2d = self.bytes_d2h = self.bytes_d2d = self.bytes_mpi = self.bytes_nccl = 0
        self.collectives: list[tuple[str, int]] = []

    def byte_counts(self) -> tuple[int, int, int, int, int]:
        """(h2d, d2h, d2d, mpi, nccl) bytes, as a Shape holds them (the fast path compares them inline)."""
        return self.bytes_h2d, self.bytes_d2h, self.bytes_d2d, self.bytes_mpi, self.bytes_nccl

    def add(self, other: "Counts") -> None:
        """Add another batch's counters (a CUDA graph's, recorded at its capture)."""
        for k in BYTE_COUNTS:
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.collectives.extend(other.collectives)
