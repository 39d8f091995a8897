"""Export a run to the Chrome trace-event JSON that Perfetto and chrome://tracing open: a process
per rank, a track each for its batches, host phases, GPU phases and CUDA streams, on rank 0's
time axis where the trace has clock lines (docs/trace-format.md).

Perfetto folds thread id 0 into the process's track and drops a slice that partly overlaps
another on its track: every track has its own thread id, never 0, and times are whole
nanoseconds on which a slice running past the next one's start is cut there (its measured length
kept in `args.measured_us`). `python -m perfmlp.report.perfetto` checks this with Perfetto."""
from __future__ import annotations

import errno
import json
import sys
from pathlib import Path

from .. import names as N
from ..errors import Parser, PerfmlpError, write_whole
from ..safeio import check_output
from .activity import to_run_s
from .format import BYTE_COUNTS
from .reader import Run, TraceError, read_run

BATCHES, HOST, GPU_PHASES, STREAM0 = 1, 2, 3, 10  # a track's number in its rank; a stream's: STREAM0 + its index
TRACKS_PER_RANK = 1000


def pid(rank: int) -> int:
    """A rank's process id in the file: never 0."""
    return rank + 1


def tid(rank: int, track: int) -> int:
    """A track's thread id: unique in the file, never 0."""
    return pid(rank) * TRACKS_PER_RANK + track


def _slices(run: Run, rank: int) -> dict[int, list[dict]]:
    """track -> its X events (unordered) for one rank."""
    rt = run.ranks[rank]
    clock = rt.clock
    p = pid(rank)
    out: dict = {BATCHES: [], HOST: [], GPU_PHASES: []}
    streams: dict = {}
    gpu_free_us = float("-inf")   # where the GPU phases drawn so far end

    def host_us(t0_s: float, off_ms: float = 0.0) -> float:
        if clock is None:
            return (t0_s + off_ms / 1e3) * 1e6
        return to_run_s(clock, clock.host_start_ns + t0_s * 1e9 + off_ms * 1e6, False) * 1e6

    def add(track, name, cat, ts, dur, args):
        out.setdefault(track, []).append({"name": str(name), "cat": cat, "ph": "X", "pid": p,
                                          "tid": tid(rank, track), "ts": ts, "dur": max(dur, 0.0), "args": args})

    for b in rt.batches:
        add(BATCHES, f"batch {b.batch}", "batch", host_us(b.t0_s), b.wall_ms * 1e3,
            {"epoch": b.epoch, "batch": b.batch, "samples": b.local_samples,
             **{k: getattr(b, k) for k in BYTE_COUNTS}, "clock": b.clock})
        if b.clock != N.CUDA_EVENTS:  # CUDA-event phases start on the GPU, not on the host clock
            for phase, (off, dur) in (b.t_ms_host or b.t_ms).items():
                add(HOST, phase, "phase", host_us(b.t0_s, off), dur * 1e3,
                    {"batch": b.batch, "flops": b.flops.get(phase, 0)})
        if b.clock == N.CUPTI and clock is not None:
            for phase, (off, dur) in b.t_ms.items():
                add(GPU_PHASES, phase, "gpu phase", to_run_s(clock, b.gpu_t0_ns + off * 1e6, True) * 1e6, dur * 1e3,
                    {"batch": b.batch})
            for g in b.gpu:
                track = streams.setdefault(g.stream, STREAM0 + len(streams))
                a = {"batch": b.batch, "phase": str(g.phase), "correlation": g.corr,
                     **({"bytes": g.bytes, "kind": g.copy} if g.cat == "copy" else {})}
                add(track, g.name or g.copy or g.cat, g.cat, to_run_s(clock, g.start_ns, True) * 1e6,
                    (g.end_ns - g.start_ns) / 1e3, a)
        elif b.clock == N.CUDA_EVENTS and b.t_ms:
            # offsets from the batch's first event on the GPU: drawn where the host recorded it or, if
            # later, where the batch before ends (the stream runs them in order; the GPU trails the host)
            start = max(host_us(b.t0_s), gpu_free_us)
            for phase, (off, dur) in b.t_ms.items():
                add(GPU_PHASES, phase, "gpu phase", start + off * 1e3, dur * 1e3, {"batch": b.batch})
            gpu_free_us = start + max(off + dur for off, dur in b.t_ms.values()) * 1e3
    out["names"] = {BATCHES: "batches (host)", HOST: "phases (host)", GPU_PHASES: "phases (GPU)",
                    **{t: f"GPU stream {s}" for s, t in streams.items()}}
    return out


