"""The overview's full tables, after it: every configuration with what
bounds it and its first change, every change priced, and the thresholds
the verdicts and recommendations use (report/thresholds.py)."""
from __future__ import annotations

from ..figures import time_split
from .overview import Overview, gain
from ..recommend import CHANGES, GPU_MOVE, SLICES, SLICES_WORDS
from . import Cell, Figure, Section, Table, pct
from ..thresholds import MIN_GAIN, table as thresholds_table
from ..verdicts import CATEGORIES, __doc__ as VERDICTS_DOC

SLICED = SLICES.split(",")[0]   # the sliced schedule's recommendations, whatever their count
SPLIT_FIGURE_MAX = 30   # configurations: beyond this the time-split figure would be taller than a page


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
    rows = []
    for r in sorted(o.recs, key=lambda r: (r.predicted_gain, r.configuration.label)):
        rows.append({"configuration": r.configuration.label, "change": r.change,
                     "measured ms": r.configuration.t_ms, "predicted ms after": r.predicted_ms,
                     "predicted": gain(r.predicted_gain), "recommended": r.recommended,
                     "measured after (ms)": r.sibling.t_ms if r.sibling else None,
                     "measured": gain(r.measured_gain), "ran as": r.sibling.label if r.sibling else "-",
                     "priced by": r.how})
    s.tables.append(Table("recommendations", "Every change priced, most predicted gain first", rows))
    s.tables.append(Table("thresholds", "The thresholds (report/thresholds.py)", thresholds_table()))
    return s
