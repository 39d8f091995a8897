"""The terms a prediction sums, the trace phase group that measures each, and the Prediction."""
from __future__ import annotations

from dataclasses import dataclass, field
from ... import names as N

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
