"""The data-parallel training loop.

Batches are taken in dataset order, batch k = samples [kB, (k+1)B); the last
one may be short and is averaged over its own size. Each rank takes its
contiguous piece of every batch (sizes differ by at most one), runs forward,
loss and backward on it with the gradient scaled by 1/B (the whole batch's
size), the gradient buffer is summed across ranks, and every rank applies
the same update (the regularisation term is added there, once). After any
number of batches every rank holds the parameters that one process training
on the whole batch would, up to rounding. The step itself, for every
strategy and execution mode, is perfmlp/step.py (the partitioned
strategies' parts: perfmlp/strategies).
"""
from __future__ import annotations

import dataclasses
import os
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import data as data_mod
from .backend import build
from .config import Config, check_procs, data_procs
from .errors import PerfmlpError
from .mixed import storage_dtype
from .mlp import init_weights
from .model.costs import piece
from .model.precision import precision as precision_of
from .step import NonFiniteLoss, step  # noqa: F401  (step: the benchmarks call it as perfmlp.train.step)
from .straggler import straggler
from .trace.format import WARMUP_BATCHES, Counts
from .trace.writer import NullTracer


@dataclass
class EpochResult:
    epoch: int
    loss: float
    accuracy: float
    seconds: float
    batches: int
    steady_seconds: float   # from the end of the epoch's warm-up batches to its end, synchronised
    steady_batches: int     # the batches in that window

    @property
    def ms_per_batch(self) -> float:
        if self.steady_batches:
            return 1e3 * self.steady_seconds / self.steady_batches
        return 1e3 * self.seconds / self.batches


@dataclass
class Result:
    epochs: list[EpochResult] = field(default_factory=list)
    params: dict | None = None
    batches: int = 0
    backend: str = ""


_FAULT = os.environ.get("PERFMLP_FAULT")


def fault_hook(rank: int, batch: int, tracer) -> None:
    """Testing hook: PERFMLP_FAULT=RANK:BATCH[:KIND] makes that rank fail as
    batch BATCH starts, so tests can show how the whole job ends: `raise` an
    exception (the default), `disk` (the rank's trace writes go to /dev/full
    from here: ENOSPC, as on a full disk), `kill` (SIGKILL: no cleanup at
    all), `term` (SIGTERM), `int` (SIGINT)."""
    if not _FAULT:
        return
    r, b, *kind = _FAULT.split(":")
    if int(r) != rank or int(b) != batch:
        return
    kind = kind[0] if kind else "raise"
    if kind == "raise":
        raise RuntimeError(f"injected fault at batch {batch}")
    if kind == "disk":
        tracer.redirect_writes("/dev/full")
    else:
        import signal
        os.kill(os.getpid(), {"kill": signal.SIGKILL, "term": signal.SIGTERM, "int": signal.SIGINT}[kind])


def load_resume(path: str, layer_sizes) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as f:
            if not hasattr(f, "files"):  # a bare .npy array
                raise ValueError("not an .npz archive")
            params = {k: f[k] for k in f.files}
    except FileNotFoundError:
        raise PerfmlpError(f"--resume: no such file {path}") from None
    except IsADirectoryError:
        raise PerfmlpError(f"--resume: {path} is a folder, not an .npz file") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        # numpy says "pickled data" of any file that is not .npy/.npz
        why = "not an .npz archive" if "pickle" in str(e) else f"{type(e).__name__}: {e}"
        raise PerfmlpError(f"--resume: {path} is not a readable .npz file ({why})") from None
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
    for name, a in params.items():
        if not np.issubdtype(a.dtype, np.floating) or not np.isfinite(a).all():
            raise PerfmlpError(f"--resume: {path}: {name} is not all finite numbers")
    return params


