"""The data-parallel training loop.

Batches are taken in dataset order, batch k = samples [kB, (k+1)B); the last
one may be short and is averaged over its own size. Each rank takes its
contiguous piece of every batch (sizes differ by at most one), runs forward,
loss and backward on it with the gradient scaled by 1/B (the whole batch's
size), the gradient buffer is summed across ranks, and every rank applies
the same update (the regularisation term is added there, once). After any
number of batches every rank holds the parameters that one process training
on the whole batch would, up to rounding.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import data as data_mod
from .comm import HostReducer, piece
from .config import Config, check_procs
from .errors import PerfmlpError, RunFailure
from .mlp import Network, init_weights


class NonFiniteLoss(RunFailure):
    """Seen on every rank at once (the loss is reduced with the gradients)."""


class NullTracer:
    """No tracing: every hook costs one attribute lookup and a no-op."""

    def phase(self, name: str):
        return contextlib.nullcontext()

    def begin_batch(self, epoch: int, batch: int, samples: int, local: int) -> None:
        pass

    def end_batch(self, **values) -> None:
        pass

    def end_epoch(self, **values) -> None:
        pass

    @property
    def ops(self):
        return None


@dataclass
class EpochResult:
    epoch: int
    loss: float
    accuracy: float
    seconds: float


@dataclass
class Result:
    epochs: list[EpochResult] = field(default_factory=list)
    batch_seconds: list[float] = field(default_factory=list)
    params: dict | None = None
    batches: int = 0


_FAULT = os.environ.get("PERFMLP_FAULT")


def fault_hook(rank: int, batch: int) -> None:
    """Testing hook: PERFMLP_FAULT=RANK:BATCH makes that rank raise there, so
    tests can show that one rank's failure ends the whole job."""
    if _FAULT:
        r, b = (int(t) for t in _FAULT.split(":"))
        if r == rank and b == batch:
            raise RuntimeError(f"injected fault at batch {batch}")


def load_resume(path: str, layer_sizes) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as f:
            params = {k: f[k] for k in f.files}
    except FileNotFoundError:
        raise PerfmlpError(f"--resume: no such file {path}") from None
    except (OSError, ValueError) as e:
        raise PerfmlpError(f"--resume: {path} is not a readable .npz file ({e})") from None
    L = len(layer_sizes) - 1
    for l in range(1, L + 1):
        for name, shape in ((f"W{l}", (layer_sizes[l], layer_sizes[l - 1])), (f"b{l}", (layer_sizes[l],))):
            if name not in params:
                raise PerfmlpError(f"--resume: {path} has no array {name}")
            if params[name].shape != shape:
                raise PerfmlpError(f"--resume: {path}: {name} has shape {params[name].shape}, the network needs {shape}")
    extra = sorted(set(params) - {f"{k}{l}" for l in range(1, L + 1) for k in "Wb"})
    if extra:
        raise PerfmlpError(f"--resume: {path} has arrays this network lacks: {', '.join(extra)}")
    return params


