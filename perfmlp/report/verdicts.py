"""What bounds each configuration: its time per batch split into the parts a
change can shrink, and the largest named.

The parts (CATEGORIES): GEMMs, elementwise kernels, launches and host (the
host's launches the GPU waits for, the gaps between kernels, a graph's
launch, the tracer's own cost, and in an eager run the host's time between
the traced phases), copies (the batch and the staged gradients between
host and device), communication (the collective itself) and waiting for a
rank (what a rank spends in the collective beyond the least any rank
spent: it arrived early and waited for the others). A NumPy run's compute
is split among GEMMs (BLAS), elementwise kernels (NumPy's passes) and
launches and host in proportion to the CPU model's terms (its CPU file,
model/predict/cpu.py); without a CPU file it is one part, compute (NumPy).

Where the phases were timed on the GPU (CUDA events, CUPTI), each measured
phase group is shared among the model's terms of that group in proportion,
except an eager run's compute: the model's GPU time is the kernels', the
excess the host's (launches the GPU waited for), or the GEMM's where the
machine file has no rate for its kernel. A graph replay's one phase holds
the collectives too. Host-timed phases (trace level counters) fall back to
the model's terms scaled to the measured time, and the verdict says so.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .analysis import RunSummary
from .thresholds import CO_BOUND
from .. import names as N

GEMMS, ELEMENTWISE, HOST, COPIES, COMMUNICATION, WAITING = (
    "GEMMs", "elementwise kernels", "launches and host", "copies", "communication", "waiting for a rank")
CPU_COMPUTE = "compute (NumPy)"
CATEGORIES = (GEMMS, ELEMENTWISE, HOST, COPIES, COMMUNICATION, WAITING, CPU_COMPUTE)
TERM_CATEGORY = {"gemm": GEMMS, "elementwise": ELEMENTWISE, "kernel_gaps": HOST, "launches": HOST,
                 "graph_launch": HOST, "tracing": HOST, N.H2D_BATCH: COPIES, N.D2H_GRAD: COPIES,
                 N.H2D_GRAD: COPIES, "allreduce": COMMUNICATION, "rank_wait": WAITING}
GROUP_DEFAULT = {N.H2D_BATCH: COPIES, N.D2H_GRAD: COPIES, N.H2D_GRAD: COPIES, "allreduce": COMMUNICATION}
COMPUTE_TERMS = ("gemm", "elementwise", "kernel_gaps", "tracing", "launches", "graph_launch")   # the GPU's
WAIT_GROUP = {"rank_wait": N.ALLREDUCE}   # a model term whose group is not its own name
CPU_COMPUTE_TERMS = ("gemm", "elementwise", "launches", "tracing")   # the CPU model's compute (predict/cpu.py)


@dataclass(frozen=True)
class Verdict:
    parts_ms: tuple          # (category, ms) for each of CATEGORIES with time, largest first
    source: str              # "measured phases" or "the model's split"

    @property
    def total_ms(self) -> float:
        return sum(ms for _, ms in self.parts_ms) or 1.0

    @property
    def bound_by(self) -> str:
        return self.parts_ms[0][0] if self.parts_ms else "-"

    def share(self, category: str) -> float:
        return dict(self.parts_ms).get(category, 0.0) / self.total_ms

    @property
    def also(self) -> str | None:
        """A second part within CO_BOUND of the first, else None."""
        if len(self.parts_ms) > 1 and self.parts_ms[1][1] >= CO_BOUND.value * self.parts_ms[0][1]:
            return self.parts_ms[1][0]
        return None

    @property
    def text(self) -> str:
        if not self.parts_ms:
            return "-"
        out = f"{self.bound_by} {100 * self.share(self.bound_by):.0f}%"
        if self.also:
            out += f", {self.also} {100 * self.share(self.also):.0f}%"
        return out


def _sorted(parts: dict) -> tuple:
    return tuple(sorted(((k, v) for k, v in parts.items() if v > 0), key=lambda kv: (-kv[1], CATEGORIES.index(kv[0]))))


def waiting_ms(r: RunSummary, rank: int) -> float:
    """What `rank` spent in the collective beyond the least any rank spent."""
    spent = [ph.get("allreduce", 0.0) for ph in r.phases_ms.values()]
    return max(0.0, r.phases_ms[rank].get("allreduce", 0.0) - min(spent)) if len(spent) > 1 else 0.0


def split_compute(measured: float, model: dict[str, float], fallback: str, excess_to: str | None = None) -> dict:
    """The measured compute among the model's terms in proportion (none: all `fallback`); with `excess_to`, a
    measurement above the model's sum is the model's terms and the rest `excess_to`'s (the module's words)."""
    total = sum(model.values())
    if total <= 0:
        return {fallback: measured}
    excess = excess_to is not None and measured > total
    out: Counter = Counter()
    for t, ms in model.items():
        out[TERM_CATEGORY[t]] += ms if excess else measured * ms / total
    if excess:
        out[excess_to] = out[excess_to] + measured - total   # (a + measured) - total: the order fixes the last bits
    return out


def attribute(r: RunSummary, unpriced_gemm: bool = False) -> Verdict:
    """The run's time per batch in CATEGORIES (ms), from its slowest rank."""
    rank = r.slowest_rank
    measured = r.measured_terms(rank)
    model = {t: s * 1e3 for t, s in r.predicted.terms.items()} if r.predicted else {}
    if r.gpu and (r.incomparable_terms or not model):
        return Verdict(_sorted(split_compute(r.t_ms, model, HOST) if sum(model.values()) > 0 else {}),
                       "the model's split")
    parts = dict.fromkeys(CATEGORIES, 0.0)
    # the model's terms inside the measured compute: a graph replay's one phase holds those timed nowhere else
    compute = {t: ms for t, ms in model.items() if t in COMPUTE_TERMS
               or (r.exec == N.GRAPH and measured.get(WAIT_GROUP.get(t, t), 0.0) == 0.0)}
    for g, ms in measured.items():
        if ms <= 0:
            continue
        if g == N.COMPUTE:
            extra = GEMMS if unpriced_gemm else HOST   # an eager GPU run's excess: the host's (or the GEMM's)
            split = (split_compute(ms, compute, extra, extra if r.exec == N.EAGER else None) if r.gpu else
                     split_compute(ms, {t: v for t, v in model.items() if t in CPU_COMPUTE_TERMS}, CPU_COMPUTE))
            for k, v in split.items():
                parts[k] += v
        elif g == N.ALLREDUCE and r.procs > 1:
            wait = min(waiting_ms(r, rank), ms)
            parts[WAITING] += wait
            parts[COMMUNICATION] += ms - wait
        else:
            parts[GROUP_DEFAULT[g]] += ms
    parts[HOST] += max(0.0, r.t_ms - sum(measured.values()))
    return Verdict(_sorted(parts), "measured phases")
