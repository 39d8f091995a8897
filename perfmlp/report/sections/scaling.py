"""How the time per batch moves with a setting: scaling over process counts,
execution mode and overlap, each rank's phases, and one batch's phases on
the host clock. Each point and row is a configuration (the median of its
repeats), so the curves compare like with like at each p.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from ..analyses.scaling import (EAGER_TO_GRAPH, STRONG, TO_OVERLAP, WEAK, Change, Variant, baseline, bytes_label,
                                changes, configuration, imbalance, scaling as scaling_table, variant_groups)
from ..analysis import Analysis, error_pct
from ..configurations import Configuration, configurations
from ..figures import host_batch, phases, scaling
from . import Figure, Section, Table
from ... import names as N

PHASE_FIGURE_MODES = ((N.PAGEABLE, N.MPI_STAGED), (N.RESIDENT, N.NCCL), (N.PINNED, N.MPI_STAGED))
FIGURE_CONFIGS = 4          # configurations in the phase figure when the study's modes did not run
HOST_TIMELINES = 2          # runs whose one batch is drawn on the host clock


def mode_label(row: dict) -> str:
    """A scaling row's modes (data parallelism: its strategy goes unsaid)."""
    out = f"{row['transfer']}, {row['comm']}, {row['exec']}"
    return out + ("" if row["trace level"] == N.PHASES_LEVEL else f", trace {row['trace level']}")


def section_scaling(a: Analysis) -> Section:
    st = a.study
    s = Section("Scaling")
    table, fig = [], {}
    for row in scaling_table(a):
        kind = row["scaling"]
        table.append({k: v for k, v in row.items() if k not in ("B", "B/p") or v is not None})   # the kind's B
        if row["gemm"] == N.CUBLAS and row["precision"] == st.precision and row["H"] == str(st.hidden_size):
            label = mode_label(row) + (f", B={row['B']}" if kind == STRONG else "")
            fig.setdefault(kind, {}).setdefault(label, []).append(
                (row["procs"], row["ms per batch"], row["efficiency %"] / 100))
    tg, pmax = st.targets, max(st.procs)
    s.paragraphs.append(f"Strong scaling: B fixed and split over p GPUs, efficiency T1 / (p Tp). Weak scaling: "
                        f"B / p fixed, efficiency T1 / Tp. Each point a configuration (the median of its repeats) "
                        f"against the one-GPU configuration with every other setting equal, execution mode and trace "
                        f"level included; data parallelism only (the strategies section compares the others). "
                        f"Targets ({Path(st.path).name}; NCCL and resident data): weak >= "
                        f"{tg.weak_efficiency_pct:g}% at {pmax} GPUs; strong: {pmax} GPUs at least "
                        f"{tg.strong_speedup:g}x faster than 1.")
    for kind in (k for k in (STRONG, WEAK) if fig.get(k)):
        split = "B split over p" if kind == STRONG else f"B/p = {st.batch_size}"
        s.figures.append(Figure(f"scaling_{kind}", f"{kind.capitalize()} scaling, H={st.hidden_size}, each "
                                "transfer, exchange and execution mode", scaling,
                                dict(groups=fig[kind], ticks=sorted({p for g in fig[kind].values() for p, _, _ in g}),
                                     title=f"{kind.capitalize()} scaling, H={st.hidden_size}, {split}")))
    s.tables.append(Table("scaling", "Scaling per configuration", table, hidden=("run ids",)))
    return s


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


def phase_figure_configs(a: Analysis, configs: list[Configuration]) -> list[Configuration]:
    """The study's modes at its largest p where they ran, else the configurations with the most ranks."""
    st = a.study
    study = [c for c in configs if c.gpu and c.judged and c.s["procs"] == max(st.procs)
             and c.s["hidden"] == str(st.hidden_size) and c.s["batch"] == st.batch_size and c.s["gemm"] == N.CUBLAS
             and c.s["exec"] == N.EAGER and c.s["strategy"] == N.DATA
             and (c.s["transfer"], c.s["comm"]) in PHASE_FIGURE_MODES]
    if study:
        return sorted(study, key=lambda c: PHASE_FIGURE_MODES.index((c.s["transfer"], c.s["comm"])))
    ranked = sorted((c for c in configs if c.judged), key=lambda c: (-c.s["procs"], c.t_ms))
    return ranked[:FIGURE_CONFIGS]


def section_phases(a: Analysis) -> Section:
    s = Section("Phase breakdown per rank")
    configs = configurations(a)
    table = imbalance(a).records()
    chosen = phase_figure_configs(a, configs)
    s.paragraphs.append("Each rank's median phase times in a steady batch, for the run that stands for each "
                        "configuration (the median repeat). A rank that finishes its compute early waits inside the "
                        "allreduce for the others: the spread of the allreduce phase across ranks is that waiting."
                        + ("" if table else " Every run used one process: no imbalance or waiting between ranks."))
    if chosen:
        s.figures.append(Figure("phases_per_rank", "Median phase times per rank, "
                                + "; ".join(c.label for c in chosen), phases,
                                dict(runs_phases=[(c.label, dict(c.representative.phases_ms)) for c in chosen],
                                     title="Median phase times per rank (one steady batch)")))
    if table:
        s.tables.append(Table("imbalance", "Imbalance and waiting across ranks", table, hidden=("run",),
                              tips={"configuration": "run"}))
    return s


def host_tracks(run) -> list[tuple[str, list[tuple[str, float, float]]]]:
    """One steady batch (the middle one) of each rank: (rank, [(phase, start ms, end ms)]), host clock."""
    steady = run.steady_batches()
    if not steady:
        return []
    key = sorted(steady)[len(steady) // 2]
    return [(f"rank {r}", [(p, o, o + d) for p, (o, d) in rec.t_ms.items()])
            for r, rec in sorted(steady[key].items())]


def section_host_timeline(a: Analysis) -> Section | None:
    """One batch of the NumPy configurations (no GPU activity records), phase by phase on the host clock."""
    configs = [c for c in configurations(a) if not c.gpu and c.judged]
    if not configs:
        return None
    by_id = {t.run_id: t for t in a.traces}
    chosen = sorted(configs, key=lambda c: -c.s["procs"])[:HOST_TIMELINES]
    s = Section("One batch on the host clock (NumPy runs)")
    s.paragraphs.append("The middle steady batch of the run that stands for each configuration, each rank's phases "
                        "from that rank's own batch start (host clock): where the time goes inside a batch, and "
                        "which rank waits in the allreduce.")
    for c in chosen:
        run = by_id.get(c.representative.run_id)
        tracks = host_tracks(run) if run else []
        if tracks:
            name = "host_batch_" + "".join(ch if ch.isalnum() else "_" for ch in c.label)[:40]
            s.figures.append(Figure(name, f"One batch of {c.label} ({c.representative.run_id}), host clock",
                                    host_batch, dict(tracks=tracks, title=f"One steady batch, {c.label}")))
    return s
