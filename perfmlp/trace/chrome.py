"""Export a run to the Chrome trace-event JSON that Perfetto and
chrome://tracing open: one complete ("X") event per batch and per phase,
a process per rank.

    python -m perfmlp.trace.chrome traces/<run-id> -o run.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .reader import Run, TraceError, read_run


def chrome_events(run: Run) -> list[dict]:
    ev = []
    for rank, rt in sorted(run.ranks.items()):
        ev.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
        for b in rt.batches:
            t0_us = b["t0_s"] * 1e6
            total = b.get("t_ms_total") or b.get("wall_ms", 0.0)
            args = {"epoch": b["epoch"], "batch": b["batch"], "samples": b["local_samples"],
                    "bytes_h2d": b["bytes_h2d"], "bytes_d2h": b["bytes_d2h"], "bytes_mpi": b["bytes_mpi"],
                    "bytes_nccl": b["bytes_nccl"], "clock": b.get("clock")}
            ev.append({"name": f"batch {b['batch']}", "cat": "batch", "ph": "X", "pid": rank, "tid": 0,
                       "ts": t0_us, "dur": total * 1e3, "args": args})
            for phase, (off, dur) in b["t_ms"].items():
                ev.append({"name": phase, "cat": "phase", "ph": "X", "pid": rank, "tid": 1,
                           "ts": t0_us + off * 1e3, "dur": dur * 1e3,
                           "args": {"batch": b["batch"], "flops": b["flops"].get(phase, 0)}})
    return ev


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfmlp.trace.chrome",
                                 description="Export a run's trace to Chrome trace-event JSON (Perfetto, "
                                             "chrome://tracing): one event per batch and per phase, a process per rank.")
    ap.add_argument("run", help="a run folder (traces/<run-id>)")
    ap.add_argument("-o", "--out", required=True, help="the JSON file to write (required)")
    a = ap.parse_args(argv)
    try:
        run = read_run(a.run)
    except TraceError as e:
        print(f"perfmlp.trace.chrome: error: {e}", file=sys.stderr)
        return 2
    try:
        Path(a.out).write_text(json.dumps({"traceEvents": chrome_events(run), "displayTimeUnit": "ms"}))
    except OSError as e:
        print(f"perfmlp.trace.chrome: error: cannot write {a.out}: {e.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {a.out} ({run.run_id}, {run.status})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
