"""The what-if solver: the time per batch a measured run would take with some
of its configuration changed (`python -m perfmlp.whatif`).

From the run's measured phase groups (the slowest rank's medians) and the
rest of its time ("other"), the model predicts every term for both
configurations at the run's trace level; in each group, no term affected:
kept as measured; every term affected (or the group gone): the model's new
value; some: the measurement plus each affected term's change. "other" is
kept, but 0 when the change makes an eager run a replayed graph. So what
the change does not touch stays measured. A NumPy run is priced so on its
CPU (predict/cpu.py), or moved to a GPU by a change only a GPU has (NCCL,
graphs, resident batches, overlap, a GEMM kernel) and priced there by the
GPU model alone: its measured phases do not carry to a GPU. Pure.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .costs import DEFAULT_BUCKET_BYTES
from .machine import Machine
from .predict import TERM_GROUP, Prediction, predict_batch, resolve_exec
from .predict.cpu import PRECISIONS, Alternative, cpu_alternatives, predict_cpu
from .predict.slices import choose_slices
from .. import names as N
from ..names import GROUPS

# The configuration keys a what-if may change (the model predicts each).
KEYS = ("comm", "batch_transfer", "exec", "overlap", "bucket_bytes", "gemm", "batch_size", "precision",
        "hidden_sizes", "slices")
# The exchanges predict_batch prices: data parallelism with an allreduce.
COMMS = ("mpi", N.MPI_STAGED, N.NCCL)
CHANGED_REL = 1e-6  # a group whose prediction moves by more than this (relative) is affected
PRESENT_S = 1e-12   # a term below this in both predictions is absent (the timeline's float residue)


class WhatIfError(ValueError):
    """A change the what-if cannot price (one-line message naming the value)."""


@dataclass(frozen=True)
class Setting:
    """What the model needs of a configuration."""
    layer_sizes: tuple
    batch: int
    procs: int
    precision: str
    comm: str
    batch_transfer: str
    exec_mode: str
    overlap: bool
    bucket_bytes: int
    gemm: str
    trace_level: str              # the level the run's tracer ran at ("": untraced), kept by every change
    slices: int | str = 1         # the first layer's exchange in K slices (perfmlp/slices.py), or auto

    def predict(self, machine: Machine) -> Prediction:
        return predict_batch(machine, self.layer_sizes, self.batch, self.procs, self.precision, self.comm,
                             self.batch_transfer, self.trace_level or None, exec_mode=self.exec_mode,
                             overlap=self.overlap, bucket_bytes=self.bucket_bytes, gemm=self.gemm, slices=self.slices)


def slices_of(value) -> int | str:
    """--slices as a configuration holds it ("4", 4 or auto): an int, or auto."""
    return value if value == N.AUTO else int(value)


def resolve_slices(machine: Machine, s: Setting) -> Setting:
    """`s` with slices `auto` resolved, refused where the trainer's sliced schedule does not run."""
    if s.slices == 1:
        return s
    if s.comm != N.NCCL or s.precision == N.FP16 or s.overlap:
        raise WhatIfError(f"slices {s.slices}: the sliced schedule is priced on a GPU with comm nccl, without "
                          f"overlap and not in fp16 (this one: comm {s.comm}, {s.precision}"
                          f"{', overlap' if s.overlap else ''})")
    if s.slices == N.AUTO:
        return dataclasses.replace(s, slices=choose_slices(machine, s.layer_sizes, s.batch, s.procs, s.precision,
                                                           comm=s.comm, batch_transfer=s.batch_transfer,
                                                           exec_mode=s.exec_mode, gemm=s.gemm))
    if not 1 <= s.slices <= s.layer_sizes[1]:
        raise WhatIfError(f"slices {s.slices}: the first layer has {s.layer_sizes[1]} hidden units; give 1 to "
                          f"{s.layer_sizes[1]}")
    return s


