"""The sliced first layer on the GPU with NCCL (the schedule: perfmlp/slices.py), eager and as one
captured step. Batch k's backward writes dW1 in K slices, last rows first; slice 0 is all-reduced with
the rest of the gradients on a communication stream while the other slices' GEMMs run; slices 1..K-1
at the start of batch k + 1 (the head), each slice's update and forward GEMM waiting for its reduction
alone, so every fork joins within one captured step. The first step after a `drain` has no head: its
graph is captured apart (`graph_state`). `--grad-precision bf16|fp16`: each piece is all-reduced in a
16-bit copy on the communication stream; the loss slot stays the rank's own, reduced once an epoch."""
from __future__ import annotations

import numpy as np

from .. import names as N
from ..comm import _nccl_communicator
from ..model.predict.schedule import slice_rows
from ..step import compute as step_compute
from ..trace.records import Phase

COLLECTIVE = "ncclAllReduce"
NCCL_HALF = {N.FP16: 6, N.BF16: 9}   # ncclFloat16, ncclBfloat16 (NCCL >= 2.10)


def half_wire(cupy, net, grad_precision: str):
    """(the 16-bit exchange's buffer, its NCCL type, the cast kernels) or None for the master type's."""
    if grad_precision not in NCCL_HALF:
        return None
    from .kernels import device_dtype, kernels
    mod = kernels(cupy, grad_precision)
    casts = {n: mod.get_function(n) for n in N.EXCHANGE_KERNELS}
    return cupy.zeros(net.g.flat.size, device_dtype(grad_precision)), NCCL_HALF[grad_precision], casts


