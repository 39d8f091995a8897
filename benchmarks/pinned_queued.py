"""A pinned H2D copy's GPU time: alone between two events (the stream idle
before it) against queued back to back behind a spin kernel (as the
trainer queues its batch copies behind the step's kernels), per size
(issue 13: on one H100, h100/validate6, 32 KB took 15 us alone and the
graph runs with pinned copies came out 7% too slow).

    python3 benchmarks/pinned_queued.py --out $OUT/pinned_queued.jsonl
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from statistics import median

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfmlp.calibrate import _copy_time, queued_ahead  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="32000,256000,2508800,10035200")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import cupy as cp
    import cupyx
    big = 256 * 1000 * 1000
    h = cupyx.empty_pinned(big, np.uint8)
    h[...] = 1
    s = cp.cuda.get_current_stream()
    rows = []
    for n in map(int, a.sizes.split(",")):
        d = cp.empty(n, cp.uint8)
        k = [0]

        def copy():
            off = (k[0] % (big // n)) * n
            k[0] += 1
            d.set(h[off:off + n], stream=s)
        ev = cp.cuda.Event(), cp.cuda.Event()
        alone = []
        for i in range(25):
            s.synchronize()
            t = _copy_time(cp, copy, True, *ev)
            if i >= 5:
                alone.append(t)
        q = {c: median(queued_ahead(cp, copy, c, spin_s=0.005, reps=1)[0] for _ in range(9)) for c in (1, 2, 4, 16)}
        row = {"bytes": n, "alone_us": median(alone) * 1e6, **{f"queued_{c}_us": v * 1e6 for c, v in q.items()}}
        rows.append(row)
        print(f"{n / 1e6:.3f} MB pinned H2D, GPU us a copy: alone {row['alone_us']:.1f}; queued behind a spin, "
              + ", ".join(f"{c} in a row {v * 1e6:.1f}" for c, v in q.items()), flush=True)
    with open(a.out, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
