"""The report's first screen (what ran, the headline figures, what bounds
each configuration, what to change first with its predicted and measured
gain) and the full tables after it. `overview_of(a)` computes it all once.
The headline sets PyTorch's step times beside perfmlp's where
benchmarks/graph_step.py measured them (its rows under the traces folder or
a committed set's benchmarks folder beside it).
"""
from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..analyses.accuracy import study_shaped
from ..analysis import Analysis
from ..configurations import (Configuration, configurations, legend, shown_settings, sort_key, split_label,
                              usual)
from ..figures import CATEGORY_COLORS, overview_roofline, time_split
from ..recommend import (CHANGES, GPU_MOVE, SLICES, SLICES_WORDS, Advice, Recommendation, advice, describable,
                         recommendations)
from . import Cell, Figure, Section, Table, pct
from ..thresholds import MAP_COLUMNS, MAP_ROWS, MIN_GAIN, REPEATS_AGREE, TOP_RECOMMENDATIONS, table as thresholds_table
from ..verdicts import CATEGORIES, Verdict, attribute, __doc__ as VERDICTS_DOC
from ... import names as N
from ...safeio import read_json

LETTERS = dict(zip(CATEGORIES, "GEHCMWN"))   # a verdict's letter in the map (its colour in report.html)
CSS = {c: f"v{i}" for i, c in enumerate(CATEGORY_COLORS)}
NARROW_MAP = 8      # shapes: a map this narrow fits the overview's left column
SLICED = SLICES.split(",")[0]   # the sliced schedule's recommendations, whatever their count
SPLIT_FIGURE_MAX = 30   # configurations: beyond this the time-split figure would be taller than a page
PEER_FILE = "graph_step.jsonl"
PEERS = {"pytorch graph": "PyTorch, CUDA graph", "pytorch eager": "PyTorch, eager"}   # on p > 1 with " (DDP)"


@dataclass(frozen=True)
class Peer:
    name: str            # PEERS' words
    hidden: tuple
    batch: int           # all ranks together (the benchmark splits B over p)
    procs: int
    ms: float            # median over the rounds of the wall time per step


def read_peers(folder: Path | None) -> list[Peer]:
    """Every peer row under the traces folder (or its set's benchmarks), merged by (name, H, B, p): median;
    a line that is not a benchmark row is skipped."""
    folders = (folder, folder.parent / "benchmarks") if folder is not None and folder.is_dir() else ()
    rows: dict[tuple, list] = {}
    for f in sorted({f for d in folders for f in d.rglob(PEER_FILE)}):
        try:
            lines = f.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                r = read_json(line)
                name = PEERS.get(str(r["variant"]).removesuffix(" (DDP)"))
                key = (name, tuple(int(h) for h in r["hidden"]), int(r["B"]), int(r["procs"]))
                ms = float(r["median_us"]) / 1e3
            except (ValueError, KeyError, TypeError):
                continue
            if name:
                rows.setdefault(key, []).append(ms)
    return [Peer(*k, statistics.median(v)) for k, v in sorted(rows.items())]


@dataclass(frozen=True)
class Overview:
    configs: tuple          # Configuration, in the report's order
    verdicts: dict          # configuration label -> Verdict
    recs: tuple             # every priced change (Recommendation)
    advice: tuple           # each change recommended somewhere (Advice), most gain first
    peers: tuple            # Peer

    def first(self, c: Configuration) -> Recommendation | None:
        """The configuration's recommended change with the most predicted gain."""
        mine = [r for r in self.recs if r.configuration is c and r.recommended]
        return min(mine, key=lambda r: r.predicted_gain) if mine else None


def overview_of(a: Analysis) -> Overview:
    configs = configurations(a)
    m = a.machines.primary

    def unpriced(gemm) -> bool:   # a GEMM kernel the machine file has no rate for: priced as cuBLAS
        return gemm not in (None, N.CUBLAS) and not m.has_gemm_kernel(gemm)
    verdicts = {c.label: attribute(c.representative, unpriced(c.s["gemm"])) for c in configs}
    by_id = {r.run_id: r for r in a.traces}
    recs = recommendations(configs, by_id, m, a.machines.datasheet, unpriced, a.machines.cpu)
    return Overview(tuple(configs), verdicts, tuple(recs), tuple(advice(recs)), tuple(read_peers(a.folder)))


