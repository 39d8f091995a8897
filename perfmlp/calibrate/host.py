"""Launches and the host's time: the trainer's own step timed in interleaved rounds (the host's speed
drifts over seconds) at a size whose GPU work is negligible unless said. host_dispatch, drawn first and
last (mean_dispatch): the eager step's host time per operation and the tracer's per phase, alone and by
2 and P ranks, and the graph step's and the batch copies' host time; dispatch_size_factors
(launch_size_factor) and copied_launch_factors (pageable_launch_factor): the launches' time at the
trainer's sizes, and after pageable copies, over the reference's."""
from __future__ import annotations

import tempfile
import time
from contextlib import contextmanager
from statistics import median
from types import SimpleNamespace

import numpy as np

from ..batches import DeviceBatches
from ..comm import Group, NcclReducer, SingleWorld
from ..config import Config
from ..gpu import timing, use_device
from ..gpu.graph import GraphStep
from ..model.costs import step_kernels
from ..model.predict import traced_phases
from ..step import step
from ..trace.format import Counts
from ..trace.writer import NullTracer, make_tracer
from .copies import HOST_BYTES
from .gemm import step_network
from .spread import ratios
from .. import names as N

DISPATCH_SIZES, DISPATCH_BATCH = (16, 16, 10), 16   # a step whose GPU work is negligible


def resident_step(cp, sizes, b, group, pieces: int = 1, source: str = N.RESIDENT, next_piece=None):
    """(network, batches, reducer) of the trainer's eager step at `sizes` on pieces of b samples: `pieces`
    random pieces from `source`, the NCCL reducer over `group`."""
    net, _, _ = step_network(cp, sizes, "float32", b)
    rng = np.random.default_rng(0)
    x = rng.random((pieces * b, sizes[0]), dtype=np.float32)
    y = np.eye(sizes[-1], dtype=np.float32)[rng.integers(0, sizes[-1], pieces * b)]
    return net, DeviceBatches(cp, x, y, source, b, next_piece=next_piece), NcclReducer(cp, group, net)


def _dispatch_step_times(cp, group, barrier, rounds: int, reps: int) -> tuple[dict, dict]:
    """This rank's host seconds per step at DISPATCH_SIZES, median over rounds started together after
    `barrier` (a first round warms up, captures the graph), keyed untraced, traced, graph (one replay),
    static and pinned (the piece's two copies into static inputs, from pinned memory); and each round's."""
    stream = use_device(cp, cp.cuda.Device().id)   # the trainer's own non-blocking stream, made current
    bl = DISPATCH_BATCH
    net, batches, reducer = resident_step(cp, DISPATCH_SIZES, bl, group, pieces=4)
    world1 = SingleWorld()
    tracer = make_tracer(Config(precision="float32", trace_dir=tempfile.mkdtemp(), run_id="calibrate"), world1)
    tracer.attach(world1, SimpleNamespace(name="cupy", xp=cp, net=net, reducer=reducer))
    counts = Counts()
    graph = GraphStep(cp, net, batches, reducer, stream)
    pinned = DeviceBatches(cp, cp.asnumpy(batches.xr), cp.asnumpy(batches.yr), N.PINNED, bl)
    quiet, copied = NullTracer().phase, Counts()   # the copies' counts apart: the steps' stay a batch's

    def copies(copy):
        def one_round():
            return timing.per_call_s(copy, reps, start=barrier, end=stream.synchronize)
        return one_round

    def steps(tr, graph_step):
        def one_round():
            net.ops = tr.ops
            k = iter(range(reps))

            def one_step():
                tr.begin_batch(0, next(k), bl, bl)
                step(net, batches, reducer, 0, bl, tr.phase, counts, graph_step)
                tr.end_batch(None, counts)
                counts.reset()
            return timing.per_call_s(one_step, reps, start=barrier, end=stream.synchronize)
        return one_round
    out = timing.rounds({N.UNTRACED: steps(NullTracer(), None), "traced": steps(tracer, None),
                         "graph": steps(NullTracer(), graph),
                         "static": copies(lambda: batches.static(0, bl, copied)),
                         N.PINNED: copies(lambda: pinned.get(0, bl, quiet, copied))}, rounds, warmup_rounds=1)
    tracer.close("complete")
    return {k: float(median(v)) for k, v in out.items()}, out


