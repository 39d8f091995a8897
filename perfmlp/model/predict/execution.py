"""How a step runs: eager or CUDA graphs (which steps a graph can hold, and
the mode `auto` runs: one rule for the trainer, perfmlp/backend.py, and the
model), and what perfmlp's tracer costs a batch at each trace level."""
from __future__ import annotations

from dataclasses import dataclass

from ... import names as N


def graph_refusal(backend: str, parallel: str = "data", comm: str = N.NCCL) -> str | None:
    """Why a step cannot run as CUDA graphs (the trainer's one-line error
    for `--exec graph`), or None where it can. A graph needs the GPU, and
    every part of the step that it holds must run without the host:
    partitioned steps (model, hybrid) issue the model group's allreduces
    inside the forward and backward passes, so they need NCCL; data
    parallelism's staged exchange runs eagerly after a replay of forward to
    backward, and the parameter server's with ps-nccl is all NCCL."""
    if backend != N.CUPY:
        return f"--exec graph needs the cupy backend (this run is on {backend})"
    if parallel != N.DATA and comm != N.NCCL:
        return (f"--exec graph with --parallel {parallel} needs --comm nccl (with --comm {comm} the model "
                "group's allreduces need the host inside the step): use --comm nccl or --exec eager")
    return None


def resolve_comm(comm: str, backend: str) -> str:
    """The exchange that runs, for the trainer and a prediction made before
    a run alike: `auto` is mpi-staged on the GPU (cupy), mpi on NumPy."""
    if comm != "auto":
        return comm
    return "mpi" if backend == N.NUMPY else N.MPI_STAGED


def resolve_exec(exec_mode: str | None, backend: str = "cupy", parallel: str = "data", comm: str = N.NCCL) -> str:
    """The execution mode that runs, for the trainer (perfmlp/backend.py)
    and the model alike: `auto` is CUDA graphs wherever the step can be
    captured (graph_refusal: the cupy backend, and NCCL for a partitioned
    step), else eager. The model describes GPU runs, so `backend` defaults
    to cupy; the comm of host MPI (mpi, ps) is the NumPy backend's."""
    if exec_mode not in (None, "auto"):
        return exec_mode
    if comm in (N.MPI, N.PS):
        backend = "numpy"
    return "graph" if graph_refusal(backend, parallel, comm) is None else N.EAGER


# What each tracer level (names.TRACE_LEVELS) costs a batch. Every level runs
# the host hooks at each recorded phase (trace_phase_host_s, measured by
# calibrate/host.py); only `phases` records a CUDA event at the end of each
# (trace_event_s of GPU time: the tracing term). The CUPTI levels' own cost is
# not calibrated: priced as counters, and detail["trace_uncalibrated"] says so.
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
    """A level's cost rule (None: untraced); a level the model does not
    price is a one-line error."""
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
    """What a prediction's detail says of the tracer: its level, and what
    of its cost is not priced (None: all of it is)."""
    cost = trace_cost(trace_level)
    return {"trace_level": trace_level or N.UNTRACED,
            "trace_uncalibrated": f"{cost.uncalibrated} ({trace_level} level), not calibrated"
            if cost and cost.uncalibrated else None}


def traced_phases(comm: str, batch_transfer: str, exec_mode: str = N.EAGER) -> int:
    """Phases a traced batch of data parallelism records (at the `phases`
    level a CUDA event at the end of each): names.batch_phases in the
    execution mode that runs."""
    return len(N.batch_phases(comm, batch_transfer, resolve_exec(exec_mode, comm=comm)))
