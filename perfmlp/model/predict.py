"""Predicted time per batch as a sum of named terms.

Terms (seconds, for the slowest rank, i.e. the one with the largest piece),
each with the trace phase group that measures it (TERM_GROUP):
- gemm: each GEMM's FLOPs over the machine's GPU-time rate for its shape and
  kernel (calibrated table when the file has one, else the peak);
- elementwise: the other kernels (the trainer's own, costs.OWN_KERNELS):
  each one's measured GPU time at its shape where the machine file's
  kernel_s has that kernel (Machine.kernel_time_s), else its device-memory
  bytes over memory bandwidth; and in graph mode with resident data the
  piece's device-to-device copy into the graph's static inputs (read and
  written: twice its bytes);
- kernel_gaps: the GPU's idle time between consecutive kernels (one per
  kernel: kernel_gap_s launched one by one, graph_kernel_gap_s in a replay);
- launches (eager): the host time to launch the step's kernels (kernels
  times the host's time per launched operation, plus the tracer's host time
  per phase, both as calibrated with p ranks launching at once:
  Machine.launch_s, trace_host_s, the first times the step's own size
  factor, Machine.launch_factor) that the GPU work does not hide: the host
  enqueues kernels while earlier ones run, so only max(0, host time - GPU
  time) adds to the batch;
- graph_launch (graph): the same for one cudaGraphLaunch per graph segment
  (one step; the staged scheme is two segments around the host allreduce)
  and the training loop's own host work between replays
  (graph_loop_host_s, from the calibrated graph_step_host_s), and the GPU's
  own time per replay beyond its kernels (graph_replay_gap_s);
- tracing (traced runs): the GPU time of the tracer's CUDA events (one per
  recorded phase eager, one per segment in graph mode), at the `phases`
  trace level only (TRACE_COSTS below); the tracer's host time per phase,
  at every level, is in launches / graph_launch;
- h2d_batch: X and Y copied (latency + bytes / bandwidth each, at the
  precision's storage width), the node's aggregate bandwidth shared by the
  ranks copying at once; 0 when resident; prefetched (the next batch's copy
  on a copy stream while this one computes) only what the pipeline
  (prefetch_s: the copies, and a pageable source's staging by a host
  thread) takes beyond the rest of the step, which is then
  max(pipeline, the rest) plus the loop's calls that order the two streams;
  a pageable copy less what its staging hides behind the previous batch's
  GPU work (the timeline with it against the one without it): one the
  runtime stages whole (Machine.pageable_ahead: not `blocks`) up to its
  staging time; a larger one, whose call waits once the runtime's staging
  buffers are full, min(ahead_s, max(0, queued - ahead_delay_s)) of the
  work still queued when its call starts (Machine.pageable_ahead_delay;
  a file without that figure: nothing hidden);
- d2h_grad, h2d_grad: the staged gradient copies (mpi-staged only), shared
  the same way;
- allreduce: host MPI or NCCL: interpolated in the machine's measured
  allreduce table for this process count (host MPI's through the staging
  memory the run uses) where it has one, else the ring
  model (MPI 2(p-1) alpha + 2(p-1)/p n / bw, NCCL alpha + 2(p-1)/p n / bw);
  with `overlap`, only the part the backward pass does not hide (below);
- rank_wait: the calibrated wait for the slowest rank at the collective
  (arrival jitter of equal ranks; with the staged exchange, the staged
  step's own where the file has it: its host copies, D2H and MPI vary from
  rank to rank and batch to batch, calibrate.staged_wait; imbalance of
  unequal pieces is already in the slowest rank's own terms); 0 on one
  process.

Overlap (gradient allreduce started per layer as each gradient is written,
the first layer's split into buckets of bucket_bytes) is a two-stage
pipeline on one communication stream: bucket i's communication starts when
its gradient is written and the previous bucket's communication is done,
end_i = max(end_{i-1}, written_i) + comm_i. What adds to the batch is the
exposed remainder end_last - (end of the backward pass); in steady state
each bucket costs max(compute, communication). Not modelled: the slowdown
of compute kernels sharing SMs with the communication kernels.

The total is the sum (copies, communication and compute serialised, as the
trainer runs them); the overlapped lower bound is the max of the compute
terms and the copy/communication terms.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .costs import (DEFAULT_BUCKET_BYTES, LOSS_SLOTS, as_widths, batch_counts, fused_output, widths,
                    kernel_name, kernel_shape, op_cost, pieces, row_blocks, step_kernels)
from .machine import Machine

TERMS = ("h2d_batch", "gemm", "elementwise", "kernel_gaps", "launches", "graph_launch", "tracing",
         "d2h_grad", "allreduce", "rank_wait", "h2d_grad")
# The trace phase group (perfmlp/trace/format.py PHASE_TERMS' values) that
# measures each term: a test holds the groups equal to the trace's.
TERM_GROUP = {"h2d_batch": "h2d_batch", "gemm": "compute", "elementwise": "compute", "kernel_gaps": "compute",
              "launches": "compute", "graph_launch": "compute", "tracing": "compute", "d2h_grad": "d2h_grad",
              "allreduce": "allreduce", "rank_wait": "allreduce", "h2d_grad": "h2d_grad"}
GROUPS = tuple(dict.fromkeys(TERM_GROUP.values()))
EXECS = ("eager", "graph")
COMPUTE_TERMS = tuple(t for t in TERMS if TERM_GROUP[t] == "compute")


def graph_refusal(backend: str, parallel: str = "data", comm: str = "nccl") -> str | None:
    """Why a step cannot run as CUDA graphs (the trainer's one-line error
    for `--exec graph`), or None where it can. A graph needs the GPU, and
    every part of the step that it holds must run without the host:
    partitioned steps (model, hybrid) issue the model group's allreduces
    inside the forward and backward passes, so they need NCCL; data
    parallelism's staged exchange runs eagerly after a replay of forward to
    backward, and the parameter server's with ps-nccl is all NCCL."""
    if backend != "cupy":
        return f"--exec graph needs the cupy backend (this run is on {backend})"
    if parallel != "data" and comm != "nccl":
        return (f"--exec graph with --parallel {parallel} needs --comm nccl (with --comm {comm} the model "
                "group's allreduces need the host inside the step): use --comm nccl or --exec eager")
    return None


