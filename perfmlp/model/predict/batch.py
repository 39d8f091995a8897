"""predict_batch: data parallelism's time per batch, the package's terms
summed (the package docstring says what each term is), and the Prediction."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..costs import DEFAULT_BUCKET_BYTES, OUTPUT_GRAD_COLS, batch_counts, pieces, widths
from .compute import batch_copies, step_compute
from .exchange import backward_stages, comm_s, gradient_buckets, overlap_pipeline, staging_memory
from .schedule import schedule_change
from .timeline import (Step, launch_host_s, resolve_exec, step_items, timeline_batch_s, trace_cost, trace_detail,
                       traced_phases)
from ... import names as N

if TYPE_CHECKING:   # annotations only: the trainer imports this module, never a machine file
    from ..machine import Machine

# Each term and the group of a batch's time (names.GROUPS) that measures it.
TERM_GROUP = {N.H2D_BATCH: N.H2D_BATCH, "gemm": N.COMPUTE, "elementwise": N.COMPUTE, "kernel_gaps": N.COMPUTE,
              "launches": N.COMPUTE, "graph_launch": N.COMPUTE, "tracing": N.COMPUTE, N.D2H_GRAD: N.D2H_GRAD,
              N.ALLREDUCE: N.ALLREDUCE, "rank_wait": N.ALLREDUCE, N.H2D_GRAD: N.H2D_GRAD}
TERMS = tuple(TERM_GROUP)
COMPUTE_TERMS = tuple(t for t in TERMS if TERM_GROUP[t] == N.COMPUTE)


@dataclass(frozen=True)
class Prediction:
    terms: dict            # term -> seconds
    total_s: float         # serialised
    overlapped_s: float    # lower bound with copies overlapped
    flops_per_rank: int
    flops_job: int
    bytes_copied_per_rank: int
    machine: str
    detail: dict = field(default_factory=dict)   # host and GPU time of the step, kernels, buckets, hidden comm

    def groups(self) -> dict[str, float]:
        """The terms summed into the trace's phase groups (seconds)."""
        out = dict.fromkeys(N.GROUPS, 0.0)
        for term, s in self.terms.items():
            out[TERM_GROUP[term]] += s
        return out


# A step is host-paced where the host's time is at least this fraction of it (docs/model.md).
HOST_PACED = 0.25


def predict_batch(machine: Machine, layer_sizes, batch: int, procs: int = 1, precision: str = "float32",
                  comm: str = N.MPI_STAGED, batch_transfer: str = N.PAGEABLE, trace_level: str | None = None,
                  exec_mode: str = N.EAGER, overlap: bool = False, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                  gemm: str = N.CUBLAS, fuse_output: bool = True,
                  output_grad_cols: int = OUTPUT_GRAD_COLS, slices: int = 1,
                  grad_precision: str = N.FLOAT32) -> Prediction:
    """Predicted time per batch (the package docstring's terms). `trace_level` None: untraced;
    `fuse_output=False`: every product a GEMM (the reference's step); `slices`, `grad_precision`:
    the sliced first layer and 16-bit exchange (schedule.py)."""
    exec_mode = resolve_exec(exec_mode, comm=comm)
    if exec_mode not in N.EXECS:
        raise ValueError(f"exec must be one of {', '.join(N.EXECS)}, got {exec_mode!r}")
    isz = widths(precision)   # the batch at isz.act bytes an element, the gradients at isz.param
    b = max(pieces(batch, procs))
    split = bucket_bytes if overlap else None   # overlapped: the weight gradients' GEMMs in row blocks
    counts = batch_counts(layer_sizes, b, isz, comm, batch_transfer, split, exec_mode, fuse_output)
    graph = exec_mode == N.GRAPH
    gap = machine.graph_kernel_gap_s if graph else machine.kernel_gap_s
    terms = dict.fromkeys(TERMS, 0.0)
    terms["gemm"], terms["elementwise"], phase_kernels, n_kernels = step_compute(
        machine, layer_sizes, b, isz, precision, gemm, split, fuse_output, gap, output_grad_cols)
    terms["kernel_gaps"] = n_kernels * gap
    copies, ahead, pipe_s = batch_copies(machine, layer_sizes, b, isz.act, batch_transfer, procs, exec_mode)
    terms[N.H2D_BATCH] = sum(copies)
    # the resident piece into the graph's static inputs: one device copy each of X and Y
    staging = [machine.device_copy_s(isz.act * b * n) for n in (layer_sizes[0], layer_sizes[-1])] \
        if counts.bytes_d2d else []
    terms["elementwise"] += sum(staging)
    detail = {"exec": exec_mode, "batch_transfer": batch_transfer, "kernels": n_kernels, "overlap": bool(overlap)}
    sliced = slices > 1 or grad_precision != N.FLOAT32
    if overlap and not sliced:   # the staged copies ride in the buckets: their exposed part is in allreduce too
        terms["allreduce"], more = _overlapped_exchange(machine, layer_sizes, b, isz, precision, gemm, gap, comm,
                                                        procs, batch_transfer, bucket_bytes, fuse_output,
                                                        output_grad_cols)
        detail.update(more)
    else:
        terms.update(comm_s(machine, comm, counts.bytes_mpi or counts.bytes_nccl, procs, batch_transfer))
    terms["rank_wait"] = _rank_wait(machine, comm, procs, batch_transfer)
    step = _traced_step(machine, layer_sizes, b, procs, comm, batch_transfer, exec_mode, trace_level,
                        phase_kernels, copies + staging, terms)
    detail.update(trace_detail(trace_level))
    timeline = _launch_terms(step, terms, ahead)
    if pipe_s is not None:
        _prefetched(pipe_s, batch_transfer, terms, detail)
    detail.update(host_s=timeline["host_s"], host_paced=timeline["host_s"] >= HOST_PACED * sum(terms.values()),
                  gpu_compute_s=terms["gemm"] + terms["elementwise"] + terms["kernel_gaps"] + terms["tracing"],
                  timeline_s=timeline["timeline_s"], h2d_hidden_s=timeline["h2d_hidden_s"], bytes_d2d=counts.bytes_d2d)
    if sliced:
        change = schedule_change(machine, layer_sizes, b, procs, slices, precision, grad_precision, comm,
                                 batch_transfer, gap, gemm)
        _scheduled(change, slices, grad_precision, terms, detail)
    total, compute = sum(terms.values()), sum(terms[t] for t in COMPUTE_TERMS)
    job = sum(batch_counts(layer_sizes, p, isz, comm, batch_transfer).flops_total for p in pieces(batch, procs))
    return Prediction(terms, total, max(compute, total - compute), counts.flops_total, job, counts.bytes_copied,
                      machine.name, detail)


