"""The trace format's constants: the only contract between a run and its
report. The records themselves (and the Phase enum) are trace/records.py;
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

from .records import Phase

# Batches left out at the start of every epoch, by the trainer's synchronised
# steady window (the epoch line's steady_ms_per_batch, `warmup_batches`) and
# by the reader (trace/reader.py STEADY_RULE). Three: the first compiles,
# allocates and captures a CUDA graph; on 2 x H200 (validate5, 2026-11-22)
# the second still took 3-7x a steady batch's host time in graph runs (the
# first replay) and the third 1.7-40x in eager pinned mpi-staged runs, one
# such batch adding up to 2x to a 20-batch window's mean. Traces written
# before 2026-11-22 (code of that day) left out one (no `warmup_batches`).
WARMUP_BATCHES = 3
MANIFEST = "manifest.json"

# The phases of a batch, in the order a batch goes through them, each with
# the model's term it measures (perfmlp/model/predict.py: TERMS; "compute"
# is the model's gemm + elementwise + launches).
PHASE_TERMS = {
    Phase.H2D: "h2d_batch",        # not with resident data
    Phase.FORWARD: "compute",
    Phase.LOSS: "compute",
    Phase.BACKWARD: "compute",
    Phase.D2H: "d2h_grad",
    Phase.ALLREDUCE: "allreduce",
    Phase.H2D_GRAD: "h2d_grad",
    Phase.UPDATE: "compute",
    # graph mode (--exec graph): one CUDA-graph replay in place of forward,
    # loss and backward, and with nccl also the allreduce and the update;
    # with resident data the piece is first copied (device to device) into
    # the graph's static input buffers, in this phase too
    Phase.GRAPH: "compute",
    # the partitioning strategies' exchanges, after the others so the phases
    # above keep their order (and the report's colours)
    Phase.COMBINE: "allreduce",
    Phase.REDUCE: "allreduce",
    Phase.BCAST: "allreduce",
    # the asynchronous parameter server's worker: its exchange with the server
    Phase.PUSH: "allreduce",
    Phase.PULL: "allreduce",
    Phase.PARAMS: "allreduce",
    Phase.H2D_PARAMS: "h2d_grad",
}
PHASES = tuple(Phase)


PHASE_GROUPS = tuple(dict.fromkeys(PHASE_TERMS.values()))  # the report's terms, in a batch's order

# Whether a measured phase time means what the model's term of its group means
# (the time of that work) depends on the clock that timed it. On the GPU
# (batch lines' `clock`: CUDA events at `phases`; the reader's `cupti`,
# from the activity records, at `timeline` and `kernels`) every phase is
# timed. On the host clock (`counters`, the default) a GPU run's phase is the
# host's time between its hooks: the host enqueues kernels, NCCL collectives,
# pinned copies and graph replays and runs on, so those phases measure the
# enqueue (a graph replay's "compute" is the cudaGraphLaunch call), and only
# a phase whose call blocks the host with the GPU idle, or with no more than
# the one update kernel queued ahead of it, times its own work.
GPU_CLOCKS = ("cuda-events", "cupti")


def host_clock_terms(batch_transfer: str, comm: str, parallel: str = "data") -> frozenset:
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
    so it is never its own time (H200, H=1024, pinned: the same 3.3 MB of
    gradients took 0.15 to 0.18 ms on the host clock at p=2, B=3200, and
    0.073 to 0.076 ms between CUDA events in the runs that had them). The other
    strategies are left out: model and hybrid parallelism's staged
    allreduces (in forward, backward and `combine`) wait for the kernels
    queued ahead of them, and ps-nccl's collectives are enqueued."""
    if comm != "mpi-staged" or parallel != "data":
        return frozenset()
    groups = {"allreduce"}
    if batch_transfer == "pageable":
        groups |= {"h2d_batch", "h2d_grad"}
    return frozenset(groups)


def comparable_terms(clock: str, on_gpu: bool, batch_transfer: str, comm: str, parallel: str = "data") -> frozenset:
    """The phase groups (PHASE_GROUPS) whose measured time a report may set
    against the model's term: every group where the phases were timed on the
    GPU (GPU_CLOCKS) or where the work is the host's own (a CPU run); on a
    GPU run's host clock, host_clock_terms."""
    if clock in GPU_CLOCKS or not on_gpu:
        return frozenset(PHASE_GROUPS)
    return host_clock_terms(batch_transfer, comm, parallel)


NVTX_RANGES = (*(p.value for p in PHASES), "batch", "epoch")  # every NVTX range a run opens (domain "perfmlp")


# How much a run records, cheapest first (`--trace-level`). Where a level
# cannot run (no GPU, no CUPTI, a profiler owning CUPTI) the tracer takes the
# richest level below it that can, and the manifest says so.
# perfmlp/model/predict.py TRACE_COSTS prices each level under these names
# (a test holds the two equal).
TRACE_LEVELS = {
    "counters": "FLOPs, bytes and collectives per batch (priced once per piece size), host times of the batch "
                "and its phases; no device timing",
    "phases": "+ each phase's GPU time from CUDA events recorded between the phases (about 2 us of GPU time each)",
    "timeline": "+ CUPTI activity records: every kernel launched outside a CUDA graph, every copy and memset, "
                "one record per graph launch; phase times from the records, no CUDA events",
    "kernels": "+ one record per kernel inside CUDA graphs too (about 0.5 us of GPU time per graph kernel node)",
}
OVERHEAD_TARGET = 0.02  # the default level costs under 2% of untraced time per batch
# The default level (`--trace-level auto`) per execution mode: the richest
# level whose median overhead was under OVERHEAD_TARGET at H=512, B=3200
# resident + NCCL on 1 and on 2 GPUs, else the cheapest. Evidence:
# OVERHEAD_EVIDENCE (benchmarks/timeline_overhead.py, 12 interleaved repeats;
# tests/test_timeline.py holds this table to it). On 2 x H200, 2026-11-22:
# graph mode, timeline +1.20% (p=1) but +2.57% (p=2), phases +2.12% and
# kernels +2.04% at p=2, counters +0.16% / +0.37%: any GPU timing costs
# each rank 1-2 us a batch, and at p=2 the ranks wait for each other every
# step. Eager mode: counters +0.23% at p=1, +11.9% at p=2, where the step is
# host-bound (161 us of host time a step untraced, 188 us with the
# counters hooks) and every level over.
DEFAULT_TRACE_LEVEL = {"graph": "counters", "eager": "counters"}
OVERHEAD_EVIDENCE = "reports/h200-x2/benchmarks/overhead"
TRACE_LEVEL_CHOICES = ("auto", *TRACE_LEVELS)  # auto: default_trace_level of the execution mode that runs