def resolve_exec(exec_mode: str | None, backend: str = "cupy", parallel: str = "data", comm: str = "nccl") -> str:
    """The execution mode that runs, for the trainer (perfmlp/backend.py)
    and the model alike: `auto` is CUDA graphs wherever the step can be
    captured (graph_refusal: the cupy backend, and NCCL for a partitioned
    step), else eager. The model describes GPU runs, so `backend` defaults
    to cupy; the comm of host MPI (mpi, ps) is the NumPy backend's."""
    if exec_mode not in (None, "auto"):
        return exec_mode
    if comm in ("mpi", "ps"):
        backend = "numpy"
    return "graph" if graph_refusal(backend, parallel, comm) is None else "eager"


# The tracer's levels (`--trace-level`; perfmlp/trace/format.py TRACE_LEVELS,
# a test holds the names equal), cheapest first, and what each costs a batch
# here. Every level runs the host hooks at each recorded phase:
# trace_phase_host_s of host time a phase (calibrate.py measures it with a
# tracer at the counters level). Only `phases` records CUDA events: one at
# the end of each phase, trace_event_s of GPU time each (the tracing term).
# The CUPTI levels' own cost (activity records; at `kernels` a record of
# every kernel inside a graph too) is not calibrated: they are priced as
# counters, and the prediction says so (detail["trace_uncalibrated"]).
@dataclass(frozen=True)
class TraceCost:
    events: bool              # a CUDA event at the end of each recorded phase
    uncalibrated: str = ""    # what the level costs that no machine file measures


TRACE_COSTS = {
    "counters": TraceCost(events=False),
    "phases": TraceCost(events=True),
    "timeline": TraceCost(events=False, uncalibrated="CUPTI activity records"),
    "kernels": TraceCost(events=False, uncalibrated="CUPTI activity records, every kernel inside CUDA graphs too"),
}
TRACE_LEVELS = tuple(TRACE_COSTS)
UNTRACED = "untraced"  # a run without the tracer, as the CLI's --trace-level and the JSON name it