def save_params(path: Path, params: dict[str, np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **params)
    tmp.replace(path)


class HostBatches:
    """The NumPy backend's batch source: views into host arrays, no copy."""

    def __init__(self, x: np.ndarray, y: np.ndarray):
        self.x0, self.y0 = x, y
        self.x, self.y = x, y

    def reorder(self, order: np.ndarray) -> None:
        self.x, self.y = self.x0[order], self.y0[order]

    def get(self, lo: int, hi: int, phase):
        with phase("h2d"):
            return self.x[lo:hi].T, self.y[lo:hi].T


def step(net, batches, reducer, lo: int, hi: int, phase) -> None:
    """One training step on samples [lo, hi) of the (current) dataset order."""
    x, y = batches.get(lo, hi, phase)
    with phase("forward"):
        net.forward(x)
    with phase("loss"):
        net.loss(y)
    with phase("backward"):
        net.backward()
    reducer.reduce(net.g.flat, phase)
    with phase("update"):
        net.update()


def build_backend(cfg: Config, world, xtrain, ytrain, tracer):
    """(array module, network, batch source, reducer, sync) for the configured backend."""
    dtype = np.dtype(cfg.precision)
    backend = cfg.backend
    if backend == "auto":
        from . import gpu
        backend = "cupy" if gpu.available() else "numpy"
    if backend == "cupy":
        from . import gpu
        return gpu.build(cfg, world, xtrain, ytrain, tracer)
    if cfg.comm == "nccl":
        raise PerfmlpError("--comm nccl needs the cupy backend")
    net = Network(np, cfg.layer_sizes, dtype, cfg.learning_rate, cfg.reg, cfg.batch_size)
    return np, net, HostBatches(xtrain, ytrain), HostReducer(world), (lambda: None), "numpy"


def train(cfg: Config, world, tracer=None, log=print) -> Result:
    # exp overflow in the sigmoid is expected (it saturates to 0); a loss that
    # is not finite is caught below, so NumPy's warnings are only noise
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        return _train(cfg, world, tracer or NullTracer(), log)


def _train(cfg: Config, world, tracer, log) -> Result:
    rank, P = world.rank, world.size
    split = data_mod.load(cfg.data, cfg.data_dir, cfg.n_train, cfg.n_heldout,
                          cfg.input_size, cfg.num_classes, cfg.seed)
    if rank == 0 and not cfg.quiet:
        log(split.note)
    N = len(split.train)
    if N != cfg.n_train:
        cfg = dataclasses.replace(cfg, n_train=N)
        if cfg.batch_size > N:
            raise PerfmlpError(f"batch_size ({cfg.batch_size}) is larger than the {N} training samples available")
    check_procs(cfg, P)
    dtype = np.dtype(cfg.precision)
    xtrain, ytrain = data_mod.to_arrays(split.train, cfg.num_classes, dtype)
    xheld, yheld = data_mod.to_arrays(split.heldout, cfg.num_classes, dtype)
    xp, net, batches, reducer, sync, backend = build_backend(cfg, world, xtrain, ytrain, tracer)
    tracer.backend = backend
    from .trace import record_machine
    record_machine(tracer, world, backend)

    if cfg.resume:
        init = load_resume(cfg.resume, cfg.layer_sizes)
        L = len(cfg.layer_sizes) - 1
        net.set_params([init[f"W{l}"] for l in range(1, L + 1)], [init[f"b{l}"] for l in range(1, L + 1)])
    else:
        net.set_params(init_weights(cfg.layer_sizes, cfg.seed))
    if cfg.save_params and rank == 0:
        save_params(Path(cfg.save_params) / "initial.npz", net.get_params())

    x_held = xp.asarray(xheld.T) if len(xheld) else None
    labels_held = split.heldout.labels
    result = Result()
    B = cfg.batch_size
    nbatches = -(-N // B)
    order = np.arange(N)
    try:
        for epoch in range(cfg.epochs):
            if cfg.shuffle:
                order = np.random.default_rng(cfg.seed + 1 + epoch).permutation(N)
                batches.reorder(order)
            t_epoch = time.perf_counter()
            ce_total, ce_known = 0.0, True
            for k in range(nbatches):
                fault_hook(rank, k)
                start = k * B
                Bk = min(B, N - start)
                lo, hi = piece(Bk, P, rank)
                net.global_batch = Bk
                tracer.begin_batch(epoch, k, Bk, hi - lo)
                net.ops = tracer.ops
                t0 = time.perf_counter()
                step(net, batches, reducer, start + lo, start + hi, tracer.phase)
                ce = reducer.host_value(net.g.flat, net.g.n_params)  # None when it would cost a sync
                if ce is not None:
                    if not np.isfinite(ce):
                        raise NonFiniteLoss(f"loss is {ce} at epoch {epoch + 1}, batch {k}: stopping")
                    ce_total += ce
                else:
                    ce_known = False
                result.batch_seconds.append(time.perf_counter() - t0)
                tracer.end_batch(loss=None if ce is None else ce / Bk, reducer=reducer, batches=batches)
                result.batches += 1
            if not ce_known:
                ce_total = reducer.epoch_loss_sum()
                if not np.isfinite(ce_total):
                    raise NonFiniteLoss(f"loss is {ce_total} in epoch {epoch + 1}: stopping")
            sync()  # the epoch's time includes its queued device work
            seconds = time.perf_counter() - t_epoch
            loss = ce_total / N + net.weight_penalty()
            acc = float("nan")
            if rank == 0 and x_held is not None:
                pred = net.predict(x_held)
                acc = float((np.asarray(pred.get() if hasattr(pred, "get") else pred) == labels_held).mean())
            ep = EpochResult(epoch + 1, loss, acc, seconds)
            result.epochs.append(ep)
            tracer.end_epoch(epoch=epoch, loss=loss, accuracy=acc, seconds=seconds)
            if rank == 0 and not cfg.quiet:
                log(f"epoch {epoch + 1}/{cfg.epochs}: loss {loss:.4f}, held-out accuracy {acc:.4f}, {seconds:.3f} s")
    except NonFiniteLoss as e:
        e.params = net.get_params()  # the caller saves them
        raise
    result.params = net.get_params()
    if cfg.save_params and rank == 0:
        save_params(Path(cfg.save_params) / "final.npz", result.params)
    result.net = net
    return result
