"""The records of a run's trace (format 2): what a run writes and what the reader returns, nothing else.
Each is a frozen dataclass whose fields carry their documentation and their check (trace/fields.py);
docs/trace-format.md, which describes the run folder they make up, is generated from them (`python -m
perfmlp.trace.docs`, held to them by a test)."""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from operator import attrgetter
from types import MappingProxyType
from typing import Any, ClassVar, Mapping, NamedTuple

from .. import names as N
from ..names import Phase  # the phases' one definition; records.Phase names it for the trace's readers
from . import fields as F
from .format import BYTE_COUNTS

SCHEMA = "perfmlp.trace/2"


def phase(v) -> Phase:
    """Checker: a phase name."""
    try:
        return Phase(v)
    except ValueError:
        raise F.Bad(f"{F.shown(v)}, not a phase ({', '.join(p.value for p in Phase)})") from None


def _gpu_phase(v):
    return "batch" if v == "batch" else phase(v)  # launched between phases: the batch's own


def _f(doc: str, check, default=None):
    """A record field: its documentation and its check (MISSING-aware)."""
    return field(default=default, metadata={"doc": doc, "check": check})


_count = F.integer(0)
_phase_counts = F.keyed(phase, _count)


def _config(v) -> Mapping:
    """The resolved configuration: every key passes through; the ones the readers compute with are checked."""
    m = F.mapping(v)  # kept as written (hidden_sizes a list, as the configuration's)
    F.checked({"input_size": F.integer(1), "hidden_sizes": F.list_of(F.integer(1)), "num_classes": F.integer(1),
               "batch_size": F.integer(1), "precision": F.string, "batch_transfer": F.string}, m)
    if not m["hidden_sizes"]:
        raise F.Bad("[], not a non-empty list", "hidden_sizes")
    return m


# ---- the manifest ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Ran:
    """What ran, resolved once at run time (the reader never works it out again)."""

    backend: str = _f("`numpy` or `cupy`", F.choice(*N.BACKENDS))
    comm: str = _f("the exchange, as `--comm` names it: `mpi`, `mpi-staged`, `nccl`, `ps`, `ps-nccl`, `ps-async`",
                   F.choice(*(c for c in N.COMMS if c != N.PS_ASYNC_NCCL)))
    exec: str = _f("`eager` or `graph`", F.choice(*N.EXECS))
    parallel: str = _f("the strategy: `data`, `model` or `hybrid`", F.choice(*N.STRATEGIES))
    model_procs: int = _f("ranks of a model group (hybrid; 0 otherwise)", _count)
    batch_transfer: str = _f("`pageable`, `pinned`, `resident`, `prefetch`, `prefetch-pageable`", F.string)
    overlap: bool = _f("the allreduce pipelined with the backward pass", F.boolean)
    bucket_bytes: int = _f("with `overlap`, the largest gradient piece one collective reduces", _count)
    gemm: str = _f("the GEMM kernels: `cublas`, `naive`, `tiled`, `regblock`", F.string)
    output_grad_cols: int = _f("launch shape: columns per block of the fused output backward (its partial sums "
                               "are ceil(b / this) per row)", F.integer(1))
    fuse_output: bool = _f("the output layer's backward ran as the fused pair of kernels", F.boolean)
    trace_level: str = _f("the level that ran (`counters`, `phases`, `timeline`, `kernels`)",
                          F.choice(*N.TRACE_LEVELS))
    trace_level_asked: str = _f("the level asked for (`auto` or a level)", F.string)
    trace_level_why: str | None = _f("with `auto`: the execution mode whose default ran", F.optional(F.string))
    trace_level_note: str | None = _f("why the level that ran differs from the one asked for",
                                      F.optional(F.string))
    trace_levels: tuple | None = _f("each rank's level, where they differ", F.optional(F.string_list))
    gpu: str | None = _f("the GPU's name (null on the CPU)", F.optional(F.string))
    batch_hooks: str | None = _f("the tracer's begin_batch and end_batch: `c` (compiled) or `python` (absent "
                                 "before perfmlp 0.4.0: Python)", F.optional(F.choice("c", "python")))
    blas: str | None = _f("the BLAS library NumPy called, with its file (`openblas (libscipy_openblas64_.so)`); null "
                          "where none was found (absent in older traces)", F.optional(F.string))
    slices: int = _f("the first layer's slices (`--slices`, `auto` resolved; 1: unsliced; absent before perfmlp "
                     "0.5.0: 1)", F.optional(F.integer(1), 1, null=False))
    grad_precision: str = _f("the width the gradients were reduced at (`--grad-precision`; absent before perfmlp "
                             "0.5.0: float32)", F.optional(F.choice(*N.GRAD_PRECISIONS), N.FLOAT32, null=False))
    blas_threads: tuple | None = _f("each rank's BLAS threads as it trained, rank 0 first (an entry null where the "
                                    "library has no thread-count call; absent in older traces)",
                                    F.optional(F.list_of(F.optional(F.integer(1)))))

    @property
    def on_gpu(self) -> bool:
        return self.backend == N.CUPY


