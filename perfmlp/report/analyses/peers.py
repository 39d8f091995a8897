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


def peer_files(folder: Path | None) -> list[Path]:
    if folder is None or not folder.is_dir():
        return []
    return sorted({f for d in (folder, folder.parent / "benchmarks") for f in d.rglob(PEER_FILE)})


def read_peers(folder: Path | None) -> list[Peer]:
    """Every peer row under the traces folder (or its set's benchmarks), merged by (name, H, B, p): median."""
    rows: dict[tuple, list] = {}
    for f in peer_files(folder):
        try:
            lines = f.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                r = read_json(line)
                name = PEERS.get(str(r["variant"]).removesuffix(" (DDP)"))
                key = (name, tuple(int(h) for h in r["hidden"]), int(r["B"]), int(r["procs"]))
                ms = float(r["median_us"]) / 1e3
            except (ValueError, KeyError, TypeError):
                continue
            if name:
                rows.setdefault(key, []).append(ms)
    return [Peer(*k, statistics.median(v)) for k, v in sorted(rows.items())]
