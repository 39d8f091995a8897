"""The tracer's begin_batch and end_batch on the fast path: a batch of the
same piece size as the one before it, whose counts and phase stamps match
its Shape (with no NVTX tool, CUPTI, CUDA events or redirected writes).
Such a batch takes two clock reads and one record stored into the mapped
batch file (records.BatchLayout); any other batch goes to the tracer's
general path (`begin_other`, `end_other`), which sets the fast path up
again (`samples`, `local`, `nfast`, `set_shape`).

Two implementations with one interface: `perfmlp.trace._fastpath.FastPath`
in C (built where a C compiler was found at install, on little-endian
Linux; with it `Stamper`, the phases' clock stamp: trace/phases.py) and
`PyFastPath` below. They write the same bytes (tests/
test_fastpath.py). Why C: inside an eager GPU step, which is host-bound,
the Python hooks cost several times what they cost run back to back
(benchmarks/trace_cost.py measures it), since the step's own work evicts
their code and data between batches; the C hooks run no bytecode.
"""
from __future__ import annotations

import time

from .records import BatchLayout

try:
    from ._fastpath import FastPath as CFastPath, Stamper as CStamper
except ImportError:  # not built: no compiler at install, another system, or run from a source tree
    CFastPath = CStamper = None

_now = time.perf_counter
NAN = float("nan")


class PyFastPath:
    """The fast path in Python (the record's pack_into arguments kept in one
    list from batch to batch: file, offset, shape id, epoch, batch, loss, t0,
    t1, GPU total, a place per phase start, size)."""

    def __init__(self, stamps: list, mm, pos: int, limit: int, begin_other, end_other, grow):
        self._rec: list = [mm, pos, 0, 0, 0, NAN, 0.0, 0.0, -1.0, 0]
        self.stamps, self.pos, self.limit = stamps, pos, limit
        self._begin_other, self._end_other, self._grow = begin_other, end_other, grow
        self.samples = self.local = self.nfast = -1
        self._bytes, self._coll, self._pack, self.size = None, None, None, 0

    mm = property(lambda self: self._rec[0], lambda self, v: self._rec.__setitem__(0, v))
    epoch = property(lambda self: self._rec[3], lambda self, v: self._rec.__setitem__(3, v))
    batch = property(lambda self: self._rec[4], lambda self, v: self._rec.__setitem__(4, v))
    t0 = property(lambda self: self._rec[6], lambda self, v: self._rec.__setitem__(6, v))
    t1 = property(lambda self: self._rec[7], lambda self, v: self._rec.__setitem__(7, v))

    def set_shape(self, shape_id: int, size: int, byte_counts, collectives) -> None:
        n = (size - BatchLayout.HEAD_BYTES) // 8  # the phase starts its record holds
        rec = self._rec
        rec[:] = [rec[0], self.pos, shape_id, rec[3], rec[4], NAN, rec[6], rec[7], -1.0, *[0.0] * n, size]
        self._pack = BatchLayout.record(n).pack_into
        self._bytes, self._coll, self.size = tuple(byte_counts), collectives, size

    def begin_batch(self, epoch: int, batch: int, samples: int, local: int) -> None:
        if samples != self.samples or local != self.local:  # another piece size, or the general path
            return self._begin_other(epoch, batch, samples, local)
        rec = self._rec
        rec[3] = epoch
        rec[4] = batch
        self.stamps.clear()
        rec[6] = _now()

    def end_batch(self, loss, counts) -> None:
        rec = self._rec
        rec[7] = _now()
        stamps = self.stamps
        if (len(stamps) != self.nfast or self._coll != counts.collectives
                or self._bytes != (counts.bytes_h2d, counts.bytes_d2h, counts.bytes_d2d, counts.bytes_mpi,
                                   counts.bytes_nccl)):
            return self._end_other(loss, counts)
        rec[5] = NAN if loss is None else loss
        rec[9:-1] = stamps
        pos = self.pos
        end = pos + self.size
        if end > self.limit:
            self._grow(end)   # a full disk raises here, the record not counted
        rec[1] = pos
        # one store into the mapped file: in the page cache at once, kept if the process is killed
        self._pack(*rec)
        self.pos = end


def fast_path(stamps: list, mm, pos: int, limit: int, begin_other, end_other, grow, compiled: bool | None = None):
    """The C fast path where it was built (`compiled` None or True), else
    the Python one; `compiled=True` where it was not built raises ImportError."""
    if compiled is None:
        compiled = CFastPath is not None
    if compiled and CFastPath is None:
        raise ImportError("perfmlp.trace._fastpath is not built (pip install -e . with a C compiler)")
    cls = CFastPath if compiled else PyFastPath
    return cls(stamps, mm, pos, limit, begin_other, end_other, grow)
