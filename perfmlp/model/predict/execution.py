"""How a step runs: eager or CUDA graphs (which steps a graph can hold, and
the mode `auto` runs: one rule for the trainer, perfmlp/backend.py, and the
model), and what perfmlp's tracer costs a batch at each trace level."""
from __future__ import annotations

from dataclasses import dataclass

from ... import names as N


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
    if comm != "auto":
        return comm
    return "mpi" if backend == N.NUMPY else N.MPI_STAGED


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
