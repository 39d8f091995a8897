"""Execution mode and overlap, measured beside predicted (analyses/execution.py
groups the variants and their changes); None when no configuration ran two ways."""
from __future__ import annotations

import statistics

from ..analyses.execution import (EAGER_TO_GRAPH, TO_OVERLAP, Change, Variant, baseline, bytes_label, changes,
                                  configuration, variant_groups)
from ..analysis import Analysis, error_pct
from . import Section, Table
from ... import names as N


def ratio(x: float) -> str:
    return f"{x:.2f}x"


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
