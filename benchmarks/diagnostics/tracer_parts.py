"""Where the default tracer's time goes inside the eager GPU step: its
parts, interleaved in one process (a one-off diagnostic).

Variants, each a block of `--steps` steps of the trainer's own `step`, in a
new random order every round:
- null: NullTracer (its begin_batch and end_batch are Python no-ops);
- full: the real Tracer at the default level, with the Python batch hooks;
- full-c: the same with the C batch hooks (where built);
- stamps: the Tracer's phase stamps (C), begin/end as null's (Python no-ops);
- cnull: no stamps, begin/end C callables that do nothing of note;
- cstamps: the Tracer's phase stamps, begin/end C callables;
- lean: the Tracer's stamps and record, end_batch without its checks;
- one: begin_batch a C stamp (no arguments), end_batch the Tracer's fast
  path with its checks, taking the batch's ids itself.
Each variant's cost is its block time less null's in the same round.

    python benchmarks/diagnostics/tracer_parts.py --hidden 512 --batch 3200 --out DIR
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trace_cost import NB, setup  # noqa: E402
from perfmlp.step import step  # noqa: E402
from perfmlp.trace.format import Counts  # noqa: E402
from perfmlp.trace.phases import stamp_class  # noqa: E402
from perfmlp.trace.records import Phase  # noqa: E402
from perfmlp.trace.writer import NullTracer  # noqa: E402


class Parts:
    """A tracer-shaped object from given hooks."""

    ops = None

    def __init__(self, phase, begin, end, clear):
        self.phase, self.begin_batch, self.end_batch, self.clear = phase, begin, end, clear


def py_noop(*a):
    return None


_now = time.perf_counter


def _record_buffer(tracer, stamps: list):
    """The Python fast path's record arguments (the tracer on its fast
    path), packing into a buffer of one block's records: (rec, pack, size,
    pos, clear)."""
    fp = tracer._fp
    rec, pack, size = list(fp._rec), fp._pack, fp.size
    rec[0] = bytearray(size * 2000)
    pos = [0]

    def clear():
        pos[0] = 0
        stamps.clear()
    return rec, pack, size, pos, clear


def lean_parts(tracer, phase, stamps):
    """Begin and end that store and pack the record as the fast path does,
    without its checks, into a buffer of one block's records."""
    rec, pack, size, pos, clear = _record_buffer(tracer, stamps)

    def begin(epoch, batch, samples, local):
        rec[3] = epoch
        rec[4] = batch
        stamps.clear()
        rec[6] = _now()

    def end(loss, counts):
        rec[7] = _now()
        rec[5] = loss
        rec[9:-1] = stamps
        rec[1] = pos[0]
        pack(*rec)
        pos[0] += size
    return Parts(phase, begin, end, clear)


def one_parts(tracer, stamps):
    """begin_batch: one C stamp; end_batch(epoch, batch, samples, local, loss,
    counts) does the fast path's checks and packs."""
    fp, note = tracer._fp, tracer._note
    rec, pack, size, pos, clear = _record_buffer(tracer, stamps)
    shape = [fp.samples, fp.local, fp.nfast + 1]
    begin = stamp_class(stamps)().__enter__

    def end(epoch, batch, samples, local, loss, counts):
        t1 = _now()
        if (samples != shape[0] or local != shape[1] or len(stamps) != shape[2] or note.coll != counts.collectives
                or note.bytes != (counts.bytes_h2d, counts.bytes_d2h, counts.bytes_d2d, counts.bytes_mpi,
                                  counts.bytes_nccl)):
            raise RuntimeError("not the fast path")
        rec[3] = epoch
        rec[4] = batch
        rec[5] = loss
        rec[6] = stamps[0]
        rec[7] = t1
        rec[9:-1] = stamps[1:]
        stamps.clear()
        rec[1] = pos[0]
        pack(*rec)
        pos[0] += size
    p = Parts(phase_of(stamps), begin, end, clear)
    p.zero = True
    return p


