"""Remake the parameters of a `--comm ps-async` run in one process from its
update lines (trace/updates.py): each gradient is computed again on the
parameters the worker had (those after `read` updates), on the piece the
line names, and applied in the recorded order with the server's own rule
(server.apply_gradient). The arrival order is the run's only freedom, so
the result equals the run's final parameters up to the rounding of the
GEMMs' summation (the BLAS's thread count may differ).
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from .. import data as data_mod
from ..batches import HostBatches
from ..config import from_mapping
from ..mlp import FlatParams, Network, start_params
from ..model.costs import piece as piece_bounds
from ..model.precision import precision
from ..step import compute
from .server import apply_gradient
from .worker import _no_phase


def replay(cfg, workers: int, updates, xtrain, ytrain, params: FlatParams) -> FlatParams:
    """`params` (the initial ones, updated in place and returned) after
    every update of `updates` (trace Update records), in their order."""
    updates = sorted(updates, key=lambda u: u.update)
    if [u.update for u in updates] != list(range(len(updates))):
        raise ValueError("the update lines are not 0, 1, ... without a gap")
    net = Network(np, cfg.layer_sizes, cfg.precision, cfg.learning_rate, cfg.reg, cfg.batch_size)
    batches = HostBatches(xtrain, ytrain)
    N, B = len(xtrain), cfg.batch_size
    nbatches = -(-N // B)
    last_use = {u.read: i for i, u in enumerate(updates)}
    kept = {0: params.flat.copy()} if 0 in last_use else {}
    applied: Counter = Counter()
    order_epoch = None
    for i, u in enumerate(updates):
        if cfg.shuffle and u.epoch != order_epoch:
            batches.reorder(np.random.default_rng(cfg.seed + 1 + u.epoch).permutation(N))
            order_epoch = u.epoch
        start = u.batch * B
        samples = min(B, N - start)
        lo, hi = piece_bounds(samples, workers, u.piece)
        net.p.params[...] = kept[u.read]
        if last_use[u.read] == i:
            del kept[u.read]
        net.global_batch = samples
        x, y = batches.get(start + lo, start + hi, _no_phase, None)
        compute(net, x, y, _no_phase, None)
        g, p = net.g.flat, params
        step = u.epoch * nbatches + u.batch
        apply_gradient(p, g[:p.n_weights], g[p.n_weights:p.n_params], cfg.learning_rate, cfg.reg,
                       applied[step] == 0)
        applied[step] += 1
        if i + 1 in last_use:
            kept[i + 1] = p.params.copy()
    return params


def replay_run(run) -> dict[str, np.ndarray]:
    """The final parameters of a ps-async run (trace.reader.Run), remade
    from its configuration, its data and its server's update lines."""
    cfg = from_mapping(dict(run.config), where=f"{run.path or run.run_id}: ", check=False)
    split = data_mod.load(cfg.data, cfg.data_dir, cfg.n_train, cfg.n_heldout, cfg.input_size, cfg.num_classes,
                          cfg.seed)
    xtrain, ytrain = data_mod.to_arrays(split.train, cfg.num_classes, np.dtype(precision(cfg.precision).master))
    net = Network(np, cfg.layer_sizes, cfg.precision, cfg.learning_rate, cfg.reg, cfg.batch_size)
    start_params(net, cfg)
    replay(cfg, run.procs - 1, run.ranks[0].updates, xtrain, ytrain, net.p)
    return net.get_params()