@dataclass(frozen=True, slots=True)
class Manifest:
    """`manifest.json`: written by rank 0 at the start (`status` running),
    completed once the backend is built (`ran`) and at the end."""

    schema: str = _f(f"`{SCHEMA}`", F.choice(SCHEMA))
    run_id: str = _f("the folder's name", F.string)
    config: Mapping = _f("the resolved configuration (every key of `perfmlp.config.Config`)", _config)
    procs: int = _f("MPI processes", F.integer(1))
    status: str = _f("`running` (or the run was killed), `complete`, `failed`, `terminated` (SIGTERM), "
                     "`interrupted` (SIGINT), `stalled` (the watchdog ended it)",
                     F.choice(*N.STATUSES))
    start: str = _f("ISO 8601, UTC", F.string)
    end: str | None = _f("ISO 8601, UTC; null while running", F.optional(F.string))
    versions: Mapping = _f("perfmlp and `perfmlp_git` (the commit that ran), Python, NumPy, CuPy, CUDA, "
                           "mpi4py, nvtx", F.optional(F.mapping, MappingProxyType({})))
    argv: tuple = _f("the command line", F.optional(F.string_list, ()))
    mpi_library: str = _f("the MPI library's version line (`none` without mpi4py)", F.optional(F.string, "none"))
    machine: Mapping | None = _f("`nodes`: host -> `{gpu, gpu_count, ranks}`; `rank_devices`; `cpu`",
                                 F.optional(F.mapping))
    profiler_attached: bool = _f("an NVTX tool (Nsight Systems) was attached", F.optional(F.boolean, False))
    ran: Ran | None = _f("what ran (null until the backend is built)", F.optional(lambda v: read(Ran, v)))

    @property
    def layer_sizes(self) -> tuple[int, ...]:
        c = self.config
        return (c["input_size"], *c["hidden_sizes"], c["num_classes"])


# ---- a rank's file ----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Header:
    """The first line of a rank's file."""

    KIND: ClassVar[str] = "header"
    schema: str = _f(f"`{SCHEMA}`", F.choice(SCHEMA))
    rank: int = _f("this rank (the file's name says the same)", _count)
    size: int = _f("MPI processes", F.integer(1))
    start: str = _f("ISO 8601, UTC", F.string)
    pid: int = _f("the process id", _count)
    clock: str = _f("what the batch records' phase stamps are: `host` (perf_counter()) or `cuda-events` "
                    "(seconds from the batch's first CUDA event)", F.choice(N.HOST_CLOCK, N.CUDA_EVENTS))
    host_start_ns: int = _f("perf_counter_ns() when the tracer started (batch times count from it)", _count)


@dataclass(frozen=True, slots=True)
class Clock:
    """This rank's clocks against rank 0's host clock and CUPTI's (at the
    start, and with GPU activity at the end: the drift)."""

    KIND: ClassVar[str] = "clock"
    at: str = _f("`start` or `end`", F.choice("start", "end"))
    host_start_ns: int = _f("as the header's", _count)
    rank0_minus_host_ns: int = _f("rank 0's host clock minus this rank's (20 MPI ping-pongs, the shortest "
                                  "round trip's midpoint; 0 on rank 0)", F.integer(None))
    rank0_err_ns: int = _f("its uncertainty", _count)
    rank0_start_ns: int = _f("rank 0's `host_start_ns`", _count)
    cupti_minus_host_ns: int | None = _f("CUPTI's clock minus the host's (GPU activity only)",
                                         F.optional(F.integer(None)))
    cupti_err_ns: int | None = _f("its uncertainty", F.optional(_count))


@dataclass(frozen=True, slots=True)
class Activity:
    """GPU activity collection (`timeline`, `kernels`): the first such line
    says what the `gpu` lines hold; later ones count records no batch launched."""

    KIND: ClassVar[str] = "activity"
    schema: str | None = _f("`perfmlp.activity/1`", F.optional(F.choice("perfmlp.activity/1")))
    level: str | None = _f("the level collecting", F.optional(F.string))
    fields: tuple | None = _f("the fields of a `gpu` line's records", F.optional(F.string_list))
    own_kernels: tuple | None = _f("the kernels perfmlp compiles (every other is cuBLAS's or NCCL's)",
                                   F.optional(F.string_list))
    orphans: int = _f("records launched outside any batch (evaluation, setup), not written", F.optional(_count, 0))


