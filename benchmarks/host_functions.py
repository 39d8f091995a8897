"""Where the host's time per batch goes: the functions a run's cProfile
profiles (`--cprofile`: rank-<r>.prof in its trace folder) name, per rank,
those called at least once a batch, by their own time per batch.

cProfile adds its own cost to every Python call (about a microsecond), so
the figures are larger than the untraced host's; what they give is the
order and the shares.

    python benchmarks/host_functions.py traces/<set>/<run>
"""
from __future__ import annotations

import json
import pstats
import sys
from pathlib import Path

TOP = 25


def main(run_dir: str) -> None:
    d = Path(run_dir)
    cfg = json.loads((d / "manifest.json").read_text())["config"]
    batches = -(-cfg["n_train"] // cfg["batch_size"]) * cfg["epochs"]
    for prof in sorted(d.glob("rank-*.prof")):
        st = pstats.Stats(str(prof))
        rows = [(tt, nc, k) for k, (_, nc, tt, _, _) in st.stats.items() if nc >= batches]
        rows.sort(reverse=True)
        total = sum(tt for tt, _, _ in rows)
        print(f"{d.name} {prof.name}: {batches} batches; functions called at least once a batch: "
              f"{1e6 * total / batches:.1f} us of own time per batch")
        print(f"{'us/batch':>9} {'calls/batch':>11} {'us/call':>8}  function")
        for tt, nc, (file, line, name) in rows[:TOP]:
            where = name if file == "~" else f"{Path(file).name}:{line}({name})"
            print(f"{1e6 * tt / batches:9.2f} {nc / batches:11.2f} {1e6 * tt / nc:8.2f}  {where}")
        print()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python benchmarks/host_functions.py RUN_DIR")
    main(sys.argv[1])
