"""The input pipeline (`--batch-transfer prefetch` and `prefetch-pageable`): the next LOOKAHEAD batches
are copied host to device on copy streams of their own, into LOOKAHEAD + 1 slots of a device buffer,
while this one computes. `prefetch` copies from the pinned host array; `prefetch-pageable` stages the
pageable source into each slot's pinned buffer on STAGE_THREADS threads, a chunk of rows a task, each
task issuing its rows' copy once staged. A task needs the GIL, which the loop's thread holds while it
runs Python: so the loop queues a piece LOOKAHEAD batches ahead, no dispatcher thread stands between
them, and a task makes only two calls that let go of the GIL (its copy, its cudaMemcpyAsync).

Ordering is by CUDA events: the compute stream waits for `copied[s]` before the step that reads slot s
(and a task, on the host, before it rewrites slot s's pinned buffer); slot s's copy stream waits for
`consumed[s]`, recorded when the next piece is taken, before its next copy. `Pipeline` is the host's
part, `CudaSlots` the device's (tests and benchmarks give it host-memory slots)."""
from __future__ import annotations

import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import numpy as np

from ..errors import RunFailure

STAGE_THREADS = 4             # staging threads (benchmarks/prefetch_stage.py compares counts)
LOOKAHEAD = 2                 # pieces staged and copied ahead of the one the step reads
MIN_CHUNK_BYTES = 1 << 18     # a smaller piece is staged by fewer tasks (a task has a fixed cost)
X, Y = 0, 1                   # the parts of a piece: samples, labels


@dataclass
class Piece:
    lo: int
    hi: int
    slot: int
    tasks: list = field(default_factory=list)   # the staging tasks' futures (none: copied at once)