# ---- words -------------------------------------------------------------------------------

def gain(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.0f}%"


def change_words(rec: Recommendation) -> str:
    """A change with its predicted gain, and its measured one where the set ran it."""
    return f"{rec.change}, predicted {gain(rec.predicted_gain)}" + \
        (f", measured {gain(rec.measured_gain)}" if rec.measured_gain is not None else "")


def what_ran(a: Analysis, o: Overview) -> str:
    """One sentence: runs, configurations, machine, dates and code."""
    ms = [t.manifest for t in a.traces]
    dates = sorted({str(m.start)[:10] for m in ms if m.start})
    recorded = [m.versions.get("perfmlp_git") for m in ms]
    commits = sorted(set(recorded) - {None})
    gpus = sorted({(node["gpu"], int(node.get("gpu_count", 1))) for m in ms
                   for node in ((m.machine or {}).get("nodes") or {}).values() if node.get("gpu")})
    where = ", ".join(f"{n} x {g}" if n > 1 else g for g, n in gpus) or "the CPU (NumPy)"
    if gpus and len(a.gpu_runs) < len(a.runs):
        where += " and the CPU (NumPy)"
    repeated = sum(len(c.runs) > 1 for c in o.configs)
    when = (dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}") if dates else "date not recorded"
    unknown = recorded.count(None)
    code = (f"code {', '.join(c[:7] for c in commits)}" + (f" ({unknown} runs recorded none)" if unknown else "")
            if commits else "code not recorded in the manifests")
    n, note = len(a.runs), legend([c.s for c in o.configs])
    return (f"{n} run{'s' if n != 1 else ''} in {len(o.configs)} configuration{'s' if len(o.configs) != 1 else ''}"
            f"{f' ({repeated} with repeats, merged: the median)' if repeated else ''} on {where}; {when}; {code}. "
            + (note[0].upper() + note[1:] + "." if note else "") + blas_sentence(o) + disagree_sentence(o))


def blas_sentence(o: Overview) -> str:
    """The BLAS library the NumPy runs called and the threads each rank ran, by process count."""
    cpu = [r for c in o.configs if not c.gpu for r in c.runs]
    if not cpu:
        return ""
    libs = ", ".join(sorted({r.blas for r in cpu if r.blas})) or "the library not recorded"
    by_procs: dict[int, set] = {}
    for r in cpu:
        by_procs.setdefault(r.procs, set()).update(r.blas_threads or (None,))
    def words(seen: set) -> str:
        known = sorted(t for t in seen if t is not None)
        return " or ".join(map(str, known)) + (" (some not recorded)" if None in seen else "") if known \
            else "not recorded"
    parts = [f"{words(seen)} with {p} rank{'s' if p > 1 else ''}" for p, seen in sorted(by_procs.items())]
    return f" BLAS threads each NumPy rank ran ({libs}): {'; '.join(parts)}."


def disagree_sentence(o: Overview) -> str:
    """The configurations whose repeats disagree (REPEATS_AGREE), each with its range."""
    shaky = [c for c in o.configs if c.disagree]
    if not shaky:
        return ""
    return (f" Repeats disagree by more than {100 * REPEATS_AGREE.value:.0f}% in {len(shaky)} configuration(s), "
            "whose median and verdict are no firm figure: " + "; ".join(f"{c.label} {c.disagree}" for c in shaky)
            + ".")


def verdict_sentence(a: Analysis, o: Overview) -> str:
    counts = Counter(o.verdicts[c.label].bound_by for c in o.configs if c.judged)
    if not counts:
        return "No configuration ran to completion outside a profiler: no verdict."
    parts = [f"{cat} in {counts[cat]}" for cat in CATEGORIES if counts[cat]]
    pool, ours = headline_pool(a, o)
    fastest = min(pool, key=lambda c: c.t_ms)
    rec = o.first(fastest)
    if rec:
        nxt = f"its first change: {change_words(rec)}"
    elif describable(fastest):
        nxt = f"no change the what-if engine prices saves {100 * MIN_GAIN.value:.0f}% or more of it"
    else:
        nxt = "the what-if engine prices changes of data parallelism only (the strategies are compared below)"
    return (f"Bound by: {'; '.join(parts)} (of {sum(counts.values())} configurations judged). Fastest"
            f"{' at the study' + chr(39) + 's job' if ours else ''}: {fastest.label}, {fastest.t_ms:.3f} ms per "
            f"batch ({o.verdicts[fastest.label].text}); {nxt}.")


