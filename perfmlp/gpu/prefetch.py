"""The input pipeline (`--batch-transfer prefetch` and `prefetch-pageable`):
the next batches are copied host to device on copy streams of their own,
into slots of a device buffer (LOOKAHEAD + 1 of them), while this one
computes.

`prefetch` copies from the pinned host array (one cudaMemcpyAsync each of X
and Y, issued by the training loop's thread). `prefetch-pageable` keeps the
source pageable, as a user's NumPy arrays are, and stages it into pinned
memory as PyTorch's DataLoader with pin_memory does, but in row chunks: a
pool of STAGE_THREADS threads copies the piece's samples into the slot's
pinned buffer, a chunk of rows a task (its labels, 1/79 of the bytes at
D = 784, in one more task), and each task issues its rows' copy to the
device as soon as they are staged, so the copy engine works beside the
staging instead of after it. The loop's thread queues the tasks of the
piece LOOKAHEAD batches ahead as it takes a piece, so the pool always has
the next piece queued behind the one it stages and never waits for the
loop between pieces: per batch the pipeline takes about the largest of the
host's staging, the copy and the step, not their sum.

Why so (benchmarks/prefetch_stage.py measures it on any host, no GPU
needed; reports/cpu/prefetch_stage/ on a 2-core one): NumPy
lets go of the GIL for a copy, but a task needs the GIL to start, after
each call that let go of it, and to return, and while the loop's thread
runs Python it gets the GIL only when that thread lets go of it (a launch,
a wait) or after CPython's switch interval (5 ms). A 23 us copy looped in
a second thread took 194 us a copy beside a thread running Python that let
go of the GIL every 20 us, as an eager step's launches do, and 5.3 ms
beside one that never did. Hence: the pool is fed pieces ahead, so that
its tasks run on whenever the loop's thread waits, as it does for most of
a graph step; nothing stands between the loop and the pool (a dispatcher
thread would add a wake-up and a GIL hand-over per batch on the path); a
task makes two calls that let go of the GIL, its copy into pinned memory
and its cudaMemcpyAsync (it waits for the slot's last copy only when the
loop's thread saw that copy still running). A shorter switch interval
(0.2 ms) cut the never-letting-go case to 0.3 ms but slowed the
launch-like one to 0.4 ms, so it is left as it is. Because each task
issues its own copy, a piece is on the device a chunk's copy after its
last chunk is staged.

Ordering, by CUDA events (nothing synchronises the compute stream):
- `copied[s]`, recorded on slot s's copy stream after every chunk's copy
  into it was issued: the compute stream waits for it before the step that
  reads slot s; a staging task waits for it on the host before it writes
  slot s's pinned buffer again (the copy that last read that buffer).
- `consumed[s]`, recorded on the compute stream when the piece after the
  one in slot s is taken (the step that read slot s is queued by then):
  slot s's copy stream waits for it before the next copy into the slot, so
  a copy never overwrites a piece a queued step still reads.

The next piece is the training loop's (`next_piece`, perfmlp/backend.py).
A piece that was not prefetched (the first; after a shuffle, which drops
what was prefetched) is staged when asked for, the same way. A staging
task's failure reaches the loop's thread as one RunFailure naming the
rows, after the tasks still queued have ended. In graph mode each slot is
a static input of its own (a graph per slot and piece size:
perfmlp/gpu/graph.py keys them by address).

`Pipeline` is the host's part (which piece lies in which slot, the staging
tasks, faults); `CudaSlots` the device's (buffers, streams, events);
`HostSlots` the same slots in host memory, for the CPU tests and the host
staging benchmark.
"""
from __future__ import annotations

import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import numpy as np

from ..errors import RunFailure

# The staging threads. On the H100 machine's 16-core host (benchmarks/prefetch_stage.py
# and precision_step.py --stage-threads, reports/h100/benchmarks/input/) a 10 MB piece
# staged alone at 6 GB/s on 1 thread, 11 on 2, 15-18 on 4 and less on 8 or 12; in the
# trainer's graph step 4 threads staged at 12.6 GB/s, 8 at 9.3 and 12 at 6.0.
STAGE_THREADS = 4
LOOKAHEAD = 2                 # pieces staged and copied ahead of the one the step reads
MIN_CHUNK_BYTES = 1 << 18     # a smaller piece is staged by fewer tasks: a task costs tens of us
X, Y = 0, 1                   # the parts of a piece: samples, labels


@dataclass
class Piece:
    lo: int
    hi: int
    slot: int
    tasks: list = field(default_factory=list)   # the staging tasks' futures (none: copied at once)


