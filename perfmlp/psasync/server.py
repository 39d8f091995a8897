"""Rank 0 of `--comm ps-async`: takes gradients as they arrive, applies them, hands out pieces under the
staleness bound and records one `update` line per gradient (trace/updates.py).

The stale-synchronous rule (`Schedule`, pure): global step k is batch k of the run, cut into W pieces
as a data-parallel run on W ranks cuts it. Pieces go out in order to whichever worker asks next, a
piece of step k only once K >= k - S, K counting the unbroken prefix of steps whose W gradients are all
applied. So a gradient sees every update of steps < k - S, and with S = 0 exactly the parameters after
step k - 1: synchronous SGD."""
from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from .. import names as N
from ..trace.updates import update_record
from . import DONE, FAILED, OK, TAG_GRAD, TAG_HEADER, TAG_PARAMS


@dataclass(frozen=True)
class Piece:
    step: int    # global step: epoch * batches_per_epoch + batch
    index: int   # which of the step's W pieces


class Schedule:
    """The pieces of `steps` steps of `workers` pieces each, under staleness S."""

    def __init__(self, steps: int, workers: int, staleness: int):
        if steps < 0 or workers < 1 or staleness < 0:
            raise ValueError(f"steps {steps}, workers {workers}, staleness {staleness}")
        self.steps, self.workers, self.staleness = steps, workers, staleness
        self.next = 0                      # flat index step * W + index of the next piece to hand out
        self.complete = 0                  # K: steps 0..K-1 all applied
        self._applied = [0] * steps        # pieces applied per step

    @property
    def exhausted(self) -> bool:   # every piece has been handed out
        return self.next >= self.steps * self.workers

    def ready(self) -> bool:
        """The next piece may be handed out now (the staleness bound holds)."""
        return not self.exhausted and self.next // self.workers - self.staleness <= self.complete

    def hand_out(self) -> Piece:
        if not self.ready():
            raise RuntimeError("no piece may be handed out now")
        p = Piece(*divmod(self.next, self.workers))
        self.next += 1
        return p

    def staleness_of(self, piece: Piece) -> int:
        """Complete steps the piece's parameters lack at this moment (k - K)."""
        return max(0, piece.step - self.complete)

    def applied(self, piece: Piece) -> range:
        """Record the piece's gradient as applied; the steps it completed."""
        self._applied[piece.step] += 1
        if self._applied[piece.step] > self.workers:
            raise RuntimeError(f"step {piece.step}: more than {self.workers} pieces applied")
        start = self.complete
        while self.complete < self.steps and self._applied[self.complete] == self.workers:
            self.complete += 1
        return range(start, self.complete)

    def first_of_step(self, piece: Piece) -> bool:
        """No other piece of its step applied yet (the step's regularisation term goes with this one)."""
        return self._applied[piece.step] == 0


def apply_gradient(p, gw, gb, lr: float, reg: float, first: bool) -> None:
    """One update of FlatParams `p` from the gradient's weight and bias parts (p's array module):
    w <- w - lr (g_w + reg w) for a step's first piece, w <- w - lr g_w for the others; b <- b - lr g_b."""
    T = p.flat.dtype.type
    p.weights -= T(lr) * (gw + T(reg) * p.weights if first else gw)
    p.biases -= T(lr) * gb


