"""The roofline of several ceilings: every GPU run of the report under the
ceiling of the precision it ran in (the primary machine's FFMA, TF32 and
BF16/FP16 tensor-core peaks), at two memory levels: FLOPs per device-memory
byte against HBM (the trace's counts of the bytes the step's kernels read
and write, at the run's own layer sizes and widths) and FLOPs per copied
byte against PCIe, where the overlapped (prefetched) bound is the slanted
line and the serialised one the modified curve below it. A NumPy run's
roofline is its CPU's (cpu_figures): the rank's share of the large-GEMM
rate per precision, memory bandwidth, and the MPI exchange as the modified
roofline's copy (model/predict/cpu.py cpu_ceilings)."""
from __future__ import annotations

import math
import statistics

from ...model.machine import MachineError
from ...model.predict.cpu import cpu_ceilings
from ...model.precision import precision as precision_of
from ..figures import ceilings_roofline
from ... import names as N


def ceilings_points(a) -> list[dict]:
    """One point per GPU run of data parallelism: its precision's GEMM format,
    measured FLOP/s per GPU (rank 0's FLOPs over the time per batch) and its
    two intensities, from the run's own trace: its FLOPs over the
    device-memory bytes its kernels moved (None where the trace does not
    count them), and over the bytes it copied."""
    out = []
    for r in a.runs:
        if r.backend != N.CUPY or r.strategy != N.DATA or not r.t_ms:
            continue
        mem = r.mem_bytes_rank0
        out.append({"precision": precision_of(r.precision).gemm, "measured": r.flops_rank0 / (r.t_ms * 1e-3),
                    "ai_hbm": r.flops_rank0 / mem if mem else None,
                    "ai_pcie": r.ai if math.isfinite(r.ai) else None, "run": r.run_id})
    return out


def ceilings_figures(a, figure) -> list:
    """The figure (a report Figure made by `figure(name, caption, draw, args)`), or none without GPU runs;
    the CPU's beside it where NumPy runs are."""
    pts, m = ceilings_points(a), a.machines.primary
    if not pts:
        return cpu_figures(a, figure)
    try:
        ceilings = m.ceilings()
        for p in pts:
            m.peak_flops_per_s(p["precision"])   # a run in a precision the machine has no ceiling for
    except MachineError:
        return []
    bws = {"HBM": m.mem_bw_bytes_per_s, "PCIe pinned, copies overlapped (prefetch):": m.h2d_pinned_bytes_per_s}
    return [figure("roofline_ceilings", "Roofline of several ceilings: every GPU run under its precision's",
                   ceilings_roofline, dict(points=pts, ceilings=ceilings, bws=bws,
                                           title=f"Ceilings per precision and memory level, {m.name}"))] \
        + cpu_figures(a, figure)


def cpu_points(a) -> list[dict]:
    """One point per NumPy run of data parallelism: measured FLOP/s per
    rank, its FLOPs per memory byte (where the trace counts them) and per
    byte its rank exchanges (several ranks)."""
    out = []
    for r in a.runs:
        if r.backend != N.NUMPY or r.strategy != N.DATA or not r.t_ms:
            continue
        sent = r.bytes_exchanged_rank0 if r.procs > 1 else 0
        out.append({"precision": r.precision, "measured": r.flops_rank0 / (r.t_ms * 1e-3),
                    "ai_hbm": r.flops_rank0 / r.mem_bytes_rank0 if r.mem_bytes_rank0 else None,
                    "ai_pcie": r.flops_rank0 / sent if sent else None, "run": r.run_id, "procs": r.procs})
    return out


def cpu_figures(a, figure) -> list:
    """The CPU's roofline at the NumPy runs' most common rank count (its
    ceilings are one rank's share of the machine), or none."""
    pts, cpu = cpu_points(a), a.machines.cpu
    if not pts or cpu is None:
        return []
    procs = statistics.mode(p["procs"] for p in pts)
    precisions = sorted({p["precision"] for p in pts})
    c = {p: cpu_ceilings(cpu, p, procs) for p in precisions}
    ceilings = {p: c[p]["peak_flops_per_s"] for p in precisions}
    bws = {"memory": c[precisions[0]]["mem_bw_bytes_per_s"]}
    if c[precisions[0]]["copy_bytes_per_s"]:
        bws["MPI exchange (the modified roofline's copy):"] = c[precisions[0]]["copy_bytes_per_s"]
    return [figure("roofline_cpu", f"Roofline of the CPU: every NumPy run under one rank's ceilings at p = {procs}",
                   ceilings_roofline, dict(points=pts, ceilings=ceilings, bws=bws, levels=("memory", "MPI"),
                                           units="BLAS", per="rank",
                                           title=f"One rank's ceilings at p = {procs}, {cpu.name}"))]
