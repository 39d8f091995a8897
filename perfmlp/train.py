"""The data-parallel training loop.

Batch k is samples [kB, (k+1)B) of the epoch's order (the last may be short, averaged over its own
size). Each rank takes its contiguous piece of every batch, its gradient scaled by 1/B of the whole
batch; the gradient buffer is summed across ranks and every rank applies the same update
(regularisation added there, once), so every rank holds what one process training on the whole batch
would, up to rounding. The step, for every strategy and execution mode: perfmlp/step.py."""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from . import data as data_mod
from . import faults
from . import names as N
from . import params as params_mod
from .backend import build
from .config import Config, check_procs, data_procs
from .errors import PerfmlpError
from .mixed import to_storage
from .mlp import start_params
from .model.costs import piece
from .model.precision import precision as precision_of
from .step import NonFiniteLoss, step  # noqa: F401  (step: the benchmarks call it as perfmlp.train.step)
from .trace.format import Counts, warmup_batches
from .trace.writer import NullTracer
from .watchdog import EPOCH_END, FINISHING, SERVING, NoWatchdog, Watched


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

    def words(self, epochs: int) -> str:
        """The epoch's line on rank 0."""
        return (f"epoch {self.epoch}/{epochs}: loss {self.loss:.4f}, held-out accuracy {self.accuracy:.4f}, "
                f"{self.seconds:.4f} s, {self.ms_per_batch:.4g} ms/batch")


@dataclass
class Result:
    epochs: list[EpochResult] = field(default_factory=list)
    params: dict | None = None
    batches: int = 0
    backend: str = ""


def train(cfg: Config, world, tracer=None, log=print, watchdog=None) -> Result:
    """Train on `world`'s ranks, recording into `tracer`, marking progress for `watchdog` (both optional)."""
    # the sigmoid's exp overflows by design (saturating to 0) and a non-finite loss is caught: no warnings
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        return _train(cfg, world, tracer or NullTracer(), log, watchdog or NoWatchdog())


@dataclass
class _Setup:
    cfg: Config
    be: object          # backend.Backend
    split: object       # data.Split
    x_held: object      # the held-out inputs on the backend, or None
    pieces_of: tuple    # the batch is split over (ranks, this rank's piece)
    straggle: object    # straggler(): the injected delay of a batch (a no-op unless asked)
    last_finite: tuple = ()   # (flat parameters, which they are): the latest finite epoch start


def straggler(cfg: Config, rank: int, size: int):
    """What this rank calls as each batch starts: with `--straggler-delay-ms MS --straggler-rank R`,
    rank R sleeps MS ms before the first phase (in the batch's wall time, in no phase's)."""
    if cfg.straggler_delay_ms and cfg.straggler_rank >= size:
        raise PerfmlpError(f"--straggler-rank {cfg.straggler_rank}: this run has ranks 0..{size - 1}")
    if not cfg.straggler_delay_ms or rank != cfg.straggler_rank:
        return lambda: None
    return partial(time.sleep, cfg.straggler_delay_ms / 1e3)


def _setup(cfg: Config, world, tracer, log) -> _Setup:
    """Data, backend and initial parameters (saved with --save-params)."""
    rank, P = world.rank, world.size
    split = data_mod.load(cfg.data, cfg.data_dir, cfg.n_train, cfg.n_heldout,
                          cfg.input_size, cfg.num_classes, cfg.seed)
    if rank == 0 and not cfg.quiet:
        log(split.note)
    n_train = len(split.train)
    if n_train != cfg.n_train:
        cfg = dataclasses.replace(cfg, n_train=n_train)
        if cfg.batch_size > n_train:
            raise PerfmlpError(f"batch_size ({cfg.batch_size}) is larger than the {n_train} training samples available")
    check_procs(cfg, data_procs(cfg, P))
    # the batch at the precision's storage width (bf16, fp16: 16 bits); held out in the master type
    master = np.dtype(precision_of(cfg.precision).master)
    xtrain, ytrain = (to_storage(a, cfg.precision) for a in data_mod.to_arrays(split.train, cfg.num_classes, master))
    xheld, _ = data_mod.to_arrays(split.heldout, cfg.num_classes, master)
    be = build(cfg, world, xtrain, ytrain)
    tracer.attach(world, be)
    be.net.ops = tracer.ops  # the network records the operations it launches there (None: not at all)
    start_params(be.net, cfg)
    initial = be.net.get_params() if cfg.save_params else None  # every rank: a collective for a shard
    if initial is not None and rank == 0:
        params_mod.save(Path(cfg.save_params) / params_mod.INITIAL, initial)
    x_held = be.xp.asarray(xheld.T) if len(xheld) else None
    return _Setup(cfg, be, split, x_held, be.data_group or (P, rank), straggler(cfg, rank, P))


