"""The in-process GPU timeline against Nsight Systems, for two runs of the
same configuration: one traced with CUPTI in-process (--trace-level
kernels: every kernel of a CUDA graph a record of its own), one under
`nsys profile --cuda-graph-trace=node` (which owns CUPTI, so that run falls
back to CUDA events) with its SQLite export in its trace folder.

How nsys's records are placed in batches: every kernel and memcpy row
carries the correlation id of the CUDA call that launched it, the
cudaGraphLaunch for a node of a CUDA graph (node-level tracing: kernel and
memcpy rows with a graphNodeId); the call's host start falls inside one of
the process's perfmlp `batch` NVTX ranges, the k-th of which is the nsys
run's k-th batch line (its epoch and batch). A graph traced whole (nsys
without --cuda-graph-trace=node: CUPTI_ACTIVITY_KIND_GRAPH_TRACE rows)
hides its kernels; the check then says so and compares no busy time.

Per rank, over the batches both runs have:
- kernel busy time: the length of the union of kernel intervals, NCCL's
  included (never a sum), median over the steady batches (reader's
  STEADY_RULE), CUPTI in-process against nsys, and their difference (the
  target: within 2%);
- bytes per batch by direction (h2d, d2h, d2d: format.COPY_KINDS, nsys's
  copyKind 1, 2, 8), batch by batch on every batch (the runs are
  deterministic, so batch k copies the same bytes in both): exact against
  nsys, and each run's records against its own counters (bytes_d2d counts
  as 0 on batch lines without it).

    python benchmarks/timeline_check.py traces/ours traces/nsys-run --out check.json
    python benchmarks/timeline_check.py --summary check-*.json --out summary.md
"""
from __future__ import annotations

import argparse
import bisect
import json
import sqlite3
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfmlp.report.timeline import length  # noqa: E402
from perfmlp.trace.format import COPY_KINDS  # noqa: E402
from perfmlp.trace.nsys import PID_SHIFT, nvtx_ranges  # noqa: E402
from perfmlp.trace.nsys import rank_pid  # noqa: E402
from perfmlp.trace.reader import WARMUP_BATCHES, read_run  # noqa: E402

DIRECTIONS = ("h2d", "d2h", "d2d")
BUSY_TARGET_PCT = 2.0  # the target: kernel-level GPU busy time per batch within 2% of nsys