@dataclass(frozen=True)
class WhatIf:
    run_id: str
    machine: str
    before: Setting
    after: Setting
    measured_ms: float                 # the run's time per batch
    measured_groups_ms: dict           # group -> ms (slowest rank's medians), plus "other"
    predicted_before: Prediction
    predicted_after: Prediction
    changed: tuple                     # the groups the change affects
    changed_terms: tuple               # the model's terms it affects
    groups_ms: dict                    # group -> ms used for the new configuration
    notes: tuple = ()                  # what the reader must know: a negative group, a change priced elsewhere

    @property
    def total_ms(self) -> float:
        return sum(self.groups_ms.values())

    def to_json(self) -> dict:
        return {"run": self.run_id, "machine": self.machine, "before": dataclasses.asdict(self.before),
                "after": dataclasses.asdict(self.after), "measured_ms": self.measured_ms,
                "measured_groups_ms": self.measured_groups_ms,
                "model_before_ms": {g: v * 1e3 for g, v in self.predicted_before.groups().items()},
                "model_after_ms": {g: v * 1e3 for g, v in self.predicted_after.groups().items()},
                "model_after_terms_ms": {t: v * 1e3 for t, v in self.predicted_after.terms.items()},
                "changed": list(self.changed), "changed_terms": list(self.changed_terms),
                "groups_ms": self.groups_ms, "predicted_ms": self.total_ms, "notes": list(self.notes)}


def changed_setting(before: Setting, values: dict, procs: int | None = None) -> Setting:
    """`before` with `values` (checked configuration keys) and the process count applied."""
    unknown = sorted(set(values) - set(KEYS))
    if unknown:
        raise WhatIfError(f"--set {unknown[0]}: not a key a what-if can change (one of {', '.join(KEYS)})")
    v = values
    comm = before.comm if v.get("comm", "auto") == "auto" else v["comm"]
    new = dataclasses.replace(
        before,
        layer_sizes=(before.layer_sizes[0], *v["hidden_sizes"], before.layer_sizes[-1]) if "hidden_sizes" in v
        else before.layer_sizes,
        batch=v.get("batch_size", before.batch), procs=procs or before.procs,
        precision=v.get("precision", before.precision), comm=comm,
        batch_transfer=v.get("batch_transfer", before.batch_transfer),
        exec_mode=resolve_exec(v.get("exec", before.exec_mode), comm=comm), overlap=v.get("overlap", before.overlap),
        bucket_bytes=v.get("bucket_bytes", before.bucket_bytes), gemm=v.get("gemm", before.gemm),
        slices=slices_of(v.get("slices", before.slices)))
    if new.procs > new.batch:
        raise WhatIfError(f"--procs {new.procs}: more processes than the {new.batch} samples of a batch")
    return new


def affected_terms(before: Prediction, after: Prediction) -> tuple:
    """The model's terms whose prediction the change moves."""
    t0, t1 = before.terms, after.terms
    return tuple(k for k in t0 if abs(t1[k] - t0[k]) > CHANGED_REL * max(t0[k], t1[k], PRESENT_S))


def what_if(machine: Machine, before: Setting, after: Setting, measured_ms: float, measured_groups_ms: dict,
            run_id: str = "") -> WhatIf:
    """The changed configuration's time per batch from the run's measured groups (ms)."""
    for s in (before, after):
        if s.comm not in COMMS:
            raise WhatIfError(f"comm {s.comm}: the what-if prices data parallelism with an allreduce "
                              f"({', '.join(COMMS)}); `python -m perfmlp.model --comm {s.comm}` predicts it alone")
    before, after = resolve_slices(machine, before), resolve_slices(machine, after)
    plain = dataclasses.replace(after, slices=before.slices)
    p0, p1 = before.predict(machine), plain.predict(machine)
    to_graph = after.exec_mode == N.GRAPH and before.exec_mode != N.GRAPH
    w = combined(run_id, machine.name, before, after, measured_ms, measured_groups_ms, p0, p1, to_graph)
    return w if plain == after else with_slices(w, after.predict(machine), p1)


