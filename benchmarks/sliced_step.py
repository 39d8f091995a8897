"""The sliced first layer's step against the unsliced one, on one GPU.

    python benchmarks/sliced_step.py [--slices 2,4] [--precisions float32,bf16] [--grads float32,bf16] [--out DIR]

Method: H=512, B=3200, D=784, C=10, resident data (4 batch positions,
cycled), NCCL on one GPU, graph mode: perfmlp's step (perfmlp.step.step)
with --slices 1 (today's step) and each K of --slices (perfmlp/slices.py,
perfmlp/gpu/sliced.py), with each gradient width of --grads (a 16-bit
exchange: its casts), in each precision. Every variant runs --warmup
steps (its captures included), then --rounds rounds in which every variant
of a precision, in turn, runs --steps steps between two synchronisations
(the sliced step's pending slices drained in its sync): its time per step
is that wall time over the steps. Printed, and written as DIR/sliced_step.md
where --out is given (--diagnose: also the unsliced step and the first K
with no collective launched, to tell the collectives' cost from the
slicing's): the median over rounds, the range, the spread
(max / min - 1), the ratio to the unsliced float32-exchange median, and the
model's predicted ratio (models/h200-calibrated.yaml, predict_batch; machine,
date, commit, command above the table).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

NPOS = 4
NOPHASE = lambda name: contextlib.nullcontext()  # noqa: E731


class _NoComm:
    """A communicator whose allReduce launches nothing (the diagnostic rows: the step less its collectives)."""

    def allReduce(self, *args):
        pass


def variant(world, H, B, precision, slices, grads, collectives=True):
    """(run(n), sync) of perfmlp's graph step with `slices` (collectives=False: none launched)."""
    from perfmlp.backend import build
    from perfmlp.config import from_mapping
    from perfmlp.mixed import to_storage
    from perfmlp.mlp import init_weights
    from perfmlp.slices import wire
    from perfmlp.step import step
    from perfmlp.trace.format import Counts
    rng = np.random.default_rng(0)
    x = to_storage(rng.random((B * NPOS, 784), dtype=np.float32), precision)
    y = to_storage(np.eye(10, dtype=np.float32)[rng.integers(0, 10, B * NPOS)], precision)
    cfg = from_mapping(dict(hidden_sizes=[H], batch_size=B, n_train=B * NPOS, backend="cupy", comm="nccl",
                            batch_transfer="resident", exec="graph", precision=precision, trace=False,
                            slices=str(slices), grad_precision=grads))
    be = wire(cfg, world, build(cfg, world, x, y))
    if not collectives:
        be.reducer.comm = _NoComm()
    be.net.set_params(init_weights(cfg.layer_sizes, 0))
    counts = Counts()

    def run(n, k=[0]):
        with be.stream:
            for _ in range(n):
                off = (k[0] % NPOS) * B
                k[0] += 1
                step(be.net, be.batches, be.reducer, off, off + B, NOPHASE, counts, be.graph, be.parts)
                counts.reset()
    return run, be.sync


def measure(variants: dict, warmup: int, rounds: int, steps: int) -> dict:
    for run, sync in variants.values():
        run(warmup)
        sync()
    times = {k: [] for k in variants}
    for _ in range(rounds):
        for k, (run, sync) in variants.items():
            sync()
            t = time.perf_counter()
            run(steps)
            sync()
            times[k].append((time.perf_counter() - t) / steps)
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slices", default="2,4")
    ap.add_argument("--precisions", default="float32,bf16")
    ap.add_argument("--grads", default="float32", help="gradient widths (--grad-precision), comma-separated")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--batch", type=int, default=3200)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--diagnose", action="store_true",
                    help="also K = 1 and the first K of --slices with no collective launched")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    from perfmlp.comm import SingleWorld
    world = SingleWorld()
    ks = [1] + [int(k) for k in a.slices.split(",")]
    grads = a.grads.split(",")
    diag = [(k, "float32", False) for k in ks[:2]] if a.diagnose else []   # K without its collectives
    lines = ["| precision | K | gradients | median (us) | range (us) | spread | / unsliced | predicted |",
             "|" + " --- |" * 8]
    for prec in a.precisions.split(","):
        keys = [(k, g, True) for g in grads for k in ks] + diag
        variants = {key: variant(world, a.hidden, a.batch, prec, *key) for key in keys}
        times = measure(variants, a.warmup, a.rounds, a.steps)
        base = median(times[(1, "float32", True)])
        for key in keys:
            t = times[key]
            name = f"{key[0]}" if key[2] else f"{key[0]}, no collectives"
            lines.append(f"| {prec} | {name} | {key[1]} | {1e6 * median(t):.1f} | {1e6 * min(t):.1f}-"
                         f"{1e6 * max(t):.1f} | {max(t) / min(t) - 1:.1%} | {median(t) / base:.3f} "
                         f"| {predicted_ratio(a, prec, *key[:2]) if key[2] else '-'} |")
        print("\n".join(lines[-len(keys):]), flush=True)
    head = _head(a, argv)
    print(head)
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "sliced_step.md").write_text(head + "\n" + "\n".join(lines) + "\n")
    return 0


def predicted_ratio(a, precision: str, slices: int, grads: str) -> str:
    """The model's time for the variant over its unsliced float32 exchange's, on the shipped H200 file."""
    from perfmlp.model.machine import load_machine
    from perfmlp.model.predict import predict_batch
    m = load_machine("h200-calibrated")
    args = (m, (784, a.hidden, 10), a.batch, 1, precision, "nccl", "resident", None, "graph")
    return f"{predict_batch(*args, slices=slices, grad_precision=grads).total_s / predict_batch(*args).total_s:.3f}"


def _head(a, argv) -> str:
    import cupy
    gpu = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    commit = os.environ.get("PERFMLP_GIT_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip() or "unknown"
    return (f"# The sliced first layer on one GPU\n\n{gpu}, {platform.node()}, "
            f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit}; H={a.hidden}, B={a.batch}, "
            f"graph mode, resident, NCCL on one GPU; {a.rounds} rounds of {a.steps} steps, interleaved.\n\n"
            f"    python benchmarks/sliced_step.py {' '.join(argv if argv is not None else sys.argv[1:])}\n")


if __name__ == "__main__":
    sys.exit(main())