class GpuSlices:
    """The schedule's state on one rank: `compute` and `exchange` are the step's Parts."""

    name = N.NCCL
    sliced = True

    def __init__(self, cupy, world, net, k: int, overlap: bool = False, grad_precision: str = N.FLOAT32):
        from cupy.cuda import nccl
        self.cp, self.nccl, self.net, self.overlap, self.world = cupy, nccl, net, overlap, world
        self.half = half_wire(cupy, net, grad_precision)
        self._cast_args: dict = {}
        self.rt = cupy.cuda.runtime
        self.comm = _nccl_communicator(nccl, world, cupy.cuda.Device().id)
        self.dtype = nccl.NCCL_FLOAT32 if net.dtype == np.float32 else nccl.NCCL_FLOAT64
        H, D = net.p.layer_sizes[1], net.p.layer_sizes[0]
        self.rows = slice_rows(H, k)[::-1]               # last rows first
        self.w1_size, self.D = H * D, D
        self._slice_at = {r0 * D: s for s, (r0, _) in enumerate(self.rows)}
        self.compute_ptr = net.stream.ptr
        self.comm_stream = cupy.cuda.Stream(non_blocking=True)
        self.comm_ptr = self.comm_stream.ptr
        ev = lambda: cupy.cuda.Event(disable_timing=True)   # noqa: E731
        self.fork, self.written = ev(), [ev() for _ in self.rows]
        self.landed = [ev() for _ in self.rows]
        self.pending = False                                  # slices 1.. unreduced, all K unapplied
        self._sent: list[int] = []
        self._base, self._isz = net.g.flat.data.ptr, net.dtype.itemsize
        if self.half is not None:
            self._base, self._isz, self.dtype = self.half[0].data.ptr, self.half[0].itemsize, self.half[1]
        net.set_first_rows(self.rows)
        net.grad_ready = self._ready
        net.first_forward = self._first_forward
        self._warm()

    def _warm(self) -> None:
        """One allreduce of each size outside any graph (NCCL's first use of a size sets it up)."""
        rest = (self.net.p.n_params if self.half else self.net.g.flat.size) - self.rows[0][0] * self.D
        sizes = {(r1 - r0) * self.D for r0, r1 in self.rows} | {rest}
        scratch = self.cp.zeros(max(sizes), self.half[0].dtype if self.half else self.net.dtype)
        for n in sorted(sizes):
            self.comm.allReduce(scratch.data.ptr, scratch.data.ptr, n, self.dtype, self.nccl.NCCL_SUM,
                                self.compute_ptr)
        self.net.stream.synchronize()

    # -- the two streams ---------------------------------------------------------------
    def _record(self, ev, ptr) -> None:
        self.rt.eventRecord(ev.ptr, ptr)

    def _wait(self, ptr, ev) -> None:
        self.rt.streamWaitEvent(ptr, ev.ptr, 0)

    def _allreduce(self, lo: int, hi: int, counted: bool = True) -> None:
        """In place on the communication stream; `counted`: this batch's (the head's are the last batch's)."""
        if self.half is not None:
            hi = min(hi, self.net.p.n_params)   # the loss slot stays the rank's (module docstring)
            self._cast(N.WIRE_PACK, lo, hi)
        p = self._base + lo * self._isz
        self.comm.allReduce(p, p, hi - lo, self.dtype, self.nccl.NCCL_SUM, self.comm_ptr)
        if self.half is not None:
            self._cast(N.WIRE_UNPACK, lo, hi)
        if counted:
            self._sent.append(hi - lo)

    def _cast(self, name: str, lo: int, hi: int) -> None:
        """Flat elements [lo, hi) into the 16-bit buffer (WIRE_PACK) or back; arguments made once a piece."""
        args = self._cast_args.get((name, lo, hi))
        if args is None:
            grads, words = self.net.g.flat[lo:hi], self.half[0][lo:hi]
            src, dst = (grads, words) if name == N.WIRE_PACK else (words, grads)
            n = hi - lo
            args = self._cast_args[(name, lo, hi)] = (((n + 255) // 256,), (256,), (src, dst, np.int64(n)))
        self.half[2][name](*args, stream=self.comm_stream)

    def _head(self) -> None:
        """The previous batch's slices 1.. reduced on the communication stream."""
        self._record(self.fork, self.compute_ptr)
        self._wait(self.comm_ptr, self.fork)
        for s in range(1, len(self.rows)):
            r0, r1 = self.rows[s]
            self._allreduce(r0 * self.D, r1 * self.D, counted=False)
            self._record(self.landed[s], self.comm_ptr)

    def _apply(self, s: int) -> None:
        """Slice s (not 0: updated with the rest) updated once its reduction has landed."""
        r0, r1 = self.rows[s]
        self._wait(self.compute_ptr, self.landed[s])
        n = (r1 - r0) * self.D
        self.net.sgd_range(r0 * self.D, r1 * self.D, n, with_loss=False)

    def _first_forward(self, x, out):
        net = self.net
        pending = self.pending
        if pending:
            self._head()
        for s, (r0, r1) in enumerate(self.rows):
            if pending and s:
                self._apply(s)
            net.gemm(net.gemm_weight(0)[r0:r1], x, out=out[r0:r1])
        return out

    def _ready(self, lo: int, hi: int) -> None:
        """The backward pass wrote flat elements [lo, hi)."""
        size = self.net.g.flat.size
        if lo >= self.w1_size:            # an upper layer's piece, or the biases with the loss slot
            if self.overlap:
                self._fork_and_reduce(lo, hi)
            return
        s = self._slice_at[lo]
        if s:
            return                        # reduced at the next step's head
        self._fork_and_reduce(lo, hi if self.overlap else size)
        self._record(self.landed[0], self.comm_ptr)

    def _fork_and_reduce(self, lo: int, hi: int) -> None:
        ev = self.written[0]
        self._record(ev, self.compute_ptr)
        self._wait(self.comm_ptr, ev)
        self._allreduce(lo, hi)

    # -- the step's parts ----------------------------------------------------------------
    compute = staticmethod(step_compute)   # the slices hook into the network's own passes

    def exchange(self, net, reducer, phase, counts) -> None:
        with phase(Phase.ALLREDUCE):
            self._wait(self.compute_ptr, self.landed[0])   # the rest (and slice 0) reduced
        with phase(Phase.UPDATE):
            n_params = net.p.n_params
            lo = self.rows[0][0] * self.D   # slice 0 landed with the rest: one kernel updates both
            net._record(("update_weights", (net.p.n_weights - lo,)), ("update_biases", (net.p.n_biases,)))
            for r0, r1 in self.rows[1:]:   # applied in the next step, counted with this one
                net._record(("update_weights", ((r1 - r0) * self.D,)), ("update_biases", (0,)))
            net.sgd_range(lo, n_params, net.p.n_weights - lo, with_loss=True)
        # this batch's gradients: slice 0 with the rest now, the other slices at the next step's head
        for n in self._sent + [(r1 - r0) * self.D for r0, r1 in self.rows[1:]]:
            counts.bytes_nccl += n * self._isz
            counts.collectives.append((COLLECTIVE, n))
        self._sent.clear()
        self.pending = True
        return None

    @property
    def graph_state(self) -> bool:
        """Which captured step the next batch replays: with the head or without."""
        return self.pending

    def replayed(self) -> None:
        self.pending = True

    def drain(self) -> None:
        """Reduce and apply the pending slices, eagerly."""
        if not self.pending:
            return
        self._head()
        for s in range(1, len(self.rows)):
            self._apply(s)
        self._sent.clear()
        self.pending = False

    def host_value(self, flat, index: int):
        return None   # reading it would synchronise the device every batch

    def epoch_loss_sum(self) -> float:
        """The epoch's loss summed over the ranks (16-bit exchange: the ranks' own sums, reduced here)."""
        v = self.net.take_epoch_loss_sum()
        if self.half is None or self.world.size == 1:
            return v
        buf = np.array([v])
        self.world.allreduce_sum(buf)
        return float(buf[0])
