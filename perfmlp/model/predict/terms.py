"""The terms a prediction sums, the trace phase group that measures each,
and the Prediction itself."""
from __future__ import annotations

from dataclasses import dataclass, field

TERMS = ("h2d_batch", "gemm", "elementwise", "kernel_gaps", "launches", "graph_launch", "tracing",
         "d2h_grad", "allreduce", "rank_wait", "h2d_grad")
# The trace phase group (perfmlp/trace/format.py PHASE_TERMS' values) that
# measures each term: a test holds the groups equal to the trace's.
TERM_GROUP = {"h2d_batch": "h2d_batch", "gemm": "compute", "elementwise": "compute", "kernel_gaps": "compute",
              "launches": "compute", "graph_launch": "compute", "tracing": "compute", "d2h_grad": "d2h_grad",
              "allreduce": "allreduce", "rank_wait": "allreduce", "h2d_grad": "h2d_grad"}
GROUPS = tuple(dict.fromkeys(TERM_GROUP.values()))
COMPUTE_TERMS = tuple(t for t in TERMS if TERM_GROUP[t] == "compute")


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
