"""The sections made from files found beside the traces: correctness results
(benchmarks/correctness.py), cProfile dumps and Nsight Systems SQLite
exports. Each is None when there is no such file."""
from __future__ import annotations

from pathlib import Path

from ..analysis import Analysis
from ..timeline import top_functions
from . import Section, Table
from ...safeio import read_json

CORRECTNESS_KEYS = ("procs", "precision", "comm", "H", "B", "batches", "lr", "max_abs", "max_rel", "ranks_identical")


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
        run = next((by_id[d.name] for d in [db.parent, *db.parents] if d.name in by_id), None)
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