def save_params(path: Path, params: dict[str, np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **params)
    tmp.replace(path)


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
    check_procs(cfg, data_procs(cfg, P))
    # the batch at the precision's storage width (bf16, fp16: 16 bits); held out in the master type
    master = np.dtype(precision_of(cfg.precision).master)
    xtrain, ytrain = (a.astype(storage_dtype(cfg.precision), copy=False)
                      for a in data_mod.to_arrays(split.train, cfg.num_classes, master))
    xheld, yheld = data_mod.to_arrays(split.heldout, cfg.num_classes, master)
    be = build(cfg, world, xtrain, ytrain)
    net, batches, reducer = be.net, be.batches, be.reducer
    tracer.attach(world, be)
    net.ops = tracer.ops  # the network records the operations it launches there (None: not at all)
    pieces_of = be.data_group or (P, rank)  # the batch is split over (ranks, this rank's piece)

    if cfg.resume:
        init = load_resume(cfg.resume, cfg.layer_sizes)
        L = len(cfg.layer_sizes) - 1
        net.set_params([init[f"W{l}"] for l in range(1, L + 1)], [init[f"b{l}"] for l in range(1, L + 1)])
    else:
        net.set_params(init_weights(cfg.layer_sizes, cfg.seed))
    initial = net.get_params() if cfg.save_params else None  # every rank: a collective for a shard
    if initial is not None and rank == 0:
        save_params(Path(cfg.save_params) / "initial.npz", initial)

    x_held = be.xp.asarray(xheld.T) if len(xheld) else None
    straggle = straggler(cfg, rank, P)
    result = Result(backend=be.name)
    if cfg.comm == "ps-async":  # the asynchronous parameter server runs a loop of its own
        from .psasync.loop import train_async
        train_async(cfg, world, be, tracer, log, straggle, (x_held, split.heldout.labels), result, EpochResult)
        if cfg.save_params and rank == 0:
            save_params(Path(cfg.save_params) / "final.npz", result.params)
        return result
    counts = Counts()
    B = cfg.batch_size
    nbatches = -(-N // B)
    warmup = min(WARMUP_BATCHES, nbatches - 1)  # the steady window starts after these (JIT, allocations, capture)
    for epoch in range(cfg.epochs):
        if cfg.shuffle:
            batches.reorder(np.random.default_rng(cfg.seed + 1 + epoch).permutation(N))
        if epoch == 0 or bool(be.xp.isfinite(net.p.flat).all()):  # one check (a device sync) per epoch
            last_finite = (net.p.flat.copy(), f"from the start of epoch {epoch + 1}")
        t_epoch = time.perf_counter()
        t_steady = None
        ce_total, ce_known = 0.0, True
        for k in range(nbatches):
            fault_hook(rank, k, tracer)
            start = k * B
            Bk = min(B, N - start)
            lo, hi = piece(Bk, *pieces_of)
            net.global_batch = Bk
            tracer.begin_batch(epoch, k, Bk, hi - lo)
            straggle()
            try:
                ce = step(net, batches, reducer, start + lo, start + hi, tracer.phase, counts, be.graph, be.parts)
            except NonFiniteLoss as e:
                e.args = (f"loss is {e.args[0]} at epoch {epoch + 1}, batch {k}: stopping",)
                e.params, e.where = _last_finite(net, last_finite, f"before batch {k} of epoch {epoch + 1}")
                raise
            if ce is not None:
                ce_total += ce
            else:
                ce_known = False
            tracer.end_batch(None if ce is None else ce / Bk, counts)
            counts.reset()
            result.batches += 1
            if warmup and k == warmup - 1:
                be.sync()  # once per epoch: the steady window starts after the warm-up batches
                t_steady = time.perf_counter()
        if not ce_known:
            ce_total = reducer.epoch_loss_sum()  # the device's running sum: one sync per epoch
            if not np.isfinite(ce_total):
                e = NonFiniteLoss(f"loss is {ce_total} in epoch {epoch + 1}: stopping")
                e.params, e.where = _last_finite(net, last_finite, None)
                raise e
        be.sync()  # the epoch's time includes its queued device work
        t_end = time.perf_counter()
        loss = ce_total / N + net.weight_penalty()
        acc = float("nan")
        if rank == 0 and x_held is not None:
            pred = net.predict(x_held)
            acc = float((np.asarray(pred.get() if hasattr(pred, "get") else pred) == split.heldout.labels).mean())
        ep = EpochResult(epoch + 1, loss, acc, t_end - t_epoch, nbatches,
                         t_end - t_steady if t_steady else 0.0, nbatches - warmup if t_steady else 0)
        result.epochs.append(ep)
        tracer.end_epoch(epoch=epoch, loss=loss, accuracy=acc, seconds=ep.seconds,
                         steady_ms_per_batch=ep.ms_per_batch if ep.steady_batches else None, warmup_batches=warmup)
        if rank == 0 and not cfg.quiet:
            log(f"epoch {epoch + 1}/{cfg.epochs}: loss {loss:.4f}, held-out accuracy {acc:.4f}, "
                f"{ep.seconds:.4f} s, {ep.ms_per_batch:.4g} ms/batch")
    result.params = net.get_params()
    if cfg.save_params and rank == 0:
        save_params(Path(cfg.save_params) / "final.npz", result.params)
    return result


def _last_finite(net, snapshot, now: str | None) -> tuple[dict, str]:
    """(parameters, which they are): the current ones if they are finite and
    `now` names them, else the latest epoch-start copy that was finite."""
    if now is not None:
        params = net.get_params()
        if all(np.isfinite(a).all() for a in params.values()):
            return params, now
    net.p.flat[...] = snapshot[0]
    return net.get_params(), snapshot[1]
