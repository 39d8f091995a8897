"""The tables over process counts, each row a configuration. Scaling: each
data-parallel GPU configuration against the one-GPU one with every other
setting equal; strong scaling keeps B and splits it over p (efficiency
T1 / (p Tp)), weak keeps B / p (T1 / Tp). Imbalance: each rank's copies and
compute before it waits, and its allreduce phase (the median repeat's median
phases); the allreduce's spread across ranks is the waiting. Overlap bounds:
today's serial bound beside the overlapped one and the sliced schedule
(perfmlp/slices.py) at its fastest count, priced by model/predict/slices.py,
where that schedule applies (data parallelism, several GPUs, NCCL, no
overlap, not fp16).
"""
from __future__ import annotations

from ...model.predict.slices import choose_slices, predict_sliced
from ..configurations import configurations
from ..recommend import slices_apply
from ... import names as N
from .table import Table

STRONG, WEAK = "strong", "weak"
COLUMNS = ("scaling", "H", "B", "B/p", "precision", "transfer", "comm", "exec", "gemm", "trace level", "procs",
           "ms per batch", "runs", "speed-up", "efficiency %", "run ids")
IMBALANCE_COLUMNS = ("configuration", "run", "procs", "compute+copy min ms", "compute+copy max ms", "imbalance ms",
                     "allreduce min ms", "allreduce max ms", "waiting (allreduce max - min) ms")
OVERLAP_COLUMNS = ("configuration", "H", "B", "procs", "exec", "measured ms", "serial bound ms",
                   "overlapped bound ms", "compute chain ms", "communication chain ms", "slices", "sliced ms",
                   "FLOPs per GPU", "bytes all-reduced per GPU")


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


def imbalance(a) -> Table:
    rows = []
    for c in (c for c in configurations(a) if c.s["procs"] > 1):
        r = c.representative
        busy = [r.busy_ms(k) for k in sorted(r.phases_ms)]
        ar = [ph.get(N.ALLREDUCE, 0) for _, ph in sorted(r.phases_ms.items())]
        rows.append((c.label, r.run_id, r.procs, min(busy), max(busy), max(busy) - min(busy), min(ar), max(ar),
                     max(ar) - min(ar)))
    return Table("imbalance", IMBALANCE_COLUMNS, tuple(rows))


def overlap_bounds(a) -> Table:
    """One row per configuration the sliced schedule applies to (ms per batch, the primary machine's)."""
    m, rows = a.machines.primary, []
    for c in configurations(a):
        if not (c.gpu and c.judged and c.s["strategy"] == N.DATA and slices_apply(c.s)):
            continue
        r = c.representative
        how = dict(precision=r.precision, comm=r.comm, batch_transfer=r.transfer, exec_mode=r.exec, gemm=N.CUBLAS)
        k = choose_slices(m, r.layer_sizes, r.batch, r.procs, **how)
        p = predict_sliced(m, r.layer_sizes, r.batch, r.procs, k, **how)
        rows.append((c.label, r.hidden_label, r.batch, r.procs, r.exec, c.t_ms, p["today_s"] * 1e3,
                     p["overlapped_s"] * 1e3, p["compute_chain_s"] * 1e3, p["comm_chain_s"] * 1e3, k,
                     p["sliced_s"] * 1e3, r.flops_rank0, r.bytes_exchanged_rank0))
    return Table("overlap_bounds", OVERLAP_COLUMNS, tuple(rows))
