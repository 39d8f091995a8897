"""The tracer's hot path: the phase hooks it hands out (`tracer.phase(Phase.X)`, a dict look-up
done in C) and begin_batch and end_batch on their fast path.

A phase costs one `with` and one perf_counter() appended to the batch's stamps, all in C
(`stamp_class`). A batch of the piece size of the one before, whose counts and stamps match its
Shape (no NVTX tool, CUPTI, CUDA events or redirected writes), costs two clock reads and one
record stored into the mapped batch file; any other goes to the tracer's general path
(`begin_other`, `end_other`), which sets the fast path up again. The C fast path
(`perfmlp.trace._fastpath`, where built) and `PyFastPath` write the same bytes; the C hooks run
no bytecode, which matters in a host-bound eager step that evicts the hooks' code between batches.
The other phases: `Recording` (a piece size's first batch), `Event` (CUDA events) and `Hooked` (NVTX
ranges in the `perfmlp` domain, no-ops unless a profiler is attached, and CUPTI correlation)."""
from __future__ import annotations

import os
import time
from itertools import repeat, starmap

from ..names import NVTX_RANGES
from . import activity as act
from .records import BatchLayout, Phase

try:
    from ._fastpath import FastPath as CFastPath, Stamper as CStamper
except ImportError:  # not built: no compiler at install, another system, or run from a source tree
    CFastPath = CStamper = None

_now = time.perf_counter  # seconds as a float: cheaper to pack than integer ns
NAN = float("nan")
DRAIN_AT = (Phase.BACKWARD, Phase.GRAPH)  # finished GPU batches are written as one of these starts


# A C callable that takes any arguments and returns None (the empty tuple's object.__init__): a `with` block's
# __exit__ that runs no Python code and returns a false value (exceptions propagate).
NOOP = ().__init__

try:
    if os.environ.get("NVTX_DISABLE"):
        raise ImportError
    import nvtx as _nvtx
    _domain = _nvtx.get_domain("perfmlp")
    _NVTX = type(_domain).__name__ != "DummyDomain"  # nvtx hands out a dummy domain with no profiler attached
except ImportError:
    _NVTX = False


def nvtx_enabled() -> bool:
    return _NVTX


def nvtx_push(name: str, payload: int | None = None) -> None:
    if _NVTX:
        cat = name if name in NVTX_RANGES else None
        _domain.push_range(_domain.get_event_attributes(message=name, category=cat, payload=payload))


def nvtx_pop() -> None:
    if _NVTX:
        _domain.pop_range()


def stamp_class(stamps: list, compiled: bool = False) -> type:
    """The class of a phase on the host clock: one stamp into `stamps` as it starts (a phase ends where the next
    starts). Both hooks are C callables used as they are (no bound method): __exit__ is NOOP; __enter__ is the C Stamper
    (`compiled`), else a map() iterator's __next__ that reads the clock and appends it."""
    stamp = CStamper(stamps) if compiled else map(stamps.append, starmap(_now, repeat(()))).__next__
    return type("Stamp", (), {"__slots__": (), "__enter__": stamp, "__exit__": NOOP})


class Event:
    """A phase timed on the GPU: a CUDA event as it ends (it starts at the event before it)."""

    __slots__ = ("t", "drain")

    def __init__(self, tracer, name: Phase):
        self.t, self.drain = tracer, name in DRAIN_AT

    def __enter__(self):
        t = self.t
        if self.drain and t._pending:
            t._drain(block=False)  # the host waits on the GPU here anyway

    def __exit__(self, tp, v, tb):
        self.t._stamps.append(self.t._event())


class Hooked:
    """An NVTX range and, collecting GPU activity, a CUPTI external correlation id around a phase."""

    __slots__ = ("t", "base", "name", "code")

    def __init__(self, tracer, name: Phase, base):
        self.t, self.base, self.name = tracer, base, name
        self.code = list(Phase).index(name) + 1  # 0: the batch itself, between phases

    def __enter__(self):
        t = self.t
        nvtx_push(self.name.value, t._batch_no)
        if t._push is not None:
            t._push((t._seq << act.PHASE_BITS) | self.code)
        self.base.__enter__()

    def __exit__(self, tp, v, tb):
        self.base.__exit__(tp, v, tb)
        t = self.t
        if t._push is not None:
            t._collector.pop()
        nvtx_pop()


class Recording:
    """The first batch of a piece size: which phases ran, in order, and what each launched."""

    __slots__ = ("t", "base", "name")

    def __init__(self, tracer, name: Phase, base):
        self.t, self.base, self.name = tracer, base, name

    def __enter__(self):
        t = self.t
        t._open = (len(t._ops), t._kernels.kernels_launched)
        self.base.__enter__()

    def __exit__(self, tp, v, tb):
        self.base.__exit__(tp, v, tb)
        t = self.t
        i0, k0 = t._open
        t._ran.append((self.name, i0, len(t._ops), t._kernels.kernels_launched - k0))


def phase_code_names() -> dict[int, Phase]:
    """CUPTI external correlation code -> phase (Hooked's codes)."""
    return {i + 1: p for i, p in enumerate(Phase)}


class PyFastPath:
    """The fast path in Python."""

    def __init__(self, stamps: list, mm, pos: int, limit: int, begin_other, end_other, grow):
        self.stamps, self.mm, self.pos, self.limit = stamps, mm, pos, limit
        self._begin_other, self._end_other, self._grow = begin_other, end_other, grow
        self.samples = self.local = self.nfast = -1
        self.epoch = self.batch = 0
        self.t0 = self.t1 = 0.0
        self._id, self._bytes, self._coll, self._pack, self.size = 0, None, None, None, 0

    def set_shape(self, shape_id: int, size: int, byte_counts, collectives) -> None:
        self._pack = BatchLayout.record((size - BatchLayout.HEAD_BYTES) // 8).pack_into  # a start per phase
        self._id, self._bytes, self._coll, self.size = shape_id, tuple(byte_counts), collectives, size

    def begin_batch(self, epoch: int, batch: int, samples: int, local: int) -> None:
        if samples != self.samples or local != self.local:  # another piece size, or the general path
            return self._begin_other(epoch, batch, samples, local)
        self.epoch = epoch
        self.batch = batch
        self.stamps.clear()
        self.t0 = _now()

    def end_batch(self, loss, counts) -> None:
        self.t1 = _now()
        stamps = self.stamps
        if (len(stamps) != self.nfast or self._coll != counts.collectives
                or self._bytes != (counts.bytes_h2d, counts.bytes_d2h, counts.bytes_d2d, counts.bytes_mpi,
                                   counts.bytes_nccl)):
            return self._end_other(loss, counts)
        pos = self.pos
        end = pos + self.size
        if end > self.limit:
            self._grow(end)   # a full disk raises here, the record not counted
        # one store into the mapped file: in the page cache at once, kept if the process is killed
        self._pack(self.mm, pos, self._id, self.epoch, self.batch, NAN if loss is None else loss, self.t0, self.t1,
                   -1.0, *stamps, self.size)
        self.pos = end


def fast_path(stamps: list, mm, pos: int, limit: int, begin_other, end_other, grow, compiled: bool | None = None):
    """The C fast path where built (`compiled` None or True), else the Python one; ImportError if True and not built."""
    if compiled is None:
        compiled = CFastPath is not None
    if compiled and CFastPath is None:
        raise ImportError("perfmlp.trace._fastpath is not built (pip install -e . with a C compiler)")
    return (CFastPath if compiled else PyFastPath)(stamps, mm, pos, limit, begin_other, end_other, grow)