def dispatch_size_factors(cp, hidden, local, log, rounds: int = 4, reps: int = 30) -> list[dict]:
    """launch_size_factor entries {hidden, batch, factor}: the host's time per operation to enqueue the eager step at
    784-H-10 (H in `hidden`, b in `local`) over its time at DISPATCH_SIZES, median ratio over the rounds."""
    stream = use_device(cp, cp.cuda.Device().id)
    group, tr, counts = SingleWorld(), NullTracer(), Counts()

    def host_time(sizes, b):
        net, batches, reducer = resident_step(cp, sizes, b, group)

        def one_round():
            net.ops = tr.ops

            def one_step():
                step(net, batches, reducer, 0, b, tr.phase, counts)
                counts.reset()
            t = timing.per_call_s(one_step, reps, start=stream.synchronize)   # the host's time to enqueue them
            stream.synchronize()
            return t
        return one_round
    tiny = (0, DISPATCH_BATCH)
    measures = {tiny: host_time(DISPATCH_SIZES, DISPATCH_BATCH),
                **{(h, b): host_time((Config.input_size, h, Config.num_classes), b) for h in hidden for b in local}}
    t = timing.rounds(measures, rounds, warmup_rounds=1)
    out = [{"hidden": h, "batch": b, "factor": float(median(x / y for x, y in zip(t[h, b], t[tiny])))}
           for (h, b) in measures if (h, b) != tiny]
    log("host time per operation of the eager step at the trainer's sizes, over the calibration's size: "
        + ", ".join(f"H={e['hidden']} b={e['batch']} {e['factor']:.2f}" for e in out))
    return out


def host_dispatch(cp, world, log, rounds: int = 5, reps: int = 200) -> dict:
    """The host's time per operation of the eager step (kernels and collective call, as the model counts them) and the
    tracer's per phase: one rank alone (launch_overhead_s, trace_phase_host_s, graph_step_host_s, static_copy_host_s and
    pinned_copy_host_s per copy call), then groups of 2 and P ranks at once, the slowest rank's (host_dispatch_s)."""
    ops = sum(len(k) for k in step_kernels(DISPATCH_SIZES, DISPATCH_BATCH, None, 4).values()) + 1
    phases = traced_phases(N.NCCL, N.RESIDENT, N.EAGER)
    P = world.size
    res, points = {}, []
    groups = []   # kept alive: the reducers' NCCL communicators are cached by the group object's id
    for g in sorted({1, 2, P} & set(range(1, P + 1))):
        member = world.rank < g
        if P > 1:
            from mpi4py import MPI
            sub = world.comm.Split(0 if member else MPI.UNDEFINED, world.rank)
        if member:
            group = Group(sub, world.library) if P > 1 else SingleWorld()
            groups.append(group)
            t, by_round = _dispatch_step_times(cp, group, sub.Barrier if P > 1 else (lambda: None), rounds, reps)
            per_rank = group.allgather(t)
        world.barrier()
        if world.rank != 0:
            continue
        launch = [r[N.UNTRACED] / ops for r in per_rank]
        trace = [max(r["traced"] - r[N.UNTRACED], 0.0) / phases for r in per_rank]
        slow = max(range(g), key=lambda i: per_rank[i]["traced"])
        log(f"host time per launched operation, {g} rank(s) at once ({ops} a step): "
            + " ".join(f"{v * 1e6:.2f}" for v in launch) + " us; the tracer per phase: "
            + " ".join(f"{v * 1e6:.2f}" for v in trace) + f" us (slowest: rank {slow})")
        if g == 1:
            res["launch_overhead_s"], res["trace_phase_host_s"] = launch[0], trace[0]
            res["graph_step_host_s"] = per_rank[0]["graph"]
            res["static_copy_host_s"], res["pinned_copy_host_s"] = per_rank[0]["static"] / 2, per_rank[0][N.PINNED] / 2
            res["_rounds"] = {k: by_round[k] for k in (N.UNTRACED, "graph")}   # rank 0's, for the spread
            log(f"host time per batch of the graph step (resident, one replay), one rank: "
                f"{per_rank[0]['graph'] * 1e6:.2f} us")
            log(f"host time per batch copy call, one rank: into a graph's static inputs "
                f"{res['static_copy_host_s'] * 1e6:.2f} us, "
                f"from pinned memory {res['pinned_copy_host_s'] * 1e6:.2f} us")
        else:
            points.append({"procs": g, "launch_s": float(launch[slow]), "trace_phase_s": float(trace[slow])})
    if points:
        res["host_dispatch_s"] = points
    return res