def default_trace_level(exec_mode: str) -> str:
    """The level `--trace-level auto` runs at in an execution mode (eager
    or graph; anything else runs eagerly)."""
    return DEFAULT_TRACE_LEVEL.get(exec_mode, DEFAULT_TRACE_LEVEL["eager"])


def resolve_trace_level(level: str | None, exec_mode: str) -> str:
    """The level a run ran (or will run) at, from its manifest's record or
    its configuration's `trace_level`: auto is default_trace_level of the
    execution mode. A manifest made before --trace-level existed has none:
    that tracer timed every phase (CUDA events on a GPU), so `phases`."""
    if not level:
        return "phases"
    return default_trace_level(exec_mode) if level == "auto" else level


ACTIVITY_LEVELS = ("timeline", "kernels")  # the levels that collect CUPTI activity records

# Activity lines (`kind: "gpu"`, one per batch and rank, written between epochs):
# `records` is a list of arrays of records.ACTIVITY_FIELDS, in that order.
ACTIVITY_SCHEMA = "perfmlp.activity/1"
# cat: what the GPU did. compute (kernels), copy (memcpy, memset), comm
# (NCCL kernels), graph (a whole CUDA-graph launch at the `timeline` level).
COPY_KINDS = {1: "h2d", 2: "d2h", 8: "d2d"}  # CUPTI's memcpy kinds the trainer issues (others: "other")


def batch_phases(comm: str, batch_transfer: str, exec_mode: str = "eager") -> tuple[Phase, ...]:
    """The phases one batch records, in order, for a communication, transfer
    and execution mode."""
    skip = {Phase.COMBINE, Phase.REDUCE, Phase.BCAST,  # the partitioning strategies' (model.strategies: step_phases)
            Phase.PUSH, Phase.PULL, Phase.PARAMS, Phase.H2D_PARAMS}  # and the asynchronous server's workers
    if batch_transfer == "resident":
        skip.add(Phase.H2D)
    if comm != "mpi-staged":
        skip |= {Phase.D2H, Phase.H2D_GRAD}
    if exec_mode == "graph":
        skip |= {Phase.FORWARD, Phase.LOSS, Phase.BACKWARD}
        if comm == "nccl":
            skip |= {Phase.ALLREDUCE, Phase.UPDATE}
    else:
        skip.add(Phase.GRAPH)
    order = (Phase.H2D, Phase.GRAPH, *(p for p in PHASES if p not in (Phase.H2D, Phase.GRAPH)))
    return tuple(p for p in order if p not in skip)


def rank_file(rank: int) -> str:
    return f"rank-{rank}.jsonl"


def batch_file(rank: int) -> str:
    return f"rank-{rank}.batches"


# A committed trace set may hold its rank files gzipped (python -m perfmlp.trace.pack):
# every reader takes either form of a rank's files through these
PACKED = ".gz"
RANK_SUFFIXES = (".jsonl", ".batches")


def rank_of(name: str) -> tuple[int, str] | None:
    """(rank, suffix) of a rank file's name (packed or not), or None where
    the name is not rank-<number>.jsonl or rank-<number>.batches."""
    stem = name[:-len(PACKED)] if name.endswith(PACKED) else name
    for suffix in RANK_SUFFIXES:
        if stem.startswith("rank-") and stem.endswith(suffix):
            digits = stem[len("rank-"):-len(suffix)]
            if digits.isdigit() and digits.isascii():
                return int(digits), suffix
    return None


def rank_files(folder: Path, suffix: str = ".jsonl") -> dict[int, Path]:
    """rank -> its file with `suffix` in `folder`, plain or packed.
    ValueError: a file named like a rank file that is not one (rank-x.jsonl),
    or a rank in both forms."""
    out: dict[int, Path] = {}
    for p in sorted([*folder.glob("rank-*" + suffix), *folder.glob("rank-*" + suffix + PACKED)]):
        got = rank_of(p.name)
        if got is None:
            raise ValueError(f"{p}: not a rank file (rank-<number>{suffix})")
        rank = got[0]
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


class Counts:
    """The byte and collective counters of one batch, filled where the
    copies and collectives are issued (the batch source and the reducer) and
    handed to the tracer by the training loop."""

    __slots__ = ("bytes_h2d", "bytes_d2h", "bytes_d2d", "bytes_mpi", "bytes_nccl", "collectives")

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
        self.bytes_h2d += other.bytes_h2d
        self.bytes_d2h += other.bytes_d2h
        self.bytes_d2d += other.bytes_d2d
        self.bytes_mpi += other.bytes_mpi
        self.bytes_nccl += other.bytes_nccl
        self.collectives.extend(other.collectives)
