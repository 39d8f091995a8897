"""The what-if of a NumPy run on its CPU file (model/whatif.py), "on a
GPU" as one change among the CPU's, reductions said as reductions, and no
group clamped silently."""
import pytest

from perfmlp import names as N
from perfmlp.model.machine import load_machine
from perfmlp.model.predict import Prediction
from perfmlp.model.whatif import (CpuSetting, change_words, changed_cpu_setting, combined, cpu_options, gpu_changes,
                                  what_if_cpu, what_if_on_gpu)
from perfmlp.model.whatif import WhatIfError

CPU = load_machine("cpu-ci-2core")
RUN = CpuSetting((784, 512, 10), 100, 2, 1, N.FLOAT32, True)
# a measured run: groups in ms, "other" the rest
GROUPS = {N.H2D_BATCH: 0.0, N.COMPUTE: 3.0, N.D2H_GRAD: 0.0, N.ALLREDUCE: 0.8, N.H2D_GRAD: 0.0, "other": 0.2}


def test_a_reduction_is_said_as_one():
    # 1 ms against 4 measured: 1 / 4 - 1 = -75%, 4 / 1 = 4.0x faster
    assert change_words(4.0, 1.0) == "-75%, 4.0x faster than the measured 4.000 ms"
    assert change_words(2.0, 3.0).startswith("+50%, 1.5x slower")


def _pred(**terms):
    return Prediction(terms=terms, total_s=sum(terms.values()), overlapped_s=0, flops_per_rank=0, flops_job=0,
                      bytes_copied_per_rank=0, machine="m")


def test_a_group_below_zero_is_kept_and_named_not_clamped():
    # allreduce measured 0.8 ms; the model drops its allreduce term by 1.0 ms and keeps rank_wait:
    # 0.8 - 1.0 = -0.2 ms
    p0 = _pred(gemm=1e-3, allreduce=1.2e-3, rank_wait=1e-4)
    p1 = _pred(gemm=1e-3, allreduce=0.2e-3, rank_wait=1e-4)
    w = combined("r", "m", RUN, RUN, 4.0, GROUPS, p0, p1)
    assert w.groups_ms[N.ALLREDUCE] == pytest.approx(-0.2)
    assert len(w.notes) == 1 and "allreduce is negative" in w.notes[0]


def test_a_change_on_the_cpu_keeps_what_it_does_not_touch_measured():
    after = changed_cpu_setting(RUN, {"batch_size": 400}, procs=1)
    assert (after.batch, after.procs, after.threads) == (400, 1, 1)
    w = what_if_cpu(CPU, RUN, after, 4.0, GROUPS)
    assert w.groups_ms["other"] == GROUPS["other"]              # untouched: measured
    assert w.groups_ms[N.COMPUTE] > GROUPS[N.COMPUTE]           # four times the samples on one rank
    assert w.groups_ms[N.ALLREDUCE] < GROUPS[N.ALLREDUCE]       # one rank exchanges nothing
    assert not gpu_changes({"batch_size": 400, "comm": N.MPI})  # CPU changes only


def test_a_gpu_only_change_is_priced_on_the_gpu_file_and_said_to_be():
    values = {"comm": N.NCCL, "exec": N.GRAPH}
    assert gpu_changes(values) == values
    gpu = load_machine("quadro-rtx-6000")
    w = what_if_on_gpu(CPU, gpu, RUN, values, 4, 4.0, GROUPS)
    assert w.after.procs == 4 and w.after.comm == N.NCCL and w.after.exec_mode == N.GRAPH
    assert "priced on a GPU" in w.notes[0] and w.machine == gpu.name
    assert w.total_ms == pytest.approx(w.predicted_after.total_s * 1e3)   # every group the GPU model's


def test_the_cpu_offers_ranks_threads_batch_and_precision_beside_the_gpu():
    kinds = {k for o in cpu_options(CPU, RUN) for k in o.change}
    assert kinds == {"procs", "threads", "batch", "precision"}


def test_a_precision_a_cpu_lacks_is_refused_in_words():
    with pytest.raises(WhatIfError, match="NumPy run computes in"):
        changed_cpu_setting(RUN, {"precision": "bf16"})


def test_a_numpy_run_is_predicted_from_the_cpu_file_its_compute_split_and_its_roofline_drawn(tmp_path):
    from conftest import run_perfmlp
    from perfmlp.report.analysis import analyse
    from perfmlp.report.sections.questions import cpu_figures
    from perfmlp.report.study import load_study
    from perfmlp.report.verdicts import CPU_COMPUTE, GEMMS, attribute
    from perfmlp.trace.reader import read_run
    r = run_perfmlp("--backend", "numpy", "--data", "synthetic", "--hidden-size", "64", "--batch-size", "50",
                    "--n-train", "400", "--epochs", "1", "--trace-dir", str(tmp_path), "--run-id", "p2", procs=2)
    assert r.returncode == 0, r.stderr
    a = analyse([read_run(tmp_path / "p2")], [], load_study())
    s = a.runs[0]
    assert a.machines.cpu is not None and s.predicted is not None and s.predicted.machine == a.machines.cpu.name
    parts = dict(attribute(s).parts_ms)
    assert GEMMS in parts and CPU_COMPUTE not in parts   # the CPU model splits the measured compute
    figs = cpu_figures(a)
    assert [f.name for f in figs] == ["roofline_cpu"]
    assert figs[0].draw(**figs[0].args)   # drawn: the encoded image
