"""How a step runs: eager or CUDA graphs (which steps a graph can hold, and
the mode `auto` runs: one rule for the trainer, perfmlp/backend.py, and the
model), what perfmlp's tracer costs a batch at each trace level, and the host
issuing a batch to one GPU stream, simulated: what its launches,
synchronisations and pageable copies add to the GPU's work."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass

from .compute import PREFETCH_CALLS
from .exchange import staging_memory
from ... import names as N

if TYPE_CHECKING:   # annotations only: the trainer imports these modules, never a machine file
    from ..machine import Machine


def graph_refusal(backend: str, parallel: str = "data", comm: str = N.NCCL) -> str | None:
    """Why a step cannot run as CUDA graphs (the trainer's error for `--exec graph`), or None."""
    if backend != N.CUPY:
        return f"--exec graph needs the cupy backend (this run is on {backend})"
    if parallel != N.DATA and comm != N.NCCL:
        return (f"--exec graph with --parallel {parallel} needs --comm nccl (with --comm {comm} the model "
                "group's allreduces need the host inside the step): use --comm nccl or --exec eager")
    return None


def resolve_comm(comm: str, backend: str) -> str:
    """The exchange that runs: `auto` is mpi-staged on the GPU (cupy), mpi on NumPy."""
    return comm if comm != "auto" else ("mpi" if backend == N.NUMPY else N.MPI_STAGED)


def resolve_exec(exec_mode: str | None, backend: str = "cupy", parallel: str = "data", comm: str = N.NCCL) -> str:
    """The execution mode that runs: `auto` is graph wherever graph_refusal allows, else eager."""
    if exec_mode not in (None, "auto"):
        return exec_mode
    if comm in (N.MPI, N.PS):
        backend = "numpy"
    return "graph" if graph_refusal(backend, parallel, comm) is None else N.EAGER


# What each tracer level costs a batch: every level runs the host hooks at each recorded phase; only
# `phases` records a CUDA event (the tracing term). The CUPTI levels' own cost is not calibrated.
@dataclass(frozen=True)
class TraceCost:
    events: bool              # a CUDA event at the end of each recorded phase
    uncalibrated: str = ""    # what the level costs that no machine file measures


TRACE_COSTS = {
    N.COUNTERS: TraceCost(events=False),
    N.PHASES_LEVEL: TraceCost(events=True),
    N.TIMELINE: TraceCost(events=False, uncalibrated="CUPTI activity records"),
    N.KERNELS: TraceCost(events=False, uncalibrated="CUPTI activity records, every kernel inside CUDA graphs too"),
}


def default_trace_level(exec_mode: str) -> str:
    """The level `--trace-level auto` runs at in an execution mode."""
    return N.DEFAULT_TRACE_LEVEL.get(exec_mode, N.DEFAULT_TRACE_LEVEL[N.EAGER])


def trace_cost(trace_level: str | None) -> TraceCost | None:
    """A level's cost rule (None: untraced); an unknown level is an error."""
    if trace_level is None:
        return None
    if trace_level not in TRACE_COSTS:
        hint = " (resolve auto with perfmlp.trace.format.resolve_trace_level)" if trace_level == N.AUTO else ""
        raise ValueError(f"trace level must be one of {', '.join(N.TRACE_LEVELS)} or None (untraced), "
                         f"got {trace_level!r}{hint}")
    return TRACE_COSTS[trace_level]


def trace_words(level: str) -> str:
    """A prediction's trace level (detail["trace_level"]) in a table's header."""
    return level if level == N.UNTRACED else f"traced at {level}"


def trace_detail(trace_level: str | None) -> dict:
    """A prediction's detail on the tracer: its level, and what of its cost is not priced."""
    cost = trace_cost(trace_level)
    return {"trace_level": trace_level or N.UNTRACED,
            "trace_uncalibrated": f"{cost.uncalibrated} ({trace_level} level), not calibrated"
            if cost and cost.uncalibrated else None}


def traced_phases(comm: str, batch_transfer: str, exec_mode: str = N.EAGER) -> int:
    """Phases a traced batch of data parallelism records (names.batch_phases)."""
    return len(N.batch_phases(comm, batch_transfer, resolve_exec(exec_mode, comm=comm)))


def launch_host_s(machine: Machine, traced: bool, procs: int = 1) -> float:
    """Host time per kernel launch with `procs` ranks launching at once."""
    if traced and not machine.trace_phase_host_s and machine.traced_launch_overhead_s:
        return machine.traced_launch_overhead_s
    return machine.launch_s(procs)


def graph_loop_host_s(machine: Machine) -> float:
    """Host time per batch of a graph-mode loop beyond its two static copies and launch (0 without it)."""
    if not machine.graph_step_host_s:
        return 0.0
    copy = machine.static_copy_host_s or machine.launch_overhead_s
    return max(0.0, machine.graph_step_host_s - 2 * copy - machine.graph_launch_s)


def copy_call_host_s(machine: Machine, batch_transfer: str, per_kernel: float) -> float:
    """Host time of one batch copy's call: as calibrated, else a launch's."""
    if batch_transfer == N.RESIDENT:
        return machine.static_copy_host_s or per_kernel
    if batch_transfer == N.PINNED:
        return machine.pinned_copy_host_s or per_kernel
    if any(p.direction == N.HOST_TO_DEVICE and p.memory == N.PAGEABLE for p in machine.host_copy_s):
        return 0.0
    return per_kernel


@dataclass(frozen=True)
class Item:
    """One thing the host issues: GPU stream time, host time, and whether the host then waits."""
    gpu_s: float
    host_s: float
    blocking: bool = False
    host_only: bool = False   # runs on the host after the stream is idle (MPI on host buffers)
    reuses: bool = False      # the host part starts once the stream has done this item of the batch before
                              # (a pageable copy's staging buffer, freed by the copy's DMA)
    hides: tuple | None = None  # (ahead, delay): a blocking copy whose staging hides min(ahead, max(0, w - delay))
                                # of the work w still queued on the stream when its call starts


def timeline_batch_s(items: list[Item], batches: int = 6) -> float:
    """Steady time per batch of a host issuing `items` to one stream (docs/model.md, the timeline)."""
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


@dataclass(frozen=True)
class Step:
    """One batch's work as the host issues it."""
    machine: Machine
    phase_kernels: dict        # phase -> GPU seconds of each kernel, its gap included
    copies: list               # GPU seconds of each batch copy (or the resident piece's into a graph's inputs)
    batch_transfer: str
    comm: str
    terms: dict                # the prediction's terms so far (the exchange's are read)
    graph: bool                # replayed as a CUDA graph
    per_kernel: float          # host seconds per launched operation
    ev_gpu: float              # GPU seconds of the tracer's event per recorded phase
    ev_host: float             # host seconds of the tracer per recorded phase
    traced: bool


def step_items(step: Step, ahead=()) -> list[Item]:
    """One batch as the host issues it (`ahead`: each pageable copy's staging, else it blocks the host)."""
    m, terms = step.machine, step.terms
    event = [Item(step.ev_gpu, step.ev_host)] if step.traced else []
    items = _copy_items(step, ahead)
    if step.batch_transfer in N.PREFETCH_TRANSFERS:   # the loop thread's calls that order the copy stream and the step
        items.append(Item(0.0, prefetch_calls_s(m, step)))
    if step.batch_transfer != N.RESIDENT:
        items += event
    loop = [Item(0.0, graph_loop_host_s(m))] if step.graph else []   # the loop's host work between replays
    if step.graph and step.comm != N.MPI_STAGED:  # one replay: the step with its NCCL allreduce inside
        gpu = sum(sum(k) for k in step.phase_kernels.values()) + terms["allreduce"] + terms["rank_wait"]
        items.append(Item(gpu + m.graph_replay_gap_s + step.ev_gpu * step.traced,
                          m.graph_launch_s + step.ev_host * step.traced))
        return items + loop
    items += _segment(step, ("forward", "loss", "backward"), step.graph, event)
    wait, per_kernel = terms["rank_wait"], step.per_kernel
    if step.comm == N.MPI_STAGED:
        staged_pageable = staging_memory(step.batch_transfer) == N.PAGEABLE
        items += [Item(terms[N.D2H_GRAD], per_kernel, blocking=True), *event]   # then the stream is synchronised
        items += [Item(0.0, terms["allreduce"] + wait, host_only=True), *event]
        items += [Item(terms[N.H2D_GRAD], per_kernel, blocking=staged_pageable), *event]
    elif step.comm == N.NCCL:
        items += [Item(terms["allreduce"] + wait, per_kernel), *event]
    items += _segment(step, ("update",), False, event)  # one kernel, launched after the exchange in both modes
    return items + loop


def prefetch_calls_s(m: Machine, step: Step) -> float:
    """Host time per batch of the loop's calls ordering the input pipeline: as calibrated, else launches."""
    measured = m.prefetch_host_s("graph" if step.graph else N.EAGER)
    calls = PREFETCH_CALLS[step.batch_transfer]
    if measured is None:
        return step.per_kernel * calls
    if step.graph:
        measured += 2 * m.static_copy_host_s
    return measured * calls / PREFETCH_CALLS[N.PREFETCH]


def _segment(step: Step, phases, replay: bool, event: list) -> list[Item]:
    """Compute phases as one graph replay or kernel by kernel, a tracer event after each."""
    if replay:
        gpu = sum(sum(step.phase_kernels[p]) for p in phases) + step.machine.graph_replay_gap_s
        return [Item(gpu, step.machine.graph_launch_s), *event]
    out = []
    for p in phases:
        out += [Item(t, step.per_kernel) for t in step.phase_kernels[p]] + event
    return out


def _copy_items(step: Step, ahead) -> list[Item]:
    """The batch copies: the host's call, then latency and transfer on the GPU."""
    items = []
    call = copy_call_host_s(step.machine, step.batch_transfer, step.per_kernel)
    for i, c in enumerate(step.copies):
        if i < len(ahead):
            a, blocks, delay = ahead[i]
            if not blocks:     # staged whole: the call returns; only its DMA waits for the stream
                items.append(Item(c - a, call + a, reuses=True))
            elif delay is not None:   # staged in part while the stream runs, then the call waits for the rest
                items.append(Item(c, call, blocking=True, hides=(a, delay)))
            else:              # not measured: the whole copy waits for the stream
                items.append(Item(c, call, blocking=True))
        else:
            items.append(Item(c, call, blocking=step.batch_transfer == N.PAGEABLE))
    return items
