"""What to change, and by how much it would help: each configuration's
candidate changes (CHANGES: one setting changed, the rest kept) priced by
the what-if engine (model/whatif.py) from its representative run, predicted
gain = predicted time / measured time - 1; where another configuration of
the set differs in that setting only, the measured gain beside it. A change
is recommended where it is predicted to save at least MIN_GAIN.

A NumPy run's changes are its CPU's (ranks, BLAS threads, the batch by its
time per sample, the precision; model/whatif.py) and a move to the GPU,
the model's time for the job on the report's GPU file. Steps the what-if
engine does not describe (model and hybrid parallelism, the parameter
server, a profiled run) get none: the strategies section compares those.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

from ..errors import PerfmlpError
from ..model.machine import Machine
from ..model.predict import graph_refusal, predict_batch
from ..model.whatif import WhatIfError, changed_cpu_setting, cpu_options, what_if_cpu
from .configurations import Configuration, overlap_words
from .thresholds import MIN_GAIN
from .whatif import cpu_setting_of, measured_groups_ms, what_if_run
from .. import names as N


@dataclass(frozen=True)
class Change:
    name: str
    key: str              # the what-if's configuration key the change sets to `value`
    value: object
    applies: Callable     # settings -> bool

    def target(self, c: Configuration) -> tuple:
        """(setting, value) of the configuration that made the change (an overlap: the run's own buckets)."""
        if self.key == "overlap":
            return (("overlap", overlap_words(c.representative.bucket_bytes)),)
        return (("transfer" if self.key == "batch_transfer" else self.key, self.value),)


CHANGES = (
    Change("pinned copies instead of pageable", "batch_transfer", N.PINNED, lambda s: s["transfer"] == N.PAGEABLE),
    Change("resident data instead of pageable copies", "batch_transfer", N.RESIDENT,
           lambda s: s["transfer"] == N.PAGEABLE),
    Change("resident data instead of pinned copies", "batch_transfer", N.RESIDENT, lambda s: s["transfer"] == N.PINNED),
    Change("prefetched copies instead of pinned", "batch_transfer", N.PREFETCH, lambda s: s["transfer"] == N.PINNED),
    Change("NCCL instead of MPI staged through the host", "comm", N.NCCL, lambda s: s["comm"] == N.MPI_STAGED),
    Change("one CUDA graph per step instead of eager launches", "exec", "graph",
           lambda s: s["exec"] == N.EAGER and graph_refusal("cupy", "data", s["comm"]) is None),
    Change("cuBLAS instead of the course's GEMM kernel", "gemm", N.CUBLAS, lambda s: s["gemm"] not in (None, N.CUBLAS)),
    Change("overlap the allreduce with the backward pass", "overlap", True,
           lambda s: s["procs"] > 1 and s["comm"] == N.NCCL and s["overlap"] == "no overlap"),
)
GPU_MOVE = "run it on a GPU"
SLICES = "slice the first layer's exchange, {k} slices"   # perfmlp/slices.py, K the model's choice
SLICES_WORDS = ("slicing the first layer's exchange (several GPUs with NCCL, no overlap; offered only where it is "
                "predicted to save min_gain or more)")


@dataclass(frozen=True)
class Recommendation:
    configuration: Configuration
    change: str
    predicted_gain: float                 # predicted time / measured time - 1 (negative: faster)
    measured_gain: float | None = None    # the sibling's measured time / this one's - 1
    sibling: Configuration | None = None
    how: str = ""                         # what priced it

    @property
    def predicted_ms(self) -> float:
        return self.configuration.t_ms * (1 + self.predicted_gain)

    @property
    def recommended(self) -> bool:
        return self.predicted_gain <= -MIN_GAIN.value


def describable(c: Configuration) -> bool:
    """A configuration the what-if engine describes: data parallelism on a GPU, not under a profiler."""
    s = c.s
    return c.judged and c.gpu and s["strategy"] == N.DATA and s["comm"] not in (N.PS, N.PS_NCCL)


def sibling_of(c: Configuration, target: tuple, index: dict) -> Configuration | None:
    s = dict(c.settings)
    s.update(target)
    found = index.get(tuple(s.items()))
    return found if found is not None and found.judged else None


def whatif_gain(change: Change, run, machine: Machine, unpriced_gemm: bool) -> float | None:
    """The what-if engine's predicted gain of one change for the configuration's representative run."""
    try:
        w = what_if_run(run, machine, {change.key: change.value})
    except (WhatIfError, PerfmlpError, ValueError, KeyError):
        return None
    if change.key == "gemm" and unpriced_gemm:
        # the machine file has no rate for the run's kernel: the model priced it as cuBLAS, so the
        # measured compute is replaced by the model's cuBLAS compute whole
        g = "compute"
        return (w.measured_ms - w.measured_groups_ms[g] + w.predicted_after.groups()[g] * 1e3) / w.measured_ms - 1
    return w.total_ms / w.measured_ms - 1


def slices_apply(s: dict) -> bool:
    """Settings the trainer's sliced schedule runs with on a GPU: several GPUs, NCCL, no overlap, not fp16."""
    return s["procs"] > 1 and s["comm"] == N.NCCL and s["overlap"] == "no overlap" and s["precision"] != N.FP16


def slices_recommendation(c: Configuration, run, machine: Machine) -> Recommendation | None:
    """The sliced first layer at the slice count the model prices fastest; None unless recommended."""
    try:
        w = what_if_run(run, machine, {"slices": N.AUTO})
    except (WhatIfError, PerfmlpError, ValueError, KeyError):
        return None
    rec = Recommendation(c, SLICES.format(k=w.after.slices), w.total_ms / w.measured_ms - 1,
                         how=f"what-if on {machine.name}")
    return rec if w.after.slices > 1 and rec.recommended else None


def gpu_gain(c: Configuration, gpu: Machine) -> tuple[float, str]:
    """The NumPy run's job on a GPU, resident data, NCCL, one CUDA graph per step: the model's time."""
    r = c.representative
    precision = r.precision if r.precision in (N.FLOAT32, N.FLOAT64) else N.FLOAT32
    p = predict_batch(gpu, r.layer_sizes, r.batch, r.procs, precision, N.NCCL, N.RESIDENT, r.trace_level,
                      exec_mode="graph")
    return p.total_s * 1e3 / c.t_ms - 1, f"the model on {gpu.name}, resident data, NCCL, CUDA graph"


# a CPU change's words: (the what-if's key, the setting a sibling configuration differs in, its words)
CPU_CHANGES = {"procs": (None, "procs", "{new} rank(s) instead of {old}"),
               "threads": ("threads", None, "{new} BLAS thread(s) per rank instead of {old}"),
               "batch": ("batch_size", "batch", "a batch of {new} instead of {old} (time per sample)"),
               "precision": ("precision", "precision", "{new} instead of {old}")}


def cpu_recommendations(c: Configuration, run, cpu, index: dict) -> list[Recommendation]:
    """A NumPy configuration's single changes on its CPU, priced on the CPU file: a change of batch by its
    time per sample, the others by their time per batch."""
    before = cpu_setting_of(run)
    t, groups = measured_groups_ms(run)
    old = {"procs": before.procs, "threads": before.threads or cpu["default_threads"], "batch": before.batch,
           "precision": before.precision}
    out = []
    for alt in cpu_options(cpu, before):
        if len(alt.change) != 1:
            continue
        (key, new), = alt.change.items()
        set_key, setting, words = CPU_CHANGES[key]
        try:
            after = changed_cpu_setting(before, {set_key: new} if set_key else {}, new if key == "procs" else None)
            w = what_if_cpu(cpu, before, after, t, groups, run.run_id)
        except (WhatIfError, ValueError):
            continue
        gain = (w.total_ms / after.batch) / (w.measured_ms / before.batch) - 1
        sib = sibling_of(c, ((setting, new),), index) if setting else None
        measured = (sib.t_ms / sib.s["batch"]) / (c.t_ms / c.s["batch"]) - 1 if sib else None
        out.append(Recommendation(c, words.format(new=new, old=old[key]), gain, measured, sib,
                                  f"what-if on {cpu.name}"))
    return out


def recommendations(configs: list[Configuration], runs_by_id: dict, machine: Machine, gpu: Machine,
                    unpriced: Callable[[str], bool], cpu) -> list[Recommendation]:
    """Every change that applies to every describable configuration, priced (recommended or not); a NumPy
    configuration's on `cpu` (the analysis's CPU file; None: none) and on the GPU."""
    index = {c.settings: c for c in configs}
    out = []
    for c in configs:
        if not c.gpu and c.judged:
            run = runs_by_id.get(c.representative.run_id)
            if cpu is not None and run is not None and c.s["strategy"] == N.DATA:
                out += cpu_recommendations(c, run, cpu, index)
            gain, how = gpu_gain(c, gpu)
            out.append(Recommendation(c, f"{GPU_MOVE} ({gpu.name})", gain, how=how))
            continue
        if not describable(c):
            continue
        run = runs_by_id.get(c.representative.run_id)
        if run is None:
            continue
        for ch in CHANGES:
            if not ch.applies(c.s):
                continue
            gain = whatif_gain(ch, run, machine, unpriced(c.s["gemm"]))
            if gain is None:
                continue
            sib = sibling_of(c, ch.target(c), index)
            out.append(Recommendation(c, ch.name, gain, sib.t_ms / c.t_ms - 1 if sib else None, sib,
                                      f"what-if on {machine.name}"))
        sliced = slices_recommendation(c, run, machine) if slices_apply(c.s) else None
        out += [sliced] if sliced else []
    return out


@dataclass(frozen=True)
class Advice:
    """One change over the set: where it is recommended, predicted and measured."""
    change: str
    recs: tuple          # the recommended Recommendations
    applicable: int      # configurations it was priced for

    @property
    def predicted(self) -> float:
        return statistics.median(r.predicted_gain for r in self.recs)

    @property
    def measured_pairs(self) -> tuple:
        return tuple(r for r in self.recs if r.measured_gain is not None)

    @property
    def measured(self) -> float | None:
        pairs = self.measured_pairs
        return statistics.median(r.measured_gain for r in pairs) if pairs else None

    @property
    def predicted_for_measured(self) -> float | None:
        pairs = self.measured_pairs
        return statistics.median(r.predicted_gain for r in pairs) if pairs else None


def advice(recs: list[Recommendation]) -> list[Advice]:
    """Each change recommended somewhere, most median predicted gain first."""
    by: dict[str, list] = {}
    for r in recs:
        by.setdefault(r.change, []).append(r)
    out = (Advice(n, tuple(r for r in mine if r.recommended), len(mine)) for n, mine in by.items())
    return sorted((a for a in out if a.recs), key=lambda a: a.predicted)