def mean_dispatch(a: dict, b: dict) -> dict:
    """The mean of two host_dispatch results (rank 0's; {} elsewhere), and in `_spread_host` every round's
    ratio to the median, the eager and the graph step's apart."""
    if not a:
        return {}
    out = {k: (a[k] + b[k]) / 2 for k in ("launch_overhead_s", "trace_phase_host_s", "graph_step_host_s",
                                          "static_copy_host_s", "pinned_copy_host_s") if k in a and k in b}
    rounds = [(a.get("_rounds") or {}).get(k, []) + (b.get("_rounds") or {}).get(k, []) for k in (N.UNTRACED, "graph")]
    out["_spread_host"] = [r for values in rounds for r in ratios(values)]
    if a.get("host_dispatch_s"):
        out["host_dispatch_s"] = [{"procs": x["procs"], **{k: (x[k] + y[k]) / 2 for k in ("launch_s", "trace_phase_s")}}
                                  for x, y in zip(a["host_dispatch_s"], b["host_dispatch_s"])]
    return out


def copied_launch_factors(cp, hidden, local, log, rounds: int = 4, reps: int = 20) -> dict:
    """{"pageable_launch_factor": [{hidden, batch, factor}]}: the host's time from the return of the
    piece's pageable H2D copies to the end of the step's launches, over the same launches from resident
    data (a copy through the runtime's staging evicts the host's caches), median ratio over the rounds."""
    stream = use_device(cp, cp.cuda.Device().id)
    D, C = Config.input_size, Config.num_classes
    host = np.ones(HOST_BYTES // 4, dtype=np.float32)
    m = N.PAGEABLE
    launch_time = _launches_after_copies(cp, stream, host, reps)
    measures = {(h, b, mem): launch_time((D, h, C), b, mem) for h in hidden for b in local for mem in (None, m)}
    t = timing.rounds(measures, rounds, warmup_rounds=1)
    factors = [{"hidden": h, "batch": b, "factor": float(median(x / y for x, y in zip(t[h, b, m], t[h, b, None])))}
               for h in hidden for b in local]
    log(f"host time of the eager step's launches after its {m} copies, over without them: "
        + ", ".join(f"H={e['hidden']} b={e['batch']} {e['factor']:.2f}" for e in factors))
    return {f"{m}_launch_factor": factors}


def _launches_after_copies(cp, stream, host, reps: int):
    """launch_time(sizes, b, memory): a round of copied_launch_factors (memory None: resident)."""
    group, tr, counts = SingleWorld(), NullTracer(), Counts()
    D, C = Config.input_size, Config.num_classes
    marks = {}

    @contextmanager
    def phase(name):
        yield
        if name == N.Phase.H2D:
            marks["copied"] = time.perf_counter()

    def launch_time(sizes, b, memory):
        net, batches, reducer = resident_step(cp, sizes, b, group)
        n = max(2, len(host) // (b * D) - 1)
        if memory:
            y = np.eye(C, dtype=np.float32)[np.arange(n * b) % C]
            batches = DeviceBatches(cp, host[:n * b * D].reshape(n * b, D), y, memory, b)

        def one_round():
            net.ops = tr.ops
            t = []
            for i in range(reps):
                lo = (i % n) * b if memory else 0
                stream.synchronize()
                marks["copied"] = time.perf_counter()   # resident: no copy, the launches start here
                step(net, batches, reducer, lo, lo + b, phase, counts)
                t.append(time.perf_counter() - marks["copied"])
                counts.reset()
            stream.synchronize()
            return median(t)
        return one_round
    return launch_time
