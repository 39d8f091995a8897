"""Scaling over process counts: each data-parallel GPU configuration against
the one-GPU one with every other setting equal. Strong scaling keeps B and
splits it over p (efficiency T1 / (p Tp)); weak keeps B / p (T1 / Tp)."""
from __future__ import annotations

from ..configurations import configurations
from ... import names as N
from .table import Table

STRONG, WEAK = "strong", "weak"
COLUMNS = ("scaling", "H", "B", "B/p", "precision", "transfer", "comm", "exec", "gemm", "trace level", "procs",
           "ms per batch", "runs", "speed-up", "efficiency %", "run ids")


def scaling_groups(a) -> dict:
    """(kind, every setting but p and the batch, B or B/p) -> {p: configuration}, data parallelism on a GPU."""
    groups: dict = {}
    for c in configurations(a):
        s = c.s
        if not (c.gpu and c.judged and s["strategy"] == N.DATA):
            continue
        rest = tuple((k, v) for k, v in c.settings if k not in ("procs", "batch"))
        for kind, b in ((STRONG, s["batch"]), (WEAK, s["batch"] // s["procs"])):
            groups.setdefault((kind, rest, b), {})[s["procs"]] = c
    return {k: v for k, v in groups.items() if 1 in v and len(v) > 1}


def scaling(a) -> Table:
    """One row per configuration of a scaling group (`B` filled for strong scaling, `B/p` for weak)."""
    rows = []
    for (kind, _rest, b), byp in sorted(scaling_groups(a).items(), key=lambda kv: (kv[0][0], str(kv[0][1]), kv[0][2])):
        t1 = byp[1].t_ms
        for p, c in sorted(byp.items()):
            sv = c.s
            eff = t1 / (p * c.t_ms) if kind == STRONG else t1 / c.t_ms
            rows.append({"scaling": kind, "H": sv["hidden"], "B": b if kind == STRONG else None,
                         "B/p": b if kind == WEAK else None, "precision": sv["precision"],
                         "transfer": sv["transfer"], "comm": sv["comm"], "exec": sv["exec"], "gemm": sv["gemm"],
                         "trace level": sv["trace_level"], "procs": p, "ms per batch": c.t_ms, "runs": len(c.runs),
                         "speed-up": t1 / c.t_ms, "efficiency %": 100 * eff,
                         "run ids": " ".join(r.run_id for r in c.runs)})
    return Table.from_records("scaling", rows, COLUMNS)