# ---- tables ------------------------------------------------------------------------------

def headline_pool(a: Analysis, o: Overview) -> tuple[list, bool]:
    """The configurations the headline compares: the study's job where it ran (True), else every judged one."""
    pool = [c for c in o.configs if study_shaped(a, c)]
    return (pool, True) if pool else ([c for c in o.configs if c.judged], False)


def headline(a: Analysis, o: Overview) -> Table:
    """The fastest configuration per process count: the study's job where it ran, else any."""
    st = a.study
    pool, ours = headline_pool(a, o)
    gpu = any(c.gpu for c in pool)
    rows = []
    for p in sorted({c.s["procs"] for c in pool}):
        best = min((c for c in pool if c.s["procs"] == p), key=lambda c: c.t_ms)
        row = {"GPUs" if gpu else "processes": p, "fastest configuration": Cell(best.label, best.which()),
               "run": best.representative.run_id, "ms per batch": best.t_ms}
        if gpu:
            row["utilisation"] = pct(best.util)
        if ours and p in st.reference_ms_per_batch:
            ref = st.reference_ms_per_batch[p]
            row[f"reference solution ({st.reference_gpu})"] = f"{ref:g} ms, {pct(st.reference_utilisation[p])}"
            # a CPU's time beside a GPU reference's is no speed-up: missing, not "0.0x"
            row["speed-up over it"] = f"{ref / best.t_ms:.3g}x" if best.gpu else None
        r = best.representative
        for p in sorted(o.peers, key=lambda p: p.name):   # the benchmarks' times at its H, B and p
            if (p.hidden, p.batch, p.procs) == (r.hidden, r.batch, r.procs):
                row.setdefault(f"{p.name} (benchmark)", p.ms)
        rows.append(row)
    what = (f"the study's job (H={st.hidden_size}, B={st.batch_size} split over p, {st.precision})" if ours
            else "any configuration (none ran the study's job)")
    return Table("overview_headline", f"Fastest per process count, {what}", rows, hidden=("run",), place="main")


def advice_rows(items: list[Advice], configs: int) -> list[dict]:
    rows = []
    for i, ad in enumerate(items, 1):
        where = (ad.recs[0].configuration.label if len(ad.recs) == 1 and configs == 1
                 else f"{len(ad.recs)} of {ad.applicable} configurations")
        preds = [r.predicted_gain for r in ad.recs]
        spread = f" ({gain(max(preds))} to {gain(min(preds))})" if len(preds) > 1 and max(preds) != min(preds) else ""
        pairs = ad.measured_pairs
        if not pairs:
            measured = "not run"
        elif len(pairs) == len(ad.recs):
            measured = gain(ad.measured) + (f" ({len(pairs)} run)" if len(pairs) > 1 else "")
        else:
            measured = (f"{gain(ad.measured)} in the {len(pairs)} run (predicted {gain(ad.predicted_for_measured)} "
                        "for them)")
        rows.append({"#": i, "change": ad.change, "where it helps": where, "predicted": gain(ad.predicted) + spread,
                     "measured": measured})
    return rows


