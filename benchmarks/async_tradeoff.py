"""The asynchronous parameter server's trade-off, from real runs: held-out
accuracy against updates and against wall time for `--comm ps-async` at
several staleness bounds beside synchronous all-reduce, each with and
without an injected straggler, on the default job (the shipped digits).

Synchronous runs use W ranks, ps-async runs W + 1 (the server and W
workers), so both compute on W ranks. Every run writes a trace under
OUT/traces; the figure and the tables are the report's own ps-async
section (perfmlp/report/sections/strategies.py) made from them, written to OUT with a
RUN.md naming the command, the commit, the date and the machine.

    python benchmarks/async_tradeoff.py --out reports/cpu/psasync
    python benchmarks/async_tradeoff.py --out DIR --backend cupy --workers 3 --straggler-ms 2 --launcher mpirun
    python benchmarks/async_tradeoff.py --out DIR --report-only      # the figure again from OUT/traces
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfmlp.report.sections.strategies import section_psasync  # noqa: E402
from perfmlp.report.render import csv_text  # noqa: E402
from perfmlp.trace.reader import read_traces  # noqa: E402


def runs_to_make(a) -> list[tuple[str, int, list[str]]]:
    """(run id, ranks, flags) of every run: sync and each S, without and with
    the straggler, the last rank (a worker in both)."""
    out = []
    for delay in (0.0, a.straggler_ms):
        def late(rank: int) -> list[str]:
            return ["--straggler-delay-ms", f"{delay:g}", "--straggler-rank", str(rank)] if delay else []
        tag = f"late{delay:g}" if delay else "even"
        out.append((f"sync-{tag}", a.workers, ["--comm", a.sync_comm, *late(a.workers - 1)]))
        for s in a.staleness:
            out.append((f"async-s{s}-{tag}", a.workers + 1,
                        ["--comm", "ps-async", "--staleness", str(s), *late(a.workers)]))
    return out


def machine() -> str:
    cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                if l.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else "?"
    gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                          text=True).stdout.strip().replace("\n", ", ") if _has("nvidia-smi") else "none"
    return f"{cpu}, {os.cpu_count()} cores; GPUs: {gpus or 'none'}; Python {platform.python_version()}"


def _has(exe: str) -> bool:
    from shutil import which
    return which(exe) is not None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for traces/, the figure, the tables and RUN.md")
    ap.add_argument("--backend", default="numpy", choices=("numpy", "cupy"))
    ap.add_argument("--workers", type=int, default=2, help="W: ranks computing gradients (default 2)")
    ap.add_argument("--staleness", default="0,1,2,4", help="the S values of the ps-async runs")
    ap.add_argument("--straggler-ms", type=float, default=10.0, help="delay per batch of the last worker (ms)")
    ap.add_argument("--sync-comm", default="auto", help="the synchronous runs' --comm (default auto)")
    ap.add_argument("--launcher", default="mpiexec", help="the MPI launcher (mpiexec, mpirun, ...)")
    ap.add_argument("--extra", default="", help="more flags for every run, e.g. '--epochs 5'")
    ap.add_argument("--report-only", action="store_true", help="make the figure from OUT/traces only")
    a = ap.parse_args()
    a.staleness = [int(s) for s in a.staleness.split(",")]
    out = Path(a.out)
    traces = out / "traces"
    load = [os.getloadavg()[0]]
    if not a.report_only:
        traces.mkdir(parents=True, exist_ok=True)
        for run_id, ranks, flags in runs_to_make(a):
            manifest = traces / run_id / "manifest.json"
            if manifest.exists():
                if json.loads(manifest.read_text()).get("status") != "complete":
                    print(f"{traces / run_id}: an unfinished run; remove it to run it again", file=sys.stderr)
                    return 1
                print(f"{run_id}: already in {traces}, kept")
                continue
            cmd = [a.launcher, "-n", str(ranks), sys.executable, "-m", "perfmlp.run", "--backend", a.backend,
                   "--trace-dir", str(traces), "--run-id", run_id, "--quiet", *flags, *shlex.split(a.extra)]
            print(" ".join(cmd), flush=True)
            r = subprocess.run(cmd, cwd=ROOT)
            if r.returncode:
                print(f"{run_id}: exit {r.returncode}", file=sys.stderr)
                return 1
        load.append(os.getloadavg()[0])
    runs, skipped = read_traces(traces)
    section = section_psasync(runs)
    if section is None:
        print(f"{traces}: no ps-async run" + (f" ({'; '.join(skipped)})" if skipped else ""), file=sys.stderr)
        return 1
    fig = section.figures[0]
    (out / "tradeoff.png").write_bytes(fig.draw(**fig.args)["png"])
    (out / "tradeoff.csv").write_text(csv_text(section.tables[0].rows))
    points = [{"group": g, "scheme": name, "updates": x, "wall_s": t, "accuracy": acc}
              for g, series in fig.args["groups"].items() for name, pts in series for x, t, acc in pts]
    (out / "curves.csv").write_text(csv_text(points))
    write_run_md(out, a, load, section)
    print(f"{out}: tradeoff.png, tradeoff.csv, curves.csv, RUN.md")
    return 0


def write_run_md(out: Path, a, load: list[float], section) -> None:
    # PERFMLP_GIT_COMMIT where the copy's .git is not the code's (the GPU machine's copy)
    commit = os.environ.get("PERFMLP_GIT_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip() or "?"
    lines = ["# The asynchronous parameter server's trade-off", "",
             f"- command: `python benchmarks/async_tradeoff.py {' '.join(shlex.quote(x) for x in sys.argv[1:])}`",
             f"- commit: {commit}; date: {dt.date.today().isoformat()}",
             f"- machine: {machine()}",
             f"- load average (1 min) before and after the runs: {', '.join(f'{v:.1f}' for v in load)}", "",
             "![trade-off](tradeoff.png)", "", *section.paragraphs, "",
             "tradeoff.csv: each run (final accuracy, wall time, what the server's update lines measured, the "
             "model's time per update); curves.csv: the figure's points (one per epoch)."]
    (out / "RUN.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
