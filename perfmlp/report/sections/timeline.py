"""The sections from what a run recorded beyond its phases: a GPU timeline
per run with activity records (timeline.analyse_timeline's results), and
the files beside the traces: correctness results, cProfile dumps and Nsight
Systems SQLite exports (each section None without such a file)."""
from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

from ...safeio import read_json
from ...trace.clocks import host_phase_spans_s, to_run_s
from ...trace.reader import Run
from ..analysis import Analysis
from . import Figure, Section, Table
from ..figures import encode, lanes, subplots, swatches
from ..timeline import PARTS, Timeline, analyse_timeline, top_functions

CAT_COLORS = {"compute": "tab:blue", "comm": "tab:purple", "copy": "tab:orange", "graph": "tab:cyan"}
PART_COLORS = ("tab:blue", "tab:purple", "tab:orange", "tab:red", "tab:olive", "tab:gray")  # PARTS' order
CORRECTNESS_KEYS = ("procs", "precision", "comm", "H", "B", "batches", "lr", "max_abs", "max_rel", "ranks_identical")


def section_timeline(runs) -> list[Section]:
    """One section per run that has GPU activity records (none without)."""
    timelines = ((run, analyse_timeline(run)) for run in runs)
    return [_section(run, t) for run, t in timelines if t is not None]


def _section(run: Run, t: Timeline) -> Section:
    s = Section(f"GPU timeline: {t.run_id}")
    s.paragraphs += _method(t)
    s.tables.append(Table(f"timeline_{t.run_id}", "Where a batch's GPU time went (median ms per rank)",
                          breakdown_rows(t)))
    if t.collectives:
        s.tables.append(Table(f"collectives_{t.run_id}", f"Each allreduce ({len(t.collectives)} batches): waiting "
                              "for the last rank against the transfer itself", collective_rows(t, sorted(run.ranks))))
    if t.representative is not None:
        epoch, batch = t.representative
        if t.critical_path:
            s.tables.append(Table(f"critical_path_{t.run_id}", f"Critical path of batch {batch} (epoch {epoch}, "
                                  "the median one) and the most removing each segment could gain",
                                  [{"segment": p.segment, "rank": p.rank, "ms": p.ms,
                                    "gain ceiling ms": p.gain_ceiling_ms} for p in t.critical_path]))
        s.figures.append(Figure(f"timeline_{t.run_id}", f"Batch {batch} of epoch {epoch} (the median one): host "
                                "phases and GPU records of every rank on one time axis", draw_batch,
                                {"run_batch": batch_tracks(run, t.representative),
                                 "title": f"{t.run_id}: batch {batch} of epoch {epoch}, every rank"}))
    s.figures.append(Figure(f"breakdown_{t.run_id}", "Where each steady batch's GPU time went, per rank",
                            draw_breakdown, {"per_rank": {r: [b.parts() for b in bds] for r, bds in
                                                          t.per_rank.items()},
                                             "title": f"{t.run_id}: each steady batch's GPU time by part"}))
    s.paragraphs.append(_checks_note(t))
    if t.host_bound:
        s.paragraphs.append(f"The GPU waits for host launches {100 * t.host_launch_share:.0f}% of a batch: "
                            "host-bound. " + ("The top Python functions by own time (cProfile, --cprofile):"
                                              if t.host_functions else
                                              "Run with --cprofile to name the host's functions."))
        if t.host_functions:
            s.tables.append(Table(f"host_{t.run_id}", "Where the host was (cProfile, own time)",
                                  [{"profile": f.profile, "function": f.function, "calls": f.calls, "own s": f.own_s,
                                    "cumulative s": f.cumulative_s} for f in t.host_functions]))
    return s


