"""The in-process GPU timeline against Nsight Systems, for two runs of the
same configuration: one traced with CUPTI in-process (--trace-level
kernels or timeline), one under nsys (which owns CUPTI, so that run falls
back to CUDA events) with its SQLite export in its trace folder.

Per rank: the median over steady batches of the kernel busy time (the union
of kernel intervals, NCCL's included) in each, and their difference; the
bytes copied per batch by direction, batch by batch (the runs are
deterministic, so batch k copies the same bytes in both), exact or not.

    PYTHONPATH=. python benchmarks/timeline_check.py traces/ours traces/nsys-run --out check.json
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
from perfmlp.trace.nsys import PID_SHIFT, nvtx_ranges  # noqa: E402
from perfmlp.trace.reader import WARMUP_BATCHES, read_run  # noqa: E402


def nsys_batches(db: Path, run) -> dict[int, list[dict]]:
    """rank -> per batch range: kernel busy ms (union) and memcpy bytes by kind,
    every GPU record placed in the batch whose NVTX range holds its API call."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    api = [t for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER") if t in tables]
    calls: dict = {}
    for t in api:
        for corr, start, gtid in con.execute(f"SELECT correlationId, start, globalTid FROM {t}"):
            calls[(gtid - gtid % PID_SHIFT, corr)] = start
    gpu: dict = {}
    for start, end, corr, gpid in con.execute("SELECT start, end, correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL"):
        gpu.setdefault(gpid, []).append((calls.get((gpid, corr)), "kernel", start, end, 0))
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        for start, end, corr, gpid, nbytes, kind in con.execute(
                "SELECT start, end, correlationId, globalPid, bytes, copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY"):
            gpu.setdefault(gpid, []).append((calls.get((gpid, corr)), {1: "h2d", 2: "d2h"}.get(kind, "other"),
                                             start, end, nbytes))
    ranges = nvtx_ranges(con)
    by_pid = {pid: gp for gp, pid in con.execute("SELECT globalPid, pid FROM PROCESSES")}
    out = {}
    for rank in run.ranks:
        with open(Path(run.path) / f"rank-{rank}.jsonl") as f:
            gpid = by_pid.get(json.loads(f.readline()).get("pid"))
        if gpid is None:
            continue
        recs = sorted((r for r in gpu.get(gpid, []) if r[0] is not None), key=lambda r: r[0])
        starts = [r[0] for r in recs]
        rows = []
        for _, lo, hi, _ in (r for r in ranges.get(gpid, []) if r[0] == "batch"):
            inside = recs[bisect.bisect_left(starts, lo):bisect.bisect_right(starts, hi)]
            rows.append({"kernel_ms": length([(s, e) for _, k, s, e, _ in inside if k == "kernel"]) / 1e6,
                         "h2d": sum(b for _, k, _, _, b in inside if k == "h2d"),
                         "d2h": sum(b for _, k, _, _, b in inside if k == "d2h")})
        out[rank] = rows
    return out


def ours(run) -> dict[int, list[dict]]:
    out = {}
    for rank, rt in run.ranks.items():
        out[rank] = [{"kernel_ms": length([(g["start_ns"], g["end_ns"]) for g in b.get("gpu") or []
                                           if g["cat"] in ("compute", "comm", "graph")]) / 1e6,
                      "h2d": sum(g["bytes"] for g in b.get("gpu") or [] if g["copy"] == "h2d"),
                      "d2h": sum(g["bytes"] for g in b.get("gpu") or [] if g["copy"] == "d2h"),
                      "counters": (b["bytes_h2d"], b["bytes_d2h"])} for b in rt.batches]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ours", help="run folder traced in-process with CUPTI")
    ap.add_argument("nsys", help="run folder of the same configuration with an nsys *.sqlite beside its trace")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    mine, theirs_run = read_run(a.ours), read_run(a.nsys)
    db = next(Path(a.nsys).glob("*.sqlite"))
    o, n = ours(mine), nsys_batches(db, theirs_run)
    rows = []
    for rank in sorted(o):
        if rank not in n:
            continue
        k = min(len(o[rank]), len(n[rank]))
        steady = range(WARMUP_BATCHES, k)
        ok = statistics.median(o[rank][i]["kernel_ms"] for i in steady)
        nk = statistics.median(n[rank][i]["kernel_ms"] for i in steady)
        exact = sum(o[rank][i]["h2d"] == n[rank][i]["h2d"] and o[rank][i]["d2h"] == n[rank][i]["d2h"] for i in range(k))
        counters = sum((o[rank][i]["h2d"], o[rank][i]["d2h"]) == o[rank][i]["counters"] for i in range(k))
        rows.append({"rank": rank, "batches": k, "cupti_kernel_busy_ms": ok, "nsys_kernel_busy_ms": nk,
                     "diff_pct": 100 * (ok / nk - 1) if nk else None,
                     "bytes_exact_vs_nsys": f"{exact}/{k}", "bytes_exact_vs_counters": f"{counters}/{k}"})
        print(f"{mine.run_id} rank {rank}: kernel busy {ok:.4f} ms (CUPTI in-process) vs {nk:.4f} ms (nsys): "
              f"{rows[-1]['diff_pct']:+.2f}%; bytes per batch exact vs nsys {exact}/{k}, vs counters {counters}/{k}")
    Path(a.out).write_text(json.dumps({"ours": a.ours, "nsys": a.nsys, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