def trace_cost(trace_level: str | None) -> TraceCost | None:
    """A level's cost rule (None: untraced); a level the model does not
    price is a one-line error."""
    if trace_level is None:
        return None
    if trace_level not in TRACE_COSTS:
        hint = " (resolve auto with perfmlp.trace.format.resolve_trace_level)" if trace_level == "auto" else ""
        raise ValueError(f"trace level must be one of {', '.join(TRACE_LEVELS)} or None (untraced), "
                         f"got {trace_level!r}{hint}")
    return TRACE_COSTS[trace_level]


def trace_words(level: str) -> str:
    """A prediction's trace level (detail["trace_level"]) in a table's header."""
    return level if level == UNTRACED else f"traced at {level}"


def trace_detail(trace_level: str | None) -> dict:
    """What a prediction's detail says of the tracer: its level, and what
    of its cost is not priced (None: all of it is)."""
    cost = trace_cost(trace_level)
    return {"trace_level": trace_level or UNTRACED,
            "trace_uncalibrated": f"{cost.uncalibrated} ({trace_level} level), not calibrated"
            if cost and cost.uncalibrated else None}


def traced_phases(comm: str, batch_transfer: str, exec_mode: str = "eager") -> int:
    """Phases a traced batch records (at the `phases` level a CUDA event at
    the end of each, the batch starting at the previous batch's last event):
    forward, loss, backward, allreduce, update (in graph mode one graph replay in place of
    the first three, and of all five with nccl), and h2d unless the data is
    resident, d2h and h2d_grad with mpi-staged (perfmlp/trace/format.py:
    batch_phases; a test holds the two equal)."""
    if resolve_exec(exec_mode, comm=comm) == "graph":
        step = 1 if comm == "nccl" else 3
    else:
        step = 5
    return step + (batch_transfer != "resident") + 2 * (comm == "mpi-staged")


def launch_host_s(machine: Machine, traced: bool, procs: int = 1) -> float:
    """Host time per kernel launch with `procs` ranks launching at once;
    older machine files (no trace_phase_host_s) priced the tracer's host
    time per kernel instead (traced_launch_overhead_s)."""
    if traced and not machine.trace_phase_host_s and machine.traced_launch_overhead_s:
        return machine.traced_launch_overhead_s
    return machine.launch_s(procs)


def graph_loop_host_s(machine: Machine) -> float:
    """Host time per batch of a graph-mode run beyond its launches: the
    training loop's own work between replays (the tracer's hooks, the batch
    piece's views, the step's Python). graph_step_host_s, the host's time
    per batch of the resident graph step on one rank, less what the
    timeline already gives that step's host (its two copies into the
    static inputs at launch_overhead_s each and the graph launch); 0 in a
    file without it."""
    if not machine.graph_step_host_s:
        return 0.0
    return max(0.0, machine.graph_step_host_s - 2 * machine.launch_overhead_s - machine.graph_launch_s)


def graph_segments(comm: str) -> int:
    """Graphs replayed per step: one (with the staged scheme, forward to
    backward; the exchange and the one update kernel then run eagerly)."""
    return 1


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
        out = dict.fromkeys(GROUPS, 0.0)
        for term, s in self.terms.items():
            out[TERM_GROUP[term]] += s
        return out


# The input pipeline (perfmlp/gpu/prefetch.py): the loop thread's host calls
# per batch that order it (an event recorded and waited on; with a pinned
# source the two copies and their stream's wait and record too; with a
# pageable source the host thread's task handed over and joined instead).
PREFETCH = ("prefetch", "prefetch-pageable")
PREFETCH_CALLS = {"prefetch": 6, "prefetch-pageable": 4}