class Pipeline:
    """Pieces [lo, hi) of `src.xh`, `src.yh` (rows: samples) through the slots of `dev` (CudaSlots, or
    a host-memory double). `staged`: a pageable source, staged by `threads` threads, the samples in `chunks` tasks
    (default: one a thread, fewer under min_chunk_bytes each), the labels in one."""

    def __init__(self, dev, src, next_piece, staged: bool, threads: int | None = None,
                 lookahead: int = LOOKAHEAD, chunks: int | None = None, min_chunk_bytes: int = MIN_CHUNK_BYTES):
        self.dev, self.src, self.next_piece, self.staged = dev, src, next_piece, staged
        threads = threads or STAGE_THREADS
        if dev.slots < lookahead + 1:
            raise ValueError(f"{dev.slots} slots for a lookahead of {lookahead}: the pieces would share a slot")
        self.lookahead, self.chunks, self.min_chunk_bytes = lookahead, chunks or threads, min_chunk_bytes
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="perfmlp-stage",
                                       initializer=dev.bind_thread) if staged else None
        self.ahead: deque[Piece] = deque()   # started, not yet handed out, in the loop's order
        self.current = None                  # the slot of the piece last handed out
        self.turn = 0                        # the next piece's slot: the oldest one
        self.stage_s = 0.0                   # time some staging task of a piece taken was running
        self.staged_bytes = 0
        self.staged_pieces = 0
        self._stage_end = 0.0

    def get(self, lo: int, hi: int) -> int:
        """The slot piece [lo, hi) is in, ordered before what the compute stream queues next."""
        if self.current is not None:
            self.dev.release(self.current)   # the queued step that read it
        if not self.ahead or (self.ahead[0].lo, self.ahead[0].hi) != (lo, hi):
            self.reset()
            self._start(lo, hi)
        while len(self.ahead) <= self.lookahead:   # queued behind this piece's tasks
            last = self.ahead[-1]
            self._start(*self.next_piece(last.lo, last.hi))
        piece = self.ahead.popleft()
        self._wait(piece)
        self.dev.ready(piece.slot)
        self.current = piece.slot
        return piece.slot

    def _start(self, lo: int, hi: int) -> None:
        slot, self.turn = self.turn, (self.turn + 1) % self.dev.slots
        piece = Piece(lo, hi, slot)
        self.dev.wait_consumed(slot)
        if not self.staged:   # pinned: the copies at once
            self.dev.copy_rows(slot, X, 0, self.src.xh[lo:hi])
            self.dev.copy_rows(slot, Y, 0, self.src.yh[lo:hi])
        else:   # the labels (1/79 of MNIST's bytes) in one task, the samples in chunks
            wait = self.dev.copying(slot)   # else no task needs to wait for the slot's last copy
            tasks = [(Y, 0, hi - lo)] + [(X, r0, r1) for r0, r1 in self._chunks(hi - lo)]
            piece.tasks = [self.pool.submit(self._stage, slot, part, lo, r0, r1, wait) for part, r0, r1 in tasks]
        self.ahead.append(piece)

    def _chunks(self, b: int) -> list[tuple[int, int]]:
        """Rows r0..r1 of the samples' staging tasks."""
        n = max(1, min(self.chunks, b, b * self.src.xh[:1].nbytes // max(1, self.min_chunk_bytes)))
        cuts = [b * i // n for i in range(n + 1)]
        return list(zip(cuts, cuts[1:]))

    def _stage(self, slot: int, part: int, lo: int, r0: int, r1: int, wait: bool) -> tuple[float, float]:
        """A staging task: rows r0..r1 of the samples (X) or labels (Y) into the slot's pinned buffer (once
        the copy that last read it is done), then their copy; (start, end) perf_counter seconds."""
        t0 = time.perf_counter()
        if wait:
            self.dev.wait_copied(slot)
        buf = self.dev.staging(slot, part)[r0:r1]
        np.copyto(buf, (self.src.xh, self.src.yh)[part][lo + r0:lo + r1])   # NumPy lets go of the GIL here
        self.dev.copy_rows(slot, part, r0, buf)
        return t0, time.perf_counter()

    def _wait(self, piece: Piece, taken: bool = True) -> None:
        """Until the piece's tasks have staged it and issued its copies (counted in stage_s where
        `taken`); a failed task: one RunFailure, once no task is left running."""
        if not piece.tasks:
            return
        try:
            spans = [t.result() for t in piece.tasks]
        except Exception as e:
            for t in piece.tasks:
                t.exception()   # the piece's other tasks end too
            self._drain()
            raise RunFailure(f"staging samples {piece.lo}..{piece.hi} into pinned memory failed "
                             f"({type(e).__name__}: {e})") from e
        if not taken:
            return
        t0, t1 = min(s[0] for s in spans), max(s[1] for s in spans)
        self.stage_s += max(0.0, t1 - max(t0, self._stage_end))   # the pieces' tasks overlap: their union
        self._stage_end = max(self._stage_end, t1)
        self.staged_bytes += (self.src.xh[:1].nbytes + self.src.yh[:1].nbytes) * (piece.hi - piece.lo)
        self.staged_pieces += 1

    def _drain(self) -> None:
        """Every started piece's tasks ended (their failures dropped), its copies done."""
        for piece in self.ahead:
            for t in piece.tasks:
                t.exception()   # waits; does not raise
        self.ahead.clear()
        self.dev.sync()

    def reset(self) -> None:
        """Drop what was prefetched (the order changed, or another piece is asked for) once its tasks and
        copies are done; a failure among them is raised as `get` raises it."""
        while self.ahead:
            self._wait(self.ahead.popleft(), taken=False)
        self.dev.sync()

    def settle(self) -> None:
        """Until the pieces started are staged and copied, kept for `get` (a benchmark's synchronisation)."""
        wait([t for piece in self.ahead for t in piece.tasks])
        self.dev.sync()

    def close(self) -> None:
        self._drain()
        if self.pool is not None:
            self.pool.shutdown()


class CudaSlots:
    """The device's part: `slots` device buffers of (n, D) and (n, C), a copy stream and the two events of
    each, and (staged) a pinned buffer each to stage into."""

    def __init__(self, cupy, n: int, xdtype, ydtype, D: int, C: int, slots: int, staged: bool, compute):
        import cupyx
        cp = self.cp = cupy
        self.slots, self.compute, self.device = slots, compute, cp.cuda.Device().id
        self.xd = [cp.empty((n, D), xdtype) for _ in range(slots)]
        self.yd = [cp.empty((n, C), ydtype) for _ in range(slots)]
        self.streams = [cp.cuda.Stream(non_blocking=True) for _ in range(slots)]
        self.copied = [cp.cuda.Event(disable_timing=True) for _ in range(slots)]
        self.consumed = [cp.cuda.Event(disable_timing=True) for _ in range(slots)]
        if staged:
            self.xs = [cupyx.empty_pinned((n, D), xdtype) for _ in range(slots)]
            self.ys = [cupyx.empty_pinned((n, C), ydtype) for _ in range(slots)]

    def bind_thread(self) -> None:
        self.cp.cuda.runtime.setDevice(self.device)   # a staging thread issues copies to this device

    def staging(self, slot: int, part: int):
        return (self.xs, self.ys)[part][slot]

    def copying(self, slot: int) -> bool:
        return not self.copied[slot].done   # the slot's last copy may still read its pinned buffer

    def wait_copied(self, slot: int) -> None:
        self.copied[slot].synchronize()   # the host waits for the slot's last copy

    def wait_consumed(self, slot: int) -> None:
        self.streams[slot].wait_event(self.consumed[slot])

    def copy_rows(self, slot: int, part: int, r0: int, host) -> None:
        """Host rows (pinned: asynchronous) into the slot's X or Y from row r0."""
        rt, dev = self.cp.cuda.runtime, (self.xd, self.yd)[part][slot]
        rt.memcpyAsync(dev.data.ptr + r0 * dev.strides[0], host.ctypes.data, host.nbytes, rt.memcpyHostToDevice,
                       self.streams[slot].ptr)

    def ready(self, slot: int) -> None:
        self.copied[slot].record(self.streams[slot])
        self.compute.wait_event(self.copied[slot])

    def release(self, slot: int) -> None:
        self.consumed[slot].record(self.compute)

    def sync(self) -> None:
        for s in self.streams:
            s.synchronize()


class Prefetcher:
    """DeviceBatches' prefetching source: `get` as DeviceBatches.get (views of a slot's buffers), `reset`."""

    def __init__(self, cupy, batches, next_piece, staged: bool, threads: int | None = None):
        xh, yh = batches.xh, batches.yh
        self.dev = CudaSlots(cupy, batches.max_local, xh.dtype, yh.dtype, xh.shape[1], yh.shape[1],
                             LOOKAHEAD + 1, staged, batches.stream)
        self.pipe = Pipeline(self.dev, batches, next_piece, staged, threads)

    def get(self, lo: int, hi: int, counts):
        slot = self.pipe.get(lo, hi)
        b = hi - lo
        xd, yd = self.dev.xd[slot][:b], self.dev.yd[slot][:b]
        counts.bytes_h2d += xd.nbytes + yd.nbytes
        return xd.T, yd.T

    def reset(self) -> None:
        self.pipe.reset()

    def close(self) -> None:
        self.pipe.close()   # its tasks and copies done, its threads ended
