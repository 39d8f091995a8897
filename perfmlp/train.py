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
from .errors import PerfmlpError, RunFailure, write_atomic
from .mixed import to_storage
from .mlp import init_weights
from .model.costs import piece
from .model.precision import precision as precision_of
from .step import NonFiniteLoss, step  # noqa: F401  (step: the benchmarks call it as perfmlp.train.step)
from .straggler import straggler
from .trace.format import WARMUP_BATCHES, Counts
from .trace.writer import NullTracer
from .watchdog import EPOCH_END, SERVING


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


def fault_hook(rank: int, batch: int, tracer, phase: str | None = None) -> None:
    """Testing hook: PERFMLP_FAULT=RANK:BATCH[:KIND[:PHASE]] makes that rank
    fail as batch BATCH starts (or as it enters PHASE), so tests can show
    how the whole job ends: `raise` an exception (the default), `disk` (the
    rank's trace writes go to /dev/full from here: ENOSPC, as on a full
    disk), `kill` (SIGKILL: no cleanup at all), `term`, `int`, `hup`
    (SIGTERM, SIGINT, SIGHUP), `stop` (SIGSTOP, as a debugger or a
    swapped-out node) or `hang` (the rank sleeps for ever)."""
    if not _FAULT:
        return
    r, b, *rest = _FAULT.split(":")
    kind, where = (rest[0] if rest else "raise"), (rest[1] if len(rest) > 1 else None)
    if int(r) != rank or int(b) != batch or where != phase:
        return
    if kind == "raise":
        raise RuntimeError(f"injected fault at batch {batch}")
    if kind == "disk":
        tracer.redirect_writes("/dev/full")
    elif kind == "hang":
        while True:
            time.sleep(1)
    else:
        import signal
        os.kill(os.getpid(), {"kill": signal.SIGKILL, "term": signal.SIGTERM, "int": signal.SIGINT,
                              "hup": signal.SIGHUP, "stop": signal.SIGSTOP}[kind])


