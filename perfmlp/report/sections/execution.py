"""Execution mode and overlap, measured beside predicted.

Runs that differ only in how the step ran (eager, or one CUDA graph
replay) and in whether the gradient allreduce overlapped the backward pass
(and in buckets of what size) are grouped, so the model's predicted gain of
each change sits beside the measured gain, not only each total beside its
measurement. A run's measured and predicted times are those of the section
"Measured against predicted" (RunSummary.t_ms, RunSummary.predicted_ms); a
variant's are the medians over its repeats. None when no group has two
variants.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..analysis import Analysis, RunSummary, error_pct
from . import Section, Table
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


def ratio(x: float) -> str:
    return f"{x:.2f}x"


def comparable(r: RunSummary) -> bool:
    """Complete GPU runs whose time per batch is the GPU's and whose cost the
    model describes: no profiler, no cProfile, not the host's enqueue time."""
    return (r.gpu and r.complete and r.predicted is not None and not r.profiled and not r.cprofile
            and not r.host_enqueue)


def configuration(r: RunSummary) -> str:
    """A run's configuration, but for its exec mode, overlap and buckets."""
    return (f"H={r.hidden_label} B={r.batch} p={r.procs} {r.precision} {r.transfer}/{r.comm} {r.gemm}"
            + ("" if r.strategy == N.DATA else f" {r.strategy}"))


def variant_groups(a: Analysis) -> dict[tuple, dict[tuple, Variant]]:
    """Configuration (everything but exec mode, overlap and bucket size) ->
    (exec, bucket bytes or None) -> variant, for configurations with at
    least two variants."""
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
    """The single changes in a group: each graph variant against the eager
    one with the same overlap, each overlapped variant against its exec mode
    without overlap."""
    out = []
    for (ex, bucket), v in variants.items():
        if ex == N.GRAPH and (N.EAGER, bucket) in variants:
            out.append(Change(EAGER_TO_GRAPH, configuration, variants[(N.EAGER, bucket)], v))
        if bucket is not None and (ex, None) in variants:
            out.append(Change(TO_OVERLAP, configuration, variants[(ex, None)], v))
    return out


def against(v: Variant, base: Variant | None, ms: str) -> str:
    """A variant's time (`ms`: measured_ms or predicted_ms) over the baseline's."""
    if base is None:
        return "-"
    return "baseline" if v is base else ratio(getattr(v, ms) / getattr(base, ms))


def section_execution(a: Analysis) -> Section | None:
    groups = variant_groups(a)
    if not groups:
        return None
    s = Section("Execution mode and overlap: measured beside predicted")
    rows, pairs = [], []
    for _, variants in sorted(groups.items()):
        r = next(iter(variants.values())).runs[0]   # the configuration, as every run of the group has it
        base = baseline(variants)
        order = sorted(variants.values(), key=lambda v: (v is not base, v.exec != N.EAGER, v.bucket_bytes is not None,
                                                         v.bucket_bytes or 0))
        for v in order:
            t = [r.t_ms for r in v.runs]
            rows.append({
                "H": r.hidden_label, "B": r.batch, "p": r.procs, "precision": r.precision, "strategy": r.strategy,
                "transfer": r.transfer, "comm": r.comm, "gemm": r.gemm, "exec": v.exec,
                "overlap": "none" if v.bucket_bytes is None else bytes_label(v.bucket_bytes), "runs": len(t),
                "measured ms (median)": v.measured_ms, "measured min ms": min(t) if len(t) > 1 else None,
                "measured max ms": max(t) if len(t) > 1 else None, "predicted ms": v.predicted_ms,
                "error %": error_pct(v.predicted_ms, v.measured_ms),
                "measured vs baseline": against(v, base, "measured_ms"),
                "predicted vs baseline": against(v, base, "predicted_ms")})
        pairs += changes(configuration(r), variants)
    s.paragraphs.append(
        f"{len(groups)} configuration(s) ran in more than one execution mode, overlap or bucket size (complete GPU "
        "runs, not under a profiler or cProfile, timed on the GPU). A run's measured and predicted time per batch "
        "are those of the section \"Measured against predicted\"; a variant's are the medians over its repeats "
        "(min and max beside the measured one). Each ratio is a variant's time over its configuration's baseline "
        "(eager without overlap where it ran, else the graph without overlap): below 1 is a gain. "
        + " ".join(change_summary(kind, [c for c in pairs if c.kind == kind]) for kind in (EAGER_TO_GRAPH, TO_OVERLAP)))
    s.tables.append(Table("execution_modes", "Each variant of a configuration: measured beside predicted, and "
                          "its change against the configuration's baseline", rows))
    if pairs:
        s.tables.append(Table("execution_changes", "Each single change the paragraph counts: the variant's time "
                              "over the one it changes from", [
                                  {"configuration": c.configuration, "change": c.kind, "from": c.before.label,
                                   "to": c.after.label, "measured": ratio(c.measured),
                                   "predicted": ratio(c.predicted), "direction right": c.direction_right}
                                  for c in pairs]))
    return s


def change_summary(kind: str, pairs: list[Change]) -> str:
    """One sentence on one kind of change."""
    what = {EAGER_TO_GRAPH: "each graph variant against the eager one with the same overlap",
            TO_OVERLAP: "each overlapped variant against the same execution mode without overlap"}[kind]
    if not pairs:
        return f"{kind.capitalize()} ({what}): no such pair ran."
    wrong = [c for c in pairs if not c.direction_right]
    text = (f"{kind.capitalize()} ({what}): {len(pairs)} pair(s) in {len({c.configuration for c in pairs})} "
            f"configuration(s), median ratio {ratio(statistics.median(c.measured for c in pairs))} measured, "
            f"{ratio(statistics.median(c.predicted for c in pairs))} predicted; the model gets the direction right "
            f"in {len(pairs) - len(wrong)} of {len(pairs)}")
    if wrong:
        text += " (wrong: " + "; ".join(f"{c.configuration}, {c.before.label} -> {c.after.label}: "
                                        f"{ratio(c.measured)} measured, {ratio(c.predicted)} predicted"
                                        for c in wrong) + ")"
    return text + "."
