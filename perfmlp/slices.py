"""The sliced first layer and the 16-bit gradient exchange on NumPy and MPI (the GPU's form:
perfmlp/gpu/sliced.py; `check` refuses what is not built).

`--slices K`: dW1 is computed in K slices of hidden units (last rows first), each reduced
(MPI_Iallreduce) as its GEMM writes it; the first written goes with the rest of the buffer and is
waited for by the exchange, the others stay in flight into the next batch, whose first-layer forward
waits for slice s, updates rows s of W1 and computes Z1[s] (`drain`, the backend's sync, lands the rest
before anything reads the parameters). Rows h of dW1 need only rows h of dZ1, so the parameters are the
unsliced step's up to summation order. With fp16's loss scaling the update waits for every slice.

`--grad-precision bf16 | fp16`: gradients rounded to 16 bits, summed by an MPI operation adding in
float32 (as NCCL's ring does hop by hop), widened for the update. The loss slot travels as the rank's
mean (a sum could pass fp16's range) and only says it is finite; the epoch's exact sum is reduced at
its end."""
from __future__ import annotations

import dataclasses

import numpy as np

from . import names as N
from .errors import PerfmlpError
from .mixed import ml_dtypes, narrow
from .model.precision import precision as precision_of
from .model.predict.schedule import slice_rows
from .model.predict.slices import choose_slices
from .step import NonFiniteLoss, Parts
from .step import compute as step_compute
from .trace.records import Phase

ISEND = "MPI_Iallreduce"
_OPS: dict = {}   # 16-bit type -> its MPI sum (created once per process)


def half_dtype(grad_precision: str) -> np.dtype | None:
    """The NumPy type gradients are reduced in, None for the master type's."""
    if grad_precision == N.FP16:
        return np.dtype(np.float16)
    if grad_precision == N.BF16:
        if ml_dtypes is None:
            raise PerfmlpError("--grad-precision bf16 on NumPy needs ml_dtypes (pip install ml_dtypes)")
        return np.dtype(ml_dtypes.bfloat16)
    return None


def _half_sum(world, dtype: np.dtype):
    """An MPI operation on 16-bit words: a + b in float32, rounded back to `dtype`."""
    if dtype not in _OPS:
        def add(inbuf, inoutbuf, datatype):
            a, b = np.frombuffer(inbuf, dtype), np.frombuffer(inoutbuf, dtype)
            b[...] = narrow(a.astype(np.float32) + b.astype(np.float32), dtype)
        _OPS[dtype] = world.MPI.Op.Create(add, commute=True)
    return _OPS[dtype]


