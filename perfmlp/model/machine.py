"""Machine descriptions: `models/*.yaml` loaded into a frozen dataclass.

The files ship inside the package as `perfmlp.machines` (pyproject.toml maps
the top-level models/ folder there), so `--machine NAME` finds them after any
install; `--machine PATH` reads any file.

Every number carries its unit in its key. A file must say where its
numbers come from (`source:`). Unknown keys, missing required keys, rates
that are not positive (a peak of 0 would divide by zero), negative times and
non-numeric values are one-line errors naming the file and key.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from .. import checks
from .costs import OWN_KERNELS
from .precision import NAMES as PRECISION_NAMES, precision as precision_of

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

MACHINES_PACKAGE = "perfmlp.machines"
DEFAULT_MACHINE = "quadro-rtx-6000"


class MachineError(ValueError):
    """A machine file that cannot be used (message: one line, file and key)."""


GEMM_KERNELS = ("cublas", "naive", "tiled", "regblock")  # perfmlp.config's CHOICES["gemm"]
COMMS = ("mpi", "nccl")


@dataclass(frozen=True)
class GemmRate:
    m: int
    n: int
    k: int
    precision: str
    flops_per_s: float
    kernel: str = "cublas"


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
    memory: str = "pinned"


@dataclass(frozen=True)
class WaitPoint:
    """Time the job loses per collective to the slowest of `procs` ranks,
    seconds: with `memory` None when their work is the same GPU work
    (arrival jitter); with `memory` (pageable, pinned) per step of the staged
    exchange whose host copies go through that memory, beyond the step's
    parts each timed alone (the ranks' copies, D2H and MPI differ from batch
    to batch: calibrate.staged_wait)."""
    procs: int
    s: float
    memory: str | None = None


@dataclass(frozen=True)
class LaunchFactor:
    """The eager step's host time per operation at 784-`hidden`-10 with
    pieces of `batch` over its time at the calibration's dispatch size
    (calibrate.dispatch_size_factors)."""
    hidden: int
    batch: int
    factor: float


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
    """One host <-> device copy of `bytes` as the trainer makes it, with
    `procs` ranks (each with its own GPU) making theirs at once (1: alone):
    the slowest rank's median seconds (pinned: GPU time between CUDA events;
    pageable: the host's wall time, the copy blocks it). `buffer`: where the
    host side is: "rotating" (a new slice of a large array every copy, as
    the batch pieces are) or "reduced" (the host buffer an MPI_Allreduce
    just wrote, as the staged exchange's gradient before its copy back).
    A pageable H2D point may also say how the copy behaves queued behind
    GPU work still running (the CUDA runtime stages pageable memory through
    pinned buffers of its own, and only the DMA waits for the stream):
    `ahead_s`, the host's time on it before it needs the stream (None: not
    measured), and `blocks`, whether the call returns only after the copy
    (else the host staged all of it and returned while the stream was
    still busy). A copy that blocks may say `ahead_delay_s`: how much of
    the GPU work still queued when its call starts it does not hide
    (behind work of w it hides min(ahead_s, max(0, w - ahead_delay_s)));
    without it, such a copy hides nothing (the model of older files)."""
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
    graph's static inputs), GPU seconds per call with the calls queued back
    to back: its bytes, its fixed cost and the gap to the next operation."""
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
class Machine:
    name: str
    source: str
    peak_flops_per_s_float32: float
    peak_flops_per_s_float64: float
    mem_bw_bytes_per_s: float
    h2d_pageable_bytes_per_s: float
    h2d_pinned_bytes_per_s: float
    d2h_pageable_bytes_per_s: float
    d2h_pinned_bytes_per_s: float
    copy_latency_s: float
    launch_overhead_s: float
    mpi_alpha_s: float
    mpi_bw_bytes_per_s: float
    nccl_alpha_s: float
    nccl_bw_bytes_per_s: float
    gemm_flops_per_s: tuple[GemmRate, ...] = ()
    traced_launch_overhead_s: float = 0.0   # host time per operation with perfmlp's tracer on (0: as untraced)
    trace_event_s: float = 0.0              # GPU time one CUDA event recorded between kernels adds
    h2d_pageable_latency_s: float = 0.0     # per-kind copy latency (0: copy_latency_s)
    h2d_pinned_latency_s: float = 0.0
    d2h_pageable_latency_s: float = 0.0
    d2h_pinned_latency_s: float = 0.0
    graph_launch_s: float = 0.0             # host time of one cudaGraphLaunch (a replayed step or segment)
    graph_step_host_s: float = 0.0          # host time per batch of the resident graph step, its loop included
    kernel_gap_s: float = 0.0               # GPU idle time between two kernels launched one by one
    graph_kernel_gap_s: float = 0.0         # the same between two kernels of a replayed graph
    graph_replay_gap_s: float = 0.0         # GPU time per graph replay beyond its kernels (replays back to back)
    trace_phase_host_s: float = 0.0         # host time the tracer adds per traced phase (0: traced_launch_overhead_s)
    h2d_pageable_aggregate_bytes_per_s: float = 0.0   # all ranks of a node copying at once, together (0: no limit)
    h2d_pinned_aggregate_bytes_per_s: float = 0.0
    d2h_pageable_aggregate_bytes_per_s: float = 0.0
    d2h_pinned_aggregate_bytes_per_s: float = 0.0
    allreduce_s: tuple[CollectivePoint, ...] = ()   # measured allreduces (interpolated; else alpha-beta)
    collective_wait_s: tuple[WaitPoint, ...] = ()   # the wait for the slowest rank, per process count
    kernel_s: tuple[KernelTime, ...] = ()   # measured times of the trainer's own kernels (else bytes / bandwidth)
    host_dispatch_s: tuple[DispatchPoint, ...] = ()   # launch and tracer host time, several ranks at once
    copy_aggregate_bytes_per_s: tuple[SharedCopyPoint, ...] = ()   # ranks copying at once, per count and kind
    d2d_copy_s: tuple[CopyPoint, ...] = ()  # device-to-device copies by size (else read + write at mem bandwidth)
    host_copy_s: tuple[HostCopyPoint, ...] = ()   # host <-> device copies measured by size and rank count
    launch_size_factor: tuple[LaunchFactor, ...] = ()   # the eager step's host per operation by size (ratio)
    # dense tensor-core peaks with float32 accumulation (model/precision.py; 0: none on this GPU)
    peak_flops_per_s_tf32: float = 0.0
    peak_flops_per_s_bf16: float = 0.0
    peak_flops_per_s_fp16: float = 0.0
    host_stage_bytes_per_s: float = 0.0     # a host thread's memcpy, pageable into pinned (0: the pageable H2D rate)
    gpus: int = 1
    date: str = ""
    device_names: tuple[str, ...] = ()   # the names CUDA gives this GPU, where they differ from `name`
    path: str = ""

    def describes(self, device_name: str) -> bool:
        """This file is for a GPU CUDA names `device_name`."""
        return device_name == self.name or device_name in self.device_names

    def peak_flops_per_s(self, precision: str) -> float:
        """The ceiling of a precision's GEMMs: the FFMA (FP64) peak for float32
        (float64), the dense tensor-core peak for tf32, bf16 and fp16; a
        MachineError where the file has none (a GPU without those tensor cores)."""
        gemm = precision_of(precision).gemm
        peak = getattr(self, f"peak_flops_per_s_{gemm}")
        if not peak:
            raise MachineError(f"{self.path or self.name}: no {gemm} ceiling (peak_flops_per_s_{gemm}): "
                               f"{self.name} has no {gemm} tensor cores, or the file does not say")
        return peak

    def ceilings(self) -> dict[str, float]:
        """The compute ceilings the file has, by GEMM input format (float64,
        float32 on the FFMA units, tf32, bf16, fp16 on tensor cores)."""
        out = {}
        for name in PRECISION_NAMES:
            gemm = precision_of(name).gemm
            if getattr(self, f"peak_flops_per_s_{gemm}"):
                out[gemm] = getattr(self, f"peak_flops_per_s_{gemm}")
        return out

    def stage_bw(self) -> float:
        """A host thread's copy of pageable rows into pinned memory, bytes/s."""
        return self.host_stage_bytes_per_s or self.h2d_pageable_bytes_per_s

    def copy_bw(self, direction: str, memory: str) -> float:
        return getattr(self, f"{direction}_{memory}_bytes_per_s")

    def copy_s(self, direction: str, memory: str, nbytes: int, sharing: int = 1,
               buffer: str = "rotating") -> float:
        """One cudaMemcpy of nbytes while `sharing` ranks copy at once. Where
        host_copy_s has points of this kind and rank count (for buffer
        "reduced" without its own points, the "rotating" ones): linear in
        bytes between them, the smallest's time below them, beyond the
        largest its time plus the rest at the shared bandwidth. Else latency
        (its kind's, else copy_latency_s) + bytes / the shared bandwidth
        (shared_copy_bw)."""
        bw = self.shared_copy_bw(direction, memory, sharing)
        pts = self.host_copy_points(direction, memory, sharing, buffer)
        if not pts:
            lat = getattr(self, f"{direction}_{memory}_latency_s") or self.copy_latency_s
            return lat + nbytes / bw
        if nbytes > pts[-1][0]:
            return pts[-1][1] + (nbytes - pts[-1][0]) / bw
        return piecewise_linear(pts, nbytes)

    def pageable_ahead_delay(self, nbytes: int, sharing: int = 1) -> float | None:
        """For a pageable H2D copy too large to be staged whole: the part of
        the GPU work queued before it that its staging does not hide
        (HostCopyPoint.ahead_delay_s), linear in bytes between the points of
        this rank count that have it, the nearest's beyond them; None where
        no point has it (the copy then hides nothing)."""
        pts = [(p.bytes, p.ahead_delay_s) for p in self._staging_points(sharing) if p.ahead_delay_s is not None]
        return piecewise_linear(pts, nbytes) if pts else None

    def _staging_points(self, sharing: int) -> list:
        """The pageable H2D batch-copy points of this rank count that were
        timed behind a busy stream (with ahead_s), by size."""
        return sorted((p for p in self.host_copy_s
                       if p.direction == "h2d" and p.memory == "pageable" and p.procs == max(sharing, 1)
                       and p.buffer == "rotating" and p.ahead_s is not None), key=lambda p: p.bytes)

    def pageable_ahead(self, nbytes: int, sharing: int = 1) -> tuple[float, bool]:
        """(seconds, blocks) of a pageable H2D copy of nbytes, `sharing`
        ranks copying at once, queued behind GPU work: the host time it
        spends before it needs the stream (staging into the runtime's
        pinned buffers; the rest of copy_s waits for the stream), and
        whether the call returns only after the copy. From host_copy_s's
        points with ahead_s of this rank count: linear in bytes between
        them, the nearest's beyond them, never more than the copy; blocks
        as the smallest point at or above nbytes (the largest beyond them).
        A file without such points: (0, True), the copy waits for the stream."""
        pts = [(p.bytes, p.ahead_s, p.blocks) for p in self._staging_points(sharing)]
        if not pts:
            return 0.0, True
        ahead = piecewise_linear([(n, a) for n, a, _ in pts], nbytes)
        blocks = next((b for n, _, b in pts if n >= nbytes), pts[-1][2])
        return min(ahead, self.copy_s("h2d", "pageable", nbytes, sharing)), blocks

    def host_copy_points(self, direction: str, memory: str, procs: int, buffer: str = "rotating") -> list:
        """(bytes, seconds) of host_copy_s for this kind, rank count and host
        buffer, by size; a "reduced" buffer without points: the "rotating"
        ones."""
        def pts(buf):
            return sorted((p.bytes, p.s) for p in self.host_copy_s if p.direction == direction
                          and p.memory == memory and p.procs == max(procs, 1) and p.buffer == buf)
        return pts(buffer) or (pts("rotating") if buffer != "rotating" else [])

    def shared_copy_bw(self, direction: str, memory: str, sharing: int = 1) -> float:
        """One rank's copy bandwidth while `sharing` ranks copy at once:
        min(its own, the node's aggregate / sharing). The aggregate: from
        copy_aggregate_bytes_per_s's points of that kind, linear in the rank
        count from one rank's own bandwidth, the last point's beyond them;
        a file without them, its `<kind>_aggregate_bytes_per_s` (all the
        node's ranks), else no limit."""
        own = self.copy_bw(direction, memory)
        if sharing <= 1:
            return own
        pts = sorted((p.procs, p.bytes_per_s) for p in self.copy_aggregate_bytes_per_s
                     if p.direction == direction and p.memory == memory and p.procs > 1)
        agg = (piecewise_linear([(1, own)] + pts, sharing) if pts
               else getattr(self, f"{direction}_{memory}_aggregate_bytes_per_s"))
        return min(own, agg / sharing) if agg else own

    def device_copy_s(self, nbytes: int) -> float:
        """GPU time of one device-to-device copy of nbytes: d2d_copy_s's
        points, linear in bytes between them, the smallest's time below
        them, beyond the largest its time plus the rest read and written at
        mem_bw_bytes_per_s; a file without points, read + write at that."""
        pts = sorted((p.bytes, p.s) for p in self.d2d_copy_s)
        if not pts:
            return 2 * nbytes / self.mem_bw_bytes_per_s
        if nbytes > pts[-1][0]:
            return pts[-1][1] + 2 * (nbytes - pts[-1][0]) / self.mem_bw_bytes_per_s
        return piecewise_linear(pts, nbytes)

    def allreduce_points(self, comm: str, procs: int, memory: str = "pinned") -> list[tuple[int, float]]:
        """(bytes, seconds) measured for `comm` over `procs` ranks, by size;
        host MPI through `memory`, else (a file without it) through pinned."""
        pts = [p for p in self.allreduce_s if p.comm == comm and p.procs == procs]
        mine = [p for p in pts if p.memory == memory]
        return sorted((p.bytes, p.s) for p in (mine or [p for p in pts if p.memory == "pinned"]))

    def launch_s(self, procs: int = 1) -> float:
        """Host time per operation an eager step launches with `procs` ranks
        launching at once (launch_overhead_s alone; host_dispatch_s's points
        beyond, linear in p between them, the nearest past the last)."""
        return self._dispatch(procs, self.launch_overhead_s, "launch_s")

    def trace_host_s(self, procs: int = 1) -> float:
        """The tracer's host time per recorded phase, the same way."""
        return self._dispatch(procs, self.trace_phase_host_s, "trace_phase_s")

    def _dispatch(self, procs: int, alone: float, key: str) -> float:
        pts = sorted((d.procs, getattr(d, key)) for d in self.host_dispatch_s if d.procs > 1)
        if procs <= 1 or not pts:
            return alone
        return piecewise_linear([(1, alone)] + pts, procs)

    def launch_factor(self, hidden: int, batch: int) -> float:
        """launch_size_factor at the measured (hidden, batch) nearest to these
        (by the ratio of each, summed in log), 1 in a file without it."""
        if not self.launch_size_factor:
            return 1.0
        near = min(self.launch_size_factor,
                   key=lambda f: abs(math.log(hidden / f.hidden)) + abs(math.log(max(batch, 1) / f.batch)))
        return near.factor

    def wait_s(self, procs: int, memory: str | None = None) -> float:
        """The calibrated wait for the slowest of `procs` ranks at a collective
        (linear in p between measured counts, the nearest beyond them; 0 on
        one): with `memory`, a staged exchange's through that host memory
        where the file has such points, else the equal-work wait."""
        pts = sorted((w.procs, w.s) for w in self.collective_wait_s if w.memory == memory)
        if memory is not None and not pts:
            return self.wait_s(procs)
        if procs <= 1 or not pts:
            return 0.0
        if procs <= pts[0][0]:
            return pts[0][1] * (procs - 1) / max(pts[0][0] - 1, 1)
        return piecewise_linear(pts, procs)

    def kernel_time_s(self, kernel: str, shape, precision: str) -> float | None:
        """GPU seconds of own kernel `kernel` at `shape` (costs.kernel_shape),
        or None where kernel_s has no point of that kernel, precision and
        number of dimensions. A shape is (h..., b): b its last size (samples,
        column blocks or elements), h the product of the others (1 if none).
        Rule: the points of the measured h nearest to this h by ratio; among
        them linear in b between the two measured b around it, the nearest
        point's time scaled by b / its b above the largest, held below the
        smallest (a kernel does not get faster than at its smallest size)."""
        pts = [(math.prod(p.shape[:-1]), p.shape[-1], p.s) for p in self.kernel_s
               if p.kernel == kernel and p.precision == precision and len(p.shape) == len(shape)]
        if not pts:
            return None
        h, b = math.prod(shape[:-1]), shape[-1]
        near = min({ph for ph, _, _ in pts}, key=lambda ph: (abs(math.log(ph / h)), ph))
        line = sorted((pb, s) for ph, pb, s in pts if ph == near)
        if b <= line[0][0]:
            return line[0][1]
        if b >= line[-1][0]:
            return line[-1][1] * b / line[-1][0]
        for (b0, s0), (b1, s1) in zip(line, line[1:]):
            if b0 <= b <= b1:
                return s0 + (s1 - s0) * (b - b0) / (b1 - b0)
        raise AssertionError("unreachable")

    @property
    def calibrated(self) -> bool:
        return bool(self.gemm_flops_per_s)

    def has_gemm_kernel(self, kernel: str) -> bool:
        return any(g.kernel == kernel for g in self.gemm_flops_per_s)

    def gemm_rate(self, m: int, n: int, k: int, precision: str, kernel: str = "cublas") -> float:
        """FLOP/s of an m x n x k GEMM by `kernel`: the calibrated entry of
        that kernel nearest in log-shape space when the file has some, else
        the peak rate."""
        rates = [g for g in self.gemm_flops_per_s if g.precision == precision and g.kernel == kernel]
        if not rates:
            return self.peak_flops_per_s(precision)

        def dist(g):
            return sum(math.log(a / b) ** 2 for a, b in ((g.m, m), (g.n, n), (g.k, k)))
        return min(rates, key=dist).flops_per_s


