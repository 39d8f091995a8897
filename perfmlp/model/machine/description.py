"""The Machine dataclass: a machine file's numbers (its fields made from
fields.FIELDS, where each key is declared once), its measured tables (tuples
of files.py's points), and the look-ups the model prices with, each
interpolating in the file's measured points where it has them."""
from __future__ import annotations

import math
from dataclasses import make_dataclass
from functools import cached_property

from .fields import FIELDS, GPU_KEYS
from ..precision import NAMES as PRECISION_NAMES, precision as precision_of
from ... import names as N


# the spread sources a file may record (model/interval.py), the model's own error per execution mode among them
MODEL_ERROR_SOURCES = {N.EAGER: "model_eager", N.GRAPH: "model_graph"}
# the same for steps whose batch is staged through pageable memory, where a file has it
PAGEABLE_MODEL_ERROR_SOURCES = {N.EAGER: "model_eager_pageable", N.GRAPH: "model_graph_pageable"}
PAGEABLE_TRANSFERS = N.PAGEABLE_SOURCES
MODEL_SOURCES = (*MODEL_ERROR_SOURCES.values(), *PAGEABLE_MODEL_ERROR_SOURCES.values())
SPREAD_SOURCES = ("host", "pageable_copy", "pinned_copy", "gpu", "collective", *MODEL_SOURCES)


