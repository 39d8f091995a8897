"""The next batch's pageable copy against the replay before it, from the
Nsight Systems exports of benchmarks/gpu_pageable_diag.sh (issue 13).

For each run (an nsys-*.sqlite or .sqlite.gz under the folders given) and
each rank (process), over the steady batches (from the 5th graph launch):
the replay's GPU span (its kernels, first start to last end), the host's
cudaGraphLaunch time, the host's time from that call's return to the next
batch's large copy call (`gap`), the replay's work still queued when the
copy is called (`queued`: the replay's end less the call's start), the
copy call's host time (`call`), its DMA time (the MEMCPY record) and the
DMA's start after the replay's end, and the launch-to-launch period; the
medians, then each rank's least-squares slope of the call's time against
the queued work, batch by batch (0: the staging hides the queued work;
1: the call waits for all of it).

    python benchmarks/pageable_timeline.py traces/h200-x2/pageable_diag
"""
from __future__ import annotations

import gzip
import shutil
import sqlite3
import statistics as st
import sys
import tempfile
from pathlib import Path

from perfmlp.trace.nsys import PID_SHIFT


def open_db(path: Path, tmp: Path) -> sqlite3.Connection:
    if path.suffix == ".gz":
        plain = tmp / path.stem
        with gzip.open(path) as f, open(plain, "wb") as g:
            shutil.copyfileobj(f, g)
        path = plain
    return sqlite3.connect(path)


def batches(con, pid) -> list[dict]:
    api = con.execute("""SELECT r.start, r.end, s.value, r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                         JOIN StringIds s ON r.nameId = s.id WHERE r.globalTid - r.globalTid % ? = ?
                         ORDER BY r.start""", (PID_SHIFT, pid)).fetchall()
    gpu: dict = {}
    for table in ("MEMCPY", "KERNEL"):
        for a, b, c in con.execute(f"SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_{table} "
                                   "WHERE globalPid = ?", (pid,)):
            g = gpu.setdefault(c, [a, b])
            g[0], g[1] = min(g[0], a), max(g[1], b)
    big = [(a, b, c) for a, b, n, c in api if n.startswith("cudaMemcpyAsync") and c in gpu
           and gpu[c][1] - gpu[c][0] > 100_000]          # the X piece (over 100 us on the GPU)
    launches = [(a, b, c) for a, b, n, c in api if n.startswith("cudaGraphLaunch")]
    rows = []
    for i in range(4, len(launches)):
        la, lb, lc = launches[i - 1]
        nxt = [x for x in big if x[0] > lb]
        if lc not in gpu or not nxt:
            continue
        ca, cb, cc = nxt[0]
        after = [x for x in launches if x[0] > cb]
        if not after:
            continue
        r0, r1 = gpu[lc]
        rows.append({"replay": r1 - r0, "launch": lb - la, "gap": ca - lb, "queued": r1 - ca, "call": cb - ca,
                     "dma": gpu[cc][1] - gpu[cc][0], "dma_after_replay": gpu[cc][0] - r1, "period": after[0][0] - la})
    return rows


def slope(xs, ys) -> float:
    mx, my = st.mean(xs), st.mean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else float("nan")


def main(folders) -> int:
    dbs = sorted(p for f in folders for p in Path(f).rglob("nsys-*.sqlite*"))
    if not dbs:
        print(f"no nsys-*.sqlite(.gz) under {', '.join(folders)}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        for db in dbs:
            con = open_db(db, Path(tmp))
            pids = sorted({r[0] - r[0] % PID_SHIFT for r in con.execute(
                "SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME")})
            print(db.parent.name)
            for pid in pids:
                rows = batches(con, pid)
                if not rows:
                    continue
                med = " ".join(f"{k} {st.median(r[k] for r in rows) / 1e3:.0f}" for k in rows[0])
                s = slope([r["queued"] for r in rows], [r["call"] for r in rows])
                q = [r["queued"] / 1e3 for r in rows]
                print(f"  process {(pid >> 24) & 0xFFFFFF}: {len(rows)} batches, medians (us): {med}; queued {min(q):.0f}-"
                      f"{max(q):.0f} us, call against queued: slope {s:.2f}")
            con.close()
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("usage: python benchmarks/pageable_timeline.py TRACE_FOLDER...", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