def _launches(v):
    op = F.pair(F.string, F.list_of(F.integer(0)), "[operation, [dimensions]]")
    return F.keyed(phase, F.list_of(op))(v)


@dataclass(frozen=True, slots=True)
class Shape:
    """What a batch of one piece size costs, written once (before the first
    batch record that references it): FLOPs priced by the model's formulas
    on the launched shapes, bytes counted where the copies and collectives
    were issued."""

    KIND: ClassVar[str] = "shape"
    id: int = _f("referenced by batch records", F.integer(1))
    samples: int = _f("the batch's size", F.integer(1))
    local_samples: int = _f("this rank's piece", F.integer(1))
    phases: tuple = _f("the phases a batch records, in order", F.list_of(phase))
    flops: Mapping = _f("phase -> FLOPs of the operations launched in it", _phase_counts)
    ops: Mapping = _f("phase -> operations computed (a fused kernel computes several)", _phase_counts)
    kernels: Mapping | None = _f("phase -> kernels the network launched (a GEMM call counts once; NCCL's not)",
                                 F.optional(_phase_counts))
    gemms: Mapping | None = _f("phase -> GEMM calls among them", F.optional(_phase_counts))
    launches: Mapping | None = _f("phase -> `[operation, [dimensions]]` as launched (null in upgraded format-1 "
                                  "traces)", F.optional(_launches))
    mem_bytes: Mapping | None = _f("phase -> device-memory bytes the kernels launched in it read and write: the "
                                   "model's formulas (model/costs.py) on the launched shapes at the precision's "
                                   "widths, the roofline's bytes (absent in older traces: the reader fills it "
                                   "from the run's own layer sizes)", F.optional(_phase_counts))
    bytes_h2d: int = _f("bytes handed to cudaMemcpy host to device", _count)
    bytes_d2h: int = _f("bytes handed to cudaMemcpy device to host", _count)
    bytes_d2d: int = _f("bytes copied device to device (resident data into a graph's static inputs)", _count)
    bytes_mpi: int = _f("bytes handed to MPI collectives", _count)
    bytes_nccl: int = _f("bytes handed to NCCL collectives", _count)
    collectives: tuple = _f("`[[name, element count], ...]`",
                            F.list_of(F.pair(F.string, _count, "[name, element count]")))


class Span(NamedTuple):
    """A phase's time: from the batch's start, and how long (ms)."""

    offset_ms: float
    ms: float


@dataclass(frozen=True, slots=True)
class Batch:
    """One batch on one rank (`BatchLayout` on disk). Its counts are its shape's."""

    epoch: int = _f("position: epoch", _count)
    batch: int = _f("position: batch k = samples [kB, (k+1)B) of the epoch", _count)
    shape: Shape = _f("the `Shape` record (`id` on disk)", None)
    t0_s: float = _f("host clock at the batch's start, seconds since the tracer started", F.number())
    wall_ms: float = _f("host time from the batch's start to its end", F.number(0))
    loss: float | None = _f("mean cross-entropy over all ranks; null where reading it would synchronise the "
                            "device (NaN on disk)", F.optional(F.number()))
    clock: str = _f("what timed `t_ms`: `host`, `cuda-events`, or `cupti` (the reader's, from GPU activity)",
                    F.choice(*N.CLOCKS))
    t_ms: Mapping = _f("phase -> (offset, duration) ms from the batch's start", None)
    t_ms_total: float | None = _f("batch start to last phase end on the GPU; null on the host clock", None)
    t_ms_host: Mapping | None = _f("with `cupti`: the host's phase times", None)
    gpu_t0_ns: int | None = _f("with `cupti`: the batch's GPU start (CUPTI clock), `t_ms`'s origin", None)
    gpu: tuple | None = _f("with `cupti`: the batch's `GpuRecord`s", None)

    @property
    def key(self) -> tuple[int, int]:
        return self.epoch, self.batch


# the shape's counts, read through the batch (`b.samples` is `b.shape.samples`)
for _name in ("samples", "local_samples", "flops", "ops", "kernels", "gemms", "mem_bytes", *BYTE_COUNTS, "collectives"):
    setattr(Batch, _name, property(attrgetter("shape." + _name)))


class BatchLayout:
    """`rank-<r>.batches`: a 16-byte file header (`FILE`: magic, format
    version, rank), then one record per batch, little-endian, of 48 + 8 n
    bytes where n is the number of its shape's phases: shape id (u32; 0: no
    record from here on, the rest of a killed run's preallocated file),
    epoch, batch (i32), loss (f64, NaN: none), the host's perf_counter() at
    the batch's start and end (f64 seconds: packing a float costs the host
    half what a 64-bit integer does), the GPU's total seconds (-1: none),
    each phase's start (f64 seconds; on the `host` clock perf_counter(), on
    `cuda-events` from the batch's first event; a phase ends where the next
    one starts, the last at the batch's end, or on the GPU at the total),
    and last the record's size (u32). struct.pack_into stores the fields in
    order, so a record whose size is not there was cut off as it was written."""

    FILE = struct.Struct("<8sII")
    MAGIC = b"perfmlpB"
    VERSION = 2
    HEAD = struct.Struct("<I")        # the shape id, read first
    HEAD_BYTES = 48

    @staticmethod
    def record(nphases: int) -> struct.Struct:
        return struct.Struct("<Iiidddd" + "d" * nphases + "I")


