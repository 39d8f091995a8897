"""A rank's files: `LineFile` (rank-<r>.jsonl, one write(2) a line), `BatchFile` (rank-<r>.batches,
records stored into a memory-mapped, preallocated file) and `decode_batches`, which reads them.

A store into a shared mapping is in the page cache at once: a run killed outright keeps every
batch it finished, with no system call per batch. posix_fallocate reserves ahead, so a full disk
is an error naming the file, not a SIGBUS. The next POPULATE_BYTES are faulted in ahead
(MADV_POPULATE_WRITE), off the step's critical path; a window, so that pages are not written
back, and made read-only again, before records land on them."""
from __future__ import annotations

import math
import mmap
import os
import sys
from pathlib import Path
from types import MappingProxyType

from .fields import TraceError
from .. import names as N
from .records import Batch, BatchLayout, Header, Span

FIRST_BYTES = 1 << 18   # the first reservation: 256 KiB (about 2,300 batches of 8 phases)
MAX_STEP = 64 << 20     # grown by doubling, at most this much at a time
POPULATE_BYTES = 1 << 18  # faulted in ahead of the records, at a time (as many batches)
# Linux 5.14 (Python 3.11's mmap does not name it); an older kernel or another system: the stores fault
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)


def named(e: OSError, path) -> OSError:
    """The same error, naming `path` (os.write's errors name no file)."""
    return OSError(e.errno, e.strerror or str(e), str(path))


class LineFile:
    """JSON lines, each written whole by one write(2) (no buffer to lose)."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            raise named(e, path) from None

    def write(self, text: str | bytes) -> None:
        data = text.encode() if isinstance(text, str) else text
        try:
            while data:
                data = data[os.write(self.fd, data):]
        except OSError as e:
            raise named(e, self.path) from None

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


class BatchFile:
    """The mapped, preallocated batch file. The writer stores records into `mm` at offsets it
    keeps itself and calls `ready_to` when the next record would go past `limit`."""

    def __init__(self, path: Path, rank: int):
        self.path = path
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            os.posix_fallocate(self.fd, 0, FIRST_BYTES)
            self.mm = mmap.mmap(self.fd, FIRST_BYTES)
        except OSError as e:
            raise named(e, path) from None
        self.cap = FIRST_BYTES
        self.ready = 0                       # the pages below this offset are faulted in
        self._populate = sys.platform == "linux"
        self.limit = self.ready_to(BatchLayout.FILE.size)
        BatchLayout.FILE.pack_into(self.mm, 0, BatchLayout.MAGIC, BatchLayout.VERSION, rank)
        self.start = BatchLayout.FILE.size   # where the first record goes

    def ready_to(self, need: int) -> int:
        """Reserve and map at least `need` bytes, fault in POPULATE_BYTES past them; returns
        `limit`, below which stores take no page fault (without MADV_POPULATE_WRITE: the mapped size)."""
        if need > self.cap:
            cap = self.cap
            while cap < need:
                cap += min(cap, MAX_STEP)
            try:
                os.posix_fallocate(self.fd, 0, cap)  # ENOSPC here, naming the file, not SIGBUS on a store
                self.mm.resize(cap)
            except OSError as e:
                raise named(e, self.path) from None
            self.cap = cap
        if self._populate:
            ready = min(self.cap, (need + POPULATE_BYTES) & -mmap.PAGESIZE)
            if ready > self.ready:
                try:
                    self.mm.madvise(MADV_POPULATE_WRITE, self.ready, ready - self.ready)
                    self.ready = ready
                except OSError:  # an older kernel: every page faults in at its first store
                    self._populate = False
        self.limit = self.ready if self._populate else self.cap
        return self.limit

    def close(self, used: int) -> None:
        """Cut the file to the `used` bytes written and close it."""
        if self.fd < 0:
            return
        fd, self.fd = self.fd, -1
        try:
            self.mm.close()
            os.ftruncate(fd, used)
        except OSError as e:
            raise named(e, self.path) from None
        finally:
            os.close(fd)


class WrittenBatchFile(LineFile):
    """The batch records written by write(2), to a file that cannot be mapped (/dev/full)."""

    def append(self, record, *values) -> None:
        self.write(record.pack(*values))


def decode_batches(data: bytes, path, shapes: dict, header: Header, problems: list) -> list:
    """The Batch records of a rank's batch file, each with where it came from, up to the first unwritten."""
    L = BatchLayout
    if len(data) < L.FILE.size:
        raise TraceError(f"{path}: {len(data)} bytes, shorter than its header")
    magic, version, rank = L.FILE.unpack_from(data, 0)
    if magic != L.MAGIC or version != L.VERSION:
        raise TraceError(f"{path}: not a perfmlp batch file (magic {magic!r}, version {version})")
    if rank != header.rank:
        raise TraceError(f"{path}: rank {rank}, but its rank-{header.rank}.jsonl header says {header.rank}")
    out, pos, k = [], L.FILE.size, 0
    while pos + 4 <= len(data):
        shape_id = L.HEAD.unpack_from(data, pos)[0]
        if shape_id == 0:
            break  # the unwritten rest of a killed run's preallocated file
        where = f"{path}: batch record {k} (byte {pos})"
        shape = shapes.get(shape_id)
        if shape is None:
            raise TraceError(f"{where}: shape: {shape_id}, no shape line with that id")
        rec = L.record(len(shape.phases))
        vals = rec.unpack_from(data, pos) if pos + rec.size <= len(data) else None
        if vals is None or vals[-1] != rec.size:
            if not any(data[pos + rec.size:pos + rec.size + 64]):  # the last one: cut off as it was written
                problems.append(f"{where}: cut off as it was written (the run was killed)")
                break
            raise TraceError(f"{where}: size: {vals[-1] if vals else 'past the end'}, not {rec.size}")
        _, epoch, batch, loss, t0, t1, total, *stamps = vals[:-1]
        out.append((_batch(where, shape, header, epoch, batch, loss, t0, t1, total, stamps), where))
        pos += rec.size
        k += 1
    return out


def _batch(where, shape, header, epoch, batch, loss, t0, t1, total, stamps) -> Batch:
    for name, v in (("epoch", epoch), ("batch", batch)):
        if v < 0:
            raise TraceError(f"{where}: {name}: {v}, not an integer >= 0")
    if not t1 >= t0:  # NaN too
        raise TraceError(f"{where}: wall_ms: ends before it starts")
    if math.isinf(loss):
        raise TraceError(f"{where}: loss: {loss}, not a finite number")
    host = header.clock == N.HOST_CLOCK
    origin = t0 if host else 0.0
    ends = (*stamps[1:], t1 if host else total)
    t_ms: dict = {}
    for p, s, e in zip(shape.phases, stamps, ends):
        if not e >= s:
            raise TraceError(f"{where}: t_ms.{p}: ends before it starts")
        span = Span((s - origin) * 1e3, (e - s) * 1e3)
        prev = t_ms.get(p)  # a phase twice in a batch: from its first start, both durations
        t_ms[p] = span if prev is None else Span(prev.offset_ms, prev.ms + span.ms)
    return Batch(epoch=epoch, batch=batch, shape=shape, t0_s=t0 - header.host_start_ns / 1e9,
                 wall_ms=(t1 - t0) * 1e3, loss=None if loss != loss else loss, clock=header.clock,
                 t_ms=MappingProxyType(t_ms), t_ms_total=None if total < 0 else total * 1e3)
