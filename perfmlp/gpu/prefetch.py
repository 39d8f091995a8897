"""The input pipeline (`--batch-transfer prefetch` and `prefetch-pageable`):
batch k+1 is copied host to device on a copy stream of its own, into the
other half of a double buffer, while batch k computes.

Ordering, by CUDA events (nothing synchronises the compute stream):
- `copied[s]`, recorded on the copy stream after the copy into slot s: the
  compute stream waits for it before the step that reads slot s.
- `consumed[s]`, recorded on the compute stream once the step that read
  slot s is queued (at the next `get`): the next copy into slot s waits for
  it, so a copy never overwrites a piece a queued step still reads.

`prefetch` copies from the pinned host array (one cudaMemcpyAsync each of X
and Y, issued by the training loop's thread). `prefetch-pageable` keeps the
source pageable, as a user's NumPy arrays are, and stages it as PyTorch's
DataLoader with pin_memory does: a host thread copies the next piece's rows
into a pinned buffer (a double one too: it first waits, on `copied[s]`, for
the copy that last read that buffer; the rows copied by STAGE_THREADS
threads at once, as one thread's memcpy reaches a fraction of the host's
memory bandwidth) and then issues its copy; the loop's thread only waits
for that thread when it needs the piece.

The next piece is the training loop's (`next_piece`, perfmlp/backend.py).
A piece that was not prefetched (the first; after a shuffle, which drops
what was prefetched) is copied when asked for, the same way. In graph mode
each half of the buffer is a static input of its own (two graphs per piece
size: perfmlp/gpu/graph.py keys them by address).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

STAGE_THREADS = 4


class Prefetcher:
    def __init__(self, cupy, batches, next_piece, staged: bool):
        import cupyx
        cp = self.cp = cupy
        self.src, self.next_piece = batches, next_piece
        self.compute = batches.stream
        self.copy = cp.cuda.Stream(non_blocking=True)
        self.device = cp.cuda.Device().id
        n, (D, C) = batches.max_local, (batches.xh.shape[1], batches.yh.shape[1])
        self.xd = [cp.empty((n, D), batches.xh.dtype) for _ in range(2)]
        self.yd = [cp.empty((n, C), batches.yh.dtype) for _ in range(2)]
        self.copied = [cp.cuda.Event(disable_timing=True) for _ in range(2)]
        self.consumed = [cp.cuda.Event(disable_timing=True) for _ in range(2)]
        self.staged = staged
        if staged:   # the pinned buffers a host thread stages the pageable rows into
            self.xs = [cupyx.empty_pinned((n, D), batches.xh.dtype) for _ in range(2)]
            self.ys = [cupyx.empty_pinned((n, C), batches.yh.dtype) for _ in range(2)]
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="perfmlp-stage")
            self.rows = ThreadPoolExecutor(STAGE_THREADS, thread_name_prefix="perfmlp-rows")
        self.current = None   # the slot of the piece last handed out
        self.ahead = None     # (lo, hi, slot, future or None) of the piece being prefetched

    def get(self, lo: int, hi: int, counts):
        """x (D x b) and y (C x b) of the piece [lo, hi) in the device buffer
        the compute stream will find it in; starts the next piece's copy."""
        if self.current is not None:
            self.consumed[self.current].record(self.compute)   # the queued step that read it
        a = self.ahead
        if a is not None and (a[0], a[1]) == (lo, hi):
            slot = a[2]
            if a[3] is not None:
                a[3].result()   # the host thread has staged it and issued its copy
        else:
            self.reset()
            slot = 0 if self.current is None else 1 - self.current
            self._stage_and_copy(lo, hi, slot) if self.staged else self._copy(lo, hi, slot)
        self.compute.wait_event(self.copied[slot])
        self.current = slot
        nlo, nhi = self.next_piece(lo, hi)
        other = 1 - slot
        if self.staged:
            self.ahead = (nlo, nhi, other, self.pool.submit(self._stage_and_copy, nlo, nhi, other))
        else:
            self._copy(nlo, nhi, other)
            self.ahead = (nlo, nhi, other, None)
        b = hi - lo
        xd, yd = self.xd[slot][:b], self.yd[slot][:b]
        counts.bytes_h2d += xd.nbytes + yd.nbytes
        return xd.T, yd.T

    def _copy(self, lo: int, hi: int, slot: int) -> None:
        """The piece's copy into `slot` on the copy stream (after the step that read it last)."""
        b = hi - lo
        xh, yh = (self.xs[slot][:b], self.ys[slot][:b]) if self.staged else (self.src.xh[lo:hi], self.src.yh[lo:hi])
        self.copy.wait_event(self.consumed[slot])
        self.xd[slot][:b].set(xh, stream=self.copy)   # pinned: asynchronous
        self.yd[slot][:b].set(yh, stream=self.copy)
        self.copied[slot].record(self.copy)

    def _stage_and_copy(self, lo: int, hi: int, slot: int) -> None:
        """The host thread's part: the pageable rows into the slot's pinned
        buffer (once the copy that last read it is done), then its copy."""
        with self.cp.cuda.Device(self.device):
            self.copied[slot].synchronize()
            cuts = np.linspace(0, hi - lo, STAGE_THREADS + 1).astype(int)
            parts = [self.rows.submit(self._stage_rows, slot, lo, int(r0), int(r1)) for r0, r1 in zip(cuts, cuts[1:])]
            for f in parts:
                f.result()
            self._copy(lo, hi, slot)

    def _stage_rows(self, slot: int, lo: int, r0: int, r1: int) -> None:
        np.copyto(self.xs[slot][r0:r1], self.src.xh[lo + r0:lo + r1])   # NumPy lets go of the GIL here
        np.copyto(self.ys[slot][r0:r1], self.src.yh[lo + r0:lo + r1])

    def reset(self) -> None:
        """Drop what was prefetched (the data's order changed, or another
        piece is asked for): the host thread's work and the copies done."""
        if self.ahead is not None and self.ahead[3] is not None:
            self.ahead[3].result()
        self.ahead = None
        self.copy.synchronize()
