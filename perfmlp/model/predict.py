"""Predicted time per batch as a sum of named terms.

Terms (seconds, for the slowest rank, i.e. the one with the largest piece):
- gemm: each GEMM's FLOPs over the machine's rate for its shape (calibrated
  table when the file has one, else the peak);
- elementwise: the other kernels' device-memory bytes over memory bandwidth;
- launches: the host time to launch the step's operations (count times the
  launch overhead) that the GPU work does not hide: the host enqueues kernels
  while earlier ones run, so only max(0, launch time - GPU compute time)
  adds to the batch;
- h2d_batch: X and Y copied (two copies: latency + bytes / bandwidth each),
  zero when the data is resident;
- d2h_grad, h2d_grad: the staged gradient copies (mpi-staged only);
- allreduce: host MPI (alpha-beta, ring: 2(p-1) alpha + 2(p-1)/p n / bw) or
  NCCL (alpha + 2(p-1)/p n / bw); zero on one process;
- tracing (traced runs only): the GPU time of the CUDA events the tracer
  records at every phase boundary (events x trace_event_s).

The total is their sum (copies, communication and compute serialised, as the
trainer runs them); the overlapped lower bound is the max of the compute
(gemm + elementwise + launches) and the copy/communication terms.
"""
from __future__ import annotations

from dataclasses import dataclass

from .costs import batch_counts, itemsize as itemsize_of, op_cost, pieces, step_ops
from .machine import Machine

TERMS = ("gemm", "elementwise", "launches", "h2d_batch", "d2h_grad", "allreduce", "h2d_grad", "tracing")


def traced_phases(comm: str, batch_transfer: str, exec_mode: str = "eager") -> int:
    """CUDA events a traced batch records: one at the end of each phase (the
    batch starts at the previous batch's last event): forward, loss,
    backward, allreduce, update (in graph mode one graph replay in place of
    the first three, and of all five with nccl), and h2d unless the data is
    resident, d2h and h2d_grad with mpi-staged (perfmlp/trace/format.py:
    batch_phases; a test holds the two equal)."""
    if exec_mode == "graph":
        step = 1 if comm == "nccl" else 3
    else:
        step = 5
    return step + (batch_transfer != "resident") + 2 * (comm == "mpi-staged")


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
                  comm: str = "mpi-staged", batch_transfer: str = "pageable", traced: bool = False) -> Prediction:
    """Predicted time per batch. `traced`: the run has perfmlp's tracer on
    (its host time per operation is the machine's traced_launch_overhead_s
    where the file has one)."""
    itemsize = itemsize_of(precision)
    b = max(pieces(batch, procs))
    counts = batch_counts(layer_sizes, b, itemsize, comm, batch_transfer)
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
    per_op = machine.traced_launch_overhead_s if traced and machine.traced_launch_overhead_s else \
        machine.launch_overhead_s
    host_s = n_ops * per_op
    if batch_transfer != "resident":
        mem = "pinned" if batch_transfer == "pinned" else "pageable"
        D, C = layer_sizes[0], layer_sizes[-1]
        terms["h2d_batch"] = machine.copy_s("h2d", mem, itemsize * b * D) + machine.copy_s("h2d", mem, itemsize * b * C)
    g = counts.bytes_mpi or counts.bytes_nccl
    if comm == "mpi-staged":
        mem = staging_memory(batch_transfer)
        terms["d2h_grad"] = machine.copy_s("d2h", mem, g)
        terms["h2d_grad"] = machine.copy_s("h2d", mem, g)
    if comm in ("mpi-staged", "mpi"):
        terms["allreduce"] = ring_allreduce_s(g, procs, machine.mpi_alpha_s, machine.mpi_bw_bytes_per_s)
    elif comm == "nccl":
        terms["allreduce"] = ring_allreduce_s(g, procs, machine.nccl_alpha_s, machine.nccl_bw_bytes_per_s, steps_alpha=False)
    # Without a synchronisation in the step (resident data, NCCL) the host
    # enqueues the next step while the GPU runs this one: the launches hide
    # behind everything the GPU does. Otherwise only behind the compute.
    hidden_by = gemm_s + elem_s
    if batch_transfer == "resident" and comm == "nccl":
        hidden_by += terms["allreduce"]
    terms["launches"] = max(0.0, host_s - hidden_by)
    if traced and machine.trace_event_s and comm != "mpi":
        terms["tracing"] = traced_phases(comm, batch_transfer) * machine.trace_event_s
    total = sum(terms.values())
    compute = terms["gemm"] + terms["elementwise"] + terms["launches"]
    overlapped = max(compute, total - compute)
    job = sum(batch_counts(layer_sizes, p, itemsize, comm, batch_transfer).flops_total
              for p in pieces(batch, procs))
    return Prediction(terms, total, overlapped, counts.flops_total, job, counts.bytes_copied, machine.name)