class Server:
    """The parameter server over MPI point to point; `host_buffer(n)`: a host array (pinned where batches are)."""

    name = N.PS_ASYNC

    def __init__(self, comm, net, schedule: Schedule, batches_per_epoch: int, host_buffer, stream=None):
        self.comm, self.net, self.sched = comm, net, schedule
        self.batches_per_epoch = batches_per_epoch   # the update lines name epoch and batch
        self.stream = stream                  # the GPU's stream (None: NumPy)
        self.W = schedule.workers
        n = net.g.flat.size                   # parameters and the loss slot
        self._recv_buf = {w: host_buffer(n) for w in range(1, self.W + 1)}
        self._host_buffer = host_buffer
        self._posted: dict = {}               # worker -> its receive request
        self._arrived: deque = deque()        # workers whose gradient has arrived, in that order
        self._out: dict = {}                  # worker -> (piece, updates read, staleness) of its piece out
        self._header = {w: np.zeros(3, np.int64) for w in self._recv_buf}
        self._header_req: dict = {}
        self._pool: list = []                 # (snapshot of the parameters, its send requests)
        self.waiting: deque = deque()         # workers asking for a piece
        self.stopped: set = set()
        self.updates = 0
        self.failed: tuple | None = None      # (loss, piece, worker) of a gradient whose loss is not finite
        self.tracer = None

    # -- the loop ---------------------------------------------------------------------
    def serve(self, tracer, on_complete) -> None:
        """Until every worker is told to stop. `on_complete(steps, piece, ce)` follows each update: the range of steps
        it completed (often empty), the piece and its loss (cross-entropy sum)."""
        self.tracer = tracer
        self.waiting.extend(range(1, self.W + 1))
        self._release()
        while len(self.stopped) < self.W:
            w = self._next_arrival()
            piece, read, stale = self._out.pop(w)
            self._poll()
            queue = len(self._arrived)
            t0 = time.perf_counter()
            buf = self._recv_buf[w]
            ce = float(buf[-1])
            if self.failed is None and not np.isfinite(ce):
                self.failed = (ce, piece, w)
            self.waiting.append(w)
            if self.failed is not None:
                self._release()
                continue
            self._apply(buf, piece)
            t1 = time.perf_counter()
            self.updates += 1
            on_complete(self.sched.applied(piece), piece, ce)
            t2 = time.perf_counter()
            self._release()
            t3 = time.perf_counter()
            self._record(w, piece, read, stale, queue, t0, t1 - t0, t3 - t2)
        self._finish_sends()

    def _record(self, w: int, piece: Piece, read: int, stale: int, queue: int, t0: float, apply_s: float,
                reply_s: float) -> None:
        if self.tracer.run_dir is None:
            return
        epoch, batch = divmod(piece.step, self.batches_per_epoch)
        self.tracer.record(update_record(
            update=self.updates - 1, worker=w, epoch=epoch, batch=batch, piece=piece.index, read=read,
            staleness=stale, queue=queue, blocked=len(self.waiting), t_s=round(t0 - self.tracer.t_start_ns / 1e9, 6),
            apply_ms=round(apply_s * 1e3, 4), reply_ms=round(reply_s * 1e3, 4)))

    # -- receiving ----------------------------------------------------------------------
    def _poll(self) -> None:
        """Move every posted receive that has completed to the arrival queue."""
        for w in sorted(self._posted):
            if self._posted[w].Test():
                del self._posted[w]
                self._arrived.append(w)

    def _next_arrival(self) -> int:
        while not self._arrived:
            if not self._posted:
                raise RuntimeError("the server waits for a gradient but no piece is out")
            self._poll()
            if not self._arrived:
                os.sched_yield()
        return self._arrived.popleft()

    def _apply(self, buf, piece: Piece) -> None:
        net, p = self.net, self.net.p
        first = self.sched.first_of_step(piece)
        if self.stream is None:
            g = buf
        else:
            net.g.flat.set(buf, stream=self.stream)   # H2D of the gradient, on the server's stream
            g = net.g.flat
        apply_gradient(p, g[:p.n_weights], g[p.n_weights:p.n_params], net.lr, net.reg, first)
        if self.stream is not None:
            self.stream.synchronize()   # the copy from the receive buffer, posted again next, has ended

    # -- answering ---------------------------------------------------------------------
    def _release(self) -> None:
        """Answer the waiting workers the schedule allows: a piece with the current parameters (a snapshot), or stop."""
        given = []
        while self.waiting and (self.sched.ready() or self.sched.exhausted or self.failed is not None):
            w = self.waiting.popleft()
            if self.failed is not None or self.sched.exhausted:
                self._send_header(w, FAILED if self.failed is not None else DONE, -1, -1)
                self.stopped.add(w)
                continue
            piece = self.sched.hand_out()
            self._out[w] = (piece, self.updates, self.sched.staleness_of(piece))
            self._posted[w] = self.comm.Irecv(self._recv_buf[w], source=w, tag=TAG_GRAD)
            given.append((w, piece))
        if given:
            snap, reqs = self._snapshot()
            for w, piece in given:
                self._send_header(w, OK, piece.step, piece.index)
                reqs.append(self.comm.Isend(snap, dest=w, tag=TAG_PARAMS))

    def _send_header(self, w: int, status: int, step: int, index: int) -> None:
        old = self._header_req.pop(w, None)
        if old is not None:
            old.Wait()   # long done: the worker read it before sending the gradient it answers
        h = self._header[w]
        h[:] = (status, step, index)
        self._header_req[w] = self.comm.Isend(h, dest=w, tag=TAG_HEADER)

    def _snapshot(self):
        """A copy of the parameters to send from (an update may start before the sends end), reusing a free buffer."""
        from mpi4py import MPI
        for snap, reqs in self._pool:
            if MPI.Request.Testall(reqs):
                reqs.clear()
                break
        else:
            snap, reqs = self._host_buffer(self.net.p.n_params), []
            self._pool.append((snap, reqs))
        params = self.net.p.params
        if self.stream is None:
            np.copyto(snap, params)
        else:
            params.get(out=snap, stream=self.stream)
            self.stream.synchronize()   # MPI reads the host copy the GPU just wrote
        return snap, reqs

    def _finish_sends(self) -> None:
        from mpi4py import MPI
        MPI.Request.Waitall([r for _, reqs in self._pool for r in reqs] + list(self._header_req.values()))
