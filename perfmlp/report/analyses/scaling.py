"""How the time per batch moves with a setting, each row a configuration:
scaling over p against the one-GPU configuration with every other setting
equal (strong: B split over p, efficiency T1 / (p Tp); weak: B / p kept,
T1 / Tp); imbalance and waiting across ranks; the serial, overlapped and
sliced bounds (model/predict/slices.py); and the execution-mode and overlap
variants of a configuration.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from ...model.predict.slices import choose_slices, predict_sliced
from ..analysis import Analysis, RunSummary
from ..configurations import configurations
from ..recommend import slices_apply
from ... import names as N
from .table import Table

STRONG, WEAK = "strong", "weak"
EAGER_TO_GRAPH, TO_OVERLAP = "eager -> graph", "no overlap -> overlap"
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


@dataclass(frozen=True)
class Variant:
    exec: str
    bucket_bytes: int | None        # None: no overlap
    runs: tuple[RunSummary, ...]    # the repeats

    @property
    def measured_ms(self) -> float:
        return statistics.median(r.t_ms for r in self.runs)

    @property
    def predicted_ms(self) -> float:
        return statistics.median(r.predicted_ms for r in self.runs)

    @property
    def label(self) -> str:
        return self.exec + ("" if self.bucket_bytes is None else f", overlap {bytes_label(self.bucket_bytes)}")


def bytes_label(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def comparable(r: RunSummary) -> bool:
    """Complete GPU runs the model describes, timed on the GPU: no profiler, no cProfile, no host enqueue."""
    return (r.gpu and r.complete and r.predicted is not None and not r.profiled and not r.cprofile
            and not r.host_enqueue)


def configuration(r: RunSummary) -> str:
    """A run's configuration, but for its exec mode, overlap and buckets."""
    return (f"H={r.hidden_label} B={r.batch} p={r.procs} {r.precision} {r.transfer}/{r.comm} {r.gemm}"
            + ("" if r.strategy == N.DATA else f" {r.strategy}"))


def variant_groups(a: Analysis) -> dict[tuple, dict[tuple, Variant]]:
    """Configuration (but for exec, overlap and buckets) -> (exec, bucket bytes or None) -> variant,
    where it has two variants or more."""
    runs: dict[tuple, dict[tuple, list]] = {}
    for r in a.runs:
        if comparable(r):
            key = (r.hidden, r.batch, r.procs, r.precision, r.strategy, r.transfer, r.comm, r.gemm)
            runs.setdefault(key, {}).setdefault((r.exec, r.bucket_bytes if r.overlap else None), []).append(r)
    return {key: {v: Variant(*v, tuple(rs)) for v, rs in by.items()} for key, by in runs.items() if len(by) > 1}


def baseline(variants: dict[tuple, Variant]) -> Variant | None:
    """Eager without overlap where it ran, else the graph without overlap."""
    return variants.get((N.EAGER, None)) or variants.get(("graph", None))


@dataclass(frozen=True)
class Change:
    """One change between two variants of a configuration, the rest held."""
    kind: str                   # EAGER_TO_GRAPH or TO_OVERLAP
    configuration: str
    before: Variant
    after: Variant

    @property
    def measured(self) -> float:
        return self.after.measured_ms / self.before.measured_ms

    @property
    def predicted(self) -> float:
        return self.after.predicted_ms / self.before.predicted_ms

    @property
    def direction_right(self) -> bool:
        """Both ratios on the same side of 1 (both gains, both losses, or both none)."""
        m, p = self.measured, self.predicted
        return (m > 1) == (p > 1) and (m < 1) == (p < 1)


def changes(configuration: str, variants: dict[tuple, Variant]) -> list[Change]:
    """Each graph variant against eager with the same overlap; each overlapped one against no overlap."""
    out = []
    for (ex, bucket), v in variants.items():
        if ex == N.GRAPH and (N.EAGER, bucket) in variants:
            out.append(Change(EAGER_TO_GRAPH, configuration, variants[(N.EAGER, bucket)], v))
        if bucket is not None and (ex, None) in variants:
            out.append(Change(TO_OVERLAP, configuration, variants[(ex, None)], v))
    return out