class SlicedExchange:
    """One rank's schedule: `compute` and `exchange` the step's Parts, `reduce`, `host_value` and
    `epoch_loss_sum` the reducer's interface, `drain` the backend's sync."""

    name = N.MPI
    sliced = True

    def __init__(self, world, net, k: int, grad_precision: str = N.FLOAT32, overlap: bool = False):
        H, D = net.p.layer_sizes[1], net.p.layer_sizes[0]
        self.D = D                                          # W1's columns: row r is flat elements [r D, (r+1) D)
        if not 1 <= k <= H:
            raise PerfmlpError(f"--slices {k}: the first layer has {H} hidden units; give 1 to {H}")
        self.world, self.net, self.overlap = world, net, overlap
        self.mpi = world.library != "none"
        self.half = half_dtype(grad_precision)
        self.rows = slice_rows(H, k)[::-1]                  # last rows first
        self.w1_size = H * D
        self._slice_at = {r0 * D: s for s, (r0, _) in enumerate(self.rows)}
        self.pipelined = k > 1 and net.scaler is None
        self.wire = None if self.half is None else np.zeros(net.g.flat.size, self.half)
        self._inflight: dict = {}   # a slice's index, or ("piece", lo) -> (request, lo, hi) while in flight
        self._pending: list[int] = []                       # slices reduced but not yet applied to W1
        self._sent: list[tuple[str, int, int]] = []         # (collective, elements, bytes) of this batch
        self._ce = 0.0                                      # the rank's exact loss sum this epoch (16-bit)
        net.set_first_rows(self.rows)
        net.grad_ready = self._ready
        net.first_forward = self._first_forward if self.pipelined else None

    # -- the backward pass hands over each written piece ---------------------------
    def _ready(self, lo: int, hi: int) -> None:
        if lo >= self.w1_size:        # an upper layer's piece, or the biases with the loss slot
            if self.overlap:          # --overlap: each reduced as written, on its own
                self._start(("piece", lo), lo, hi)
            return
        s = self._slice_at[lo]
        if s == 0 and not self.overlap:
            hi = self.net.g.flat.size   # the first slice with the rest of the buffer
        self._start(s, lo, hi)

    def _start(self, key, lo: int, hi: int) -> None:
        """Start the reduction of flat elements [lo, hi) (`key`: a slice's index, or a piece's)."""
        g = self.net.g.flat
        if self.half is None:
            buf, nbytes = g[lo:hi], (hi - lo) * g.itemsize
            req = self.world.iallreduce_sum(buf) if self.mpi else None
        else:
            if hi == g.size:   # the loss slot as the rank's mean (the module docstring)
                self._ce += float(g[-1])
                g[-1] = g[-1] / self.net.global_batch
            self.wire[lo:hi] = narrow(g[lo:hi], self.half)
            buf, nbytes = self.wire[lo:hi], (hi - lo) * self.half.itemsize
            req = self._start_half(buf) if self.mpi else None
        self._sent.append((ISEND, hi - lo, nbytes))
        self._inflight[key] = (req, lo, hi)

    def _start_half(self, buf):
        MPI = self.world.MPI
        return self.world.comm.Iallreduce(MPI.IN_PLACE, [buf.view(np.uint16), MPI.UINT16_T],
                                          op=_half_sum(self.world, self.half))

    def _land(self, key) -> None:
        """Wait for one piece's reduction and widen it into the gradient buffer."""
        req, lo, hi = self._inflight.pop(key)
        if req is not None:
            req.Wait()
        if self.half is not None:
            self.net.g.flat[lo:hi] = self.wire[lo:hi].astype(self.net.dtype)

    # -- the step's parts --------------------------------------------------------------
    # the network's own passes: its forward waits for each slice of the previous batch as it needs
    # it, its backward starts each slice's reduction as it is written
    compute = staticmethod(step_compute)

    def exchange(self, net, reducer, phase, counts) -> float | None:
        with phase(Phase.ALLREDUCE):
            self.reduce(net.g.flat, phase, counts)
        ce = float(net.g.flat[-1])
        if not np.isfinite(ce):
            raise NonFiniteLoss(ce)      # before the update: the parameters are still the last finite ones
        with phase(Phase.UPDATE):
            if self.pipelined:   # the rest and slice 0 now; the other slices in the next forward, counted here
                lo = self.rows[0][0] * self.D
                net._record(("update_weights", (net.p.n_weights - lo,)), ("update_biases", (net.p.n_biases,)))
                for r0, r1 in self.rows[1:]:
                    net._record(("update_weights", ((r1 - r0) * self.D,)), ("update_biases", (0,)))
                net.sgd_weights(lo, net.p.n_weights)
                net.sgd_biases()
            else:
                net.update()
        return ce if self.half is None else None

    def reduce(self, flat, phase, counts) -> None:
        """Land the rest's reduction (and, not pipelined, every slice's); count what was sent."""
        for key in [k for k in self._inflight if k == 0 or not isinstance(k, int) or not self.pipelined]:
            self._land(key)
        self._pending = list(range(1, len(self.rows))) if self.pipelined else []
        if self.mpi:
            for name, n, nbytes in self._sent:
                counts.bytes_mpi += nbytes
                counts.collectives.append((name, n))
        self._sent.clear()

    def _first_forward(self, x, out):
        """Z1 = W1 X slice by slice, each slice's rows updated as its reduction lands."""
        net = self.net
        z = out if out is not None else np.empty((net.p.layer_sizes[1], x.shape[1]), net.act_dtype)
        for s, (r0, r1) in enumerate(self.rows):
            self._apply(s, r0 * self.D, r1 * self.D)
            net.gemm(net.gemm_weight(0)[r0:r1], x, out=z[r0:r1])
        return z

    def _apply(self, s: int, lo: int, hi: int) -> None:
        if s not in self._pending:
            return
        if s in self._inflight:
            self._land(s)
        self.net.sgd_weights(lo, hi)
        self._pending.remove(s)

    def drain(self) -> None:
        """Land and apply every slice still in flight (W1 as the unsliced step leaves it)."""
        for s in list(self._pending):
            r0, r1 = self.rows[s]
            self._apply(s, r0 * self.D, r1 * self.D)

    def host_value(self, flat, index: int) -> float | None:
        return float(flat[index]) if self.half is None else None

    def epoch_loss_sum(self) -> float:
        """The epoch's exact loss sum over the ranks (16-bit: reduced here, once)."""
        buf = np.array([self._ce])
        self._ce = 0.0
        if self.mpi:
            self.world.allreduce_sum(buf)
        return float(buf[0])


