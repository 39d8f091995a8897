"""What perfmlp's tracer costs a batch, per trace level."""
from __future__ import annotations

from dataclasses import dataclass

from .execution import resolve_exec

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


# The level the trainer's `--trace-level auto` runs at, per execution mode
# (perfmlp/trace/format.py DEFAULT_TRACE_LEVEL; a test holds the two equal).
DEFAULT_TRACE_LEVEL = {"graph": "counters", "eager": "counters"}


def default_trace_level(exec_mode: str) -> str:
    """The level `--trace-level auto` runs at in an execution mode."""
    return DEFAULT_TRACE_LEVEL.get(exec_mode, DEFAULT_TRACE_LEVEL["eager"])


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
