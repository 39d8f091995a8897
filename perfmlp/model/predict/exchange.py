"""The gradient exchange: one allreduce (measured table, else the ring),
the staged scheme's copies, and the overlapped exchange's buckets and
pipeline (the package docstring's Overlap)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import math

from ..costs import LOSS_SLOTS, OUTPUT_GRAD_COLS, as_widths, fused_output, row_blocks, step_kernels
from .compute import kernel_s
from ... import names as N

if TYPE_CHECKING:   # annotations only: the trainer imports these modules, never a machine file
    from ..machine import Machine


def staging_memory(batch_transfer: str) -> str:
    """Host memory the gradients are staged through: pageable with a pageable batch, else pinned."""
    return N.PAGEABLE if batch_transfer == N.PAGEABLE else N.PINNED


def ring_allreduce_s(nbytes: int, procs: int, alpha_s: float, bw_bytes_per_s: float, steps_alpha: bool = True) -> float:
    if procs <= 1:
        return 0.0
    f = 2 * (procs - 1) / procs
    return (2 * (procs - 1) * alpha_s if steps_alpha else alpha_s) + f * nbytes / bw_bytes_per_s


def allreduce_s(machine: Machine, comm: str, nbytes: int, procs: int, memory: str = N.PINNED) -> float:
    """One allreduce: the measured table (scaled by the ring beyond it), else the ring; one rank: 0 unmeasured."""
    if procs < 1 or nbytes <= 0:
        return 0.0
    kind = N.NCCL if comm == N.NCCL else "mpi"
    if procs == 1:
        return _interpolated(machine.allreduce_points(kind, 1, memory), nbytes)
    alpha, bw = (machine.nccl_alpha_s, machine.nccl_bw_bytes_per_s) if kind == N.NCCL else \
        (machine.mpi_alpha_s, machine.mpi_bw_bytes_per_s)
    ring = lambda n: ring_allreduce_s(n, procs, alpha, bw, steps_alpha=kind == N.MPI)  # noqa: E731
    pts = machine.allreduce_points(kind, procs, memory)
    return _interpolated(pts, nbytes, ring) if pts else ring(nbytes)


def _interpolated(pts: list[tuple[int, float]], nbytes: int, scale=lambda n: 1.0) -> float:
    """Seconds at nbytes: log-log between points, beyond them the nearest times
    scale(nbytes) / scale(its bytes); 0 with no point."""
    if not pts:
        return 0.0
    if nbytes <= pts[0][0] or nbytes >= pts[-1][0]:
        n0, s0 = pts[0] if nbytes <= pts[0][0] else pts[-1]
        return s0 * scale(nbytes) / scale(n0)
    (n0, s0), (n1, s1) = next((a, b) for a, b in zip(pts, pts[1:]) if a[0] <= nbytes <= b[0])
    f = math.log(nbytes / n0) / math.log(n1 / n0)
    return math.exp(math.log(s0) + f * (math.log(s1) - math.log(s0)))


def comm_s(machine: Machine, comm: str, nbytes: int, procs: int, batch_transfer: str) -> dict[str, float]:
    """d2h_grad, allreduce and h2d_grad of one gradient buffer (or bucket) of nbytes."""
    out = {N.D2H_GRAD: 0.0, "allreduce": 0.0, N.H2D_GRAD: 0.0}
    mem = staging_memory(batch_transfer) if comm == N.MPI_STAGED else N.PAGEABLE  # mpi: NumPy's own buffers
    if comm == N.MPI_STAGED:
        out[N.D2H_GRAD] = machine.copy_s("d2h", mem, nbytes, sharing=procs)
        out[N.H2D_GRAD] = machine.copy_s("h2d", mem, nbytes, sharing=procs,
                                         buffer="reduced" if procs > 1 else "rotating")
    if comm in (N.MPI_STAGED, N.MPI, N.NCCL):
        out["allreduce"] = allreduce_s(machine, comm, nbytes, procs, mem)
    return out


def gradient_buckets(layer_sizes, itemsize: int, bucket_bytes: int) -> list[int]:
    """Elements of each allreduce the overlapped exchange starts, in order (perfmlp/mlp.py's)."""
    L = len(layer_sizes) - 1
    tail = sum(layer_sizes[1:]) + LOSS_SLOTS
    out = []
    for l in range(L, 0, -1):
        out += [(r1 - r0) * layer_sizes[l - 1] for r0, r1 in row_blocks(layer_sizes[l], layer_sizes[l - 1],
                                                                        itemsize, bucket_bytes)]
        if l == min(2, L):
            out.append(tail)
    return out


def overlap_pipeline(stages: list[tuple[float, float]]) -> tuple[float, float]:
    """(end of compute, end of last communication) of stages of (compute_s, comm_s), one stream each."""
    t_compute = t_comm = 0.0
    for c, m in stages:
        t_compute += c
        t_comm = max(t_comm, t_compute) + m
    return t_compute, max(t_comm, t_compute)


def backward_stages(machine, layer_sizes, b, itemsize, precision, gemm, gap_s, bucket_bytes, bucket_comm,
                    fuse_output=True, output_grad_cols=OUTPUT_GRAD_COLS):
    """(compute, communication) of each piece of the overlapped exchange, in order."""
    L = len(layer_sizes) - 1
    grad_bytes = as_widths(itemsize).param
    kernels = iter(step_kernels(layer_sizes, b, bucket_bytes, itemsize, fuse_output, output_grad_cols)["backward"])
    stages, acc = [], 0.0

    def run(n: int):   # the next n kernels
        nonlocal acc
        for _ in range(n):
            acc += kernel_s(machine, next(kernels), itemsize, precision, gemm) + gap_s

    def send():   # the next bucket, after the kernels run since the last
        nonlocal acc
        stages.append((acc, bucket_comm(grad_bytes * next(buckets))))
        acc = 0.0

    buckets = iter(gradient_buckets(layer_sizes, grad_bytes, bucket_bytes))
    fuse = fuse_output and fused_output(layer_sizes)
    for l in range(L, 0, -1):
        fused = l == L and fuse   # the fused output-layer backward (and its partial sums) writes all its row blocks
        run(2 if fused else 0)
        for _ in row_blocks(layer_sizes[l], layer_sizes[l - 1], grad_bytes, bucket_bytes):
            run(0 if fused else 1)   # a row block of dW
            send()
        if not fused:   # the output layer's bias row sum; dA = W^T delta and the sigmoid gradient (and db below)
            run((l == L) + 2 * (l > 1))
        if l == min(2, L):   # every bias gradient written: the last bucket
            send()
    return stages
