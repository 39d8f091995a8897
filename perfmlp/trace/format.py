"""The trace format: the only contract between a run and its report.

A run writes `<trace-dir>/<run-id>/manifest.json` (rank 0; rewritten at the
end with the status) and `rank-<r>.jsonl` per rank: a header line, one line
per batch (flushed as written, so a killed run keeps every finished batch),
one line per epoch and an end line (a committed set may hold them gzipped,
`rank-<r>.jsonl.gz`: rank_files, read_rank_text). `docs/trace-format.md`
describes every field; this module names them, and the writer and the
reader both use it.
"""
from __future__ import annotations

import gzip
import zlib
from pathlib import Path

SCHEMA = "perfmlp.trace/1"
# Batches left out at the start of every epoch, by the trainer's synchronised
# steady window (the epoch line's steady_ms_per_batch, `warmup_batches`) and
# by the reader (trace/reader.py STEADY_RULE). Three: the first compiles,
# allocates and captures a CUDA graph; on 2 x H200 (validate5, 2026-11-22)
# the second still took 3-7x a steady batch's host time in graph runs (the
# first replay) and the third 1.7-40x in eager pinned mpi-staged runs, one
# such batch adding up to 2x to a 20-batch window's mean. Traces written
# before 2026-11-22's seventh session left out one (no `warmup_batches`).
WARMUP_BATCHES = 3
MANIFEST = "manifest.json"

# The phases of a batch, in the order a batch goes through them, each with
# the model's term it measures (perfmlp/model/predict.py: TERMS; "compute"
# is the model's gemm + elementwise + launches).
PHASE_TERMS = {
    "h2d": "h2d_batch",        # the batch piece copied to the device (not with resident data)
    "forward": "compute",
    "loss": "compute",
    "backward": "compute",
    "d2h": "d2h_grad",         # the gradient buffer staged to the host (mpi-staged)
    "allreduce": "allreduce",
    "h2d_grad": "h2d_grad",    # the reduced gradients copied back (mpi-staged)
    "update": "compute",
    # graph mode (--exec graph): one CUDA-graph replay in place of forward,
    # loss and backward, and with nccl also the allreduce and the update;
    # with resident data the piece is first copied (device to device) into
    # the graph's static input buffers, in this phase too
    "graph": "compute",
    # the partitioning strategies' exchanges (perfmlp/strategies), after the others so the
    # phases above keep their order (and the report's colours)
    "combine": "allreduce",    # model parallelism: the output's partial sums, allreduced over the model group
    "reduce": "allreduce",     # the parameter server: gradients reduced to rank 0
    "bcast": "allreduce",      # the parameter server: parameters broadcast from rank 0
}
PHASES = tuple(PHASE_TERMS)


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


NVTX_RANGES = (*PHASES, "batch", "epoch")  # every NVTX range a run opens (domain "perfmlp")

# Keys every batch line has (the writer writes more: docs/trace-format.md).
BATCH_KEYS = ("epoch", "batch", "samples", "local_samples", "t_ms", "flops", "bytes_h2d", "bytes_d2h",
              "bytes_mpi", "bytes_nccl")


# How much a run records, cheapest first (`--trace-level`). Where a level
# cannot run (no GPU, no CUPTI, a profiler owning CUPTI) the tracer takes the
# richest level below it that can, and the manifest says so.
# perfmlp/model/predict.py TRACE_COSTS prices each level under these names
# (a test holds the two equal).
TRACE_LEVELS = {
    "counters": "FLOPs, bytes and collectives per batch, host wall time; no device timing",
    "phases": "+ each phase's GPU time from CUDA events recorded between the phases (about 2 us of GPU time each)",
    "timeline": "+ CUPTI activity records: every kernel launched outside a CUDA graph, every copy and memset, "
                "one record per graph launch; phase times from the records, no CUDA events",
    "kernels": "+ one record per kernel inside CUDA graphs too (about 0.5 us of GPU time per graph kernel node)",
}
OVERHEAD_TARGET = 0.02  # issue 12: the default level costs under 2% of untraced time per batch
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
OVERHEAD_EVIDENCE = "benchmarks/results/h200-x2/overhead"
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
# `records` is a list of arrays with these fields, in this order.
ACTIVITY_SCHEMA = "perfmlp.activity/1"
ACTIVITY_FIELDS = ("cat", "phase", "start_ns", "end_ns", "stream", "bytes", "copy", "name", "api_ns", "corr")
# cat: what the GPU did. compute (kernels), copy (memcpy, memset), comm
# (NCCL kernels), graph (a whole CUDA-graph launch at the `timeline` level).
COPY_KINDS = {1: "h2d", 2: "d2h", 8: "d2d"}  # CUPTI's memcpy kinds the trainer issues (others: "other")