def _prefetched(pipe_s: float, batch_transfer: str, terms: dict, detail: dict) -> None:
    """h2d_batch of a prefetched step: only what the pipeline takes beyond the rest of the step."""
    if batch_transfer == N.PREFETCH:   # the staged gradients' copy back shares the H2D link with the pipeline
        pipe_s += terms[N.H2D_GRAD]
    rest = sum(terms.values())
    terms[N.H2D_BATCH] = max(0.0, pipe_s - rest)
    detail.update(prefetch_s=pipe_s, prefetch_hidden_s=min(pipe_s, rest))


def _scheduled(change: dict, slices: int, grad_precision: str, terms: dict, detail: dict) -> None:
    """The sliced schedule's change (schedule_change) put into the terms and the detail."""
    terms["gemm"] += change["compute_s"]
    terms["allreduce"] += change["exchange_s"]
    detail.update(slices=slices, grad_precision=grad_precision, schedule=change,
                  chain_today_s=change["chain_today_s"], chain_sliced_s=change["chain_sliced_s"])
    detail["gpu_compute_s"] += change["compute_s"]


def _rank_wait(machine: Machine, comm: str, procs: int, batch_transfer: str) -> float:
    """The calibrated wait for the slowest rank at the collective; none on one process."""
    if procs <= 1 or comm not in (N.MPI_STAGED, N.MPI, N.NCCL):
        return 0.0
    return machine.wait_s(procs, staging_memory(batch_transfer) if comm == N.MPI_STAGED else None)


def _overlapped_exchange(machine: Machine, layer_sizes, b: int, isz, precision: str, gemm: str, gap: float,
                         comm: str, procs: int, batch_transfer: str, bucket_bytes: int,
                         fuse_output: bool, output_grad_cols: int = OUTPUT_GRAD_COLS) -> tuple[float, dict]:
    """(exposed seconds, detail) of the overlapped exchange (the package docstring's Overlap)."""
    buckets = gradient_buckets(layer_sizes, isz.param, bucket_bytes)
    bucket_comm = lambda n: sum(comm_s(machine, comm, n, procs, batch_transfer).values())  # noqa: E731
    stages = backward_stages(machine, layer_sizes, b, isz, precision, gemm, gap, bucket_bytes, bucket_comm,
                             fuse_output, output_grad_cols)
    t_compute, t_end = overlap_pipeline(stages)
    exposed = t_end - t_compute
    total_comm = sum(m for _, m in stages)
    return exposed, {"buckets": len(buckets), "comm_s": total_comm, "hidden_comm_s": total_comm - exposed}


def _traced_step(machine: Machine, layer_sizes, b: int, procs: int, comm: str, batch_transfer: str, exec_mode: str,
                 trace_level: str | None, phase_kernels: dict, copies: list, terms: dict) -> Step:
    """The step as the host issues it, the tracer's cost per recorded phase (sets the tracing term)."""
    cost = trace_cost(trace_level)
    graph = exec_mode == N.GRAPH
    traced = cost is not None and comm != N.MPI
    ev_gpu = machine.trace_event_s if traced and cost.events else 0.0
    ev_host = machine.trace_host_s(procs) if traced else 0.0
    per_kernel = launch_host_s(machine, traced, procs)
    if not graph:   # the eager step's host per operation at this size (calibrated at a tiny one)
        hidden = max(layer_sizes[1:-1], default=layer_sizes[0])
        per_kernel *= machine.launch_factor(hidden, b)
        if batch_transfer == N.PAGEABLE:   # pageable copies evict the host's caches: slower launches
            per_kernel *= machine.pageable_launch(hidden, b)
    terms["tracing"] = (traced_phases(comm, batch_transfer, exec_mode) if traced else 0) * ev_gpu
    return Step(machine, phase_kernels, copies, batch_transfer, comm, terms, graph, per_kernel, ev_gpu, ev_host,
                traced)


def _launch_terms(step: Step, terms: dict, ahead: list) -> dict:
    """Set launches or graph_launch and take off h2d_batch what staged pageable copies hide."""
    items = step_items(step)
    host_s = sum(it.host_s for it in items if not it.host_only)
    sim = timeline_batch_s(items)
    launch_term = "graph_launch" if step.graph else "launches"
    terms[launch_term] = max(0.0, sim - sum(terms.values()))
    hidden = max(0.0, sim - timeline_batch_s(step_items(step, ahead=ahead))) if ahead else 0.0
    off_copies = min(hidden, sum(a for a, blocks, delay in ahead if not blocks or delay is not None))
    terms[N.H2D_BATCH] -= off_copies
    terms[launch_term] = max(0.0, terms[launch_term] - (hidden - off_copies))
    return {"host_s": host_s, "timeline_s": sim - hidden, "h2d_hidden_s": hidden}