def resolve(cfg, procs: int, backend: str = N.NUMPY, exec_mode: str = N.EAGER, gpu: str | None = None) -> int:
    """--slices as a count: auto is the model's choice on the machine file of `gpu` (its device name),
    else the default file; 1 where that file has no ceiling for the precision."""
    if cfg.slices != N.AUTO:
        return int(cfg.slices)
    from types import SimpleNamespace
    from .model.machine import MachineError
    from .model.machine.choose import pick_machines
    machine = pick_machines([SimpleNamespace(gpu=gpu)], None).primary
    try:
        return choose_slices(machine, cfg.layer_sizes, cfg.batch_size, procs, cfg.precision, cfg.grad_precision,
                             N.NCCL if backend == N.CUPY else N.MPI, cfg.batch_transfer, exec_mode)
    except MachineError:
        return 1


def check(cfg, backend: str, partitioned: bool) -> None:
    """Refuse, in one line, what the schedule and the 16-bit exchange do not run."""
    asked = [f for f, on in (("--slices", cfg.slices != "1"),
                             ("--grad-precision", cfg.grad_precision != N.FLOAT32)) if on]
    if not asked:
        return
    what = " and ".join(asked)
    if partitioned:
        raise PerfmlpError(f"{what}: data parallelism with an allreduce only (this run: --parallel {cfg.parallel}, "
                           f"--comm {cfg.comm})")
    if backend == N.NUMPY:
        return
    if cfg.comm != N.NCCL:
        raise PerfmlpError(f"{what} on the GPU needs --comm nccl (this run's exchange, {N.MPI_STAGED}, needs "
                           f"the host between a slice's GEMM and its reduction)")
    if cfg.precision == N.FP16:
        raise PerfmlpError(f"{what} with --precision fp16 is not built on the GPU (the loss scale's finite check "
                           "needs every gradient before any update)")
    if cfg.grad_precision != N.FLOAT32 and precision_of(cfg.precision).master != N.FLOAT32:
        raise PerfmlpError(f"--grad-precision {cfg.grad_precision} on the GPU rounds float32 gradients (this run: "
                           f"--precision {cfg.precision}); use --precision float32, tf32 or bf16")


def wire(cfg, world, be):
    """`be` (backend.build's) with the sliced schedule or the 16-bit exchange where asked (idempotent)."""
    if getattr(be.reducer, "sliced", False):
        return be
    gpu = None
    if be.name == N.CUPY:
        gpu = be.xp.cuda.runtime.getDeviceProperties(be.xp.cuda.Device().id)["name"].decode()
    k = resolve(cfg, world.size, be.name, be.exec, gpu)
    if k == 1 and cfg.grad_precision == N.FLOAT32:
        return be
    if cfg.overlap:
        be.net.set_buckets(cfg.bucket_bytes)
    if be.name == N.NUMPY:
        sched = SlicedExchange(world, be.net, k, cfg.grad_precision, cfg.overlap)
        return dataclasses.replace(be, reducer=sched, parts=Parts(sched.compute, sched.exchange), sync=sched.drain)
    from .gpu.sliced import GpuSlices
    sched = GpuSlices(be.xp, world, be.net, k, cfg.overlap, cfg.grad_precision)
    parts = Parts(sched.compute, sched.exchange)
    graph = be.graph
    if graph is not None:
        from .gpu.graph import GraphStep
        graph = GraphStep(be.xp, be.net, be.batches, sched, be.stream, parts)

    def sync():
        sched.drain()
        be.sync()
    return dataclasses.replace(be, reducer=sched, parts=parts, sync=sync, graph=graph)