def _train(cfg: Config, world, tracer, log, watchdog) -> Result:
    s = _setup(cfg, world, tracer, log)
    cfg, be = s.cfg, s.be
    result = Result(backend=be.name)
    if cfg.comm == N.PS_ASYNC:  # the asynchronous parameter server runs a loop of its own
        from .psasync.loop import train_async
        watchdog.mark(SERVING)  # the server marks nothing more; a worker's batches and phases are marked
        heldout = (s.x_held, s.split.heldout.labels)
        watched = Watched(tracer, watchdog)
        watched.phase = faults.per_phase(watched.phase, world.rank, tracer, watched.at)
        train_async(cfg, world, be, watched, log, s.straggle, heldout, result, EpochResult)
    else:
        _epochs(s, world, tracer, log, watchdog, result)
    watchdog.mark(FINISHING)
    faults.hook(world.rank, faults.END, tracer)
    if cfg.save_params and world.rank == 0:   # the final parameters
        params_mod.save(Path(cfg.save_params) / params_mod.FINAL, result.params)
    return result


def _epochs(s: _Setup, world, tracer, log, watchdog, result: Result) -> None:
    cfg, be = s.cfg, s.be
    at = [0]  # the batch the fault hook sees
    phase = faults.per_phase(watchdog.watch(tracer.phase), world.rank, tracer, at)
    warmup = warmup_batches(cfg.batches_per_epoch)  # the steady window starts after these (JIT, allocations, capture)
    for epoch in range(cfg.epochs):
        ep = _epoch(s, world, tracer, watchdog, phase, at, epoch, warmup, result)
        result.epochs.append(ep)
        tracer.end_epoch(epoch=epoch, loss=ep.loss, accuracy=ep.accuracy, seconds=ep.seconds,
                         steady_ms_per_batch=ep.ms_per_batch if ep.steady_batches else None, warmup_batches=warmup)
        if world.rank == 0 and not cfg.quiet:
            log(ep.words(cfg.epochs))
    result.params = be.net.get_params()
    if hasattr(be.batches, "close"):   # the prefetching threads, once the last batch is done
        be.batches.close()


def _epoch(s: _Setup, world, tracer, watchdog, phase, at: list, epoch: int, warmup: int,
           result: Result) -> EpochResult:
    """One pass over the training samples, then the held-out accuracy (rank 0)."""
    cfg, be = s.cfg, s.be
    net, batches, reducer = be.net, be.batches, be.reducer
    n_train, B, nbatches = cfg.n_train, cfg.batch_size, cfg.batches_per_epoch
    if cfg.shuffle:
        batches.reorder(np.random.default_rng(cfg.seed + 1 + epoch).permutation(n_train))
    if epoch == 0 or bool(be.xp.isfinite(net.p.flat).all()):  # one check (a device sync) per epoch
        s.last_finite = (net.p.flat.copy(), f"from the start of epoch {epoch + 1}")
    counts = Counts()
    t_epoch = time.perf_counter()
    t_steady = None
    ce_total, ce_known = 0.0, True
    for k in range(nbatches):
        watchdog.batch(epoch, k)
        at[0] = k
        faults.hook(world.rank, k, tracer)
        start = k * B
        Bk = min(B, n_train - start)
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
    loss = ce_total / n_train + net.weight_penalty()
    acc = net.accuracy(s.x_held, s.split.heldout.labels) if world.rank == 0 and s.x_held is not None else float("nan")
    return EpochResult(epoch + 1, loss, acc, t_end - t_epoch, nbatches,
                       t_end - t_steady if t_steady else 0.0, nbatches - warmup if t_steady else 0)


def _last_finite(net, snapshot, now: str | None) -> tuple[dict, str]:
    """(parameters, which): the current ones if finite and `now` names them, else the last finite epoch start's."""
    if now is not None:
        params = net.get_params()
        if all(np.isfinite(a).all() for a in params.values()):
            return params, now
    net.p.flat[...] = snapshot[0]
    return net.get_params(), snapshot[1]
