"""The measured tables a machine file may hold, one frozen dataclass per
kind of point, and the rule that interpolates between points."""
from __future__ import annotations

from dataclasses import dataclass
from ... import names as N

# the spread sources a file may record (model/interval.py), the model's own error per execution mode among them
MODEL_ERROR_SOURCES = {N.EAGER: "model_eager", N.GRAPH: "model_graph"}
# the same for steps whose batch is staged through pageable memory, where a file has it
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
    """One measured allreduce (the slowest rank's median, buffer cold); host MPI's through `memory`."""
    comm: str
    procs: int
    bytes: int
    s: float
    memory: str = N.PINNED


@dataclass(frozen=True)
class WaitPoint:
    """Seconds lost per collective to the slowest of `procs` ranks: arrival jitter (`memory`
    None), or the staged exchange's through that memory beyond its parts timed alone."""
    procs: int
    s: float
    memory: str | None = None


@dataclass(frozen=True)
class LaunchFactor:
    """A ratio of the eager step's host time at 784-`hidden`-10, pieces of `batch`
    (launch_size_factor, pageable_launch_factor)."""
    hidden: int
    batch: int
    factor: float


@dataclass(frozen=True)
class PrefetchPoint:
    """The tiny step with its batch prefetched from `source` in `exec` mode, pieces
    of `bytes`: seconds per batch, and the same loop's with the batch resident."""
    exec: str
    source: str
    bytes: int
    s: float
    loop_s: float


@dataclass(frozen=True)
class DispatchPoint:
    """Host seconds per launched operation and per traced phase, `procs` ranks at once (the slowest's)."""
    procs: int
    launch_s: float
    trace_phase_s: float


@dataclass(frozen=True)
class SharedCopyPoint:
    """The node's aggregate bandwidth while `procs` ranks (a GPU each) copy at once, bytes/s."""
    procs: int
    direction: str
    memory: str
    bytes_per_s: float


@dataclass(frozen=True)
class HostCopyPoint:
    """One host <-> device copy as the trainer makes it, `procs` ranks at once: the
    slowest rank's median seconds. `buffer`: "rotating" (a new slice each copy)
    or "reduced" (the buffer an MPI_Allreduce just wrote). A pageable H2D point
    may say how it behaves queued behind GPU work: `ahead_s`, host time before it
    needs the stream; `blocks`, the call returns only after the copy; for one
    that blocks, behind queued work w it hides min(ahead_s, max(0, w - ahead_delay_s))."""
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
    """One device-to-device copy (into a graph's static inputs), GPU seconds per call."""
    bytes: int
    s: float


@dataclass(frozen=True)
class KernelTime:
    """GPU seconds per call of an own kernel (costs.OWN_KERNELS) at `shape` (costs.kernel_shape)."""
    kernel: str
    shape: tuple[int, ...]
    precision: str
    s: float


@dataclass(frozen=True)
class SpreadPoint:
    """One source's measured spread: repeats over their median, pooled and sorted (interval.py
    draws from them); the model's own error over earlier blind tests (report/blind_spread.py)."""
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