def batch_phases(comm: str, batch_transfer: str, exec_mode: str = "eager") -> tuple[str, ...]:
    """The phases one batch records, in order, for a communication, transfer
    and execution mode."""
    skip = {"combine", "reduce", "bcast"}  # the partitioning strategies' (perfmlp/model/strategies: step_phases)
    if batch_transfer == "resident":
        skip.add("h2d")
    if comm != "mpi-staged":
        skip |= {"d2h", "h2d_grad"}
    if exec_mode == "graph":
        skip |= {"forward", "loss", "backward"}
        if comm == "nccl":
            skip |= {"allreduce", "update"}
    else:
        skip.add("graph")
    order = ("h2d", "graph", *(p for p in PHASES if p not in ("h2d", "graph")))
    return tuple(p for p in order if p not in skip)


def rank_file(rank: int) -> str:
    return f"rank-{rank}.jsonl"


# A committed trace set may hold its rank files gzipped (python -m perfmlp.trace.pack):
# every reader takes either form of a rank's file through these two
PACKED = ".gz"


def rank_files(folder: Path) -> dict[int, Path]:
    """rank -> its file in `folder` (rank-<r>.jsonl, or rank-<r>.jsonl.gz as
    packed). ValueError: a name without a rank number, or a rank in both forms."""
    out: dict[int, Path] = {}
    for p in sorted([*folder.glob("rank-*.jsonl"), *folder.glob("rank-*.jsonl" + PACKED)]):
        stem = p.name[:-len(PACKED)] if p.name.endswith(PACKED) else p.name
        try:
            rank = int(stem[len("rank-"):-len(".jsonl")])
        except ValueError:
            raise ValueError(f"{p}: not a rank file name") from None
        if rank in out:
            raise ValueError(f"{folder}: rank {rank} is there both packed and plain ({out[rank].name}, {p.name})")
        out[rank] = p
    return out


def read_rank_text(path: Path, first_line: bool = False) -> str:
    """A rank file's text (or only its first line, the header), plain or
    gzipped. OSError (gzip.BadGzipFile for a damaged pack) or EOFError (a
    cut-off one) on a damaged file."""
    packed = path.name.endswith(PACKED)
    try:
        with gzip.open(path, "rt", errors="replace") if packed else open(path, errors="replace") as f:
            return f.readline() if first_line else f.read()
    except zlib.error as e:     # damaged deflate data: not an OSError of its own
        raise gzip.BadGzipFile(str(e)) from None


class Counts:
    """The byte and collective counters of one batch line, filled where the
    copies and collectives are issued (the batch source and the reducer) and
    handed to the tracer by the training loop."""

    __slots__ = ("bytes_h2d", "bytes_d2h", "bytes_d2d", "bytes_mpi", "bytes_nccl", "collectives")

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.bytes_h2d = self.bytes_d2h = self.bytes_d2d = self.bytes_mpi = self.bytes_nccl = 0
        self.collectives: list[tuple[str, int]] = []

    def add(self, other: "Counts") -> None:
        """Add another batch's counters (a CUDA graph's, recorded at its capture)."""
        self.bytes_h2d += other.bytes_h2d
        self.bytes_d2h += other.bytes_d2h
        self.bytes_d2d += other.bytes_d2d
        self.bytes_mpi += other.bytes_mpi
        self.bytes_nccl += other.bytes_nccl
        self.collectives.extend(other.collectives)
