"""The tracer's time per batch, at the default level, in one process.

The same network and batches take blocks of steps untraced (NullTracer)
and traced (a real Tracer at `--trace-level auto`, writing its trace: one
with the C batch hooks where they are built, one with the Python ones),
in turn, the order reversed every other round, through the trainer's own
`step`. The cost is a traced block's time less the untraced one's, per
batch, one figure per round; reported: the median and the spread (10th,
25th, 75th, 90th percentiles). Also the hooks alone, in a loop with no step between them
(everything in cache: the floor), and NVTX's cost where the nvtx package
is installed and no profiler is attached.

On the CPU (the default): NumPy, a tiny step (D=784, H=4, C=10, B=4: the
step is all host time, so every microsecond the tracer adds shows), each
block timed by the thread's CPU time (time.thread_time: what other
processes on a shared machine take is not counted); budget 3 us.

    python benchmarks/trace_cost.py --out reports/cpu/trace_cost

On one GPU (`--backend cupy --hidden 512 --batch 3200 --exec eager`): the
trainer's step at that size, resident batches, each block timed on the
wall clock between two device synchronisations (an eager step is
host-bound, so the host's extra time is the step's); reported as a share
of the untraced step, budget 2%.

    python benchmarks/trace_cost.py --backend cupy --hidden 512 --batch 3200 --exec eager --comm nccl --out DIR
"""
from __future__ import annotations

import argparse
import dataclasses
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
from perfmlp.trace.fastpath import CFastPath  # noqa: E402
from perfmlp.trace.format import Counts  # noqa: E402
from perfmlp.trace.manifest import git_commit  # noqa: E402
from perfmlp.trace.records import Phase  # noqa: E402
from perfmlp.trace.writer import NullTracer, make_tracer  # noqa: E402

BUDGET_US = 3.0  # the default level's host time per batch on the CPU machine, at most
BUDGET_PCT = 2.0  # the default level's share of the step on one GPU, at most
NB = 8  # batches in the data set (the blocks cycle through them)


def block(be, tracer, n: int, B: int, clock) -> float:
    """Seconds per step over n steps, on `clock` (the device synchronised
    before and after)."""
    net = be.net
    net.ops = tracer.ops
    counts = Counts()
    be.sync()
    t0 = clock()
    for k in range(n):
        lo = (k % NB) * B
        tracer.begin_batch(0, k, B, B)
        step(net, be.batches, be.reducer, lo, lo + B, tracer.phase, counts, be.graph, be.parts)
        tracer.end_batch(0.5, counts)
        counts.reset()
    be.sync()
    return (clock() - t0) / n


def step_shape(be, B: int) -> tuple[Counts, int]:
    """(a step's counters, the number of phases it enters): one untraced step."""
    null, counts, entered = NullTracer(), Counts(), []

    def phase(name):
        entered.append(name)
        return null.phase(name)
    be.net.ops = None
    step(be.net, be.batches, be.reducer, 0, B, phase, counts, be.graph, be.parts)
    be.sync()
    return counts, len(entered)


def hooks_only(tracer, n: int, B: int, last: Counts, nphases: int) -> float:
    """Seconds per batch of the hooks alone: the step's number of phases and
    its counters (`last`, a step's), no step between them."""
    t0 = time.thread_time()
    for k in range(n):
        tracer.begin_batch(0, k, B, B)
        for _ in range(nphases):
            with tracer.phase(Phase.FORWARD):
                pass
        tracer.end_batch(0.5, last)
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


def setup(a, tdir: str):
    """The backend (its network initialised) and the tracers attached to it:
    {"c": ..., "python": ...}, the batch hooks each has (only "python" where
    the C hooks are not built)."""
    cfg = from_mapping(dict(batch_size=a.batch, n_train=a.batch * NB, hidden_sizes=[a.hidden], backend=a.backend,
                            exec=a.exec, comm=a.comm, trace=True, trace_dir=tdir, run_id="cost",
                            quiet=True, **({"batch_transfer": "resident"} if a.backend == "cupy" else {})))
    world = SingleWorld()
    rng = np.random.default_rng(0)
    x = rng.random((cfg.n_train, 784)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, cfg.n_train)]
    be = build(cfg, world, x, y)
    tracers = {}
    for hooks in (("c", "python") if CFastPath is not None else ("python",)):
        tracers[hooks] = make_tracer(dataclasses.replace(cfg, run_id=f"cost-{hooks}"), world,
                                     compiled=hooks == "c")
        tracers[hooks].attach(world, be)
    be.net.set_params(init_weights(cfg.layer_sizes, 0))
    be.net.global_batch = a.batch
    return be, tracers


def spread(cost: list, off: list, floor: list) -> dict:
    share = [100 * c / u for c, u in zip(cost, off)]
    return {"cost_us_median": statistics.median(cost), "cost_us_p10": pct(cost, 10), "cost_us_p25": pct(cost, 25),
            "cost_us_p75": pct(cost, 75), "cost_us_p90": pct(cost, 90), "cost_pct_median": statistics.median(share),
            "cost_pct_p25": pct(share, 25), "cost_pct_p75": pct(share, 75),
            "hooks_only_us_median": statistics.median(floor)}


