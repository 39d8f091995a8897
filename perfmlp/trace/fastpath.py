"""The tracer's begin_batch and end_batch on the fast path: a batch of the same piece size as the
one before, whose counts and phase stamps match its Shape (and no NVTX tool, CUPTI, CUDA events
or redirected writes) takes two clock reads and one record stored into the mapped batch file.
Any other batch goes to the tracer's general path (`begin_other`, `end_other`), which sets the
fast path up again (`samples`, `local`, `nfast`, `set_shape`).

Two implementations write the same bytes: `perfmlp.trace._fastpath.FastPath` in C (built where a
compiler was found at install; with it `Stamper`, trace/phases.py's stamp) and `PyFastPath`. The
C hooks run no bytecode: inside a host-bound eager step, which evicts the hooks' code and data
between batches, Python hooks cost several times what they cost run back to back."""
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
    """The C fast path where built (`compiled` None or True), else the Python one; `compiled=True`
    where it was not built raises ImportError."""
    if compiled is None:
        compiled = CFastPath is not None
    if compiled and CFastPath is None:
        raise ImportError("perfmlp.trace._fastpath is not built (pip install -e . with a C compiler)")
    cls = CFastPath if compiled else PyFastPath
    return cls(stamps, mm, pos, limit, begin_other, end_other, grow)
