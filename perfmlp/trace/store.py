"""Where a rank's records go: `LineFile` (rank-<r>.jsonl, one write(2) a line) and `BatchFile`
(rank-<r>.batches, records.BatchLayout records stored into a memory-mapped, preallocated file).

A record stored into a shared mapping is in the page cache at once, so a run killed outright
keeps every batch it finished, with no system call per batch. posix_fallocate reserves the file
ahead, so a full disk is an error naming the file, never a SIGBUS on a store; the end cuts it to
what was written. The first store into a page faults on the step's critical path, so the next
POPULATE_BYTES are faulted in ahead (madvise(MADV_POPULATE_WRITE)): a window, not the whole
file, so its pages are not written back, and made read-only again, before records land on them."""
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
    """The batch records written by write(2), to a file that cannot be mapped (/dev/full)."""

    def append(self, record, *values) -> None:
        self.write(record.pack(*values))
