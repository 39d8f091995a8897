"""Does the default job learn as well in every precision? The default
configuration (perfmlp.config.Config: 784-512-10, B = 100, 10 epochs on the
8,000 shipped digits, 2,000 held out) trained on NumPy in float32, tf32,
bf16 and fp16 (NumPy computes what the GPU computes: perfmlp/mixed.py), each
held-out accuracy against float32's (the target: within 0.5 points).

    python benchmarks/precision_accuracy.py --out reports/cpu/precision_accuracy.md
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from perfmlp.comm import SingleWorld
from perfmlp.config import Config
from perfmlp.train import train

PRECISIONS = ("float32", "tf32", "bf16", "fp16")
TARGET_POINTS = 0.5


def commit() -> str:
    if os.environ.get("PERFMLP_GIT_COMMIT"):  # the GPU machine's copy: its .git is not the code's
        return os.environ["PERFMLP_GIT_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="precision_accuracy.md")
    ap.add_argument("--data-dir", default="data/mnist", help="MNIST folder (absent: the shipped digits)")
    a = ap.parse_args()
    rows = []
    for p in PRECISIONS:
        t = time.perf_counter()
        r = train(Config(backend="numpy", trace=False, quiet=True, precision=p, data_dir=a.data_dir), SingleWorld())
        rows.append((p, [e.accuracy for e in r.epochs], r.epochs[-1].loss, time.perf_counter() - t))
        print(f"{p}: held-out accuracy {rows[-1][1][-1]:.4f}", file=sys.stderr)
    ref = rows[0][1][-1]
    lines = ["# The default job's held-out accuracy in each precision (NumPy)", "",
             f"machine: {platform.node()} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), "
             f"date: {datetime.date.today()}, commit: {commit()}",
             f"command: python benchmarks/precision_accuracy.py --out {a.out}", "",
             "| precision | held-out accuracy | points from float32 | within 0.5 | final loss | epoch 1 accuracy | "
             "wall s |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for p, acc, loss, s in rows:
        d = 100 * (acc[-1] - ref)
        lines.append(f"| {p} | {acc[-1]:.4f} | {d:+.2f} | {'yes' if abs(d) <= TARGET_POINTS else 'NO'} | "
                     f"{loss:.4f} | {acc[0]:.4f} | {s:.0f} |")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(out)
    print("\n".join(lines))
    return 0 if all(abs(100 * (acc[-1] - ref)) <= TARGET_POINTS for _, acc, _, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
