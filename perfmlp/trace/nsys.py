"""Read an Nsight Systems SQLite export (`nsys ... --export sqlite`) and check
a run's trace against it.

Per rank (matched by process id: each rank file's header holds its pid):
- bytes: every CUPTI memcpy record whose CUDA API call was issued inside the
  k-th perfmlp `batch` NVTX range of that process is summed by direction
  (copyKind 1 = H2D, 2 = D2H) and compared, to the byte, with the k-th batch
  line's bytes_h2d and bytes_d2h;
- time: each phase's median NVTX range duration (host side) beside the
  trace's median phase time (CUDA events, device side), and the GPU time of
  the kernels launched inside the phase's ranges.
"""
from __future__ import annotations

import bisect
import sqlite3
import statistics
from pathlib import Path


PID_SHIFT = 0x1000000  # nsys: globalTid = globalPid + tid


def _q(con, sql, *args):
    return con.execute(sql, args).fetchall()


def nvtx_ranges(con, domain: str = "perfmlp"):
    """{globalPid: [(name, start_ns, end_ns, payload)]} of one domain's ranges, by start."""
    dom = _q(con, "SELECT DISTINCT domainId FROM NVTX_EVENTS WHERE text = ? AND end IS NULL", domain)
    if not dom:
        return {}
    rows = _q(con, """SELECT COALESCE(n.text, s.value), n.start, n.end, n.globalTid, n.int64Value
                      FROM NVTX_EVENTS n LEFT JOIN StringIds s ON n.textId = s.id
                      WHERE n.domainId = ? AND n.end IS NOT NULL ORDER BY n.start""", dom[0][0])
    out: dict = {}
    for name, start, end, tid, payload in rows:
        out.setdefault(tid - tid % PID_SHIFT, []).append((name, start, end, payload))
    return out


def memcpys(con):
    """{globalPid: [(api_start_ns, bytes, copyKind)]} sorted by API start."""
    rows = _q(con, """SELECT r.start, m.bytes, m.copyKind, m.globalPid
                      FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
                      ON m.correlationId = r.correlationId AND m.globalPid = r.globalTid - r.globalTid % ?
                      ORDER BY r.start""", PID_SHIFT)
    out: dict = {}
    for start, nbytes, kind, gpid in rows:
        out.setdefault(gpid, []).append((start, nbytes, kind))
    return out


def kernels(con):
    """{globalPid: [(api_start_ns, gpu_ns)]} sorted by API start."""
    rows = _q(con, """SELECT r.start, k.end - k.start, k.globalPid
                      FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
                      ON k.correlationId = r.correlationId AND k.globalPid = r.globalTid - r.globalTid % ?
                      ORDER BY r.start""", PID_SHIFT)
    out: dict = {}
    for start, dur, gpid in rows:
        out.setdefault(gpid, []).append((start, dur))
    return out


def _inside(events, lo, hi):
    starts = [e[0] for e in events]
    return events[bisect.bisect_left(starts, lo):bisect.bisect_right(starts, hi)]


def cross_check(db: str | Path, run) -> tuple[list[dict], list[str]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    pids = {gp: pid for gp, pid in _q(con, "SELECT globalPid, pid FROM PROCESSES")}
    by_pid = {pid: gp for gp, pid in pids.items()}
    ranges, copies, kerns = nvtx_ranges(con), memcpys(con), kernels(con)
    rows, notes = [], []
    for rank, rt in sorted(run.ranks.items()):
        header_pid = rank_pid(run, rank)
        gpid = by_pid.get(header_pid)
        if gpid is None or gpid not in ranges:
            notes.append(f"{Path(db).name}: no perfmlp NVTX ranges for rank {rank} (pid {header_pid})")
            continue
        batch_ranges = [r for r in ranges[gpid] if r[0] == "batch"]
        n = min(len(batch_ranges), len(rt.batches))
        exact_h2d = exact_d2h = 0
        tot = {"trace_h2d": 0, "nsys_h2d": 0, "trace_d2h": 0, "nsys_d2h": 0}
        first_bad = None
        for k in range(n):
            _, lo, hi, _ = batch_ranges[k]
            rec = rt.batches[k]
            inside = _inside(copies.get(gpid, []), lo, hi)
            h2d = sum(b for _, b, kind in inside if kind == 1)
            d2h = sum(b for _, b, kind in inside if kind == 2)
            tot["trace_h2d"] += rec.bytes_h2d
            tot["nsys_h2d"] += h2d
            tot["trace_d2h"] += rec.bytes_d2h
            tot["nsys_d2h"] += d2h
            exact_h2d += h2d == rec.bytes_h2d
            exact_d2h += d2h == rec.bytes_d2h
            if first_bad is None and (h2d != rec.bytes_h2d or d2h != rec.bytes_d2h):
                first_bad = f"batch line {k}: trace {rec['bytes_h2d']}/{rec['bytes_d2h']}, nsys {h2d}/{d2h}"
        rows.append({"rank": rank, "check": "bytes per batch (H2D / D2H)", "batches": n,
                     "exact H2D": f"{exact_h2d}/{n}", "exact D2H": f"{exact_d2h}/{n}",
                     "trace H2D bytes": tot["trace_h2d"], "nsys H2D bytes": tot["nsys_h2d"],
                     "trace D2H bytes": tot["trace_d2h"], "nsys D2H bytes": tot["nsys_d2h"],
                     "first mismatch": first_bad or "none"})
        # phase times: NVTX (host) and kernels in the phase (device) beside the trace (CUDA events)
        first_batch_end = batch_ranges[0][2] if batch_ranges else 0
        for phase in sorted({p for b in rt.batches for p in b.t_ms}):
            prs = [r for r in ranges[gpid] if r[0] == phase and r[1] > first_batch_end]
            if not prs:
                continue
            nvtx_ms = statistics.median((e - s) / 1e6 for _, s, e, _ in prs)
            kern_ms = statistics.median(sum(d for _, d in _inside(kerns.get(gpid, []), s, e)) / 1e6
                                        for _, s, e, _ in prs)
            trace_ms = statistics.median(b.t_ms[phase].ms for b in rt.batches[1:] if phase in b.t_ms)
            rows.append({"rank": rank, "check": f"phase {phase} (median ms)", "batches": len(prs),
                         "NVTX range (host)": nvtx_ms, "kernels in range (GPU)": kern_ms,
                         "trace (CUDA events)": trace_ms})
    return rows, notes


def rank_pid(run, rank):
    """The process id a rank's header recorded (None without one)."""
    header = run.ranks[rank].header
    return header.pid if header is not None else None