def piecewise_linear(points: list[tuple[float, float]], x: float) -> float:
    """y at x on the line through `points` (sorted by x); the nearest end's y outside them."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1
    return points[-1][1]


class MachineError(ValueError):
    """A machine file that cannot be used (message: one line, file and key)."""


class MachineLookups:
    """The look-ups the model prices with, on a Machine's fields."""

    def describes(self, device_name: str) -> bool:
        """This file is for a GPU CUDA names `device_name`."""
        return device_name == self.name or device_name in self.device_names

    def peak_flops_per_s(self, precision: str) -> float:
        """The ceiling of a precision's GEMMs (FFMA, FP64 or dense tensor-core peak); MachineError if none."""
        gemm = precision_of(precision).gemm
        peak = getattr(self, f"peak_flops_per_s_{gemm}")
        if not peak:
            raise MachineError(f"{self.path or self.name}: no {gemm} ceiling (peak_flops_per_s_{gemm}): "
                               f"{self.name} has no {gemm} tensor cores, or the file does not say")
        return peak

    def ceilings(self) -> dict[str, float]:
        """The compute ceilings the file has, by GEMM input format."""
        peaks = {g: getattr(self, f"peak_flops_per_s_{g}") for g in (precision_of(n).gemm for n in PRECISION_NAMES)}
        return {g: v for g, v in peaks.items() if v}

    def stage_bw(self) -> float:
        """A host thread's copy of pageable rows into pinned memory, bytes/s."""
        return self.host_stage_bytes_per_s or self.h2d_pageable_bytes_per_s

    def copy_bw(self, direction: str, memory: str) -> float:
        return getattr(self, f"{direction}_{memory}_bytes_per_s")

    def copy_s(self, direction: str, memory: str, nbytes: int, sharing: int = 1,
               buffer: str = "rotating") -> float:
        """One cudaMemcpy while `sharing` ranks copy: host_copy_s's points of this kind, ranks and buffer (else
        "rotating"), else latency + bytes / bandwidth."""
        bw = self.shared_copy_bw(direction, memory, sharing)
        mine = [p for p in self.host_copy_s if (p.direction, p.memory, p.procs) == (direction, memory, max(sharing, 1))]
        pts = sorted((p.bytes, p.s) for p in mine if p.buffer == buffer) or \
            sorted((p.bytes, p.s) for p in mine if p.buffer == "rotating")
        if not pts:
            lat = getattr(self, f"{direction}_{memory}_latency_s") or self.copy_latency_s
            return lat + nbytes / bw
        return extended(pts, nbytes, lambda n0, s0: s0 + (nbytes - n0) / bw)

    def pageable_ahead_delay(self, nbytes: int, sharing: int = 1) -> float | None:
        """HostCopyPoint.ahead_delay_s at nbytes (piecewise_linear); None where no point has it."""
        pts = [(p.bytes, p.ahead_delay_s) for p in self._staging_points(sharing) if p.ahead_delay_s is not None]
        return piecewise_linear(pts, nbytes) if pts else None

    def _staging_points(self, sharing: int) -> list:
        """The pageable H2D batch-copy points of this rank count with ahead_s, by size."""
        return sorted((p for p in self.host_copy_s
                       if p.direction == N.HOST_TO_DEVICE and p.memory == N.PAGEABLE and p.procs == max(sharing, 1)
                       and p.buffer == "rotating" and p.ahead_s is not None), key=lambda p: p.bytes)

    def pageable_ahead(self, nbytes: int, sharing: int = 1) -> tuple[float, bool]:
        """(seconds, blocks) of a pageable H2D copy queued behind GPU work: its
        host time before it needs the stream (at most the copy's) and whether
        the call returns only after the copy; (0, True) without points."""
        pts = [(p.bytes, p.ahead_s, p.blocks) for p in self._staging_points(sharing)]
        if not pts:
            return 0.0, True
        ahead = piecewise_linear([(n, a) for n, a, _ in pts], nbytes)
        blocks = next((b for n, _, b in pts if n >= nbytes), pts[-1][2])
        return min(ahead, self.copy_s("h2d", N.PAGEABLE, nbytes, sharing)), blocks

    def prefetch_pace(self, exec_mode: str, source: str, nbytes: int) -> float | None:
        """Seconds per batch of the input pipeline from `source` (prefetch_s); None without points."""
        pts = sorted((q.bytes, q.s) for q in self.prefetch_s if q.exec == exec_mode and q.source == source)
        return extended(pts, nbytes, lambda n0, s0: s0 * nbytes / n0) if pts else None

    def prefetch_host_s(self, exec_mode: str) -> float | None:
        """Host time per batch prefetching from pinned memory adds to the loop; None without points."""
        pts = sorted((q.bytes, q.s - q.loop_s) for q in self.prefetch_s
                     if q.exec == exec_mode and q.source == N.PREFETCH)
        return max(0.0, pts[0][1]) if pts else None

    def shared_copy_bw(self, direction: str, memory: str, sharing: int = 1) -> float:
        """One rank's copy bandwidth while `sharing` ranks copy: min(its own, the
        node's aggregate / sharing), the aggregate from copy_aggregate_bytes_per_s
        (piecewise_linear in ranks), else `<kind>_aggregate_bytes_per_s`, else none."""
        own = self.copy_bw(direction, memory)
        if sharing <= 1:
            return own
        pts = sorted((p.procs, p.bytes_per_s) for p in self.copy_aggregate_bytes_per_s
                     if p.direction == direction and p.memory == memory and p.procs > 1)
        agg = (piecewise_linear([(1, own)] + pts, sharing) if pts
               else getattr(self, f"{direction}_{memory}_aggregate_bytes_per_s"))
        return min(own, agg / sharing) if agg else own

    def device_copy_s(self, nbytes: int) -> float:
        """GPU time of one device copy: d2d_copy_s's points, the rest read and written at mem_bw."""
        pts = sorted((p.bytes, p.s) for p in self.d2d_copy_s)
        if not pts:
            return 2 * nbytes / self.mem_bw_bytes_per_s
        return extended(pts, nbytes, lambda n0, s0: s0 + 2 * (nbytes - n0) / self.mem_bw_bytes_per_s)

    def allreduce_points(self, comm: str, procs: int, memory: str = N.PINNED) -> list[tuple[int, float]]:
        """(bytes, seconds) measured for `comm` over `procs` ranks by size; host MPI through `memory`, else pinned."""
        pts = [p for p in self.allreduce_s if p.comm == comm and p.procs == procs]
        mine = [p for p in pts if p.memory == memory]
        return sorted((p.bytes, p.s) for p in (mine or [p for p in pts if p.memory == N.PINNED]))

    def launch_s(self, procs: int = 1) -> float:
        """Host time per launched operation with `procs` ranks launching (host_dispatch_s, piecewise_linear)."""
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
        """launch_size_factor at the nearest measured (hidden, batch); 1 without it."""
        return _nearest_factor(self.launch_size_factor, hidden, batch)

    def pageable_launch(self, hidden: int, batch: int) -> float:
        """pageable_launch_factor the same way: eager launches after pageable batch copies."""
        return _nearest_factor(self.pageable_launch_factor, hidden, batch)

    def wait_s(self, procs: int, memory: str | None = None) -> float:
        """The calibrated wait for the slowest of `procs` ranks, 0 on one (`memory`: the staged exchange's)."""
        pts = sorted((w.procs, w.s) for w in self.collective_wait_s if w.memory == memory)
        if memory is not None and not pts:
            return self.wait_s(procs)
        if procs <= 1 or not pts:
            return 0.0
        if procs <= pts[0][0]:
            return pts[0][1] * (procs - 1) / max(pts[0][0] - 1, 1)
        return piecewise_linear(pts, procs)

    @cached_property
    def _picks(self) -> dict:
        """The table rows each look-up picked (by position), memoised. They depend on the rows' shapes and
        order only, which a perturbed copy keeps (model/interval.py scales a table's figures alike), so
        such a copy shares this memo."""
        return {}

    def kernel_time_s(self, kernel: str, shape, precision: str) -> float | None:
        """GPU seconds of own kernel `kernel` at shape (h..., b), None without points: at the
        measured h nearest by ratio, piecewise_linear in b, in proportion to b beyond."""
        key = ("kernel_time_s", kernel, tuple(shape), precision)
        if key not in self._picks:
            rows = {i: math.prod(p.shape[:-1]) for i, p in enumerate(self.kernel_s)
                    if p.kernel == kernel and p.precision == precision and len(p.shape) == len(shape)}
            h = math.prod(shape[:-1])
            near = min(set(rows.values()), key=lambda ph: (abs(math.log(ph / h)), ph), default=None)
            self._picks[key] = sorted((i for i, ph in rows.items() if ph == near),
                                      key=lambda i: (self.kernel_s[i].shape[-1], self.kernel_s[i].s))
        line = [(self.kernel_s[i].shape[-1], self.kernel_s[i].s) for i in self._picks[key]]
        if not line:
            return None
        b = shape[-1]
        if b >= line[-1][0]:
            return line[-1][1] * b / line[-1][0]
        return piecewise_linear(line, b)

    @property
    def calibrated(self) -> bool:
        return bool(self.gemm_flops_per_s)

    def has_gemm_kernel(self, kernel: str) -> bool:
        return any(g.kernel == kernel for g in self.gemm_flops_per_s)

    def gemm_rate(self, m: int, n: int, k: int, precision: str, kernel: str = N.CUBLAS) -> float:
        """FLOP/s of an m x n x k GEMM by `kernel`: the nearest calibrated entry in log-shape space, else the peak."""
        key = ("gemm_rate", m, n, k, precision, kernel)
        if key not in self._picks:
            table = self.gemm_flops_per_s

            def dist(i):
                return sum(math.log(a / b) ** 2 for a, b in ((table[i].m, m), (table[i].n, n), (table[i].k, k)))
            rows = (i for i, g in enumerate(table) if g.precision == precision and g.kernel == kernel)
            self._picks[key] = min(rows, key=dist, default=None)
        i = self._picks[key]
        return self.peak_flops_per_s(precision) if i is None else self.gemm_flops_per_s[i].flops_per_s


