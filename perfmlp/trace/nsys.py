"""Check a run's trace against an Nsight Systems SQLite export (`nsys ... --export sqlite`), per rank
(matched by the header's process id): the bytes each `batch` NVTX range copied (by CUPTI memcpy
records, H2D and D2H) against the batch's bytes_h2d and bytes_d2h, to the byte; and each phase's
median NVTX range (host) and kernel time inside it (GPU) beside the trace's median phase time."""
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


def _by_pid(con, what: str, table: str) -> dict:
    """{globalPid: [(api_start_ns, *what)]} of a CUPTI table's records, by the launching call's start."""
    rows = _q(con, f"""SELECT r.start, {what}, a.globalPid
                       FROM {table} a JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
                       ON a.correlationId = r.correlationId AND a.globalPid = r.globalTid - r.globalTid % ?
                       ORDER BY r.start""", PID_SHIFT)
    out: dict = {}
    for *row, gpid in rows:
        out.setdefault(gpid, []).append(tuple(row))
    return out


def _inside(events, lo, hi):
    starts = [e[0] for e in events]
    return events[bisect.bisect_left(starts, lo):bisect.bisect_right(starts, hi)]


def cross_check(db: str | Path, run) -> tuple[list[dict], list[str]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    by_pid = {pid: gp for gp, pid in _q(con, "SELECT globalPid, pid FROM PROCESSES")}
    ranges = nvtx_ranges(con)
    copies = _by_pid(con, "a.bytes, a.copyKind", "CUPTI_ACTIVITY_KIND_MEMCPY")   # (API start, bytes, kind)
    kerns = _by_pid(con, "a.end - a.start", "CUPTI_ACTIVITY_KIND_KERNEL")        # (API start, GPU ns)
    rows, notes = [], []
    for rank, rt in sorted(run.ranks.items()):
        header_pid = rank_pid(run, rank)
        gpid = by_pid.get(header_pid)
        if gpid is None or gpid not in ranges:
            notes.append(f"{Path(db).name}: no perfmlp NVTX ranges for rank {rank} (pid {header_pid})")
            continue
        batch_ranges = [r for r in ranges[gpid] if r[0] == "batch"]
        per_batch = []   # (trace H2D, nsys H2D, trace D2H, nsys D2H) bytes
        for (_, lo, hi, _), rec in zip(batch_ranges, rt.batches):
            inside = _inside(copies.get(gpid, []), lo, hi)
            per_batch.append((rec.bytes_h2d, sum(b for _, b, kind in inside if kind == 1),
                              rec.bytes_d2h, sum(b for _, b, kind in inside if kind == 2)))
        n = len(per_batch)
        tot = [sum(col) for col in zip(*per_batch)] or [0] * 4
        first_bad = next((f"batch line {k}: trace {th}/{td}, nsys {nh}/{nd}"
                          for k, (th, nh, td, nd) in enumerate(per_batch) if (th, td) != (nh, nd)), "none")
        rows.append({"rank": rank, "check": "bytes per batch (H2D / D2H)", "batches": n,
                     "exact H2D": f"{sum(t == s for t, s, _, _ in per_batch)}/{n}",
                     "exact D2H": f"{sum(t == s for _, _, t, s in per_batch)}/{n}",
                     "trace H2D bytes": tot[0], "nsys H2D bytes": tot[1],
                     "trace D2H bytes": tot[2], "nsys D2H bytes": tot[3], "first mismatch": first_bad})
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
