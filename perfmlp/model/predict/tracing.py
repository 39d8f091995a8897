"""What perfmlp's tracer costs a batch, per trace level."""
from __future__ import annotations

from dataclasses import dataclass

from .execution import resolve_exec
from ... import names as N

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