def prefetch_s(machine: Machine, batch_transfer: str, copies: list[float], nbytes: int) -> float:
    """Per batch, the prefetching pipeline's own time: its copies on the
    copy engine and, from a pageable source, the host thread's staging of
    the piece's nbytes into pinned memory (Machine.stage_bw); each runs
    beside the other and beside the step, so the slowest sets the pace."""
    stage = nbytes / machine.stage_bw() if batch_transfer == "prefetch-pageable" else 0.0
    return max(sum(copies), stage)


def staging_memory(batch_transfer: str) -> str:
    """Host memory the gradients are staged through: pageable for the
    reference scheme, pinned once the batch is pinned or resident."""
    return "pageable" if batch_transfer == "pageable" else "pinned"


def ring_allreduce_s(nbytes: int, procs: int, alpha_s: float, bw_bytes_per_s: float, steps_alpha: bool = True) -> float:
    if procs <= 1:
        return 0.0
    f = 2 * (procs - 1) / procs
    return (2 * (procs - 1) * alpha_s if steps_alpha else alpha_s) + f * nbytes / bw_bytes_per_s


def allreduce_s(machine: Machine, comm: str, nbytes: int, procs: int, memory: str = "pinned") -> float:
    """One allreduce of nbytes over procs ranks: the measured table (log-log
    interpolation between the two nearest sizes; beyond the table, the
    nearest point scaled by the ring model's ratio; host MPI's through
    `memory`, the host buffer's) else the ring model."""
    if procs <= 1 or nbytes <= 0:
        return 0.0
    kind = "nccl" if comm == "nccl" else "mpi"
    alpha, bw = (machine.nccl_alpha_s, machine.nccl_bw_bytes_per_s) if kind == "nccl" else \
        (machine.mpi_alpha_s, machine.mpi_bw_bytes_per_s)
    ring = lambda n: ring_allreduce_s(n, procs, alpha, bw, steps_alpha=kind == "mpi")  # noqa: E731
    pts = machine.allreduce_points(kind, procs, memory)
    if not pts:
        return ring(nbytes)
    if nbytes <= pts[0][0] or nbytes >= pts[-1][0]:
        n0, s0 = pts[0] if nbytes <= pts[0][0] else pts[-1]
        return s0 * ring(nbytes) / ring(n0)
    for (n0, s0), (n1, s1) in zip(pts, pts[1:]):
        if n0 <= nbytes <= n1:
            f = math.log(nbytes / n0) / math.log(n1 / n0)
            return math.exp(math.log(s0) + f * (math.log(s1) - math.log(s0)))
    raise AssertionError("unreachable")


def comm_s(machine: Machine, comm: str, nbytes: int, procs: int, batch_transfer: str) -> dict[str, float]:
    """The communication of one gradient buffer (or bucket) of nbytes:
    d2h_grad, allreduce, h2d_grad (the staged scheme's copies shared by the
    ranks copying at once; the copy back from the host buffer MPI has just
    reduced, which a pageable copy reads from the host's caches)."""
    out = {"d2h_grad": 0.0, "allreduce": 0.0, "h2d_grad": 0.0}
    mem = staging_memory(batch_transfer) if comm == "mpi-staged" else "pageable"  # mpi: NumPy's own buffers
    if comm == "mpi-staged":
        out["d2h_grad"] = machine.copy_s("d2h", mem, nbytes, sharing=procs)
        out["h2d_grad"] = machine.copy_s("h2d", mem, nbytes, sharing=procs,
                                         buffer="reduced" if procs > 1 else "rotating")
    if comm in ("mpi-staged", "mpi", "nccl"):
        out["allreduce"] = allreduce_s(machine, comm, nbytes, procs, mem)
    return out


def gradient_buckets(layer_sizes, itemsize: int, bucket_bytes: int) -> list[int]:
    """Elements of each allreduce the overlapped exchange starts, in order
    (perfmlp/mlp.py Network.backward): every weight gradient from the top
    down in row blocks of at most bucket_bytes (costs.row_blocks), and all
    biases with the loss slot as one piece once the last bias gradient is
    written (before the first layer's weight gradient)."""
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
    """(compute_s, comm_s) per stage, in order: a stage's communication starts
    when its compute is done and the previous communication has finished.
    Returns (end of the compute, end of the last communication)."""
    t_compute = t_comm = 0.0
    for c, m in stages:
        t_compute += c
        t_comm = max(t_comm, t_compute) + m
    return t_compute, max(t_comm, t_compute)