def verdict_map(o: Overview) -> tuple[Table, Table]:
    """(the colours' legend, the map: settings x shape, each cell a configuration)."""
    settings = [c.s for c in o.configs]
    shown, u = shown_settings(settings), usual(settings)
    labels = [split_label(c.s, shown, u) for c in o.configs]
    cells = dict(zip(labels, o.configs))
    cols, rows = Counter(shape for shape, _ in cells), Counter(how for _, how in cells)
    top = dict(cols.most_common(MAP_COLUMNS.value))
    keep_cols = [shape for shape in cols if shape in top]
    first: dict = {}   # a row's place: its settings' order, then its first configuration's
    for i, (c, (_, how)) in enumerate(zip(o.configs, labels)):
        first.setdefault(how, sort_key({**c.s, "hidden": "0", "batch": 0, "procs": 0})[3:] + (i,))
    keep_rows = sorted(dict(rows.most_common(MAP_ROWS.value)), key=first.get)
    table = [{"settings \\ shape": how,
              **{shape: map_cell(o, cells[shape, how]) if (shape, how) in cells else Cell("") for shape in keep_cols}}
             for how in keep_rows]
    left = len(o.configs) - sum(1 for (shape, how) in cells if shape in keep_cols and how in keep_rows)
    note = f" ({left} configurations not in the map: see the configurations table)" if left else ""
    used = [cat for cat in CATEGORIES if any(o.verdicts[c.label].bound_by == cat for c in o.configs)]
    # a narrow map sits under the headline tables, beside the figure; a wide one below both
    place = "main" if len(keep_cols) <= NARROW_MAP else "wide"
    key = Table("overview_legend", "What bounds each configuration: its ms per batch, coloured and lettered by what "
                "bounds it, and →n: the change above to make first; hover a cell for its verdict and that change's "
                "predicted and measured gain" + note,
                [{LETTERS[cat]: Cell(f"{LETTERS[cat]} {cat}", css=CSS[cat]) for cat in used}], place=place,
                collapse=False, header=False, css="legend")
    return key, Table("overview_map", "", table, place=place, collapse=False, css="map")


def map_cell(o: Overview, c: Configuration) -> Cell:
    v: Verdict = o.verdicts[c.label]
    rec = o.first(c)
    tip = f"{c.label}: {c.t_ms:.3f} ms per batch ({len(c.runs)} run{'s' if len(c.runs) > 1 else ''}); " \
          f"bound by {v.text} ({v.source})"
    if rec:
        tip += f"; first change: {change_words(rec)}"
    if not c.judged:
        tip += "; not judged (incomplete, profiled or timed by the host's enqueue)"
    rank = next((i for i, ad in enumerate(o.advice[:int(TOP_RECOMMENDATIONS.value)], 1)
                 if rec and ad.change == rec.change), None)
    return Cell(f"{c.t_ms:.3g} {LETTERS.get(v.bound_by, '?')}" + (f" →{rank}" if rank else ""), tip,
                CSS.get(v.bound_by, ""))


def overview_figure(a: Analysis, o: Overview) -> Figure:
    """The roofline with every GPU configuration on it; a NumPy-only set: where each one's time goes."""
    gpu = [c for c in o.configs if c.gpu and c.judged]
    if not gpu:
        rows = [(c.label, list(o.verdicts[c.label].parts_ms)) for c in o.configs]
        return Figure("overview_time", "Where each configuration's time per batch goes (measured phases)",
                      time_split, dict(rows=rows, title="Time per batch by part, each configuration"), place="side")
    m = a.machines.primary
    prec = a.study.precision
    points = [{"ai": c.representative.ai, "flops": c.representative.flops_rank0 / (c.t_ms * 1e-3),
               "category": o.verdicts[c.label].bound_by, "transfer": c.s["transfer"]} for c in gpu]
    bws = {N.PAGEABLE: m.h2d_pageable_bytes_per_s, N.PINNED: m.h2d_pinned_bytes_per_s}
    return Figure("overview_roofline", f"Every GPU configuration on the modified roofline ({m.name}, {prec} peak), "
                  "coloured by what bounds it", overview_roofline,
                  dict(points=points, peak=m.peak_flops_per_s(prec), bws=bws,
                       title=f"{len(gpu)} configurations on the modified roofline, {m.name}"), place="side")


def section_overview(a: Analysis, o: Overview) -> Section:
    s = Section("Overview", anchor="overview")
    s.paragraphs += [what_ran(a, o), verdict_sentence(a, o)]
    s.tables.append(headline(a, o))
    top = list(o.advice)[:int(TOP_RECOMMENDATIONS.value)]
    more = len(o.advice) - len(top)
    s.tables.append(Table("overview_changes", f"What to change first: the predicted gain (the what-if engine's; a move "
                          f"to a GPU: the model's), and the measured one where the set ran the change"
                          f"{f' ({more} more below)' if more else ''}",
                          advice_rows(top, len(o.configs)) or [{"change": "none predicted to save "
                                                                f"{100 * MIN_GAIN.value:.0f}% or more"}],
                          place="main", collapse=False))
    s.tables += verdict_map(o)
    s.figures.append(overview_figure(a, o))
    return s


# ---- the full tables ---------------------------------------------------------------------

