"""The peers' measured step times, where benchmarks/graph_step.py measured
them (`graph_step.jsonl`: PyTorch eager and as one CUDA graph, DDP on
several GPUs), under the traces folder or a committed set's benchmarks
folder beside it. A line that is not a benchmark row is skipped.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from ...safeio import read_json

PEER_FILE = "graph_step.jsonl"
PEERS = {"pytorch graph": "PyTorch, CUDA graph", "pytorch eager": "PyTorch, eager"}   # on p > 1 with " (DDP)"


@dataclass(frozen=True)
class Peer:
    name: str            # PEERS' words
    hidden: tuple
    batch: int           # all ranks together (the benchmark splits B over p)
    procs: int
    ms: float            # median over the rounds of the wall time per step
    source: str          # the file, relative to the traces folder's parent


def peer_files(folder: Path | None) -> list[Path]:
    if folder is None or not folder.is_dir():
        return []
    found = set(folder.rglob(PEER_FILE))
    bench = folder.parent / "benchmarks"
    if bench.is_dir():
        found |= set(bench.rglob(PEER_FILE))
    return sorted(found)


def read_peers(folder: Path | None) -> list[Peer]:
    """Every peer row under the traces folder (or its set's benchmarks), merged by (name, H, B, p): median."""
    rows: dict[tuple, list] = {}
    for f in peer_files(folder):
        try:
            lines = f.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        rel = str(f.relative_to(folder.parent)) if folder.parent in f.parents else str(f)
        for line in lines:
            try:
                r = read_json(line)
                name = PEERS.get(str(r["variant"]).removesuffix(" (DDP)"))
                key = (name, tuple(int(h) for h in r["hidden"]), int(r["B"]), int(r["procs"]))
                ms = float(r["median_us"]) / 1e3
            except (ValueError, KeyError, TypeError):
                continue
            if name:
                rows.setdefault(key, []).append((ms, rel))
    return [Peer(*k, statistics.median(ms for ms, _ in v), v[0][1]) for k, v in sorted(rows.items())]