def _kernel_s(machine: Machine, kernel, itemsize: int, precision: str, gemm: str) -> float:
    """GPU time of one kernel: a GEMM's FLOPs over its rate; an own kernel's
    calibrated time (kernel_s) where the machine has one, else its
    operations' bytes over memory bandwidth."""
    name = kernel_name(kernel)
    if name == "gemm":
        (_, shape), = kernel
        return op_cost("gemm", shape, itemsize)[0] / machine.gemm_rate(*shape, precision, kernel=gemm)
    measured = machine.kernel_time_s(name, kernel_shape(kernel), precision)
    if measured is not None:
        return measured
    return sum(op_cost(op, shape, itemsize)[1] for op, shape in kernel) / machine.mem_bw_bytes_per_s


def _backward_stages(machine, layer_sizes, b, itemsize, precision, gemm, gap_s, bucket_bytes, bucket_comm,
                     fuse_output=True):
    """(compute, communication) of each piece of the overlapped exchange: the
    backward kernels (costs.step_kernels with the row-block GEMMs) are cut
    where the trainer starts each piece's allreduce (gradient_buckets).
    itemsize: an int or a precision's Widths (the gradients: its param)."""
    L = len(layer_sizes) - 1
    grad_bytes = as_widths(itemsize).param
    kernels = iter(step_kernels(layer_sizes, b, bucket_bytes, itemsize, fuse_output)["backward"])
    stages, acc = [], 0.0

    def run(n=1):
        nonlocal acc
        for _ in range(n):
            acc += _kernel_s(machine, next(kernels), itemsize, precision, gemm) + gap_s

    pieces_ = iter(gradient_buckets(layer_sizes, grad_bytes, bucket_bytes))
    fuse = fuse_output and fused_output(layer_sizes)
    for l in range(L, 0, -1):
        blocks = row_blocks(layer_sizes[l], layer_sizes[l - 1], grad_bytes, bucket_bytes)
        if l == L and fuse:
            run(2)         # the fused output-layer backward (and its partial sums) writes all its row blocks
        for _ in blocks:
            if not (l == L and fuse):
                run()
            stages.append((acc, bucket_comm(grad_bytes * next(pieces_))))
            acc = 0.0
        if l == L and not fuse:
            run()          # the output layer's bias row sum
        if l > 1 and not (l == L and fuse):
            run(2)         # dA = W^T delta, and the sigmoid gradient with the layer below's bias gradient
        if l == min(2, L):
            stages.append((acc, bucket_comm(grad_bytes * next(pieces_))))
            acc = 0.0
    return stages


@dataclass(frozen=True)
class Item:
    """One thing the host issues in a step, for the host/GPU timeline.
    gpu_s: time on the GPU stream; host_s: host time to issue it (or, for a
    host-only item, the work itself); blocking: the host waits until the
    stream has finished it (a pageable copy, a synchronisation); the
    host part of a `reuses` item waits for the stream to finish that item
    in the batch before."""
    gpu_s: float
    host_s: float
    blocking: bool = False
    host_only: bool = False   # runs on the host after the stream is idle (MPI on host buffers)
    reuses: bool = False      # the host part starts once the stream has done this item of the batch before
                              # (a pageable copy's staging buffer, freed by the copy's DMA)
    hides: tuple | None = None  # (ahead, delay): a blocking copy whose staging hides min(ahead, max(0, w - delay))
                                # of the work w still queued on the stream when its call starts


