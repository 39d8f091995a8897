"""The model's host terms as calibrated: the host's time per launched
operation with p ranks launching at once (host_dispatch_s), host MPI
through the staged buffer's memory (allreduce_s memory) and the GPU's time
per graph replay (graph_replay_gap_s)."""
import dataclasses
import re

import pytest

from perfmlp.model.machine import MachineError, load_machine, machine_from_mapping
from perfmlp.model.predict import predict_batch
from perfmlp.model.scaled import scaled_values


def _values(**extra):
    m = load_machine("quadro-rtx-6000")
    d = {k: getattr(m, k) for k in m.__dataclass_fields__
         if k not in ("path", "gemm_flops_per_s", "date", "traced_launch_overhead_s")}
    d.update(launch_overhead_s=10e-6, trace_phase_host_s=3e-6, **extra)
    return d


DISPATCH = [{"procs": 2, "launch_s": 20e-6, "trace_phase_s": 5e-6},
            {"procs": 4, "launch_s": 16e-6, "trace_phase_s": 4e-6}]


def test_launch_time_per_process_count():
    m = machine_from_mapping(_values(host_dispatch_s=DISPATCH), "x.yaml")
    assert m.launch_s(1) == 10e-6 and m.trace_host_s(1) == 3e-6          # one rank alone
    assert m.launch_s(2) == 20e-6 and m.trace_host_s(4) == 4e-6          # measured points
    assert m.launch_s(3) == pytest.approx(18e-6)                          # linear between 2 and 4
    assert m.launch_s(8) == 16e-6                                         # the last beyond it
    plain = machine_from_mapping(_values(), "x.yaml")
    assert plain.launch_s(4) == 10e-6 and plain.trace_host_s(4) == 3e-6   # no table: alone


@pytest.mark.parametrize("entry, words", [
    ({"procs": 2, "launch_s": 0, "trace_phase_s": 1e-6}, "host_dispatch_s[0] launch_s must be positive"),
    ({"procs": 2, "launch_s": 1e-5}, "host_dispatch_s[0] needs exactly procs, launch_s, trace_phase_s"),
])
def test_a_bad_dispatch_point_is_one_line(entry, words):
    with pytest.raises(MachineError, match=re.escape(words)):
        machine_from_mapping(_values(host_dispatch_s=[entry]), "x.yaml")


def test_an_eager_host_bound_step_pays_the_launch_time_of_its_process_count():
    kw = dict(comm="nccl", batch_transfer="resident", exec_mode="eager", trace_level="counters")
    fast_nccl = dict(nccl_alpha_s=1e-6, nccl_bw_bytes_per_s=1e12)   # so that the host is the bound
    slow = machine_from_mapping(_values(host_dispatch_s=DISPATCH, **fast_nccl), "x.yaml")
    plain = machine_from_mapping(_values(**fast_nccl), "x.yaml")
    at4 = [predict_batch(m, (784, 512, 10), 3200, 4, **kw) for m in (plain, slow)]
    # host time per step: kernels + the collective call at the launch time, 5 phases of the tracer
    ops = at4[0].detail["host_s"] - 5 * 3e-6
    assert at4[1].detail["host_s"] == pytest.approx(ops * 16e-6 / 10e-6 + 5 * 4e-6)
    assert at4[1].total_s > at4[0].total_s
    at1 = [predict_batch(m, (784, 512, 10), 3200, 1, **kw) for m in (plain, slow)]
    assert at1[0] == dataclasses.replace(at1[1], machine=at1[0].machine)   # one rank: the table plays no part


def _with_mpi_points(memories):
    pts = [{"comm": "mpi", "procs": 2, "bytes": n, "s": s * (2 if mem == "pageable" else 1), "memory": mem}
           for mem in memories for n, s in ((10**5, 1e-4), (10**7, 1e-2))]
    return machine_from_mapping(_values(allreduce_s=pts), "x.yaml")


def test_host_mpi_through_the_staged_buffers_memory():
    both, pinned_only = _with_mpi_points(("pinned", "pageable")), _with_mpi_points(("pinned",))
    args = ((784, 512, 10), 3200, 2)
    ar = {t: predict_batch(both, *args, comm="mpi-staged", batch_transfer=t).terms["allreduce"]
          for t in ("pageable", "pinned", "resident")}
    assert ar["pageable"] == pytest.approx(2 * ar["pinned"]) and ar["pinned"] == ar["resident"]
    # a file with pinned points only prices every staging memory by them
    assert predict_batch(pinned_only, *args, comm="mpi-staged", batch_transfer="pageable").terms["allreduce"] \
        == pytest.approx(ar["pinned"])
    with pytest.raises(MachineError, match=r"allreduce_s\[0\] memory must be one of pinned, pageable"):
        machine_from_mapping(_values(allreduce_s=[{"comm": "mpi", "procs": 2, "bytes": 8, "s": 1e-6,
                                                   "memory": "managed"}]), "x.yaml")


def test_a_graph_replay_costs_its_gap_on_the_gpu():
    base = machine_from_mapping(_values(), "x.yaml")
    gap = dataclasses.replace(base, graph_replay_gap_s=3e-6)
    kw = dict(comm="nccl", batch_transfer="resident", exec_mode="graph")
    a, b = (predict_batch(m, (784, 512, 10), 3200, 1, **kw) for m in (base, gap))
    assert b.total_s - a.total_s == pytest.approx(3e-6)   # GPU-bound: the replay gap adds in full
    assert b.terms["graph_launch"] - a.terms["graph_launch"] == pytest.approx(3e-6)
    eager = [predict_batch(m, (784, 512, 10), 3200, 1, comm="nccl", batch_transfer="resident") for m in (base, gap)]
    assert eager[0].total_s == eager[1].total_s


def test_a_calibration_carried_to_another_gpu_keeps_the_host_terms():
    cal = machine_from_mapping(_values(host_dispatch_s=DISPATCH, allreduce_s=[
        {"comm": "mpi", "procs": 2, "bytes": 8, "s": 1e-6, "memory": "pageable"}]), "x.yaml")
    v = scaled_values(cal, load_machine("h200"), load_machine("h100-sxm"))
    assert v["host_dispatch_s"] == DISPATCH   # the host's, as measured
    assert v["allreduce_s"][0]["memory"] == "pageable"
    assert machine_from_mapping(v, "y.yaml").launch_s(4) == 16e-6