def ns(us: float) -> int:
    """Microseconds as Perfetto stores them: whole nanoseconds, rounded."""
    return round(us * 1e3)


def one_after_another(events: list[dict]) -> list[dict]:
    """A track's slices in order on Perfetto's nanosecond grid, each cut where the next one starts."""
    for e in events:
        e["ts"], e["dur"] = ns(e["ts"]) / 1e3, ns(e["dur"]) / 1e3
    events.sort(key=lambda e: (e["ts"], -e["dur"]))
    for a, b in zip(events, events[1:]):
        if ns(a["ts"]) + ns(a["dur"]) > ns(b["ts"]):
            a["args"]["measured_us"] = a["dur"]
            a["dur"] = max(ns(b["ts"]) - ns(a["ts"]), 0) / 1e3
    return events


def chrome_events(run: Run) -> list[dict]:
    ev = []
    for rank in sorted(run.ranks):
        tracks = _slices(run, rank)
        names = tracks.pop("names")
        p = pid(rank)
        ev.append({"name": "process_name", "ph": "M", "pid": p, "args": {"name": f"rank {rank}"}})
        ev.append({"name": "process_sort_index", "ph": "M", "pid": p, "args": {"sort_index": rank}})
        for track, name in names.items():
            if not tracks.get(track):
                continue
            t = tid(rank, track)
            ev.append({"name": "thread_name", "ph": "M", "pid": p, "tid": t, "args": {"name": name}})
            ev.append({"name": "thread_sort_index", "ph": "M", "pid": p, "tid": t, "args": {"sort_index": track}})
            ev += one_after_another(tracks[track])
    return ev


def main(argv=None) -> int:
    ap = Parser(prog="python -m perfmlp.trace.chrome",
                description="Export a run's trace to Chrome trace-event JSON (Perfetto, chrome://tracing): a process "
                            "per rank with its batches, host phases, GPU phases and, with GPU activity, a track per "
                            "CUDA stream.")
    ap.add_argument("run", help="a run folder (traces/<run-id>)")
    ap.add_argument("-o", "--out", required=True, help="the JSON file to write (required)")
    try:
        a = ap.parse_args(argv)
        check_output(a.out, inputs=[a.run], what="-o")   # never over the run it reads, a link or a device
        run = read_run(a.run)
        text = json.dumps({"traceEvents": chrome_events(run), "displayTimeUnit": "ms"})
        try:
            write_whole(Path(a.out), text)
        except OSError as e:
            print(f"perfmlp.trace.chrome: error: cannot write {a.out}: {e.strerror}", file=sys.stderr)
            bad_path = e.errno in (errno.ENOENT, errno.EACCES, errno.ENOTDIR, errno.EISDIR)
            return 2 if bad_path else 1  # a path that cannot be written: bad input; a full disk: failed
    except (TraceError, PerfmlpError) as e:  # InputError is a PerfmlpError
        print(f"perfmlp.trace.chrome: error: {e}", file=sys.stderr)
        return 2
    except RecursionError:
        print(f"perfmlp.trace.chrome: error: {a.run}: JSON nested too deeply", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("perfmlp.trace.chrome: interrupted", file=sys.stderr)
        return 130
    print(f"wrote {a.out} ({run.run_id}, {run.status})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
