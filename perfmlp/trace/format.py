"""The trace format: the only contract between a run and its report.

A run writes `<trace-dir>/<run-id>/manifest.json` (rank 0; rewritten at the
end with the status) and `rank-<r>.jsonl` per rank: a header line, one line
per batch (flushed as written, so a killed run keeps every finished batch),
one line per epoch and an end line. `docs/trace-format.md` describes every
field; this module names them, and the writer and the reader both use it.
"""
from __future__ import annotations

SCHEMA = "perfmlp.trace/1"
MANIFEST = "manifest.json"

# The phases of a batch, in the order a batch goes through them, each with
# the model's term it measures (perfmlp/model/predict.py: TERMS; "compute"
# is the model's gemm + elementwise + launches).
PHASE_TERMS = {
    "h2d": "h2d_batch",        # the batch piece copied to the device (not with resident data)
    "forward": "compute",
    "loss": "compute",
    "backward": "compute",
    "d2h": "d2h_grad",         # the gradient buffer staged to the host (mpi-staged)
    "allreduce": "allreduce",
    "h2d_grad": "h2d_grad",    # the reduced gradients copied back (mpi-staged)
    "update": "compute",
    # the partitioning strategies' exchanges (perfmlp/partition.py), after the others so the
    # phases above keep their order (and the report's colours)
    "combine": "allreduce",    # model parallelism: the output's partial sums, allreduced over the model group
    "reduce": "allreduce",     # the parameter server: gradients reduced to rank 0
    "bcast": "allreduce",      # the parameter server: parameters broadcast from rank 0
}
PHASES = tuple(PHASE_TERMS)
NVTX_RANGES = (*PHASES, "batch", "epoch")  # every NVTX range a run opens (domain "perfmlp")

# Keys every batch line has (the writer writes more: docs/trace-format.md).
BATCH_KEYS = ("epoch", "batch", "samples", "local_samples", "t_ms", "flops", "bytes_h2d", "bytes_d2h",
              "bytes_mpi", "bytes_nccl")


def batch_phases(comm: str, batch_transfer: str) -> tuple[str, ...]:
    """The phases one batch records for a communication and transfer mode."""
    skip = {"combine", "reduce", "bcast"}  # the partitioning strategies' (perfmlp/model/partition.py: step_phases)
    if batch_transfer == "resident":
        skip.add("h2d")
    if comm != "mpi-staged":
        skip |= {"d2h", "h2d_grad"}
    return tuple(p for p in PHASES if p not in skip)


def rank_file(rank: int) -> str:
    return f"rank-{rank}.jsonl"


class Counts:
    """The byte and collective counters of one batch line, filled where the
    copies and collectives are issued (the batch source and the reducer) and
    handed to the tracer by the training loop."""

    __slots__ = ("bytes_h2d", "bytes_d2h", "bytes_mpi", "bytes_nccl", "collectives")

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.bytes_h2d = self.bytes_d2h = self.bytes_mpi = self.bytes_nccl = 0
        self.collectives: list[tuple[str, int]] = []
