"""Imbalance across the ranks of each multi-rank configuration: each rank's
copies and compute before it waits, and its allreduce phase (the median
repeat's median phases); the allreduce's spread across ranks is the waiting."""
from __future__ import annotations

from ..configurations import configurations
from ... import names as N
from .table import Table

COLUMNS = ("configuration", "run", "procs", "compute+copy min ms", "compute+copy max ms", "imbalance ms",
           "allreduce min ms", "allreduce max ms", "waiting (allreduce max - min) ms")


def imbalance(a) -> Table:
    rows = []
    for c in (c for c in configurations(a) if c.s["procs"] > 1):
        r = c.representative
        busy = [r.busy_ms(k) for k in sorted(r.phases_ms)]
        ar = [ph.get(N.ALLREDUCE, 0) for _, ph in sorted(r.phases_ms.items())]
        rows.append((c.label, r.run_id, r.procs, min(busy), max(busy), max(busy) - min(busy), min(ar), max(ar),
                     max(ar) - min(ar)))
    return Table("imbalance", COLUMNS, tuple(rows))