def nsys_batches(db: Path, run) -> tuple[dict[int, dict], list[str]]:
    """rank -> {(epoch, batch): row} from the SQLite export beside `run`, and
    notes. A row: kernel busy ms (union of kernel intervals), bytes by
    direction, graph-node kernels, whole-graph records (graph-level trace)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    calls: dict = {}  # (globalPid, correlation id) -> host start of the CUDA call
    for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"):
        if t in tables:
            for corr, start, gtid in con.execute(f"SELECT correlationId, start, globalTid FROM {t}"):
                calls[(gtid - gtid % PID_SHIFT, corr)] = start
    gpu: dict = {}  # globalPid -> [(api start, kind, start, end, bytes, graph node)]
    for start, end, corr, gpid, node in con.execute(
            "SELECT start, end, correlationId, globalPid, graphNodeId FROM CUPTI_ACTIVITY_KIND_KERNEL"):
        gpu.setdefault(gpid, []).append((calls.get((gpid, corr)), "kernel", start, end, 0, node))
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        for start, end, corr, gpid, nbytes, kind in con.execute(
                "SELECT start, end, correlationId, globalPid, bytes, copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY"):
            gpu.setdefault(gpid, []).append((calls.get((gpid, corr)), COPY_KINDS.get(kind, "other"), start, end,
                                             nbytes, None))
    if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables:  # graph-level tracing: a launch, its kernels unseen
        for start, end, corr, gpid in con.execute(
                "SELECT start, end, correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE"):
            gpu.setdefault(gpid, []).append((calls.get((gpid, corr)), "graph", start, end, 0, None))
    ranges = nvtx_ranges(con)
    by_pid = {pid: gp for gp, pid in con.execute("SELECT globalPid, pid FROM PROCESSES")}
    out, notes = {}, []
    for rank, rt in run.ranks.items():
        gpid = by_pid.get(rank_pid(run, rank))
        if gpid is None:
            notes.append(f"{db.name}: no process for rank {rank}")
            continue
        unjoined = sum(1 for r in gpu.get(gpid, []) if r[0] is None)
        if unjoined:
            notes.append(f"{db.name}: rank {rank}: {unjoined} GPU records without their CUDA call (left out)")
        recs = sorted((r for r in gpu.get(gpid, []) if r[0] is not None), key=lambda r: r[0])
        starts = [r[0] for r in recs]
        batch_ranges = [r for r in ranges.get(gpid, []) if r[0] == "batch"]
        if len(batch_ranges) != len(rt.batches):
            notes.append(f"{db.name}: rank {rank}: {len(batch_ranges)} batch ranges, {len(rt.batches)} batch lines")
        rows = {}
        for (_, lo, hi, _), b in zip(batch_ranges, rt.batches):
            inside = recs[bisect.bisect_left(starts, lo):bisect.bisect_right(starts, hi)]
            row = {"kernel_ms": length([(s, e) for _, k, s, e, _, _ in inside if k == "kernel"]) / 1e6,
                   "graph_nodes": sum(1 for r in inside if r[1] == "kernel" and r[5] is not None),
                   "whole_graphs": sum(1 for r in inside if r[1] == "graph"),
                   "counters": _counters(b)}
            row.update({d: sum(r[4] for r in inside if r[1] == d) for d in DIRECTIONS})
            rows[(b.epoch, b.batch)] = row
        out[rank] = rows
    return out, notes


def _counters(b: dict) -> dict:
    return {d: getattr(b, f"bytes_{d}") for d in DIRECTIONS}


def ours(run) -> dict[int, dict]:
    """rank -> {(epoch, batch): row} from the CUPTI records of the in-process run."""
    out = {}
    for rank, rt in run.ranks.items():
        rows = {}
        for b in rt.batches:
            g = b.gpu or ()
            row = {"kernel_ms": length([(r.start_ns, r.end_ns) for r in g
                                        if r.cat in ("compute", "comm", "graph")]) / 1e6,
                   "whole_graphs": sum(1 for r in g if r.cat == "graph"), "counters": _counters(b)}
            row.update({d: sum(r.bytes for r in g if r.copy == d) for d in DIRECTIONS})
            rows[(b.epoch, b.batch)] = row
        out[rank] = rows
    return out


def _bytes(row: dict) -> dict:
    return {d: row[d] for d in DIRECTIONS}


def compare(mine: dict[int, dict], theirs: dict[int, dict]) -> list[dict]:
    """One row per rank: busy medians and difference, bytes exact counts."""
    rows = []
    for rank in sorted(mine):
        if rank not in theirs:
            continue
        keys = sorted(set(mine[rank]) & set(theirs[rank]))
        steady = [k for k in keys if k[1] >= WARMUP_BATCHES] or keys
        o, n = mine[rank], theirs[rank]
        whole = sum(n[k]["whole_graphs"] for k in keys)
        ok = statistics.median(o[k]["kernel_ms"] for k in steady) if steady else None
        nk = statistics.median(n[k]["kernel_ms"] for k in steady) if steady and not whole else None
        diff = 100 * (ok / nk - 1) if ok is not None and nk else None
        first_bad = next((f"{k}: CUPTI {_bytes(o[k])}, nsys {_bytes(n[k])}" for k in keys
                          if _bytes(o[k]) != _bytes(n[k])), None)
        rows.append({
            "rank": rank, "batches": len(keys), "steady_batches": len(steady),
            "cupti_kernel_busy_ms": ok, "nsys_kernel_busy_ms": nk, "diff_pct": diff,
            "busy_within_target": diff is not None and abs(diff) <= BUSY_TARGET_PCT,
            "nsys_graph_node_kernels": sum(n[k]["graph_nodes"] for k in keys),
            "nsys_whole_graphs": whole, "cupti_whole_graphs": sum(o[k]["whole_graphs"] for k in keys),
            "bytes_exact_vs_nsys": f"{sum(_bytes(o[k]) == _bytes(n[k]) for k in keys)}/{len(keys)}",
            "cupti_bytes_exact_vs_counters": f"{sum(_bytes(o[k]) == o[k]['counters'] for k in keys)}/{len(keys)}",
            "nsys_bytes_exact_vs_counters": f"{sum(_bytes(n[k]) == n[k]['counters'] for k in keys)}/{len(keys)}",
            "bytes_total": {d: sum(o[k][d] for k in keys) for d in DIRECTIONS},
            "first_bytes_mismatch": first_bad})
    return rows


def _pct(v) -> str:
    return "n/a" if v is None else f"{v:+.2f}%"


def _ms(v) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def check(ours_dir: str, nsys_dir: str) -> dict:
    mine, theirs_run = read_run(ours_dir), read_run(nsys_dir)
    dbs = sorted(Path(nsys_dir).glob("*.sqlite"))
    if not dbs:
        raise SystemExit(f"timeline_check: no nsys *.sqlite export in {nsys_dir}")
    theirs, notes = nsys_batches(dbs[0], theirs_run)
    rows = compare(ours(mine), theirs)
    if any(r["nsys_whole_graphs"] for r in rows):
        notes.append("nsys recorded CUDA graphs whole (no --cuda-graph-trace=node): kernel busy not compared")
    if any(r["cupti_whole_graphs"] for r in rows):
        notes.append(f"the CUPTI run is at the {mine.trace_level} level: graphs are one record each")
    c = mine.config
    return {"ours": ours_dir, "nsys": nsys_dir, "procs": mine.procs, "exec": mine.exec, "comm": mine.comm,
            "batch_transfer": c.get("batch_transfer"), "trace_level": mine.trace_level,
            "nsys_trace_level": theirs_run.trace_level,
            "nsys_trace_level_note": theirs_run.ran.trace_level_note, "notes": notes, "rows": rows}


def summary(files: list[str]) -> str:
    """A markdown table of check files: bytes exact and busy difference per pair and rank."""
    lines = ["| p | transfer | comm | exec | rank | bytes exact vs nsys | CUPTI vs counters | nsys vs counters "
             "| busy CUPTI ms | busy nsys ms | diff | within 2% |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for f in files:
        d = json.loads(Path(f).read_text())
        for r in d["rows"]:
            busy = _ms(r["cupti_kernel_busy_ms"]), _ms(r["nsys_kernel_busy_ms"])
            lines.append(f"| {d['procs']} | {d['batch_transfer']} | {d['comm']} | {d['exec']} | {r['rank']} | "
                         f"{r['bytes_exact_vs_nsys']} | {r['cupti_bytes_exact_vs_counters']} | "
                         f"{r['nsys_bytes_exact_vs_counters']} | {busy[0]} | {busy[1]} | {_pct(r['diff_pct'])} | "
                         f"{'yes' if r['busy_within_target'] else 'no'} |")
        notes += [f"- {Path(f).name}: {n}" for n in d.get("notes", [])]
    return "\n".join(lines) + "\n" + ("\n" + "\n".join(notes) + "\n" if notes else "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ours", nargs="?", help="run folder traced in-process with CUPTI (--trace-level kernels)")
    ap.add_argument("nsys", nargs="?", help="run folder of the same configuration with an nsys *.sqlite beside it")
    ap.add_argument("--summary", nargs="+", metavar="CHECK.json", help="write a markdown table of these checks")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.summary:
        Path(a.out).write_text(summary(a.summary))
        return
    if not (a.ours and a.nsys):
        ap.error("give the CUPTI run and the nsys run, or --summary")
    d = check(a.ours, a.nsys)
    for r in d["rows"]:
        print(f"{Path(a.ours).name} rank {r['rank']}: kernel busy {_ms(r['cupti_kernel_busy_ms'])} ms (CUPTI in-process) "
              f"vs {_ms(r['nsys_kernel_busy_ms'])} ms (nsys): {_pct(r['diff_pct'])}; bytes per batch exact vs nsys "
              f"{r['bytes_exact_vs_nsys']}, vs counters {r['cupti_bytes_exact_vs_counters']}")
    for n in d["notes"]:
        print(f"{Path(a.ours).name}: {n}")
    Path(a.out).write_text(json.dumps(d, indent=1))


if __name__ == "__main__":
    main()