def configuration_row(o: Overview, c) -> dict:
    v = o.verdicts[c.label]
    rec = o.first(c)
    times = [r.t_ms for r in c.runs]
    row = {"configuration": Cell(c.label, c.which()), "runs": len(c.runs), "ms per batch": c.t_ms,
           "min ms": min(times) if len(times) > 1 else None, "max ms": max(times) if len(times) > 1 else None}
    if c.disagree:
        row["repeats disagree"] = c.disagree
    if c.gpu:
        row.update({"utilisation": pct(c.util), "predicted ms": c.predicted_ms})
    else:
        row["BLAS threads a rank"] = c.blas_threads
    row.update({"bound by": v.text, "split from": v.source})
    row.update({f"{cat} %": 100 * v.share(cat) for cat in CATEGORIES if v.share(cat)})
    row.update({"first change": rec.change if rec else "-", "predicted": gain(rec.predicted_gain) if rec else "-",
                "measured": gain(rec.measured_gain) if rec else "-", "stands for it": c.which(),
                "run ids": " ".join(r.run_id for r in c.runs)})
    return row


def section_configurations(o: Overview) -> Section:
    s = Section("Configurations: what bounds each, and what to change first", anchor="configurations")
    s.paragraphs.append(
        "Each row is a configuration: the runs that share every setting, merged (the time per batch is the median "
        "of the repeats'; min and max beside it; the run that stands for it, the median repeat, is named in the "
        "column 'stands for it' and in the configuration's tooltip). "
        + VERDICTS_DOC.split("\n\n")[1].replace("\n", " ") + " The shares of each part are in the columns "
        "'<part> %'; the first change is the recommendation with the most predicted gain (section Recommendations).")
    rows = [configuration_row(o, c) for c in o.configs]
    s.tables.append(Table("configurations", "Every configuration", rows, hidden=("stands for it", "run ids")))
    if len(o.configs) <= SPLIT_FIGURE_MAX and any(c.gpu for c in o.configs):   # else the overview's figure
        split = [(c.label, list(o.verdicts[c.label].parts_ms)) for c in o.configs]
        s.figures.append(Figure("time_split", "Where each configuration's time per batch goes", time_split,
                                dict(rows=split, title="Time per batch by part, each configuration")))
    return s


def section_recommendations(o: Overview) -> Section:
    s = Section("Recommendations: every change priced", anchor="recommendations")
    gpu, cpu = any(c.gpu for c in o.configs), any(not c.gpu for c in o.configs)
    what = []
    if gpu:
        what.append("for each GPU configuration the what-if engine describes (data parallelism, not under a "
                    "profiler): " + ", ".join(ch.name for ch in CHANGES)
                    + (f", and {SLICES_WORDS}" if any(r.change.startswith(SLICED) for r in o.recs) else ""))
    if cpu:
        what.append(f"for a NumPy configuration: {GPU_MOVE}, the model's time for the same job on the GPU machine "
                    "file, with resident data, NCCL and one CUDA graph per step (nothing of the CPU run carries over)")
    s.paragraphs.append(
        "The changes priced, " + "; ".join(what) + ". Predicted: the time per batch after the change over the "
        "configuration's measured one, less 1" + (" (the what-if engine: what the change does not touch stays "
                                                  "measured, what it touches is the model's)" if gpu else "")
        + ". Measured: the time of the configuration in the set that differs in that setting only, over this one's, "
        f"less 1. A change is recommended where it is predicted to save {100 * MIN_GAIN.value:.0f}% or more "
        "(threshold min_gain below); the overview ranks the recommended changes by their median predicted gain.")
    rows = [{"configuration": r.configuration.label, "change": r.change, "measured ms": r.configuration.t_ms,
             "predicted ms after": r.predicted_ms, "predicted": gain(r.predicted_gain), "recommended": r.recommended,
             "measured after (ms)": r.sibling.t_ms if r.sibling else None, "measured": gain(r.measured_gain),
             "ran as": r.sibling.label if r.sibling else "-", "priced by": r.how}
            for r in sorted(o.recs, key=lambda r: (r.predicted_gain, r.configuration.label))]
    s.tables.append(Table("recommendations", "Every change priced, most predicted gain first", rows))
    s.tables.append(Table("thresholds", "The thresholds (report/thresholds.py)", thresholds_table()))
    return s