def measure(a) -> dict:
    """Untraced and each tracer's blocks, interleaved: round r runs them in
    one order, round r + 1 in the reverse (ABC CBA), so that drift in the
    host's speed weighs on each alike."""
    be, tracers = setup(a, tempfile.mkdtemp())
    clock = time.thread_time if a.backend == "numpy" else time.perf_counter
    null = NullTracer()
    runs = [null, *tracers.values()]
    warm = 1000 if a.backend == "numpy" else 100
    for tr in runs:
        block(be, tr, warm, a.batch, clock)
    t = {id(tr): [] for tr in runs}
    for r in range(a.rounds):
        for tr in (runs if r % 2 == 0 else runs[::-1]):
            t[id(tr)].append(block(be, tr, a.steps, a.batch, clock) * 1e6)
    off = t[id(null)]
    last, nph = step_shape(be, a.batch)
    res = {"level": next(iter(tracers.values())).level, "exec": be.exec, "untraced_us_median": statistics.median(off),
           "hooks": list(tracers)}
    for hooks, tr in tracers.items():
        cost = [x - u for x, u in zip(t[id(tr)], off)]
        floor = [(hooks_only(tr, 20_000, a.batch, last, nph) - hooks_only(null, 20_000, a.batch, last, nph)) * 1e6
                 for _ in range(5)]
        res[hooks] = spread(cost, off, floor)
        tr.close("complete")
    return res


def machine(backend: str) -> str:
    where = f"{platform.node()}: {platform.processor() or platform.machine()}, Python {platform.python_version()}, " \
            f"NumPy {np.__version__}"
    if backend == "cupy":
        import cupy as cp
        where += f", CuPy {cp.__version__}, {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}"
    return where


def verdict(res: dict, hooks: str) -> str:
    r = res[hooks]
    if res["backend"] == "numpy":
        ok = "within" if r["cost_us_median"] <= BUDGET_US else "over"
        return f"Budget {BUDGET_US:g} us: the median of the {hooks} hooks is {ok} it."
    ok = "within" if r["cost_pct_median"] < BUDGET_PCT else "over"
    return f"Budget {BUDGET_PCT:g}% of the untraced step: the median of the {hooks} hooks is {ok} it."


def markdown(res: dict) -> str:
    head = (f"# Tracer time per batch, {res['backend']}, {res['exec']}, H={res['hidden']}, B={res['batch']}, "
            f"comm {res['comm']} ({res['level']} level)")
    md = [head, "", f"Machine: {res['machine']}. Date: {res['date']}. Commit: {res['commit']}.", "",
          f"Command: `{res['command']}`", "",
          f"Untraced step (median): {res['untraced_us_median']:.2f} us. {res['rounds']} rounds of {res['steps']} "
          f"steps, each round the untraced step and each tracer in turn, the order reversed every other round.", "",
          "| batch hooks | tracer's cost, median us | share of the untraced step | 10th / 25th / 75th / 90th "
          "percentile us | share, 25th to 75th | the hooks alone, no step between them (median of 5) |",
          "| --- | --- | --- | --- | --- | --- |"]
    for hooks in res["hooks"]:
        r = res[hooks]
        md.append(f"| {hooks} | {r['cost_us_median']:.2f} | {r['cost_pct_median']:+.2f}% | {r['cost_us_p10']:.2f} / "
                  f"{r['cost_us_p25']:.2f} / {r['cost_us_p75']:.2f} / {r['cost_us_p90']:.2f} | "
                  f"{r['cost_pct_p25']:+.2f}% to {r['cost_pct_p75']:+.2f}% | {r['hooks_only_us_median']:.2f} |")
    md += ["", " ".join(verdict(res, h) for h in res["hooks"]) + " NVTX with no profiler attached: "
           + (f"{res['push_pop_ns']:.0f} ns a push and pop ({res['domain']}); the tracer calls none unless a tool is "
              "attached." if "push_pop_ns" in res else "the nvtx package is not installed here; the tracer calls "
              "NVTX only where a tool is attached."), ""]
    return "\n".join(md)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder: trace_cost.json and trace_cost.md")
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--steps", type=int, default=100, help="steps per block")
    ap.add_argument("--backend", choices=("numpy", "cupy"), default="numpy")
    ap.add_argument("--hidden", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--exec", choices=("auto", "eager", "graph"), default="auto")
    ap.add_argument("--comm", choices=("auto", "nccl"), default="auto", help="the gradient exchange (p = 1: nccl's "
                    "all-reduce of one rank, as the trainer runs under mpirun -n 1 --comm nccl)")
    a = ap.parse_args()
    np.seterr(all="ignore")
    res = {"machine": machine(a.backend), "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "commit": git_commit(), "command": " ".join(["python", *sys.argv]), "backend": a.backend,
           "hidden": a.hidden, "batch": a.batch, "comm": a.comm, "rounds": a.rounds, "steps": a.steps, **measure(a),
           "budget_us": BUDGET_US, "budget_pct": BUDGET_PCT, **nvtx_cost()}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "trace_cost.json").write_text(json.dumps(res, indent=1) + "\n")
    md = markdown(res)
    (out / "trace_cost.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