def phase_of(stamps: list):
    return dict.fromkeys(Phase, stamp_class(stamps)()).__getitem__


def variants(tracers: dict):
    """The variants; the tracers on their fast path (after a batch of the size)."""
    null = NullTracer()
    stamps: list = []
    phase = phase_of(stamps)
    lean: list = []
    tracer = tracers["python"]
    return {"null": null, "full": tracer, **({"full-c": tracers["c"]} if "c" in tracers else {}),
            "stamps": Parts(phase, null.begin_batch, null.end_batch, stamps.clear),
            "cnull": Parts(null.phase, max, slice, None),
            "cstamps": Parts(phase, max, slice, stamps.clear),
            "lean": lean_parts(tracer, phase_of(lean), lean),
            "one": one_parts(tracer, [])}


def block(be, tr, n: int, B: int):
    net = be.net
    net.ops = tr.ops
    counts = Counts()
    clear = getattr(tr, "clear", None)
    zero = getattr(tr, "zero", False)
    be.sync()
    t0, c0 = time.perf_counter(), time.thread_time()
    for k in range(n):
        lo = (k % NB) * B
        if zero:
            tr.begin_batch()
            step(net, be.batches, be.reducer, lo, lo + B, tr.phase, counts, be.graph, be.parts)
            tr.end_batch(0, k, B, B, 0.5, counts)
        else:
            tr.begin_batch(0, k, B, B)
            step(net, be.batches, be.reducer, lo, lo + B, tr.phase, counts, be.graph, be.parts)
            tr.end_batch(0.5, counts)
        counts.reset()
    be.sync()
    t1, c1 = time.perf_counter(), time.thread_time()
    if clear is not None:
        clear()
    return (t1 - t0) / n * 1e6, (c1 - c0) / n * 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--batch", type=int, default=3200)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--backend", default="cupy")
    a = ap.parse_args()
    a.exec, a.comm = "eager", ("nccl" if a.backend == "cupy" else "auto")
    be, tracers = setup(a, tempfile.mkdtemp())
    for tracer in tracers.values():
        block(be, tracer, 100, a.batch)
    vs = variants(tracers)
    for tr in vs.values():
        block(be, tr, 100, a.batch)
    rng = np.random.default_rng(0)
    names = list(vs)
    wall = {n: [] for n in names}
    cpu = {n: [] for n in names}
    for _ in range(a.rounds):
        for i in rng.permutation(len(names)):
            w, c = block(be, vs[names[i]], a.steps, a.batch)
            wall[names[i]].append(w)
            cpu[names[i]].append(c)
    for tracer in tracers.values():
        tracer.close("complete")
    res = {"hidden": a.hidden, "batch": a.batch, "rounds": a.rounds, "steps": a.steps, "variants": {}}
    lines = [f"H={a.hidden} B={a.batch} eager nccl, {a.rounds} rounds of {a.steps} steps, random order",
             "variant | wall us | cost us median (p25, p75) | cpu us | cpu cost median"]
    for n in names:
        d = [x - y for x, y in zip(wall[n], wall["null"])]
        dc = [x - y for x, y in zip(cpu[n], cpu["null"])]
        q = statistics.quantiles(d, n=4)
        res["variants"][n] = {"wall_us": statistics.median(wall[n]), "cost_us": statistics.median(d),
                              "cost_p25": q[0], "cost_p75": q[2], "cpu_us": statistics.median(cpu[n]),
                              "cpu_cost_us": statistics.median(dc)}
        v = res["variants"][n]
        lines.append(f"{n} | {v['wall_us']:.2f} | {v['cost_us']:+.2f} ({q[0]:+.2f}, {q[2]:+.2f}) | "
                     f"{v['cpu_us']:.2f} | {v['cpu_cost_us']:+.2f}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"parts-b{a.batch}.json").write_text(json.dumps(res, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
