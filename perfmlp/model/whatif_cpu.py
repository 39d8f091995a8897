"""The what-if of a NumPy run: on its CPU with ranks, BLAS threads, batch,
network or precision changed (predict/cpu.py; whatif.py's rule per group),
or moved to a GPU by a change only a GPU has (NCCL, graphs, resident
batches, overlap, a GEMM kernel), priced there by the GPU model alone: a CPU
run's measured phases do not carry to a GPU. Pure: numbers in, numbers out.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import names as N
from .predict import predict_batch, resolve_exec
from .predict.batch import DEFAULT_BUCKET_BYTES
from .predict.cpu import PRECISIONS, Alternative, cpu_alternatives, predict_cpu
from .whatif import KEYS, Setting, WhatIf, WhatIfError, combined

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
    out = {k: v for k, v in values.items() if k in KEYS and k not in CPU_KEYS}
    if out.get("comm") in CPU_COMMS:
        out.pop("comm")
    return out


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
    g = {**GPU_DEFAULTS, **gpu_changes(values)}
    if g["comm"] in CPU_COMMS:
        g["comm"] = N.NCCL
    precision = values.get("precision", before.precision)
    exec_mode = resolve_exec(g["exec"], comm=g["comm"])
    p1 = predict_batch(gpu_machine, after_cpu.layer_sizes, after_cpu.batch, after_cpu.procs, precision, g["comm"],
                       g["batch_transfer"], N.COUNTERS if before.traced else None, exec_mode=exec_mode,
                       overlap=g["overlap"], bucket_bytes=g["bucket_bytes"], gemm=g["gemm"])
    after = Setting(after_cpu.layer_sizes, after_cpu.batch, after_cpu.procs, precision, g["comm"],
                    g["batch_transfer"], exec_mode, g["overlap"], g["bucket_bytes"], g["gemm"],
                    N.COUNTERS if before.traced else "")
    used = {**{k: v * 1e3 for k, v in p1.groups().items()}, "other": 0.0}
    note = (f"priced on a GPU ({gpu_machine.name}) by the GPU model alone: this run's CPU measurement does not "
            "carry to a GPU, so every group is the model's")
    return WhatIf(run_id, gpu_machine.name, before, after, measured_ms, measured_groups_ms,
                  before.predict(cpu_machine), p1, tuple(used), tuple(p1.terms), used, (note,))


def cpu_options(machine, s: CpuSetting) -> list[Alternative]:
    """Each single change the CPU offers (cpu_alternatives), fastest per sample first."""
    return cpu_alternatives(machine, s.layer_sizes, s.batch, s.procs, s.threads, s.precision, s.traced)