_TYPES = {"rate": float, "time": float, "optional-rate": float, "count": int, "word": str, "table": tuple}
_DEFAULTS = {"rate": 0.0, "time": 0.0, "optional-rate": 0.0, "count": 1, "word": "", "table": ()}


def _machine_field(key: str) -> tuple:
    """(name, type[, default]) of a GPU file's key: required keys first, as fields.FIELDS declares them."""
    check = "table" if key == "device_names" else FIELDS[key].check   # a list of words
    return (key, _TYPES[check]) if FIELDS[key].required else (key, _TYPES[check], _DEFAULTS[check])


# A GPU machine file's values, one field per key of fields.FIELDS (declared there once: unit, check, doc).
Machine = make_dataclass("Machine", [_machine_field(k) for k in GPU_KEYS], bases=(MachineLookups,), frozen=True,
                         namespace={"__module__": __name__})


def extended(points: list[tuple[float, float]], x: float, beyond) -> float:
    """piecewise_linear up to the largest point's x; beyond it, beyond(that point's x, its y)."""
    return beyond(*points[-1]) if x > points[-1][0] else piecewise_linear(points, x)


def _nearest_factor(table, hidden: int, batch: int) -> float:
    """The factor of the (hidden, batch) point nearest in summed log ratio; 1 for none."""
    if not table:
        return 1.0
    return min(table, key=lambda f: abs(math.log(hidden / f.hidden)) + abs(math.log(max(batch, 1) / f.batch))).factor