def piecewise_linear(points: list[tuple[float, float]], x: float) -> float:
    """y at x on the line through `points` (sorted by x): linear between
    the two around x, the nearest end's y outside them."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1
    return points[-1][1]


_OPTIONAL_NUMBERS = ("traced_launch_overhead_s", "trace_event_s", "h2d_pageable_latency_s", "h2d_pinned_latency_s",
                     "d2h_pageable_latency_s", "d2h_pinned_latency_s", "graph_launch_s", "graph_step_host_s",
                     "kernel_gap_s", "graph_kernel_gap_s", "graph_replay_gap_s", "trace_phase_host_s",
                     "h2d_pageable_aggregate_bytes_per_s",
                     "h2d_pinned_aggregate_bytes_per_s", "d2h_pageable_aggregate_bytes_per_s",
                     "d2h_pinned_aggregate_bytes_per_s", "peak_flops_per_s_tf32", "peak_flops_per_s_bf16",
                     "peak_flops_per_s_fp16", "host_stage_bytes_per_s")
_TABLES = ("gemm_flops_per_s", "allreduce_s", "collective_wait_s", "kernel_s", "host_dispatch_s",
           "copy_aggregate_bytes_per_s", "d2d_copy_s", "host_copy_s", "launch_size_factor")
_OPTIONAL = {"gpus", "date", "device_names", "path", *_TABLES, *_OPTIONAL_NUMBERS}
_NUMERIC = [f.name for f in fields(Machine) if f.name not in _OPTIONAL and f.name not in ("name", "source")]


def _rate_or_time(key: str, value) -> float:
    """A rate (`..._per_s...`) must be positive (an optional one may be 0:
    not measured), a time must not be negative."""
    v = checks.number(key, value)
    if "_per_s" in key and not (key in _OPTIONAL_NUMBERS and v == 0):
        return checks.positive(key, v)
    return checks.non_negative(key, v)


def _entry(entry, required: tuple, optional: tuple = ()) -> dict:
    if not isinstance(entry, dict) or not set(required) <= set(entry) <= set(required) | set(optional):
        extra = f" (optional: {', '.join(optional)})" if optional else ""
        raise checks.CheckError(f"needs exactly {', '.join(required)}{extra}")
    return entry


def _gemm_rate(entry) -> GemmRate:
    entry = _entry(entry, ("m", "n", "k", "precision", "flops_per_s"), ("kernel",))
    m, n, k = (checks.positive(key, checks.integer(key, entry[key])) for key in ("m", "n", "k"))
    precision = checks.choice("precision", entry["precision"], PRECISION_NAMES)
    kernel = checks.choice("kernel", entry.get("kernel", "cublas"), GEMM_KERNELS)
    return GemmRate(m, n, k, precision, _rate_or_time("flops_per_s", entry["flops_per_s"]), kernel)


def _collective_point(entry) -> CollectivePoint:
    entry = _entry(entry, ("comm", "procs", "bytes", "s"), ("memory",))
    return CollectivePoint(checks.choice("comm", entry["comm"], COMMS),
                           checks.positive("procs", checks.integer("procs", entry["procs"])),
                           checks.positive("bytes", checks.integer("bytes", entry["bytes"])),
                           checks.positive("s", checks.number("s", entry["s"])),
                           checks.choice("memory", entry.get("memory", "pinned"), ("pinned", "pageable")))


def _dispatch_point(entry) -> DispatchPoint:
    entry = _entry(entry, ("procs", "launch_s", "trace_phase_s"))
    return DispatchPoint(checks.positive("procs", checks.integer("procs", entry["procs"])),
                         checks.positive("launch_s", checks.number("launch_s", entry["launch_s"])),
                         checks.non_negative("trace_phase_s", checks.number("trace_phase_s", entry["trace_phase_s"])))


def _shared_copy_point(entry) -> SharedCopyPoint:
    entry = _entry(entry, ("procs", "direction", "memory", "bytes_per_s"))
    return SharedCopyPoint(checks.positive("procs", checks.integer("procs", entry["procs"])),
                           checks.choice("direction", entry["direction"], ("h2d", "d2h")),
                           checks.choice("memory", entry["memory"], ("pageable", "pinned")),
                           checks.positive("bytes_per_s", checks.number("bytes_per_s", entry["bytes_per_s"])))


def _host_copy_point(entry) -> HostCopyPoint:
    entry = _entry(entry, ("procs", "direction", "memory", "bytes", "s"),
                   ("buffer", "ahead_s", "blocks", "ahead_delay_s"))
    point = HostCopyPoint(checks.positive("procs", checks.integer("procs", entry["procs"])),
                          checks.choice("direction", entry["direction"], ("h2d", "d2h")),
                          checks.choice("memory", entry["memory"], ("pageable", "pinned")),
                          checks.positive("bytes", checks.integer("bytes", entry["bytes"])),
                          checks.positive("s", checks.number("s", entry["s"])),
                          checks.choice("buffer", entry.get("buffer", "rotating"), ("rotating", "reduced")))
    ahead, blocks, delay = entry.get("ahead_s"), entry.get("blocks", True), entry.get("ahead_delay_s")
    if ahead is None and blocks is True and delay is None:   # as dataclasses.asdict writes a point without them
        return point
    if (point.direction, point.memory) != ("h2d", "pageable"):
        raise checks.CheckError(f"ahead_s and blocks are for pageable h2d copies, not {point.memory} {point.direction}")
    if not isinstance(blocks, bool):
        raise checks.CheckError(f"blocks must be true or false, got {blocks!r}")
    ahead = None if ahead is None else checks.non_negative("ahead_s", checks.number("ahead_s", ahead))
    if delay is not None:
        if ahead is None or not blocks:
            raise checks.CheckError("ahead_delay_s is for a copy that blocks, with its ahead_s")
        delay = checks.non_negative("ahead_delay_s", checks.number("ahead_delay_s", delay))
    return replace(point, ahead_s=ahead, blocks=blocks, ahead_delay_s=delay)


def _copy_point(entry) -> CopyPoint:
    entry = _entry(entry, ("bytes", "s"))
    return CopyPoint(checks.positive("bytes", checks.integer("bytes", entry["bytes"])),
                     checks.positive("s", checks.number("s", entry["s"])))


def _wait_point(entry) -> WaitPoint:
    entry = _entry(entry, ("procs", "s"), ("memory",))
    memory = entry.get("memory")
    return WaitPoint(checks.positive("procs", checks.integer("procs", entry["procs"])),
                     checks.non_negative("s", checks.number("s", entry["s"])),
                     None if memory is None else checks.choice("memory", memory, ("pageable", "pinned")))


def _launch_factor(entry) -> LaunchFactor:
    entry = _entry(entry, ("hidden", "batch", "factor"))
    return LaunchFactor(checks.positive("hidden", checks.integer("hidden", entry["hidden"])),
                        checks.positive("batch", checks.integer("batch", entry["batch"])),
                        checks.positive("factor", checks.number("factor", entry["factor"])))


def _kernel_time(entry) -> KernelTime:
    entry = _entry(entry, ("kernel", "shape", "precision", "s"))
    shape = entry["shape"]
    if not isinstance(shape, list) or not shape:
        raise checks.CheckError(f"shape must be a non-empty list of sizes, got {shape!r}")
    return KernelTime(checks.choice("kernel", entry["kernel"], OWN_KERNELS.values()),
                      tuple(checks.positive(f"shape[{i}]", checks.integer(f"shape[{i}]", n))
                            for i, n in enumerate(shape)),
                      checks.choice("precision", entry["precision"], PRECISION_NAMES),
                      checks.positive("s", checks.number("s", entry["s"])))


_TABLE_ENTRY = {"gemm_flops_per_s": _gemm_rate, "allreduce_s": _collective_point, "collective_wait_s": _wait_point,
                "kernel_s": _kernel_time, "host_dispatch_s": _dispatch_point,
                "copy_aggregate_bytes_per_s": _shared_copy_point, "d2d_copy_s": _copy_point,
                "host_copy_s": _host_copy_point, "launch_size_factor": _launch_factor}


def machine_from_mapping(data, where: str) -> Machine:
    if not isinstance(data, dict):
        raise MachineError(f"{where}: expected a mapping of keys, got {type(data).__name__}")
    known = {f.name for f in fields(Machine)} - {"path"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise MachineError(f"{where}: unknown key {unknown[0]}")
    for key in ("name", "source", *_NUMERIC):
        if key not in data or data[key] is None:
            raise MachineError(f"{where}: missing key {key}")
    values = {"path": where}
    try:
        for key in ("name", "source"):
            values[key] = checks.string(key, data[key], non_empty=True)
        for key in _NUMERIC:
            values[key] = _rate_or_time(key, data[key])
        for key in _OPTIONAL_NUMBERS:
            values[key] = _rate_or_time(key, data.get(key, 0.0))
        if "gpus" in data:
            values["gpus"] = checks.positive("gpus", checks.integer("gpus", data["gpus"]))
        values["date"] = str(data.get("date", ""))
        names = data.get("device_names") or []
        if not isinstance(names, list):
            raise checks.CheckError("device_names must be a list")
        values["device_names"] = tuple(checks.string(f"device_names[{i}]", n, non_empty=True)
                                       for i, n in enumerate(names))
        for key in _TABLES:
            if not isinstance(data.get(key) or [], list):
                raise checks.CheckError(f"{key} must be a list")
    except checks.CheckError as e:
        raise MachineError(f"{where}: {e}") from None
    for key in _TABLES:
        rows = []
        for i, entry in enumerate(data.get(key) or []):
            try:
                rows.append(_TABLE_ENTRY[key](entry))
            except checks.CheckError as e:
                raise MachineError(f"{where}: {key}[{i}] {e}") from None
        values[key] = tuple(rows)
    # one time per point: interpolation needs distinct sizes
    for key, point in (("kernel_s", lambda k: (k.kernel, k.shape, k.precision)),
                       ("host_copy_s", lambda c: (c.procs, c.direction, c.memory, c.buffer, c.bytes))):
        seen = {}
        for i, row in enumerate(values[key]):
            first = seen.setdefault(point(row), i)
            if first != i:
                what = " ".join(str(list(x)) if isinstance(x, tuple) else str(x) for x in point(row))
                raise MachineError(f"{where}: {key}[{i}] repeats {key}[{first}] ({what})")
    return Machine(**values)


def machine_files() -> list[Traversable]:
    """The machine files shipped with the package (models/*.yaml), by name;
    in a source checkout used without installing (PYTHONPATH, as on the GPU
    machine), the checkout's models/ folder."""
    try:
        folder = resources.files(MACHINES_PACKAGE)
    except ModuleNotFoundError:
        folder = Path(__file__).resolve().parents[2] / "models"
        if not folder.is_dir():
            raise MachineError(f"the package {MACHINES_PACKAGE} (the machine files) is not installed: "
                               "run `pip install -e .` again in the project") from None
    return sorted((p for p in folder.iterdir() if p.name.endswith(".yaml")), key=lambda p: p.name)


def resolve_machine_path(name_or_path) -> Path | Traversable:
    """A file as given (a path ending in .yaml/.yml or that exists, or one of
    machine_files()), else the shipped machine file `<name>.yaml`."""
    if name_or_path is None:
        name_or_path = DEFAULT_MACHINE
    if not isinstance(name_or_path, (str, Path)):
        return name_or_path  # a Traversable from machine_files()
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    shipped = machine_files()
    for f in shipped:
        if f.name == f"{name_or_path}.yaml":
            return f
    names = ", ".join(f.name.removesuffix(".yaml") for f in shipped)
    raise MachineError(f"no machine named {str(name_or_path)!r} (shipped: {names}; or give a .yaml file)")


def load_machine(name_or_path=None) -> Machine:
    """The machine in a file given by path, or shipped under a name (default: DEFAULT_MACHINE)."""
    path = resolve_machine_path(name_or_path)
    try:
        data = checks.read_yaml(path, "machine file")
    except checks.CheckError as e:
        raise MachineError(str(e)) from None
    return machine_from_mapping(data, str(path))


def machine_to_yaml(values: dict) -> str:
    """YAML text for a mapping of machine keys (used by the calibration)."""
    return yaml.safe_dump(values, sort_keys=False, default_flow_style=None, width=120)
