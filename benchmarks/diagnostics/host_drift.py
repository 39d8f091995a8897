"""How steady is the host's side of a copy? (The trainer's pageable copies
came out 18-27% slower than calibrated on one H100 and 20-25% faster on
another; on 2 x H200 the same microbenchmark drifted 20-40% within a
minute. On one H100 this measured a pageable copy's median over 10 calls
moving 27-54% within 16 s of one process: hence the calibration's rounds
(perfmlp.gpu.timing.rounds) and the sweeps' min_steady_seconds.)

One process: every --every seconds for --rounds rounds, the median of 10
H2D copies of each size from rotating slices of a 256 MB host array,
pageable (host wall time: the host stages it) and pinned (GPU time between
events), as perfmlp.gpu.timing.copy_s times them. Run it several times in a
row (each launch a new process: the host's speed is drawn again) and
compare within a launch with between launches. Prints one line per round
and a summary; appends JSON lines to --out.

    for i in 1 2 3 4; do python3 benchmarks/diagnostics/host_drift.py --launch $i --out drift.jsonl; done
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from statistics import median

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from perfmlp.calibrate.copies import rotating_offsets  # noqa: E402
from perfmlp.gpu.timing import copy_s  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="2508800,10035200")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--every", type=float, default=2.0)
    ap.add_argument("--launch", default="1")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import cupy as cp
    import cupyx
    sizes = [int(n) for n in a.sizes.split(",")]
    big = 256 * 1000 * 1000
    hosts = {"pageable": np.ones(big, np.uint8), "pinned": cupyx.empty_pinned(big, np.uint8)}
    hosts["pinned"][...] = 1
    d = cp.empty(max(sizes), cp.uint8)
    s = cp.cuda.Stream(non_blocking=True)
    ev = cp.cuda.Event(), cp.cuda.Event()
    rows = []
    t_start = time.perf_counter()
    for r in range(a.rounds):
        row = {"launch": a.launch, "round": r, "t_s": time.perf_counter() - t_start}
        for mem, h in hosts.items():
            for n in sizes:
                ts, offset = [], rotating_offsets(big, n)
                for i in range(13):
                    off = offset()
                    with s:   # copy_s times the current stream
                        t = copy_s(cp, lambda: d[:n].set(h[off:off + n], stream=s), mem == "pinned", ev)
                    if i >= 3:
                        ts.append(t)
                row[f"{mem}_{n}_us"] = median(ts) * 1e6
        rows.append(row)
        print(" ".join(f"{k} {v:.0f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
        time.sleep(max(0.0, a.every - (time.perf_counter() - t_start - row["t_s"])))
    for key in (k for k in rows[0] if k.endswith("_us")):
        v = [r[key] for r in rows]
        print(f"launch {a.launch} {key}: median {median(v):.0f}, range {min(v):.0f}-{max(v):.0f} "
              f"({(max(v) - min(v)) / median(v) * 100:.1f}% of the median)")
    with open(a.out, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