def timeline_batch_s(items: list[Item], batches: int = 6) -> float:
    """Steady time per batch of a host issuing `items` batch after batch to
    one GPU stream: the stream starts an item when it is issued and the
    previous one is done; the host waits on blocking and host-only items,
    and before a reuses item for the stream to finish that item of the
    batch before; a `hides` item (a blocking pageable copy staged in part
    while the stream still runs) takes min(ahead, max(0, queued - delay))
    off its stream time, queued being the stream's work left when its call
    starts. The difference between the GPU finishing the last two simulated batches."""
    th = tg = 0.0
    ends = []
    done = [0.0] * len(items)   # when the stream finished each item, last batch
    for _ in range(batches):
        for i, it in enumerate(items):
            if it.host_only:
                th = max(th, tg) + it.host_s
                tg = th
                continue
            th = (max(th, done[i]) if it.reuses else th) + it.host_s
            hidden = min(it.hides[0], max(0.0, tg - th - it.hides[1])) if it.hides else 0.0
            tg = done[i] = max(th, tg) + it.gpu_s - hidden
            if it.blocking:
                th = tg
        ends.append(max(tg, th))
    return ends[-1] - ends[-2]


def predict_batch(machine: Machine, layer_sizes, batch: int, procs: int = 1, precision: str = "float32",
                  comm: str = "mpi-staged", batch_transfer: str = "pageable", trace_level: str | None = None,
                  exec_mode: str = "eager", overlap: bool = False, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                  gemm: str = "cublas", fuse_output: bool = True) -> Prediction:
    """Predicted time per batch. `trace_level`: the level perfmlp's tracer
    runs at (TRACE_LEVELS; None: untraced), priced per recorded phase by
    TRACE_COSTS: counters, timeline and kernels the hooks' host time
    (trace_phase_host_s), phases that plus a CUDA event's GPU time
    (trace_event_s, the tracing term); the CUPTI cost of timeline and
    kernels is not calibrated (detail["trace_uncalibrated"] says so);
    `exec_mode`: eager or graph (auto: resolve_exec's); `overlap`: the gradient
    allreduce pipelined with the backward pass; `gemm`: the GEMM kernel;
    `fuse_output=False`: a step without the fused output backward (the
    reference solution's: every product a GEMM).

    launches / graph_launch is what the host/GPU timeline (timeline_batch_s)
    adds to the sum of the other terms: where the step synchronises (a
    pageable copy, the staged gradients) the stream starts empty and waits
    for the host's launches until the host is ahead again; without a
    synchronisation only the host's excess over the GPU time shows."""
    exec_mode = resolve_exec(exec_mode, comm=comm)
    if exec_mode not in EXECS:
        raise ValueError(f"exec must be one of {', '.join(EXECS)}, got {exec_mode!r}")
    cost = trace_cost(trace_level)
    isz = widths(precision)   # the batch at isz.act bytes an element, the gradients at isz.param
    b = max(pieces(batch, procs))
    split = bucket_bytes if overlap else None   # overlapped: the weight gradients' GEMMs in row blocks
    counts = batch_counts(layer_sizes, b, isz, comm, batch_transfer, split, exec_mode, fuse_output)
    graph = exec_mode == "graph"
    gap = machine.graph_kernel_gap_s if graph else machine.kernel_gap_s
    terms = dict.fromkeys(TERMS, 0.0)
    phase_kernels: dict[str, list[float]] = {}
    n_kernels = 0
    for phase, kernels in step_kernels(layer_sizes, b, split, isz, fuse_output).items():
        phase_kernels[phase] = []
        for kernel in kernels:
            n_kernels += 1
            t = _kernel_s(machine, kernel, isz, precision, gemm)
            terms["gemm" if kernel_name(kernel) == "gemm" else "elementwise"] += t
            phase_kernels[phase].append(t + gap)
    terms["kernel_gaps"] = n_kernels * gap
    copies, ahead, pipe_s = [], [], None
    if batch_transfer != "resident":
        mem = "pageable" if batch_transfer == "pageable" else "pinned"
        D, C = layer_sizes[0], layer_sizes[-1]
        copies = [machine.copy_s("h2d", mem, isz.act * b * n, sharing=procs) for n in (D, C)]
        terms["h2d_batch"] = sum(copies)
        if batch_transfer in PREFETCH:   # on a copy stream, beside the step: priced after the timeline
            pipe_s = prefetch_s(machine, batch_transfer, copies, isz.act * b * (D + C))
            copies, terms["h2d_batch"] = [], 0.0
        if mem == "pageable":  # the host's staging of each copy ahead of the stream: (seconds, blocks, delay)
            for n in (D, C):
                a, blocks = machine.pageable_ahead(isz.act * b * n, sharing=procs)
                ahead.append((a, blocks, machine.pageable_ahead_delay(isz.act * b * n, sharing=procs)
                              if blocks else None))
    # the resident piece into the graph's static inputs: one device copy each of X and Y
    D, C = layer_sizes[0], layer_sizes[-1]
    staging = [machine.device_copy_s(isz.act * b * n) for n in (D, C)] if counts.bytes_d2d else []
    terms["elementwise"] += sum(staging)
    g = counts.bytes_mpi or counts.bytes_nccl
    detail = {"exec": exec_mode, "kernels": n_kernels, "overlap": bool(overlap)}
    if overlap:
        buckets = gradient_buckets(layer_sizes, isz.param, bucket_bytes)
        bucket_comm = lambda n: sum(comm_s(machine, comm, n, procs, batch_transfer).values())  # noqa: E731
        stages = _backward_stages(machine, layer_sizes, b, isz, precision, gemm, gap, bucket_bytes, bucket_comm,
                                  fuse_output)
        t_compute, t_end = overlap_pipeline(stages)
        exposed = t_end - t_compute
        total_comm = sum(m for _, m in stages)
        terms["allreduce"] = exposed  # the staged copies ride in the buckets: their exposed part is here too
        detail.update(buckets=len(buckets), comm_s=total_comm, hidden_comm_s=total_comm - exposed)
    else:
        terms.update(comm_s(machine, comm, g, procs, batch_transfer))
    if procs > 1 and comm in ("mpi-staged", "mpi", "nccl"):   # the staged step's own where measured
        terms["rank_wait"] = machine.wait_s(procs, staging_memory(batch_transfer) if comm == "mpi-staged" else None)
    # the tracer at the end of each recorded phase: host time, and a CUDA event's GPU time at `phases`
    # (host MPI, comm mpi, is the NumPy backend's run: no GPU, no tracer cost priced)
    traced = cost is not None and comm != "mpi"
    ev_gpu = machine.trace_event_s if traced and cost.events else 0.0
    ev_host = machine.trace_host_s(procs) if traced else 0.0
    detail.update(trace_detail(trace_level))
    per_kernel = launch_host_s(machine, traced, procs)
    if not graph:   # the eager step's host per operation at this size (calibrated at a tiny one)
        per_kernel *= machine.launch_factor(max(layer_sizes[1:-1], default=layer_sizes[0]), b)
    terms["tracing"] = (traced_phases(comm, batch_transfer, exec_mode) if traced else 0) * ev_gpu
    step = [machine, phase_kernels, copies + staging, batch_transfer, comm, terms, graph, per_kernel, ev_gpu, ev_host,
            traced]
    items = _step_items(*step)
    host_s = sum(it.host_s for it in items if not it.host_only)
    sim = timeline_batch_s(items)
    rest = sum(terms.values())
    launch_term = "graph_launch" if graph else "launches"
    terms[launch_term] = max(0.0, sim - rest)
    # pageable copies staged by the host while the stream still runs the previous batch's work
    # (the timeline with that staging against the one without): what it hides comes off the copies'
    # term, up to what the host stages ahead; the rest is host launch time that no longer waits for a copy
    hidden = max(0.0, sim - timeline_batch_s(_step_items(*step, ahead=ahead))) if ahead else 0.0
    off_copies = min(hidden, sum(a for a, blocks, delay in ahead if not blocks or delay is not None))
    terms["h2d_batch"] -= off_copies
    terms[launch_term] = max(0.0, terms[launch_term] - (hidden - off_copies))
    if pipe_s is not None:   # the prefetched copies show only where they take longer than the rest of the step
        rest = sum(terms.values())
        terms["h2d_batch"] = max(0.0, pipe_s - rest)
        detail.update(prefetch_s=pipe_s, prefetch_hidden_s=min(pipe_s, rest))
    gpu_s = terms["gemm"] + terms["elementwise"] + terms["kernel_gaps"] + terms["tracing"]
    detail.update(host_s=host_s, gpu_compute_s=gpu_s, timeline_s=sim - hidden, h2d_hidden_s=hidden)
    total = sum(terms.values())
    compute = sum(terms[t] for t in COMPUTE_TERMS)
    overlapped = max(compute, total - compute)
    job = sum(batch_counts(layer_sizes, p, isz, comm, batch_transfer).flops_total for p in pieces(batch, procs))
    detail["bytes_d2d"] = counts.bytes_d2d
    return Prediction(terms, total, overlapped, counts.flops_total, job, counts.bytes_copied, machine.name, detail)


