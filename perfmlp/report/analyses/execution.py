"""Execution mode and overlap: runs that differ only in exec mode (eager or
one CUDA graph replay) and in overlap (and its bucket size) grouped as
variants of one configuration, so each change's predicted gain sits beside
its measured gain. A variant's times are the medians over its repeats.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..analysis import Analysis, RunSummary
from ... import names as N

EAGER_TO_GRAPH, TO_OVERLAP = "eager -> graph", "no overlap -> overlap"


@dataclass(frozen=True)
class Variant:
    exec: str
    bucket_bytes: int | None        # None: no overlap
    runs: tuple[RunSummary, ...]    # the repeats

    @property
    def measured_ms(self) -> float:
        return statistics.median(r.t_ms for r in self.runs)

    @property
    def predicted_ms(self) -> float:
        return statistics.median(r.predicted_ms for r in self.runs)

    @property
    def label(self) -> str:
        return self.exec + ("" if self.bucket_bytes is None else f", overlap {bytes_label(self.bucket_bytes)}")


def bytes_label(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def comparable(r: RunSummary) -> bool:
    """Complete GPU runs the model describes, timed on the GPU: no profiler, no cProfile, no host enqueue."""
    return (r.gpu and r.complete and r.predicted is not None and not r.profiled and not r.cprofile
            and not r.host_enqueue)


def configuration(r: RunSummary) -> str:
    """A run's configuration, but for its exec mode, overlap and buckets."""
    return (f"H={r.hidden_label} B={r.batch} p={r.procs} {r.precision} {r.transfer}/{r.comm} {r.gemm}"
            + ("" if r.strategy == N.DATA else f" {r.strategy}"))


def variant_groups(a: Analysis) -> dict[tuple, dict[tuple, Variant]]:
    """Configuration (but for exec, overlap and buckets) -> (exec, bucket bytes or None) -> variant,
    where it has two variants or more."""
    runs: dict[tuple, dict[tuple, list]] = {}
    for r in a.runs:
        if comparable(r):
            key = (r.hidden, r.batch, r.procs, r.precision, r.strategy, r.transfer, r.comm, r.gemm)
            runs.setdefault(key, {}).setdefault((r.exec, r.bucket_bytes if r.overlap else None), []).append(r)
    return {key: {v: Variant(*v, tuple(rs)) for v, rs in by.items()} for key, by in runs.items() if len(by) > 1}


def baseline(variants: dict[tuple, Variant]) -> Variant | None:
    """Eager without overlap where it ran, else the graph without overlap."""
    return variants.get((N.EAGER, None)) or variants.get(("graph", None))


@dataclass(frozen=True)
class Change:
    """One change between two variants of a configuration, the rest held."""
    kind: str                   # EAGER_TO_GRAPH or TO_OVERLAP
    configuration: str
    before: Variant
    after: Variant

    @property
    def measured(self) -> float:
        return self.after.measured_ms / self.before.measured_ms

    @property
    def predicted(self) -> float:
        return self.after.predicted_ms / self.before.predicted_ms

    @property
    def direction_right(self) -> bool:
        """Both ratios on the same side of 1 (both gains, both losses, or both none)."""
        m, p = self.measured, self.predicted
        return (m > 1) == (p > 1) and (m < 1) == (p < 1)


def changes(configuration: str, variants: dict[tuple, Variant]) -> list[Change]:
    """Each graph variant against eager with the same overlap; each overlapped one against no overlap."""
    out = []
    for (ex, bucket), v in variants.items():
        if ex == N.GRAPH and (N.EAGER, bucket) in variants:
            out.append(Change(EAGER_TO_GRAPH, configuration, variants[(N.EAGER, bucket)], v))
        if bucket is not None and (ex, None) in variants:
            out.append(Change(TO_OVERLAP, configuration, variants[(ex, None)], v))
    return out
