"""A worker of `--comm ps-async` (every rank but 0): get a piece and the
parameters, compute the piece's gradient, send it with the loss, ask again.
One batch line per piece; its wall time is the whole cycle, waiting included.
"""
from __future__ import annotations

import os

import numpy as np

from .. import names as N
from ..step import compute, no_phase
from ..trace.records import Phase
from . import OK, SERVER, TAG_GRAD, TAG_HEADER, TAG_PARAMS


def wait(req) -> None:
    """Wait for an MPI request, yielding the core to others between tests."""
    while not req.Test():
        os.sched_yield()


class Worker:
    """`host_buffer(n)`: a host array to stage through; None on NumPy (MPI uses the network's buffers)."""

    name = N.PS_ASYNC

    def __init__(self, comm, net, batches, host_buffer=None, stream=None):
        self.comm, self.net, self.batches, self.stream = comm, net, batches, stream
        self.header = np.zeros(3, np.int64)
        self.pieces = 0       # pieces computed
        if stream is None:
            self.grad_host, self.params_host = net.g.flat, net.p.params
        else:
            self.grad_host, self.params_host = host_buffer(net.g.flat.size), host_buffer(net.p.n_params)

    def run(self, tracer, straggle, locate, reorder, counts) -> int:
        """Compute pieces until the server says stop; its status. `locate(step, index)`: (epoch, batch,
        samples, lo, hi) of the piece in the epoch's order, which `reorder(epoch)` puts in place."""
        status, step, index = self.pull(no_phase, counts)
        counts.reset()
        while status == OK:
            epoch, batch, samples, lo, hi = locate(step, index)
            reorder(epoch)
            tracer.begin_batch(epoch, batch, samples, hi - lo)
            straggle()
            self.net.global_batch = samples
            x, y = self.batches.get(lo, hi, tracer.phase, counts)
            compute(self.net, x, y, tracer.phase, counts)
            self.push(tracer.phase, counts)
            status, step, index = self.pull(tracer.phase, counts)
            tracer.end_batch(None, counts)
            counts.reset()
            self.pieces += 1
        return status

    def push(self, phase, counts) -> None:
        g = self.net.g.flat
        if self.stream is not None:
            with phase(Phase.D2H):
                g.get(out=self.grad_host, stream=self.stream)
                self.stream.synchronize()   # MPI reads the host copy the GPU just wrote
                self.net.g.extra.fill(0)    # the loss kernel adds into the slot: sent, so cleared
            counts.bytes_d2h += g.nbytes
        with phase(Phase.PUSH):   # until MPI has the buffer back: a large one only once the server took it
            wait(self.comm.Isend(self.grad_host, dest=SERVER, tag=TAG_GRAD))
        counts.bytes_mpi += self.grad_host.nbytes
        counts.collectives.append(("MPI_Isend", int(self.grad_host.size)))

    def pull(self, phase, counts) -> tuple[int, int, int]:
        """The next header (status, step, piece) and, with OK, the parameters."""
        with phase(Phase.PULL):   # the server's queue, its update and the staleness bound
            wait(self.comm.Irecv(self.header, source=SERVER, tag=TAG_HEADER))
        status = int(self.header[0])
        if status != OK:
            return status, -1, -1
        with phase(Phase.PARAMS):  # the parameters' message alone, sent as the header was
            wait(self.comm.Irecv(self.params_host, source=SERVER, tag=TAG_PARAMS))
        counts.bytes_mpi += self.params_host.nbytes
        counts.collectives.append(("MPI_Irecv", int(self.params_host.size)))
        if self.stream is not None:
            with phase(Phase.H2D_PARAMS):
                self.net.p.params.set(self.params_host, stream=self.stream)
            counts.bytes_h2d += self.net.p.params.nbytes
        return status, int(self.header[1]), int(self.header[2])