class Pipeline:
    """Pieces [lo, hi) of `src.xh`, `src.yh` (rows: samples) through the
    slots of `dev` (CudaSlots or HostSlots); `get` returns the slot the
    piece is in. `staged`: the source is pageable, so its rows are staged
    into the slot's pinned buffer by `threads` threads: the samples in
    `chunks` tasks (default: one a thread, none under min_chunk_bytes), the
    labels in one; `lookahead`
    pieces started beyond the one handed out, in lookahead + 1 slots."""

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
        """The slot piece [lo, hi) is in, ordered before what the compute
        stream queues next; the pieces after it started."""
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

    def _row_bytes(self) -> int:
        return self.src.xh[:1].nbytes + self.src.yh[:1].nbytes

    def _chunks(self, b: int) -> list[tuple[int, int]]:
        """Rows r0..r1 of the samples' staging tasks."""
        n = max(1, min(self.chunks, b, b * self.src.xh[:1].nbytes // max(1, self.min_chunk_bytes)))
        cuts = [b * i // n for i in range(n + 1)]
        return list(zip(cuts, cuts[1:]))

    def _stage(self, slot: int, part: int, lo: int, r0: int, r1: int, wait: bool) -> tuple[float, float]:
        """A staging task: rows r0..r1 of the piece's samples (X) or labels
        (Y) into the slot's pinned buffer (once the copy that last read it
        is done), then their copy. Each call that lets go of the GIL must
        take it again, so a task makes few: one copy to pinned memory, one
        cudaMemcpyAsync."""
        t0 = time.perf_counter()
        if wait:
            self.dev.wait_copied(slot)
        buf = self.dev.staging(slot, part)[r0:r1]
        np.copyto(buf, (self.src.xh, self.src.yh)[part][lo + r0:lo + r1])   # NumPy lets go of the GIL here
        self.dev.copy_rows(slot, part, r0, buf)
        return t0, time.perf_counter()

    def _wait(self, piece: Piece, taken: bool = True) -> None:
        """Until the piece's tasks have staged it and issued its copies
        (counted in stage_s where the piece is `taken`); a failed task: one
        RunFailure, once no task is left running."""
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
        self.staged_bytes += self._row_bytes() * (piece.hi - piece.lo)
        self.staged_pieces += 1

    def _drain(self) -> None:
        """Every started piece's tasks ended (their failures dropped), its copies done."""
        for piece in self.ahead:
            for t in piece.tasks:
                t.exception()   # waits; does not raise
        self.ahead.clear()
        self.dev.sync()

    def reset(self) -> None:
        """Drop what was prefetched (the data's order changed, or another
        piece is asked for) once its tasks and copies are done; a failure
        among them is raised as `get` raises it."""
        while self.ahead:
            self._wait(self.ahead.popleft(), taken=False)
        self.dev.sync()

    def settle(self) -> None:
        """Until the pieces started are staged and copied, kept for `get`
        (a benchmark's synchronisation: no work of this pipeline runs on
        into what is timed next)."""
        wait([t for piece in self.ahead for t in piece.tasks])
        self.dev.sync()

    def close(self) -> None:
        self._drain()
        if self.pool is not None:
            self.pool.shutdown()


class CudaSlots:
    """The device's part: `slots` device buffers of (n, D) and (n, C), a
    copy stream and the two events of each, and (staged) a pinned buffer
    each to stage into."""

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


class HostSlots:
    """CudaSlots' interface in host memory, with nothing asynchronous: a
    copy is np.copyto at once (`copies=False`: left out, to time the
    staging alone). `copy_rows` may be replaced to inject a fault."""

    def __init__(self, n: int, xdtype, ydtype, D: int, C: int, slots: int = LOOKAHEAD + 1, copies: bool = True):
        self.slots, self.copies = slots, copies
        self.xd = [np.zeros((n, D), xdtype) for _ in range(slots)]
        self.yd = [np.zeros((n, C), ydtype) for _ in range(slots)]
        self.xs = [np.zeros((n, D), xdtype) for _ in range(slots)]
        self.ys = [np.zeros((n, C), ydtype) for _ in range(slots)]
        self.calls: list = []   # (what, slot) of the loop thread's calls, in order

    def bind_thread(self) -> None:
        pass

    def staging(self, slot: int, part: int):
        return (self.xs, self.ys)[part][slot]

    def copying(self, slot: int) -> bool:
        return False

    def wait_copied(self, slot: int) -> None:
        pass

    def wait_consumed(self, slot: int) -> None:
        self.calls.append(("wait_consumed", slot))

    def copy_rows(self, slot: int, part: int, r0: int, host) -> None:
        if self.copies:
            np.copyto((self.xd, self.yd)[part][slot][r0:r0 + len(host)], host)

    def ready(self, slot: int) -> None:
        self.calls.append(("ready", slot))

    def release(self, slot: int) -> None:
        self.calls.append(("release", slot))

    def sync(self) -> None:
        self.calls.append(("sync", None))


class Prefetcher:
    """DeviceBatches' prefetching source: `get` as DeviceBatches.get (x as
    D x b, y as C x b, views of the slot's device buffers), `reset`."""

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
        """Its tasks and copies done, its threads ended."""
        self.pipe.close()
