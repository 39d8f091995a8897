"""The training loop of `--comm ps-async` (`train_async`, called by train.py) and the backend's
assembly (`backend_fields`, for backend.build).

Epochs belong to the server: epoch e ends when every batch of it has been applied (with S > 0
pieces of epoch e + 1 may already be in); the server then evaluates and writes the epoch line with
`updates`, the gradients applied so far. Its `seconds` exclude the previous epoch's evaluation.
"""
from __future__ import annotations

import time
from functools import partial

import numpy as np

from .. import names as N
from ..comm import host_array
from ..mlp import to_host
from ..model.costs import piece as piece_bounds, pieces
from ..model.predict import staging_memory
from ..step import NonFiniteLoss
from ..strategies.build import device, network
from ..trace.format import Counts
from . import FAILED, SERVER, check_world
from .server import Schedule, Server
from .worker import Worker


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
        nbatches = -(-cfg.n_train // cfg.batch_size)
        role = Server(world.comm, net, Schedule(cfg.epochs * nbatches, W, cfg.staleness), nbatches, host_buffer,
                      stream)
    else:
        role = Worker(world.comm, net, batches, host_buffer if name == N.CUPY else None, stream)
    return dict(name=name, xp=xp, net=net, batches=batches, reducer=role, sync=sync, stream=stream,
                data_group=(W, world.rank - 1))


def train_async(cfg, world, be, tracer, log, straggle, heldout, result, epoch_result) -> None:
    """Serve (rank 0) or work until the last piece, then hand every rank the final parameters.
    `heldout`: (x, labels) for the server's accuracy; `result`: train.Result, filled here with the
    server's epochs made by `epoch_result` (train.EpochResult)."""
    nbatches = -(-cfg.n_train // cfg.batch_size)
    if world.rank == SERVER:
        status = _serve(cfg, be, tracer, log, nbatches, heldout, result, epoch_result)
    else:
        status = _work(cfg, world, be, tracer, straggle, nbatches, result)
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