def with_slices(w: WhatIf, sliced_p: Prediction, plain_p: Prediction) -> WhatIf:
    """The what-if with the slice count changed too: the model's change added to the exchange's group."""
    shift_ms = (sliced_p.total_s - plain_p.total_s) * 1e3
    groups = {**w.groups_ms, N.ALLREDUCE: w.groups_ms[N.ALLREDUCE] + shift_ms}
    changed = w.changed if N.ALLREDUCE in w.changed else (*w.changed, N.ALLREDUCE)
    terms = w.changed_terms if N.ALLREDUCE in w.changed_terms else (*w.changed_terms, N.ALLREDUCE)
    return dataclasses.replace(w, predicted_after=sliced_p, groups_ms=groups, changed=changed, changed_terms=terms)


def combined(run_id, machine_name, before, after, measured_ms, measured_groups_ms, p0: Prediction,
             p1: Prediction, to_graph: bool = False) -> WhatIf:
    """The WhatIf of two predictions of a measured run; a negative group is kept and noted, never clamped."""
    t0, t1 = p0.terms, p1.terms
    terms = affected_terms(p0, p1)
    g1 = p1.groups()
    used, notes = {}, []
    for g in GROUPS:
        mine = [k for k in t0 if TERM_GROUP[k] == g and max(t0[k], t1[k]) > PRESENT_S]
        hit = [k for k in mine if k in terms]
        if not hit:
            used[g] = measured_groups_ms[g]
        elif g1[g] == 0 or len(hit) == len(mine):
            used[g] = g1[g] * 1e3
        else:
            used[g] = measured_groups_ms[g] + sum(t1[k] - t0[k] for k in hit) * 1e3
            if used[g] < 0:
                notes.append(f"{g} is negative: the model takes away more ({sum(t0[k] - t1[k] for k in hit) * 1e6:.1f}"
                             f" us) than the run measured there ({measured_groups_ms[g] * 1e3:.1f} us)")
    # a replayed graph has no host time between phases: its one launch is the model's graph_launch
    used["other"] = 0.0 if to_graph else measured_groups_ms["other"]
    changed = tuple(g for g in GROUPS if any(TERM_GROUP[k] == g for k in terms)) + (("other",) if to_graph else ())
    return WhatIf(run_id, machine_name, before, after, measured_ms, measured_groups_ms, p0, p1, changed, terms, used,
                  tuple(notes))


def change_words(measured_ms: float, predicted_ms: float) -> str:
    """A predicted time beside the measured one, e.g. "-75%, 4.0x faster than the measured 2.000 ms"."""
    if predicted_ms <= 0:
        return f"not positive: the model's changes exceed the measured {measured_ms:.3f} ms"
    pct = 100 * (predicted_ms / measured_ms - 1)
    if predicted_ms < measured_ms:
        return f"{pct:.0f}%, {measured_ms / predicted_ms:.1f}x faster than the measured {measured_ms:.3f} ms"
    return f"+{pct:.0f}%, {predicted_ms / measured_ms:.1f}x slower than the measured {measured_ms:.3f} ms"


# ---- a NumPy run ----------------------------------------------------------------------------------

# the keys a NumPy run can change on its CPU; --procs too, and threads (BLAS threads per rank)
CPU_KEYS = ("batch_size", "precision", "hidden_sizes", "threads")
# an exchange a NumPy run makes on the CPU: MPI's allreduce of the host's gradients ("auto" keeps it)
CPU_COMMS = (N.AUTO, N.MPI, N.MPI_STAGED)
# a GPU's settings where the change sets none: the trainer's defaults, the exchange through NCCL
GPU_DEFAULTS = {"comm": N.NCCL, "batch_transfer": N.PAGEABLE, "exec": N.AUTO, "overlap": False,
                "bucket_bytes": DEFAULT_BUCKET_BYTES, "gemm": N.CUBLAS}


