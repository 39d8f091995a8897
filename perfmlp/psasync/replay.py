"""Remake a `--comm ps-async` run's parameters in one process from its update lines (trace/updates.py):
each gradient computed again on the parameters the worker had (after `read` updates) and applied in the
recorded order by the server's rule. Arrival order being the run's only freedom, the result is the
run's up to the GEMMs' rounding."""
from __future__ import annotations

from collections import Counter

import numpy as np

from .. import data as data_mod
from ..batches import HostBatches
from ..config import from_mapping
from ..mlp import FlatParams, Network, start_params
from ..model.costs import piece as piece_bounds
from ..model.precision import precision
from ..step import compute, no_phase
from .server import apply_gradient


def replay(cfg, workers: int, updates, xtrain, ytrain, params: FlatParams) -> FlatParams:
    """`params` (the initial ones, updated in place) after every update of `updates` (trace records)."""
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
        x, y = batches.get(start + lo, start + hi, no_phase, None)
        compute(net, x, y, no_phase, None)
        g, p = net.g.flat, params
        step = u.epoch * nbatches + u.batch
        apply_gradient(p, g[:p.n_weights], g[p.n_weights:p.n_params], cfg.learning_rate, cfg.reg,
                       applied[step] == 0)
        applied[step] += 1
        if i + 1 in last_use:
            kept[i + 1] = p.params.copy()
    return params


def replay_run(run) -> dict[str, np.ndarray]:
    """The final parameters of a ps-async run (trace.reader.Run), remade from its update lines."""
    cfg = from_mapping(dict(run.config), where=f"{run.path or run.run_id}: ", check=False)
    split = data_mod.load(cfg.data, cfg.data_dir, cfg.n_train, cfg.n_heldout, cfg.input_size, cfg.num_classes,
                          cfg.seed)
    xtrain, ytrain = data_mod.to_arrays(split.train, cfg.num_classes, np.dtype(precision(cfg.precision).master))
    net = Network(np, cfg.layer_sizes, cfg.precision, cfg.learning_rate, cfg.reg, cfg.batch_size)
    start_params(net, cfg)
    replay(cfg, run.procs - 1, run.ranks[0].updates, xtrain, ytrain, net.p)
    return net.get_params()
