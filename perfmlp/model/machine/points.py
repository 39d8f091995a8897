"""The measured tables a machine file may hold, one frozen dataclass per
kind of point, and the rule that interpolates between points."""
from __future__ import annotations

from dataclasses import dataclass
from ... import names as N

# the sources of a file's figures whose measured spread it may record (model/interval.py), and
# the model's own error, measured blind per execution mode (report/blind_spread.py)
MODEL_ERROR_SOURCES = {N.EAGER: "model_eager", N.GRAPH: "model_graph"}
# the same for steps whose batch is staged through pageable host memory (PAGEABLE_TRANSFERS), where a file
# has it; the ones above are then the other transfers' (resident, pinned, prefetched from pinned memory)
PAGEABLE_MODEL_ERROR_SOURCES = {N.EAGER: "model_eager_pageable", N.GRAPH: "model_graph_pageable"}
PAGEABLE_TRANSFERS = N.PAGEABLE_SOURCES
MODEL_SOURCES = (*MODEL_ERROR_SOURCES.values(), *PAGEABLE_MODEL_ERROR_SOURCES.values())
SPREAD_SOURCES = ("host", "pageable_copy", "pinned_copy", "gpu", "collective", *MODEL_SOURCES)


@dataclass(frozen=True)
class GemmRate:
    m: int
    n: int
    k: int
    precision: str
    flops_per_s: float
    kernel: str = N.CUBLAS


@dataclass(frozen=True)
class CollectivePoint:
    """One measured allreduce: `comm` over `procs` ranks of `bytes`, `s` seconds
    (the slowest rank's median, the buffer cold as the trainer's is); host
    MPI's through `memory` (the staged gradients' host buffer: pinned, or
    pageable as the reference scheme's and the NumPy backend's are)."""
    comm: str
    procs: int
    bytes: int
    s: float
    memory: str = N.PINNED


@dataclass(frozen=True)
class WaitPoint:
    """Seconds the job loses per collective to the slowest of `procs` ranks:
    `memory` None for equal GPU work (arrival jitter); with `memory`
    (pageable, pinned), per step of the staged exchange through that memory,
    beyond its parts each timed alone (calibrate.staged_wait)."""
    procs: int
    s: float
    memory: str | None = None


@dataclass(frozen=True)
class LaunchFactor:
    """A ratio of the eager step's host time at 784-`hidden`-10, pieces of
    `batch`: per operation over the tiny step's (launch_size_factor), or
    after pageable batch copies over without them (pageable_launch_factor)."""
    hidden: int
    batch: int
    factor: float


@dataclass(frozen=True)
class PrefetchPoint:
    """The trainer's step at a negligible size with its batch prefetched
    (calibrate/pipeline.py) from `source` (prefetch: pinned memory;
    prefetch-pageable: staged by the pipeline's threads) in `exec` mode,
    pieces of `bytes`: seconds per batch (`s`) and the same loop's with the
    batch resident, in the same rounds (`loop_s`)."""
    exec: str
    source: str
    bytes: int
    s: float
    loop_s: float


@dataclass(frozen=True)
class DispatchPoint:
    """The host's time per operation an eager step launches (`launch_s`)
    and the tracer's per recorded phase (`trace_phase_s`), with `procs`
    ranks launching at once: the slowest rank's, seconds."""
    procs: int
    launch_s: float
    trace_phase_s: float


@dataclass(frozen=True)
class SharedCopyPoint:
    """`procs` ranks, each with its own GPU, making one copy of a kind
    (`direction`, host `memory`) at once after a barrier: the node's
    aggregate bandwidth, bytes/s (procs x bytes over the slowest rank's
    median time; pinned copies timed on the GPU, pageable on the host)."""
    procs: int
    direction: str
    memory: str
    bytes_per_s: float


@dataclass(frozen=True)
class HostCopyPoint:
    """One host <-> device copy of `bytes` as the trainer makes it, `procs`
    ranks (a GPU each) copying at once: the slowest rank's median seconds
    (pinned: GPU time between CUDA events; pageable: the host's wall time).
    `buffer`: "rotating" (a new slice of a large array every copy, as the
    batch pieces) or "reduced" (the host buffer an MPI_Allreduce just wrote).
    A pageable H2D point may say how the copy behaves queued behind GPU work
    (the runtime stages it through pinned buffers; only the DMA waits for
    the stream): `ahead_s`, the host's time on it before it needs the
    stream (None: not measured); `blocks`, whether the call returns only
    after the copy; for one that blocks, `ahead_delay_s`: behind queued work
    w it hides min(ahead_s, max(0, w - ahead_delay_s)) (None: nothing)."""
    procs: int
    direction: str
    memory: str
    bytes: int
    s: float
    buffer: str = "rotating"
    ahead_s: float | None = None
    blocks: bool = True
    ahead_delay_s: float | None = None


@dataclass(frozen=True)
class CopyPoint:
    """One device-to-device copy of `bytes` (a batch piece into a CUDA
    graph's static inputs), GPU seconds per call queued back to back."""
    bytes: int
    s: float


@dataclass(frozen=True)
class KernelTime:
    """The GPU time of one of the trainer's own kernels (costs.OWN_KERNELS'
    names) at `shape` (costs.kernel_shape: its first operation's shape as
    the trainer records it), seconds per call with the calls queued back to
    back as the GEMM rates are."""
    kernel: str
    shape: tuple[int, ...]
    precision: str
    s: float


@dataclass(frozen=True)
class SpreadPoint:
    """The measured spread of one source of the file's figures
    (SPREAD_SOURCES): repeated measurements over their median, pooled over
    the source's points, sorted (calibrate/spread.py; interval.py draws from
    them); for the model's own error, measured over predicted times of
    earlier blind tests (report/blind_spread.py)."""
    source: str
    ratios: tuple[float, ...]


def piecewise_linear(points: list[tuple[float, float]], x: float) -> float:
    """y at x on the line through `points` (sorted by x): linear between
    the two around x, the nearest end's y outside them."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1
    return points[-1][1]