@dataclass(frozen=True)
class CpuSetting:
    """What the CPU model needs of a NumPy run's configuration."""
    layer_sizes: tuple
    batch: int
    procs: int
    threads: int | None           # BLAS threads per rank (None: the CPU file's default)
    precision: str
    traced: bool

    def predict(self, machine):
        return predict_cpu(machine, self.layer_sizes, self.batch, self.procs, self.threads, self.precision,
                           self.traced)


def gpu_changes(values: dict) -> dict:
    """The changes only a GPU has, among `values` (configuration keys)."""
    return {k: v for k, v in values.items() if k in KEYS and k not in CPU_KEYS and not (k == "comm" and v in CPU_COMMS)}


def changed_cpu_setting(before: CpuSetting, values: dict, procs: int | None = None) -> CpuSetting:
    """`before` with the CPU's changes among `values` and the rank count applied."""
    v = values
    new = dataclasses.replace(
        before, batch=v.get("batch_size", before.batch), procs=procs or before.procs,
        threads=v.get("threads", before.threads), precision=v.get("precision", before.precision),
        layer_sizes=(before.layer_sizes[0], *v["hidden_sizes"], before.layer_sizes[-1]) if "hidden_sizes" in v
        else before.layer_sizes)
    if new.procs > new.batch:
        raise WhatIfError(f"--procs {new.procs}: more ranks than the {new.batch} samples of a batch")
    if new.precision not in PRECISIONS:
        raise WhatIfError(f"precision {new.precision}: a NumPy run computes in {' or '.join(PRECISIONS)}; "
                          "add --machine with a GPU file and a GPU change to price it on a GPU")
    return new


def what_if_cpu(machine, before: CpuSetting, after: CpuSetting, measured_ms: float, measured_groups_ms: dict,
                run_id: str = "") -> WhatIf:
    """The changed NumPy run on the CPU `machine` describes (whatif.combined's rule)."""
    return combined(run_id, machine.name, before, after, measured_ms, measured_groups_ms,
                    before.predict(machine), after.predict(machine))


def what_if_on_gpu(cpu_machine, gpu_machine, before: CpuSetting, values: dict, procs: int | None,
                   measured_ms: float, measured_groups_ms: dict, run_id: str = "") -> WhatIf:
    """The run moved to `gpu_machine` with `values` (else GPU_DEFAULTS) applied, every group the model's."""
    after_cpu = changed_cpu_setting(before, {k: v for k, v in values.items() if k != "precision"}, procs)
    g = {**GPU_DEFAULTS, **gpu_changes(values)}   # an exchange the CPU has: the GPU's default
    precision = values.get("precision", before.precision)
    exec_mode = resolve_exec(g["exec"], comm=g["comm"])
    after = Setting(after_cpu.layer_sizes, after_cpu.batch, after_cpu.procs, precision, g["comm"],
                    g["batch_transfer"], exec_mode, g["overlap"], g["bucket_bytes"], g["gemm"],
                    N.COUNTERS if before.traced else "")
    p1 = after.predict(gpu_machine)
    used = {**{k: v * 1e3 for k, v in p1.groups().items()}, "other": 0.0}
    note = (f"priced on a GPU ({gpu_machine.name}) by the GPU model alone: this run's CPU measurement does not "
            "carry to a GPU, so every group is the model's")
    return WhatIf(run_id, gpu_machine.name, before, after, measured_ms, measured_groups_ms,
                  before.predict(cpu_machine), p1, tuple(used), tuple(p1.terms), used, (note,))


def cpu_options(machine, s: CpuSetting) -> list[Alternative]:
    """Each single change the CPU offers (cpu_alternatives), fastest per sample first."""
    return cpu_alternatives(machine, s.layer_sizes, s.batch, s.procs, s.threads, s.precision, s.traced)
