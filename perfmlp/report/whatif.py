"""What a measured run gives the what-if solver (model/whatif.py): its configuration and its time by phase group."""
from __future__ import annotations

from ..model.machine import Machine
from ..model.whatif import CpuSetting, Setting, WhatIf, changed_setting, slices_of, what_if
from ..trace.reader import Run
from .. import names as N


def setting_of(run: Run) -> Setting:
    c, ran = run.config, run.ran
    return Setting(tuple(run.layer_sizes), int(c["batch_size"]), run.procs, c["precision"], ran.comm,
                   ran.batch_transfer, ran.exec, ran.overlap, ran.bucket_bytes, ran.gemm, ran.trace_level,
                   slices_of(c.get("slices", "1")))


def cpu_setting_of(run: Run) -> CpuSetting:
    """A NumPy run's configuration for the CPU model, with the BLAS threads rank 0 ran (None: the CPU file's)."""
    threads = (run.ran.blas_threads or (None,))[0]
    return CpuSetting(tuple(run.layer_sizes), int(run.config["batch_size"]), run.procs, threads,
                      run.config["precision"], True)


def measured_groups_ms(run: Run) -> tuple[float, dict]:
    """(time per batch, group -> ms) of the slowest rank; "other": what the phases' medians do not add up to."""
    steady = run.steady_batches().values()
    per_rank = {r: sorted(run.batch_time_ms(recs[r]) for recs in steady) for r in run.ranks}
    slowest = max(per_rank, key=lambda r: per_rank[r][len(per_rank[r]) // 2])
    groups = dict.fromkeys(N.GROUPS, 0.0)
    for phase, ms in run.phase_ms(slowest).items():
        groups[N.PHASE_GROUP[phase]] += ms
    t = run.median_batch_ms()
    groups["other"] = t - sum(groups.values())
    return t, groups


def what_if_run(run: Run, machine: Machine, values: dict, procs: int | None = None) -> WhatIf:
    """The what-if of a measured run with `values` (configuration keys) and `procs` changed."""
    before = setting_of(run)
    after = changed_setting(before, values, procs)
    t, groups = measured_groups_ms(run)
    return what_if(machine, before, after, t, groups, run.run_id)