@dataclass(frozen=True, slots=True)
class Epoch:
    """`epoch` line: an epoch's loss, accuracy and wall time, written as it ends (every rank)."""

    KIND: ClassVar[str] = "epoch"
    epoch: int = _f("the epoch", _count)
    loss: float | None = _f("mean cross-entropy over the epoch + the weight penalty at its end",
                            F.optional(F.number()))
    accuracy: float | None = _f("held-out accuracy (rank 0; null elsewhere)", F.optional(F.number(0)))
    seconds: float | None = _f("the epoch's synchronised wall time", F.optional(F.number(0)))
    steady_ms_per_batch: float | None = _f("synchronised wall time from the end of the first `warmup_batches` "
                                           "batches to the epoch's end, per batch (null: a one-batch epoch)",
                                           F.optional(F.number(0)))
    warmup_batches: int | None = _f("batches left out of that window", F.optional(_count))
    updates: int | None = _f("the asynchronous parameter server: gradients applied so far", F.optional(_count))


ACTIVITY_FIELDS = ("cat", "phase", "start_ns", "end_ns", "stream", "bytes", "copy", "name", "api_ns", "corr")


@dataclass(frozen=True, slots=True)
class GpuRecord:
    """One kernel, copy, memset or graph launch (an array of ACTIVITY_FIELDS on disk)."""

    ARRAY: ClassVar[bool] = True  # written as the array of its fields, in ACTIVITY_FIELDS order
    cat: str = _f("`compute` (a kernel), `comm` (an NCCL kernel or a 16-bit exchange cast), `copy` (memcpy, "
                  "memset), `graph` (a whole CUDA-graph launch at the `timeline` level)",
                  F.choice("compute", "copy", "comm", "graph"))
    phase: Any = _f("the phase that launched it (`batch`: between phases)", _gpu_phase)
    start_ns: int = _f("start on the GPU, CUPTI's clock", _count)
    end_ns: int = _f("end on the GPU", _count)
    stream: int = _f("CUDA stream id", _count)
    bytes: int = _f("bytes copied or set (0 for kernels)", _count)
    copy: str | None = _f("`h2d`, `d2h`, `d2d`, `other` for copies, `memset`, null for kernels",
                          F.optional(F.string))
    name: str | None = _f("kernel name as CUPTI gives it (mangled); `graph <id>` for a graph launch",
                          F.optional(F.string))
    api_ns: int | None = _f("host start of the CUDA call that launched it (CUPTI's clock)", F.optional(_count))
    corr: int = _f("CUPTI's correlation id of that call", _count)


def _gpu_record(v) -> GpuRecord:
    if not isinstance(v, list) or len(v) != len(ACTIVITY_FIELDS):
        raise F.Bad(f"{F.shown(v)}, not an array of {len(ACTIVITY_FIELDS)} fields")
    rec = read(GpuRecord, dict(zip(ACTIVITY_FIELDS, v)))
    if rec.end_ns < rec.start_ns:
        raise F.Bad(f"ends ({rec.end_ns}) before it starts ({rec.start_ns})", "end_ns")
    return rec


@dataclass(frozen=True, slots=True)
class GpuActivity:
    """`gpu` line: every GPU record one batch launched (written between epochs)."""

    KIND: ClassVar[str] = "gpu"
    epoch: int = _f("the batch's epoch", _count)
    batch: int = _f("the batch", _count)
    records: tuple = _f("arrays of the `Activity` line's `fields`", F.list_of(_gpu_record))


@dataclass(frozen=True, slots=True)
class End:
    """`end` line: the last line of a rank's file, written once the rank is done."""

    KIND: ClassVar[str] = "end"
    status: str = _f("as the manifest's", F.choice(*N.STATUSES))
    end: str = _f("ISO 8601, UTC", F.string)
    batches: int | None = _f("batch records written (absent in format 1)", F.optional(_count))


LINE_RECORDS = {cls.KIND: cls for cls in (Header, Clock, Activity, Shape, Epoch, GpuActivity, End)}


def read(cls, obj):
    """A record of `cls` from a JSON object, every field checked (F.Bad names the field)."""
    return cls(**F.fields_of(cls, obj))
