"""Export a run to the Chrome trace-event JSON that Perfetto and
chrome://tracing open: a process per rank, with tracks for its batches, its
host phases, its phases as measured on the GPU and, where the run collected
GPU activity (`--trace-level timeline|kernels`), one track per CUDA stream
with every kernel, copy and memset. Where the trace has clock lines, every
rank is on rank 0's time axis (trace/activity.py: to_run_s).

    python -m perfmlp.trace.chrome traces/<run-id> -o run.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .activity import to_run_s
from .reader import Run, TraceError, read_run

TID_BATCH, TID_HOST, TID_GPU_PHASES, TID_STREAM0 = 0, 1, 2, 10  # a stream's track: TID_STREAM0 + its index


def chrome_events(run: Run) -> list[dict]:
    ev = []
    for rank, rt in sorted(run.ranks.items()):
        clock = rt.clock
        ev.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
        names = {TID_BATCH: "batches (host)", TID_HOST: "phases (host)", TID_GPU_PHASES: "phases (GPU)"}
        streams: dict = {}

        def host_us(t0_s, off_ms=0.0):
            if clock is None:
                return (t0_s + off_ms / 1e3) * 1e6
            return to_run_s(clock, clock["host_start_ns"] + t0_s * 1e9 + off_ms * 1e6, False) * 1e6

        for b in rt.batches:
            gpu = b.get("clock") == "cupti"
            host_phases = b.get("t_ms_host", b["t_ms"])
            args = {"epoch": b["epoch"], "batch": b["batch"], "samples": b["local_samples"],
                    "bytes_h2d": b["bytes_h2d"], "bytes_d2h": b["bytes_d2h"], "bytes_d2d": b.get("bytes_d2d", 0),
                    "bytes_mpi": b["bytes_mpi"], "bytes_nccl": b["bytes_nccl"], "clock": b.get("clock")}
            ev.append({"name": f"batch {b['batch']}", "cat": "batch", "ph": "X", "pid": rank, "tid": TID_BATCH,
                       "ts": host_us(b["t0_s"]), "dur": b.get("wall_ms", 0.0) * 1e3, "args": args})
            on_gpu = b.get("clock") in ("cuda-events", "cupti")
            for phase, (off, dur) in host_phases.items():
                if on_gpu and not gpu:
                    break  # CUDA-event phases: their origin is on the GPU, not the host clock
                ev.append({"name": phase, "cat": "phase", "ph": "X", "pid": rank, "tid": TID_HOST,
                           "ts": host_us(b["t0_s"], off), "dur": dur * 1e3,
                           "args": {"batch": b["batch"], "flops": b["flops"].get(phase, 0)}})
            if gpu and clock is not None:
                t0 = b["gpu_t0_ns"]
                for phase, (off, dur) in b["t_ms"].items():
                    ev.append({"name": phase, "cat": "gpu phase", "ph": "X", "pid": rank, "tid": TID_GPU_PHASES,
                               "ts": to_run_s(clock, t0 + off * 1e6, True) * 1e6, "dur": dur * 1e3,
                               "args": {"batch": b["batch"]}})
                for g in b["gpu"]:
                    tid = streams.setdefault(g["stream"], TID_STREAM0 + len(streams))
                    a = {"batch": b["batch"], "phase": g["phase"], "correlation": g["corr"]}
                    if g["cat"] == "copy":
                        a.update(bytes=g["bytes"], kind=g["copy"])
                    ev.append({"name": g["name"] or g["copy"] or g["cat"], "cat": g["cat"], "ph": "X", "pid": rank,
                               "tid": tid, "ts": to_run_s(clock, g["start_ns"], True) * 1e6,
                               "dur": (g["end_ns"] - g["start_ns"]) / 1e3, "args": a})
            elif on_gpu:  # CUDA events: offsets from the batch's start on the GPU, drawn from its host start
                for phase, (off, dur) in b["t_ms"].items():
                    ev.append({"name": phase, "cat": "gpu phase", "ph": "X", "pid": rank, "tid": TID_GPU_PHASES,
                               "ts": host_us(b["t0_s"], off), "dur": dur * 1e3, "args": {"batch": b["batch"]}})
        names.update({tid: f"GPU stream {s}" for s, tid in streams.items()})
        ev += [{"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": n}}
               for tid, n in names.items()]
    return ev


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfmlp.trace.chrome",
                                 description="Export a run's trace to Chrome trace-event JSON (Perfetto, "
                                             "chrome://tracing): a process per rank with its batches, host phases, "
                                             "GPU phases and, with GPU activity, a track per CUDA stream.")
    ap.add_argument("run", help="a run folder (traces/<run-id>)")
    ap.add_argument("-o", "--out", required=True, help="the JSON file to write (required)")
    a = ap.parse_args(argv)
    try:
        run = read_run(a.run)
    except TraceError as e:
        print(f"perfmlp.trace.chrome: error: {e}", file=sys.stderr)
        return 2
    try:
        Path(a.out).write_text(json.dumps({"traceEvents": chrome_events(run), "displayTimeUnit": "ms"}))
    except OSError as e:
        print(f"perfmlp.trace.chrome: error: cannot write {a.out}: {e.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {a.out} ({run.run_id}, {run.status})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
