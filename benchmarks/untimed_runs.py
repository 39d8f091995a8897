"""Which runs under a trace folder are timed by the host's enqueue (a GPU
run traced at the counters level with no synchronised steady_ms_per_batch
on its epoch lines): the report leaves them out of every error figure.

    python benchmarks/untimed_runs.py TRACES
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfmlp.trace.reader import read_traces  # noqa: E402


def main() -> None:
    runs, _ = read_traces(sys.argv[1])
    bad = [r.run_id for r in runs if r.host_enqueue_times]
    print(f"{len(bad)} of {len(runs)} runs timed by the host enqueue (no steady_ms_per_batch; left out of the "
          "report): " + ", ".join(bad) if bad else
          f"all {len(runs)} runs GPU-timed or synchronised (steady_ms_per_batch)")


if __name__ == "__main__":
    main()