def _faulty(phase, rank: int, tracer, where: list):
    """`phase` with fault_hook called as each phase starts (PERFMLP_FAULT names a phase)."""
    def faulty(name):
        entered = phase(name)  # the phase is marked as entered before the fault
        fault_hook(rank, where[0], tracer, name)
        return entered
    return faulty


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
    """The parameters as an .npz file, written whole or not at all (a
    RunFailure naming the file on a full disk)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunFailure(f"cannot create {path.parent}: {e.strerror}") from None
    write_atomic(path, lambda f: np.savez(f, **params))


def train(cfg: Config, world, tracer=None, log=print, watchdog=None) -> Result:
    """Train on `world`'s ranks, recording into `tracer` and marking progress
    for `watchdog` (perfmlp/watchdog.py), both optional."""
    # exp overflow in the sigmoid is expected (it saturates to 0); a loss that
    # is not finite is caught below, so NumPy's warnings are only noise
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        return _train(cfg, world, tracer or NullTracer(), log, watchdog or _NoWatchdog())


class _Watched:
    """The tracer, with the watchdog marking each batch and phase it begins
    (for a loop that calls the tracer, not the watchdog)."""

    def __init__(self, tracer, watchdog, rank: int):
        self._tracer, self._watchdog = tracer, watchdog
        self._at = [0]  # the batch the fault hook sees
        self.phase = watchdog.watch(tracer.phase)
        if _FAULT and len(_FAULT.split(":")) > 3:
            self.phase = _faulty(self.phase, rank, tracer, self._at)

    def begin_batch(self, epoch: int, batch: int, samples: int, local: int) -> None:
        self._watchdog.batch(epoch, batch)
        self._at[0] = batch
        self._tracer.begin_batch(epoch, batch, samples, local)

    def __getattr__(self, name):
        return getattr(self._tracer, name)


class _NoWatchdog:
    def watch(self, phase):
        return phase

    def batch(self, epoch: int, batch: int) -> None:
        pass

    def mark(self, state: int) -> None:
        pass


@dataclass
class _Setup:
    cfg: Config
    be: object          # backend.Backend
    split: object       # data.Split
    x_held: object      # the held-out inputs on the backend, or None
    pieces_of: tuple    # the batch is split over (ranks, this rank's piece)
    straggle: object    # straggler.straggler: the injected delay of a batch (a no-op unless asked)
    last_finite: tuple = ()   # (flat parameters, which they are): the latest finite epoch start


def _setup(cfg: Config, world, tracer, log) -> _Setup:
    """Data, backend and initial parameters (saved with --save-params)."""
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
    xtrain, ytrain = (to_storage(a, cfg.precision) for a in data_mod.to_arrays(split.train, cfg.num_classes, master))
    xheld, _ = data_mod.to_arrays(split.heldout, cfg.num_classes, master)
    be = build(cfg, world, xtrain, ytrain)
    tracer.attach(world, be)
    be.net.ops = tracer.ops  # the network records the operations it launches there (None: not at all)
    if cfg.resume:
        init = load_resume(cfg.resume, cfg.layer_sizes)
        L = len(cfg.layer_sizes) - 1
        be.net.set_params([init[f"W{l}"] for l in range(1, L + 1)], [init[f"b{l}"] for l in range(1, L + 1)])
    else:
        be.net.set_params(init_weights(cfg.layer_sizes, cfg.seed))
    initial = be.net.get_params() if cfg.save_params else None  # every rank: a collective for a shard
    if initial is not None and rank == 0:
        save_params(Path(cfg.save_params) / "initial.npz", initial)
    x_held = be.xp.asarray(xheld.T) if len(xheld) else None
    return _Setup(cfg, be, split, x_held, be.data_group or (P, rank), straggler(cfg, rank, P))


def _train(cfg: Config, world, tracer, log, watchdog) -> Result:
    s = _setup(cfg, world, tracer, log)
    cfg, be = s.cfg, s.be
    result = Result(backend=be.name)
    if cfg.comm == "ps-async":  # the asynchronous parameter server runs a loop of its own
        from .psasync.loop import train_async
        watchdog.mark(SERVING)  # the server marks nothing more; a worker's batches and phases are marked
        heldout = (s.x_held, s.split.heldout.labels)
        train_async(cfg, world, be, _Watched(tracer, watchdog, world.rank), log, s.straggle, heldout, result,
                    EpochResult)
        if cfg.save_params and world.rank == 0:
            save_params(Path(cfg.save_params) / "final.npz", result.params)
        return result
    phase = watchdog.watch(tracer.phase)
    at = [0]  # the batch the fault hook sees
    if _FAULT and len(_FAULT.split(":")) > 3:
        phase = _faulty(phase, world.rank, tracer, at)
    nbatches = -(-cfg.n_train // cfg.batch_size)
    warmup = min(WARMUP_BATCHES, nbatches - 1)  # the steady window starts after these (JIT, allocations, capture)
    for epoch in range(cfg.epochs):
        ep = _epoch(s, world, tracer, watchdog, phase, at, epoch, warmup, result)
        result.epochs.append(ep)
        tracer.end_epoch(epoch=epoch, loss=ep.loss, accuracy=ep.accuracy, seconds=ep.seconds,
                         steady_ms_per_batch=ep.ms_per_batch if ep.steady_batches else None, warmup_batches=warmup)
        if world.rank == 0 and not cfg.quiet:
            log(f"epoch {epoch + 1}/{cfg.epochs}: loss {ep.loss:.4f}, held-out accuracy {ep.accuracy:.4f}, "
                f"{ep.seconds:.4f} s, {ep.ms_per_batch:.4g} ms/batch")
    result.params = be.net.get_params()
    if hasattr(be.batches, "close"):   # the prefetching threads, once the last batch is done
        be.batches.close()
    if cfg.save_params and world.rank == 0:
        save_params(Path(cfg.save_params) / "final.npz", result.params)
    return result


def _epoch(s: _Setup, world, tracer, watchdog, phase, at: list, epoch: int, warmup: int,
           result: Result) -> EpochResult:
    """One pass over the training samples, then the held-out accuracy (rank 0)."""
    cfg, be = s.cfg, s.be
    net, batches, reducer = be.net, be.batches, be.reducer
    N, B = cfg.n_train, cfg.batch_size
    nbatches = -(-N // B)
    if cfg.shuffle:
        batches.reorder(np.random.default_rng(cfg.seed + 1 + epoch).permutation(N))
    if epoch == 0 or bool(be.xp.isfinite(net.p.flat).all()):  # one check (a device sync) per epoch
        s.last_finite = (net.p.flat.copy(), f"from the start of epoch {epoch + 1}")
    counts = Counts()
    t_epoch = time.perf_counter()
    t_steady = None
    ce_total, ce_known = 0.0, True
    for k in range(nbatches):
        watchdog.batch(epoch, k)
        at[0] = k
        fault_hook(world.rank, k, tracer)
        start = k * B
        Bk = min(B, N - start)
        lo, hi = piece(Bk, *s.pieces_of)
        net.global_batch = Bk
        tracer.begin_batch(epoch, k, Bk, hi - lo)
        s.straggle()
        try:
            ce = step(net, batches, reducer, start + lo, start + hi, phase, counts, be.graph, be.parts)
        except NonFiniteLoss as e:
            e.args = (f"loss is {e.args[0]} at epoch {epoch + 1}, batch {k}: stopping",)
            e.params, e.where = _last_finite(net, s.last_finite, f"before batch {k} of epoch {epoch + 1}")
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
    watchdog.mark(EPOCH_END)
    if not ce_known:
        ce_total = reducer.epoch_loss_sum()  # the device's running sum: one sync per epoch
        if not np.isfinite(ce_total):
            e = NonFiniteLoss(f"loss is {ce_total} in epoch {epoch + 1}: stopping")
            e.params, e.where = _last_finite(net, s.last_finite, None)
            raise e
    be.sync()  # the epoch's time includes its queued device work
    t_end = time.perf_counter()
    loss = ce_total / N + net.weight_penalty()
    acc = float("nan")
    if world.rank == 0 and s.x_held is not None:
        pred = net.predict(s.x_held)
        acc = float((np.asarray(pred.get() if hasattr(pred, "get") else pred) == s.split.heldout.labels).mean())
    return EpochResult(epoch + 1, loss, acc, t_end - t_epoch, nbatches,
                       t_end - t_steady if t_steady else 0.0, nbatches - warmup if t_steady else 0)


def _last_finite(net, snapshot, now: str | None) -> tuple[dict, str]:
    """(parameters, which they are): the current ones if they are finite and
    `now` names them, else the latest epoch-start copy that was finite."""
    if now is not None:
        params = net.get_params()
        if all(np.isfinite(a).all() for a in params.values()):
            return params, now
    net.p.flat[...] = snapshot[0]
    return net.get_params(), snapshot[1]