def _method(t: Timeline) -> list[str]:
    """How the records were taken and read, the clocks' alignment and drift, what was left out."""
    batches = t.medians[0].batches if t.medians else 0
    out = [f"CUPTI activity records ({t.trace_level} level), attributed to batch and phase by the external "
           f"correlation id of the launching call. Medians over {batches} steady batches of interval unions: busy = "
           "compute, then exposed communication (not under compute), then copies under neither; idle = the rest of "
           "the batch's GPU span, named by what the host was doing. Ranks on one time axis to within "
           f"{t.clock_err_us:.1f} us (ping-pong with rank 0 plus CUPTI-to-host bracket)."
           if t.clock_err_us is not None else "No clock line: ranks not aligned."]
    if t.drift_us is not None:
        out.append(f"CUPTI clock against the host clock over the run: drift {t.drift_us:.1f} us.")
    if t.orphans:
        out.append(f"{t.orphans} records were launched outside any batch (held-out evaluation, setup) and are "
                   "left out.")
    return out


def breakdown_rows(t: Timeline) -> list[dict]:
    """Per rank: the window, each part, all communication (median ms) and the exposed share."""
    return [{"rank": m.rank, "batches": m.batches, "window ms": m.median.window,
             **{f"{k} ms": ms for k, ms in m.median.parts().items()}, "comm ms": m.median.comm,
             "exposed comm share": m.exposed_comm_share} for m in t.medians]


def collective_rows(t: Timeline, ranks: list[int]) -> list[dict]:
    """Per rank: how often it arrived last, its median wait for the last rank and transfer after it."""
    lasts = Counter(c.last_rank for c in t.collectives)
    return [{"rank": r, "last to arrive (batches)": lasts[r],
             "median wait for the last rank ms": statistics.median(c.wait_ms[r] for c in t.collectives),
             "median transfer after it ms": statistics.median(c.transfer_ms[r] for c in t.collectives)}
            for r in ranks]


def _checks_note(t: Timeline) -> str:
    checks = t.checks
    bad_bytes = [r for r, c in checks if not c.bytes_ok]
    bad_k = [(r, c.kernel_mismatch) for r, c in checks if c.kernels_ok is False]
    unchecked = sum(1 for _, c in checks if c.kernels_ok is None)
    return (f"Cross-check over {len(checks)} batch records: memcpy bytes equal the counters in "
            f"{len(checks) - len(bad_bytes)}; kernel records match the launches in "
            f"{len(checks) - len(bad_k) - unchecked} (our own kernels exactly, at least one library kernel per "
            "cuBLAS GEMM call and one NCCL kernel per collective)"
            + (f", {unchecked} not checked (batch lines without `gemms`)" if unchecked else "")
            + (f"; first mismatch, rank {bad_k[0][0]}: phase -> (records, expected) {bad_k[0][1]}" if bad_k else "")
            + ".")


# ---- the files beside the traces -----------------------------------------------------------

def section_correctness(folder: Path) -> Section | None:
    files = sorted(folder.rglob("correctness*.jsonl"))
    if not files:
        return None
    rows = []
    for f in files:
        for line in f.read_text().splitlines():
            try:
                r = read_json(line)
            except ValueError:
                continue
            rows.append({k: r.get(k) for k in CORRECTNESS_KEYS})
    s = Section("Correctness: GPU against CPU parameters")
    s.paragraphs.append(
        f"From {', '.join(str(f) for f in files)} (benchmarks/correctness.py): after one epoch on real digits, "
        "the GPU parameters against one NumPy process trained on the same batches; max |difference| over all "
        "parameters, and relative to the largest parameter. Every rank's parameters are compared bit for bit.")
    s.tables.append(Table("correctness", "GPU against CPU after training", rows))
    return s


def section_profiles(a: Analysis) -> Section | None:
    profs = [(r, p) for r in a.runs if r.path for p in sorted(Path(r.path).glob("rank-*.prof"))]
    if not profs:
        return None
    s = Section("Top Python functions (cProfile)")
    for r, p in profs[:4]:
        s.tables.append(Table(f"profile_{r.run_id}_{p.stem}", f"{r.run_id} {p.name}: cumulative time", [
            {"function": f.function, "calls": f.calls, "total s": f.own_s, "cumulative s": f.cumulative_s}
            for f in top_functions(p, column=3)]))
    return s


