"""Predicted time per batch as a sum of named terms.

Terms (seconds, for the slowest rank, i.e. the one with the largest piece):
- gemm: each GEMM's FLOPs over the machine's rate for its shape (calibrated
  table when the file has one, else the peak);
- elementwise: the other kernels' device-memory bytes over memory bandwidth;
- launches: operations launched times the launch overhead;
- h2d_batch: X and Y copied (two copies: latency + bytes / bandwidth each),
  zero when the data is resident;
- d2h_grad, h2d_grad: the staged gradient copies (mpi-staged only);
- allreduce: host MPI (alpha-beta, ring: 2(p-1) alpha + 2(p-1)/p n / bw) or
  NCCL (alpha + 2(p-1)/p n / bw); zero on one process.

The serialised total is their sum; the overlapped lower bound is the max of
the compute (gemm + elementwise + launches) and the copy/communication terms.
"""
from __future__ import annotations

from dataclasses import dataclass

from .costs import batch_counts, pieces, step_ops, op_cost
from .machine import Machine

TERMS = ("gemm", "elementwise", "launches", "h2d_batch", "d2h_grad", "allreduce", "h2d_grad")


@dataclass(frozen=True)
class Prediction:
    terms: dict            # term -> seconds
    total_s: float         # serialised
    overlapped_s: float    # lower bound with copies overlapped
    flops_per_rank: int
    flops_job: int
    bytes_copied_per_rank: int
    machine: str


def staging_memory(batch_transfer: str) -> str:
    """Host memory the gradients are staged through: pageable for the
    reference scheme, pinned once the batch is pinned or resident."""
    return "pageable" if batch_transfer == "pageable" else "pinned"


def ring_allreduce_s(nbytes: int, procs: int, alpha_s: float, bw_bytes_per_s: float, steps_alpha: bool = True) -> float:
    if procs <= 1:
        return 0.0
    f = 2 * (procs - 1) / procs
    return (2 * (procs - 1) * alpha_s if steps_alpha else alpha_s) + f * nbytes / bw_bytes_per_s


def predict_batch(machine: Machine, layer_sizes, batch: int, procs: int = 1, precision: str = "float32",
                  comm: str = "mpi-staged", batch_transfer: str = "pageable") -> Prediction:
    itemsize = 4 if precision == "float32" else 8
    b = max(pieces(batch, procs))
    counts = batch_counts(layer_sizes, b, itemsize, comm, batch_transfer, procs)
    gemm_s = elem_s = 0.0
    n_ops = 0
    for phase, ops in step_ops(layer_sizes, b).items():
        for name, shape in ops:
            n_ops += 1
            flops, nbytes = op_cost(name, shape, itemsize)
            if name == "gemm":
                gemm_s += flops / machine.gemm_rate(*shape, precision)
            else:
                elem_s += nbytes / machine.mem_bw_bytes_per_s
    terms = dict.fromkeys(TERMS, 0.0)
    terms["gemm"], terms["elementwise"] = gemm_s, elem_s
    terms["launches"] = n_ops * machine.launch_overhead_s
    if batch_transfer != "resident":
        mem = "pinned" if batch_transfer == "pinned" else "pageable"
        bw = machine.copy_bw("h2d", mem)
        terms["h2d_batch"] = 2 * machine.copy_latency_s + (counts.bytes_h2d - (counts.bytes_d2h if comm == "mpi-staged" else 0)) / bw
    g = counts.bytes_mpi or counts.bytes_nccl
    if comm == "mpi-staged":
        mem = staging_memory(batch_transfer)
        terms["d2h_grad"] = machine.copy_latency_s + g / machine.copy_bw("d2h", mem)
        terms["h2d_grad"] = machine.copy_latency_s + g / machine.copy_bw("h2d", mem)
    if comm in ("mpi-staged", "mpi-host"):
        terms["allreduce"] = ring_allreduce_s(g, procs, machine.mpi_alpha_s, machine.mpi_bw_bytes_per_s)
    elif comm == "nccl":
        terms["allreduce"] = ring_allreduce_s(g, procs, machine.nccl_alpha_s, machine.nccl_bw_bytes_per_s, steps_alpha=False)
    total = sum(terms.values())
    compute = terms["gemm"] + terms["elementwise"] + terms["launches"]
    overlapped = max(compute, total - compute)
    job = sum(batch_counts(layer_sizes, p, itemsize, comm, batch_transfer, procs).flops_total
              for p in pieces(batch, procs))
    return Prediction(terms, total, overlapped, counts.flops_total, job, counts.bytes_copied, machine.name)
