"""Tracing overhead: time per batch with tracing on against off, in one run.

One process, one GPU: the same network, batches and reducer take blocks of
steps alternately untraced (the no-op tracer) and traced (a real Tracer
writing its JSONL with CUDA events and NVTX ranges); each block is timed by
the host clock from a synchronised start to a synchronised end. Median over
blocks, per transfer/communication mode.

    python benchmarks/trace_overhead.py --out reports/h100/benchmarks/trace_overhead.json
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfmlp.comm import make_world  # noqa: E402
from perfmlp.config import from_mapping  # noqa: E402
from statistics import median  # noqa: E402

from perfmlp.backend import build  # noqa: E402
from perfmlp.gpu.timing import per_call_s  # noqa: E402
from perfmlp.mlp import init_weights  # noqa: E402
from perfmlp.trace.format import Counts  # noqa: E402
from perfmlp.trace.writer import NullTracer, make_tracer  # noqa: E402
from perfmlp.step import step  # noqa: E402


def block(cp, net, batches, reducer, tracer, nsteps, B, nb):
    """Seconds per step of nsteps steps from a synchronised start to a
    synchronised end, the batch positions cycled."""
    s = cp.cuda.get_current_stream()
    net.ops = tracer.ops
    counts = Counts()
    k = iter(range(nsteps))

    def one():
        i = next(k)
        lo = (i % nb) * B
        tracer.begin_batch(0, i, B, B)
        step(net, batches, reducer, lo, lo + B, tracer.phase, counts)
        tracer.end_batch(None, counts)
        counts.reset()
    return per_call_s(one, nsteps, start=s.synchronize, end=s.synchronize)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--blocks", type=int, default=7)
    a = ap.parse_args()
    import cupy as cp
    world = make_world()
    rows = []
    for transfer, comm in (("resident", "nccl"), ("resident", "mpi-staged"), ("pageable", "mpi-staged")):
        B, nb = 3200, 4
        tdir = Path(tempfile.mkdtemp())
        cfg = from_mapping(dict(batch_size=B, n_train=B * nb, batch_transfer=transfer, comm=comm,
                                backend="cupy", trace=True, trace_dir=str(tdir), run_id="overhead"))
        rng = np.random.default_rng(0)
        x = rng.random((cfg.n_train, 784)).astype(np.float32)
        y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, cfg.n_train)]
        tracer = make_tracer(cfg, world)
        be = build(cfg, world, x, y)
        tracer.attach(world, be)
        net, batches, reducer = be.net, be.batches, be.reducer
        net.set_params(init_weights(cfg.layer_sizes, 0))
        null = NullTracer()
        off, on = [], []
        block(cp, net, batches, reducer, null, 20, B, nb)  # warm-up
        block(cp, net, batches, reducer, tracer, 20, B, nb)
        for _ in range(a.blocks):
            off.append(block(cp, net, batches, reducer, null, a.steps, B, nb))
            on.append(block(cp, net, batches, reducer, tracer, a.steps, B, nb))
        tracer.close("complete")
        lines = sum(1 for _ in open(tdir / "overhead" / "rank-0.jsonl"))
        row = {"transfer": transfer, "comm": comm, "off_us": median(off) * 1e6, "on_us": median(on) * 1e6,
               "overhead_pct": 100 * (median(on) / median(off) - 1), "blocks": a.blocks, "steps": a.steps,
               "off_all_us": [t * 1e6 for t in off], "on_all_us": [t * 1e6 for t in on], "trace_lines": lines}
        rows.append(row)
        print(f"{transfer} {comm}: off {row['off_us']:.1f} us, on {row['on_us']:.1f} us, "
              f"overhead {row['overhead_pct']:+.2f}%", flush=True)
    gpu = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"gpu": gpu, "date": dt.date.today().isoformat(),
                                       "command": " ".join(sys.argv), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