def _step_items(machine, phase_kernels, copies, batch_transfer, comm, terms, graph, per_kernel, ev_gpu, ev_host,
                traced, ahead=()) -> list[Item]:
    """One batch as the host issues it: the batch copies, the compute phases'
    kernels (or graph replays), the gradient exchange, the update, and the
    tracer's event at the end of each phase it records. `ahead`: for each
    pageable batch copy, (host seconds staged before it needs the stream,
    whether the call then waits for the copy, and for one that waits the
    queued work its staging does not hide, None where not measured)
    (Machine.pageable_ahead, pageable_ahead_delay); without it a pageable
    copy waits for the stream and blocks the host."""
    items: list[Item] = []
    pageable = batch_transfer == "pageable"

    def event():
        if traced:
            items.append(Item(ev_gpu, ev_host))

    def segment(phases, replay=graph):
        if replay:
            items.append(Item(sum(sum(phase_kernels[p]) for p in phases) + machine.graph_replay_gap_s,
                              machine.graph_launch_s))
            event()
        else:
            for p in phases:
                items.extend(Item(t, per_kernel) for t in phase_kernels[p])
                event()

    # a copy's host call costs about one launch; its latency and transfer are GPU time
    # (resident data in graph mode: the device copies into the graph's inputs, in its phase)
    for i, c in enumerate(copies):
        if i < len(ahead):
            a, blocks, delay = ahead[i]
            if not blocks:     # staged whole: the call returns; only its DMA waits for the stream
                items.append(Item(c - a, per_kernel + a, reuses=True))
            elif delay is not None:   # staged in part while the stream runs, then the call waits for the rest
                items.append(Item(c, per_kernel, blocking=True, hides=(a, delay)))
            else:              # not measured: the whole copy waits for the stream
                items.append(Item(c, per_kernel, blocking=True))
        else:
            items.append(Item(c, per_kernel, blocking=pageable))
    if batch_transfer in PREFETCH:   # the loop thread's calls that order the copy stream and the step
        items.append(Item(0.0, PREFETCH_CALLS[batch_transfer] * per_kernel))
    if batch_transfer != "resident":
        event()
    loop = [Item(0.0, graph_loop_host_s(machine))] if graph else []   # the loop's host work between replays
    if graph and comm != "mpi-staged":  # one replay: the step with its NCCL allreduce inside
        gpu = sum(sum(k) for k in phase_kernels.values()) + terms["allreduce"] + terms["rank_wait"]
        items.append(Item(gpu + machine.graph_replay_gap_s + ev_gpu * traced, machine.graph_launch_s + ev_host * traced))
        return items + loop
    segment(("forward", "loss", "backward"))
    wait = terms["rank_wait"]
    if comm == "mpi-staged":
        staged_pageable = staging_memory(batch_transfer) == "pageable"
        items.append(Item(terms["d2h_grad"], per_kernel, blocking=True))   # then the stream is synchronised
        event()
        items.append(Item(0.0, terms["allreduce"] + wait, host_only=True))
        event()
        items.append(Item(terms["h2d_grad"], per_kernel, blocking=staged_pageable))
        event()
    elif comm == "nccl":
        items.append(Item(terms["allreduce"] + wait, per_kernel))
        event()
    segment(("update",), replay=False)  # one kernel, launched after the exchange in both modes
    return items + loop
