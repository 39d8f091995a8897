"""The input pipeline's host side alone: how fast this host stages a
pageable batch into the pipeline's buffers, and what the training loop's
thread, busy in Python, takes from it. No GPU: perfmlp/gpu/prefetch.py's
Pipeline runs as the trainer runs it, on host-memory slots with the copies
left out (on a GPU they are the copy engine's, not the host's).

    python benchmarks/prefetch_stage.py --out DIR

writes DIR/prefetch_stage.json and DIR/prefetch_stage.md (machine, date,
commit, command). Method: x pieces of B x 784 float32 and y of B x 10
(B = 3200: 10.2 MB, the trainer's batch at H=512, B=3200, p=1) taken in
turn from NPOS batch positions (a source larger than the last-level cache
of most hosts). For each staging configuration (threads, lookahead) and
each kind of loop thread, a loop takes `--steps` pieces through
Pipeline.get, the loop's thread doing between two pieces:
- `idle`: nothing (the pipeline alone: its staging rate);
- `graph`: `--graph-us` of Python with a GIL-free call every 20 us, as a
  graph step's host work (a few calls, each letting go of the GIL);
- `eager`: `--eager-us` the same way, as an eager step's launches;
- `python`: `--eager-us` of Python that never lets go of the GIL (the
  worst case: a task waits for CPython's switch interval);
- `nogil`: `--eager-us` of NumPy calls that let go of the GIL, the CPU as
  busy but the GIL free (the control: what is left is the host's cores).
Reported per configuration and loop: the median time per piece over rounds
(range in brackets; the configurations interleaved in rounds), against the
ideal max(loop's work, staging alone), and the staging's own rate (bytes
over the pieces' host staging time, Pipeline.stage_s).

Then the GIL hand-over alone, at each switch interval: a second thread
copies 1 MB (np.copyto, which lets go of the GIL) over and over for 0.2 s
while the loop's thread sleeps, spins in Python, or spins in Python with a
GIL-free call every 20 us; reported: the copies done, the wall time per
copy (0.2 s over the copies: a copy and its waits for the GIL) and a copy's
own time (the median of np.copyto's).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfmlp.gpu.prefetch import Pipeline  # noqa: E402
from perfmlp.gpu.timing import rounds, summary  # noqa: E402
from perfmlp.trace.manifest import git_commit  # noqa: E402

D, C, NPOS = 784, 10, 8
LOOPS = ("idle", "graph", "eager", "python", "nogil")


def busy(seconds: float, release, scratch=np.ones(8192, np.float32), big=np.ones(1 << 15, np.float32)) -> None:
    """The loop thread's host work for `seconds`: Python with a short
    GIL-free NumPy call every 20 us (release True), Python alone (False),
    or ("nogil") NumPy calls back to back, the GIL let go of nearly all
    the time (the CPU busy, the GIL free: the control)."""
    end = time.perf_counter() + seconds
    nxt = time.perf_counter()
    while (t := time.perf_counter()) < end:
        if release == "nogil":
            np.multiply(big, 1.0, out=big)
        elif release and t >= nxt:
            np.multiply(scratch, 1.0, out=scratch)   # lets go of the GIL, as a launch does
            nxt = t + 20e-6


class StagingSlots:
    """CudaSlots' interface in host memory with the copies left out: the staging alone."""

    def __init__(self, n: int, xdtype, ydtype, slots: int):
        self.slots = slots
        self.xs = [np.zeros((n, D), xdtype) for _ in range(slots)]
        self.ys = [np.zeros((n, C), ydtype) for _ in range(slots)]

    def staging(self, slot: int, part: int):
        return (self.xs, self.ys)[part][slot]

    def copying(self, slot: int) -> bool:
        return False

    def noop(self, *args) -> None:
        pass

    bind_thread = wait_copied = wait_consumed = copy_rows = ready = release = sync = noop


class Case:
    """One staging configuration and one loop, its pipeline kept between rounds."""

    def __init__(self, x, y, B, threads, lookahead, switch_s, work_s, release):
        self.B, self.switch_s, self.work_s, self.release = B, switch_s, work_s, release
        self.dev = StagingSlots(B, x.dtype, y.dtype, lookahead + 1)
        src = type("Src", (), {"xh": x, "yh": y})
        self.pipe = Pipeline(self.dev, src, self.next_piece, True, threads, lookahead)
        self.k = 0

    def next_piece(self, lo, hi):
        nlo = (lo + self.B) % (NPOS * self.B)
        return nlo, nlo + self.B

    def run(self, steps: int) -> float:
        """Seconds per piece over `steps` pieces, up to the pieces started
        being staged (Pipeline.settle: none runs on into the next case's
        time; the next run starts with them, as this one did)."""
        sys.setswitchinterval(self.switch_s)
        t0 = time.perf_counter()
        for _ in range(steps):
            self.take()
        self.pipe.settle()
        return (time.perf_counter() - t0) / steps

    def take(self) -> None:
        lo = (self.k % NPOS) * self.B
        self.k += 1
        self.pipe.get(lo, lo + self.B)
        busy(self.work_s, self.release)


