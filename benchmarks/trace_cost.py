"""The tracer's host time per batch on the CPU, at the default level.

NumPy, one process, a tiny step (D=784, H=4, C=10, B=4: the step is all
host time, so every microsecond the tracer adds shows). The same network
and batches take blocks of steps untraced (NullTracer) and traced (a real
Tracer at `--trace-level auto`, counters on NumPy, writing its trace),
alternately in ABBA order; each block is timed by the thread's CPU time
(time.thread_time: what other processes on a shared machine take is not
counted). The cost is the traced block's time less the untraced one's,
per batch, one figure per round; reported: the median and the spread
(10th, 25th, 75th, 90th percentiles). Also the hooks alone, in a loop with
no step between them (everything in cache: the floor), and NVTX's cost
where the nvtx package is installed and no profiler is attached.

    python benchmarks/trace_cost.py --out reports/cpu/trace_cost
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfmlp.backend import build  # noqa: E402
from perfmlp.comm import SingleWorld  # noqa: E402
from perfmlp.config import from_mapping  # noqa: E402
from perfmlp.mlp import init_weights  # noqa: E402
from perfmlp.step import step  # noqa: E402
from perfmlp.trace.format import Counts  # noqa: E402
from perfmlp.trace.manifest import git_commit  # noqa: E402
from perfmlp.trace.records import Phase  # noqa: E402
from perfmlp.trace.writer import NullTracer, make_tracer  # noqa: E402

BUDGET_US = 3.0  # the default level's host time per batch on this machine, at most
H, B, NB = 4, 4, 8


def block(net, be, tracer, n: int) -> float:
    """Seconds of thread CPU time per step over n steps."""
    net.ops = tracer.ops
    counts = Counts()
    t0 = time.thread_time()
    for k in range(n):
        lo = (k % NB) * B
        tracer.begin_batch(0, k, B, B)
        step(net, be.batches, be.reducer, lo, lo + B, tracer.phase, counts)
        tracer.end_batch(0.5, counts)
        counts.reset()
    return (time.thread_time() - t0) / n


def hooks_only(tracer, n: int) -> float:
    """Seconds per batch of the hooks alone: six phases, no step."""
    counts = Counts()
    phases = (Phase.H2D, Phase.FORWARD, Phase.LOSS, Phase.BACKWARD, Phase.ALLREDUCE, Phase.UPDATE)
    t0 = time.thread_time()
    for k in range(n):
        tracer.begin_batch(0, k, B, B)
        for p in phases:
            with tracer.phase(p):
                pass
        tracer.end_batch(0.5, counts)
    return (time.thread_time() - t0) / n


def nvtx_cost(n: int = 200_000) -> dict:
    """ns per push and pop of an NVTX range with no tool attached (the nvtx
    package's own; the tracer calls none then)."""
    try:
        import nvtx
    except ImportError:
        return {"nvtx": "not installed"}
    dom = nvtx.get_domain("perfmlp")
    attr = dom.get_event_attributes(message="forward")
    t0 = time.thread_time()
    for _ in range(n):
        dom.push_range(attr)
        dom.pop_range()
    return {"nvtx": getattr(nvtx, "__version__", "?"), "push_pop_ns": 1e9 * (time.thread_time() - t0) / n,
            "domain": type(dom).__name__}


def pct(xs, q) -> float:
    return statistics.quantiles(xs, n=100)[q - 1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder: trace_cost.json and trace_cost.md")
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--steps", type=int, default=100, help="steps per block")
    a = ap.parse_args()
    np.seterr(all="ignore")
    tdir = tempfile.mkdtemp()
    cfg = from_mapping(dict(batch_size=B, n_train=B * NB, hidden_sizes=[H], backend="numpy", trace=True,
                            trace_dir=tdir, run_id="cost", quiet=True))
    world = SingleWorld()
    rng = np.random.default_rng(0)
    x = rng.random((cfg.n_train, 784)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, cfg.n_train)]
    be = build(cfg, world, x, y)
    tracer = make_tracer(cfg, world)
    tracer.attach(world, be)
    net = be.net
    net.set_params(init_weights(cfg.layer_sizes, 0))
    null = NullTracer()
    block(net, be, null, 1000)
    block(net, be, tracer, 1000)
    off, cost = [], []
    for r in range(a.rounds):
        order = (null, tracer) if r % 2 == 0 else (tracer, null)   # ABBA
        t = {id(tr): block(net, be, tr, a.steps) for tr in order}
        off.append(t[id(null)] * 1e6)
        cost.append((t[id(tracer)] - t[id(null)]) * 1e6)
    floor = [(hooks_only(tracer, 20_000) - hooks_only(null, 20_000)) * 1e6 for _ in range(5)]
    tracer.close("complete")
    res = {"machine": f"{platform.node()}: {platform.processor() or platform.machine()}, Python "
                      f"{platform.python_version()}, NumPy {np.__version__}",
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "commit": git_commit(),
           "command": " ".join(["python", *sys.argv]), "level": tracer.level, "rounds": a.rounds, "steps": a.steps,
           "untraced_us_median": statistics.median(off), "cost_us_median": statistics.median(cost),
           "cost_us_p10": pct(cost, 10), "cost_us_p25": pct(cost, 25), "cost_us_p75": pct(cost, 75),
           "cost_us_p90": pct(cost, 90), "hooks_only_us_median": statistics.median(floor), "budget_us": BUDGET_US,
           **nvtx_cost()}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "trace_cost.json").write_text(json.dumps(res, indent=1) + "\n")
    ok = "within" if res["cost_us_median"] <= BUDGET_US else "over"
    md = [f"# Tracer host time per batch, CPU ({res['level']} level)", "",
          f"Machine: {res['machine']}. Date: {res['date']}. Commit: {res['commit']}.", "",
          f"Command: `{res['command']}`", "",
          "| | us per batch |", "| --- | --- |",
          f"| untraced step (median) | {res['untraced_us_median']:.2f} |",
          f"| tracer's cost, median of {a.rounds} ABBA rounds of {a.steps} steps | {res['cost_us_median']:.2f} |",
          f"| spread: 10th / 25th / 75th / 90th percentile | {res['cost_us_p10']:.2f} / {res['cost_us_p25']:.2f} / "
          f"{res['cost_us_p75']:.2f} / {res['cost_us_p90']:.2f} |",
          f"| the hooks alone, no step between them (median of 5) | {res['hooks_only_us_median']:.2f} |", "",
          f"Budget {BUDGET_US:g} us: the median is {ok} it. NVTX with no profiler attached: "
          + (f"{res['push_pop_ns']:.0f} ns a push and pop ({res['domain']}); the tracer calls none unless a tool is "
             "attached." if "push_pop_ns" in res else "the nvtx package is not installed here; the tracer calls "
             "NVTX only where a tool is attached."), ""]
    (out / "trace_cost.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
