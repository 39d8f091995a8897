"""The training loop of `--comm ps-async` (`train_async`, called by train.py), the workers' side (`Worker`:
get a piece and the parameters, send the piece's gradient with its loss, ask again) and the backend's
assembly (`backend_fields`, for backend.build).

Epochs belong to the server: epoch e ends when every batch of it has been applied (with S > 0 pieces of
epoch e + 1 may already be in); the server then evaluates and writes the epoch line with `updates`, the
gradients applied so far. Its `seconds` exclude the previous epoch's evaluation. A worker writes one
batch line per piece; its wall time is the whole cycle, waiting included."""
from __future__ import annotations

import os
import time
from functools import partial

import numpy as np

from .. import names as N
from ..comm import host_array
from ..mlp import to_host
from ..model.costs import piece as piece_bounds, pieces
from ..model.predict import staging_memory
from ..step import NonFiniteLoss, compute, no_phase
from ..strategies.build import device, network
from ..trace.format import Counts
from ..trace.records import Phase
from . import FAILED, OK, SERVER, TAG_GRAD, TAG_HEADER, TAG_PARAMS, check_world
from .server import Schedule, Server


def backend_fields(cfg, world, xtrain, ytrain, name: str) -> dict:
    """backend.Backend's fields for this rank: the server (rank 0) or a worker."""
    check_world(cfg, world.size)
    W = world.size - 1
    max_local = max(pieces(cfg.batch_size, W))
    serving = world.rank == SERVER
    xp, batches, sync, stream = device(cfg, world, xtrain, ytrain, name, max_local, batches=not serving)
    net = network(cfg, xp, name, max_local)
    # pinned where the batches are (on NumPy the batches are pageable)
    host_buffer = partial(host_array, dtype=net.dtype, memory=staging_memory(cfg.batch_transfer))
    if serving:
        nbatches = cfg.batches_per_epoch
        role = Server(world.comm, net, Schedule(cfg.epochs * nbatches, W, cfg.staleness), nbatches, host_buffer,
                      stream)
    else:
        role = Worker(world.comm, net, batches, host_buffer if name == N.CUPY else None, stream)
    return dict(name=name, xp=xp, net=net, batches=batches, reducer=role, sync=sync, stream=stream,
                data_group=(W, world.rank - 1))


def train_async(cfg, world, be, tracer, log, straggle, heldout, result, epoch_result) -> None:
    """Serve (rank 0) or work until the last piece, then hand every rank the final parameters; `heldout`: (x, labels)
    for the server's accuracy; `result` (train.Result) gets the server's epochs as `epoch_result`s."""
    if world.rank == SERVER:
        status = _serve(cfg, be, tracer, log, cfg.batches_per_epoch, heldout, result, epoch_result)
    else:
        status = _work(cfg, world, be, tracer, straggle, cfg.batches_per_epoch, result)
    status = world.bcast(status if world.rank == SERVER else None, root=SERVER)
    if status[0] == FAILED:
        e = NonFiniteLoss(status[1])
        if world.rank == SERVER:
            e.params, e.where = be.net.get_params(), status[2]
        raise e
    final = to_host(be.net.p.params)
    world.comm.Bcast(final, root=SERVER)
    if world.rank != SERVER:
        be.net.p.params[...] = be.xp.asarray(final)
    result.params = be.net.get_params()


def _work(cfg, world, be, tracer, straggle, nbatches: int, result) -> tuple:
    W = world.size - 1
    n_train, B = cfg.n_train, cfg.batch_size
    current = [None]

    def locate(step: int, index: int):
        epoch, batch = divmod(step, nbatches)
        start = batch * B
        samples = min(B, n_train - start)
        lo, hi = piece_bounds(samples, W, index)
        return epoch, batch, samples, start + lo, start + hi

    def reorder(epoch: int) -> None:
        if cfg.shuffle and epoch != current[0]:
            be.batches.reorder(np.random.default_rng(cfg.seed + 1 + epoch).permutation(n_train))
        current[0] = epoch

    be.reducer.run(tracer, straggle, locate, reorder, Counts())   # under train()'s np.errstate
    be.sync()
    result.batches = be.reducer.pieces
    return ()


def _serve(cfg, be, tracer, log, nbatches: int, heldout, result, epoch_result) -> tuple:
    server, net = be.reducer, be.net
    x_held, labels = heldout
    ce_sum = [0.0] * cfg.epochs
    t_epoch = [time.perf_counter()]

    def on_complete(steps: range, piece, ce: float) -> None:
        ce_sum[piece.step // nbatches] += ce
        for k in steps:
            if (k + 1) % nbatches == 0:
                end_epoch(k // nbatches)

    def end_epoch(epoch: int) -> None:
        be.sync()
        seconds = time.perf_counter() - t_epoch[0]
        loss = ce_sum[epoch] / cfg.n_train + net.weight_penalty()
        acc = net.accuracy(x_held, labels) if x_held is not None else float("nan")
        ep = epoch_result(epoch + 1, loss, acc, seconds, nbatches, 0.0, 0)
        result.epochs.append(ep)
        tracer.end_epoch(epoch=epoch, loss=loss, accuracy=acc, seconds=seconds, steady_ms_per_batch=None,
                         warmup_batches=0, updates=server.updates)
        if not cfg.quiet:
            log(f"{ep.words(cfg.epochs)}, {server.updates} updates")
        t_epoch[0] = time.perf_counter()

    server.serve(tracer, on_complete)   # under train()'s np.errstate
    result.batches = server.sched.complete   # batches wholly applied (W updates each)
    if server.failed is None:
        return (0,)
    ce, piece, w = server.failed
    epoch, batch = divmod(piece.step, nbatches)
    return (FAILED, f"loss is {ce} at epoch {epoch + 1}, batch {batch} (piece {piece.index}, from rank {w}): "
                    "stopping", f"after {server.updates} updates, before the one that failed")


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
            tracer.end_batch(None, counts)   # the loss went with the gradient: the server's lines carry it
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