def handover(switch_s: float, loop: str, seconds: float = 0.2) -> dict:
    """Per copy of 1 MB in a second thread, while the loop's thread does `loop`."""
    a = np.ones(1 << 18, np.float32)
    b, times, stop = np.empty_like(a), [], threading.Event()

    def copies():
        while not stop.is_set():
            t = time.perf_counter()
            np.copyto(b, a)
            times.append(time.perf_counter() - t)
    sys.setswitchinterval(switch_s)
    th = threading.Thread(target=copies)
    th.start()
    if loop == "sleeps":
        time.sleep(seconds)
    else:
        busy(seconds, release=loop != "python")
    stop.set()
    th.join()
    sys.setswitchinterval(0.005)
    us = 1e6 * np.array(times[1:])
    return {"switch_ms": 1e3 * switch_s, "loop": loop, "copies": len(us), "wall_us": 1e6 * seconds / max(1, len(us)),
            "copy_us": float(np.median(us))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--batch", type=int, default=3200)
    ap.add_argument("--threads", default="1,2,4,8")
    ap.add_argument("--lookahead", default="1,2")
    ap.add_argument("--graph-us", type=float, default=60.0)
    ap.add_argument("--eager-us", type=float, default=600.0)
    ap.add_argument("--switch-ms", default="5,0.2", help="CPython's switch intervals to try, ms (sys.setswitchinterval)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    B = a.batch
    x, y = rng.random((NPOS * B, D), dtype=np.float32), rng.random((NPOS * B, C), dtype=np.float32)
    work = {"idle": (0.0, True), "graph": (a.graph_us / 1e6, True), "eager": (a.eager_us / 1e6, True),
            "python": (a.eager_us / 1e6, False), "nogil": (a.eager_us / 1e6, "nogil")}
    cases = {(t, la, sw, loop): Case(x, y, B, t, la, sw / 1e3, *work[loop])
             for t in map(int, a.threads.split(",")) for la in map(int, a.lookahead.split(","))
             for sw in map(float, a.switch_ms.split(",")) for loop in LOOPS}
    for c in cases.values():
        c.run(3)
    sys.setswitchinterval(0.005)
    times = rounds({key: (lambda c=c: c.run(a.steps)) for key, c in cases.items()}, a.rounds)
    piece_bytes = (x[:B].nbytes + y[:B].nbytes)
    rows = []
    for (t, la, sw, loop), ts in times.items():
        c = cases[(t, la, sw, loop)]
        s = summary(ts)
        rows.append({"threads": t, "lookahead": la, "switch_ms": sw, "loop": loop, "work_us": 1e6 * c.work_s,
                     "median_us": 1e6 * s.median, "min_us": 1e6 * s.min, "max_us": 1e6 * s.max, "spread": s.spread,
                     "stage_us": 1e6 * c.pipe.stage_s / c.pipe.staged_pieces,
                     "stage_gb_per_s": c.pipe.staged_bytes / c.pipe.stage_s / 1e9})
        c.pipe.close()
    gil = [handover(sw / 1e3, loop) for sw in map(float, a.switch_ms.split(",")) for loop in ("sleeps", "eager", "python")]
    write(Path(a.out), rows, gil, piece_bytes, " ".join(sys.argv))
    return 0


def write(out: Path, rows: list, gil: list, piece_bytes: int, command: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    meta = {"machine": f"{platform.processor() or platform.machine()} ({platform.node()})",
            "date": dt.date.today().isoformat(), "commit": git_commit() or "unknown",
            "command": f"python {command}", "piece_bytes": piece_bytes}
    tmp = out / "prefetch_stage.json.tmp"
    tmp.write_text(json.dumps({**meta, "rows": rows, "gil_handover": gil}, indent=1))
    tmp.replace(out / "prefetch_stage.json")
    key = lambda r: (r["threads"], r["lookahead"], r["switch_ms"])  # noqa: E731
    alone = {key(r): r["median_us"] for r in rows if r["loop"] == "idle"}
    lines = ["# The input pipeline's host staging", "",
             f"machine: {meta['machine']}, date: {meta['date']}, commit: {meta['commit']}",
             f"command: `{meta['command']}`", "",
             f"A {piece_bytes / 1e6:.1f} MB piece staged from pageable memory (copies to the device left out); "
             "switch: CPython's switch interval. us per piece, median over rounds [range]; "
             "ideal: max(the loop's work, staging with the loop idle); stage: the time some staging task ran, "
             "per piece (mean over every piece taken, Pipeline.stage_s), and the rate it gives.", "",
             "| threads | lookahead | switch ms | loop thread | its work us | us per piece | ideal | over ideal | "
             "stage us (GB/s) |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ideal = max(r["work_us"], alone[key(r)])
        lines.append(f"| {r['threads']} | {r['lookahead']} | {r['switch_ms']:g} | {r['loop']} | {r['work_us']:.0f} | "
                     f"{r['median_us']:.0f} [{r['min_us']:.0f}-{r['max_us']:.0f}] | {ideal:.0f} | "
                     f"{r['median_us'] / ideal:.2f} | {r['stage_us']:.0f} ({r['stage_gb_per_s']:.1f}) |")
    lines += ["", "GIL hand-over: a 1 MB np.copyto looped in a second thread for 0.2 s beside the loop's thread "
              "(eager: Python with a GIL-free call every 20 us; python: Python alone)", "",
              "| switch ms | loop thread | copies | wall us per copy | the copy's own us |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {g['switch_ms']:g} | {g['loop']} | {g['copies']} | {g['wall_us']:.0f} | {g['copy_us']:.0f} |" for g in gil]
    tmp = out / "prefetch_stage.md.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(out / "prefetch_stage.md")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
