"""Is the eager step's host time a property of the process launch? (issue 13)

The blind sweeps' eager runs spread up to 2x between repeats of one
configuration, and the model, calibrated once, sits near the fastest. Each
process launched here times the host's side of the trainer's eager step at a
tiny size (perfmlp/calibrate.py _dispatch_step_times: step.py with resident
batches and the NCCL reducer, untraced and at the counters level), all ranks
of the launch at once, in several rounds, and writes one JSON line per rank:
the rounds' host us per step and the CPUs the process ran on. Launched
several times in a row, the lines show whether the time varies more between
launches than within one. On the GPU machine, from the project root:

    source benchmarks/gpu_env.sh
    for i in 1 2 3 4 5 6; do for p in 1 4; do
      $MPIRUN -n $p python3 benchmarks/host_jitter.py --launch $i --out $OUT/host_jitter.jsonl; done; done
    python3 benchmarks/host_jitter.py --table $OUT/host_jitter.jsonl > $OUT/host_jitter.md
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path


def current_cpu() -> int:
    """The CPU this process last ran on (/proc/self/stat, field 39)."""
    stat = Path("/proc/self/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[36])


def measure(launch: int, out: Path, rounds: int, reps: int) -> None:
    from perfmlp.calibrate import _dispatch_step_times
    from perfmlp.comm import make_world
    from perfmlp.gpu import require_cupy
    from perfmlp.partition import Group, LocalGroup
    cp = require_cupy()
    world = make_world()
    cp.cuda.Device(world.rank % cp.cuda.runtime.getDeviceCount()).use()
    group = Group(world.comm, world.library) if world.size > 1 else LocalGroup()
    barrier = world.comm.Barrier if world.size > 1 else (lambda: None)
    cpus, times = [current_cpu()], []
    for _ in range(rounds):   # each call: a warm-up round and one timed round
        times.append(_dispatch_step_times(cp, group, barrier, 1, reps))
        cpus.append(current_cpu())
    line = {"launch": launch, "procs": world.size, "rank": world.rank, "cpus": cpus,
            "affinity": len(os.sched_getaffinity(0)),
            "untraced_us": [1e6 * t["untraced"] for t in times], "traced_us": [1e6 * t["traced"] for t in times]}
    for text in group.allgather(json.dumps(line)):
        if world.rank == 0:
            with open(out, "a") as f:
                f.write(text + "\n")


def table(path: Path) -> str:
    rows = [json.loads(l) for l in path.read_text().splitlines() if l.strip()]
    out = ["| procs | launch | rank | untraced us/step (median of rounds) | min-max over rounds | traced us/step | CPUs |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in sorted(rows, key=lambda r: (r["procs"], r["launch"], r["rank"])):
        u = r["untraced_us"]
        out.append(f"| {r['procs']} | {r['launch']} | {r['rank']} | {statistics.median(u):.1f} | "
                   f"{min(u):.1f}-{max(u):.1f} | {statistics.median(r['traced_us']):.1f} | "
                   f"{','.join(str(c) for c in sorted(set(r['cpus'])))} |")
    out.append("")
    for p in sorted({r["procs"] for r in rows}):
        per_launch = {}
        for r in rows:
            if r["procs"] == p:   # a launch's time is its slowest rank's (the ranks wait for it)
                per_launch[r["launch"]] = max(per_launch.get(r["launch"], 0.0), statistics.median(r["untraced_us"]))
        within = [max(r["untraced_us"]) / min(r["untraced_us"]) for r in rows if r["procs"] == p]
        v = sorted(per_launch.values())
        out.append(f"p={p}: the slowest rank's untraced host time per step over {len(v)} launches: "
                   f"{v[0]:.1f}-{v[-1]:.1f} us ({v[-1] / v[0]:.2f}x); within one process, rounds vary "
                   f"up to {max(within):.2f}x (median {statistics.median(within):.2f}x)")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launch", type=int, default=0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--table", type=Path, help="summarise a file of lines instead of measuring")
    a = ap.parse_args(argv)
    if a.table:
        print(table(a.table), end="")
        return 0
    if a.out is None:
        ap.error("--out is required to measure")
    measure(a.launch, a.out, a.rounds, a.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