def section_nsys(a: Analysis) -> Section | None:
    dbs = sorted(a.folder.rglob("*.sqlite")) if a.folder else []
    if not dbs:
        return None
    from ...trace.nsys import cross_check
    s = Section("Nsight Systems cross-check")
    by_id = {r.run_id: r for r in a.traces}
    for db in dbs:
        run = next((by_id[d.name] for d in db.parents if d.name in by_id), None)
        if run is None:
            s.paragraphs.append(f"{db}: no trace of the same run beside it; skipped")
            continue
        try:
            rows, notes = cross_check(db, run)
        except Exception as e:  # a damaged export: say so, report the rest
            s.paragraphs.append(f"{db}: cannot read ({type(e).__name__}: {e})")
            continue
        s.paragraphs.extend(notes)
        s.tables.append(Table(f"nsys_{run.run_id}", f"{db.name} against {run.run_id}", rows))
    return s


# ---- figures -------------------------------------------------------------------------------

def batch_tracks(run: Run, key) -> list[tuple[str, list[tuple[str, str, float, float]]]]:
    """(track, [(label, colour, start ms, end ms)]) of one batch, every rank, from its earliest start."""
    tracks = []
    for r, b in sorted(run.steady_batches()[key].items()):
        clock = run.ranks[r].clock
        if clock is None:
            continue
        host = [(p, "tab:gray", s, e) for p, s, e in host_phase_spans_s(b, clock)]
        gpu = [(g.phase, CAT_COLORS[g.cat], to_run_s(clock, g.start_ns, True),
                to_run_s(clock, g.end_ns, True)) for g in b.gpu or ()]
        tracks += [(f"rank {r} host", host), (f"rank {r} GPU", gpu)]
    t0 = min((s for _, items in tracks for _, _, s, _ in items), default=0.0)
    return [(lab, [(n, c, (s - t0) * 1e3, (e - t0) * 1e3) for n, c, s, e in items]) for lab, items in tracks]


def draw_batch(run_batch, title: str = ""):
    fig, ax = subplots(figsize=(10, 0.45 * len(run_batch) + 1.2))
    for i, (_, items) in enumerate(run_batch):
        for name, colour, s, e in items:
            ax.barh(i, max(e - s, 1e-4), left=s, color=colour, edgecolor="black", linewidth=0.3, height=0.7)
            if e - s > 0.02 * max((x[3] for _, it in run_batch for x in it), default=1.0):
                ax.text((s + e) / 2, i, name, ha="center", va="center", fontsize=6)
    lanes(ax, [lab for lab, _ in run_batch], "ms from the batch's first start (run time axis)", title)
    swatches(ax, {**CAT_COLORS, "host phase": "tab:gray"}, ncol=5)
    return encode(fig)


def draw_breakdown(per_rank, title: str = ""):
    """per_rank: rank -> each steady batch's PARTS -> ms, stacked; every rank on one y scale."""
    fig, axes = subplots(len(per_rank), 1, figsize=(9, 2.2 * len(per_rank) + 1.0), squeeze=False)
    top = max((sum(b[p] for p in PARTS) for bds in per_rank.values() for b in bds), default=1.0) or 1.0
    for ax, (r, bds) in zip(axes[:, 0], sorted(per_rank.items())):
        x = range(len(bds))
        bottom = [0.0] * len(bds)
        for part, c in zip(PARTS, PART_COLORS):
            v = [b[part] for b in bds]
            ax.bar(x, v, bottom=bottom, color=c, width=1.0, label=part)
            bottom = [a + b for a, b in zip(bottom, v)]
        ax.set_ylabel(f"rank {r}: ms", fontsize=8)
        ax.set_ylim(0, top * 1.08)
    axes[-1, 0].set_xlabel("steady batch")
    axes[0, 0].set_title(title, fontsize=10)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, ncol=len(labels), loc="lower center", frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return encode(fig)
