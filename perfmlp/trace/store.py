"""Where a rank's records go: `LineFile` (rank-<r>.jsonl, one write(2) a
line) and `BatchFile` (rank-<r>.batches, the batch records in
records.BatchLayout, written into a memory-mapped, preallocated file).

Why a mapped file: a record stored into a shared mapping is in the kernel's
page cache at once, so a run killed outright (SIGKILL) keeps every batch it
finished, without a system call per batch. The file is reserved ahead with
posix_fallocate, so a full disk shows up as an error naming the file when
it grows, never as a SIGBUS on a store; at the end it is cut to what was
written. Every error names the file.

Why pages are faulted in ahead: the first store into each page of the
mapping takes a page fault (the page allocated, zeroed and made writable),
on the step's critical path. The file faults in the next POPULATE_BYTES
with one madvise(MADV_POPULATE_WRITE) as the records reach them; a window,
not the whole file, so that its pages are not written back, and made
read-only again, long before records land on them.
"""
from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path

from .records import BatchLayout

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
    """The mapped, preallocated batch file. The writer stores records into
    `mm` at offsets it keeps itself (the hot path: no call into this class
    per batch) and calls `ready_to` when the next record would go past the
    bytes made ready for it."""

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
        """Reserve and map at least `need` bytes and fault in the pages up to
        POPULATE_BYTES past them; returns `limit`: stores below it take no
        page fault (without MADV_POPULATE_WRITE: the mapped size)."""
        if need > self.cap:
            self.grow(need)
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

    def grow(self, need: int) -> None:
        """Reserve and map at least `need` bytes."""
        cap = self.cap
        while cap < need:
            cap += min(cap, MAX_STEP)
        try:
            os.posix_fallocate(self.fd, 0, cap)  # ENOSPC here, naming the file, not SIGBUS on a store
            self.mm.resize(cap)
        except OSError as e:
            raise named(e, self.path) from None
        self.cap = cap

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
    """The batch records written by write(2), to a file or device that
    cannot be mapped (the fault tests' /dev/full)."""

    def append(self, record, *values) -> None:
        self.write(record.pack(*values))
