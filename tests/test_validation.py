"""Execution modes, overlap, the host/GPU timeline, the machine terms, the
what-if, the sweep's blind predictions and repeats, and the report's
validation section, on synthetic traces (tests/synthetic.py) and a
calibration of the tests' own (tests/data/)."""
import csv
import json
import math
import subprocess
import sys

import pytest

from perfmlp import names as N
from perfmlp.model.costs import grad_buffer_bytes
from perfmlp.model.machine import MachineError, load_machine, machine_from_mapping
from perfmlp.names import GROUPS
from perfmlp.model.predict import (TERM_GROUP, Item, allreduce_s, gradient_buckets, graph_loop_host_s,
                                   overlap_pipeline, predict_batch, timeline_batch_s)

from conftest import ROOT
from test_whatif import whatif
from synthetic import as_run, gpu_records, gpu_run, level_of, model_phase_ms, prediction_entry, write_predictions, write_run

CALIBRATED = ROOT / "tests" / "data" / "h200-x2-calibrated.yaml"  # a 2 x H200 calibration with the kernels' rates
OTHER_MS = 0.05  # the eager base run's time between phases


def base_run():
    """The reference scheme (H=512, B=3200, one GPU, pageable, mpi-staged,
    eager, traced at phases) measuring exactly what h200-calibrated predicts
    of each phase group, plus OTHER_MS a batch between the phases."""
    m = load_machine("h200-calibrated")
    ms, pred = model_phase_ms(m)
    return gpu_records(phase_ms=ms, other_ms=OTHER_MS, batches=6, run_id="base"), m, pred


def machine(**extra):
    """A machine whose GPU work is negligible (1e18 FLOP/s, 1e18 B/s) and
    whose host takes 10 us per launch."""
    values = {"name": "toy", "source": "test", "peak_flops_per_s_float32": 1e18, "peak_flops_per_s_float64": 1e18,
              "mem_bw_bytes_per_s": 1e18, "h2d_pageable_bytes_per_s": 1e9, "h2d_pinned_bytes_per_s": 1e10,
              "d2h_pageable_bytes_per_s": 1e9, "d2h_pinned_bytes_per_s": 1e10, "copy_latency_s": 0.0,
              "launch_overhead_s": 10e-6, "mpi_alpha_s": 1e-6, "mpi_bw_bytes_per_s": 1e9, "nccl_alpha_s": 1e-5,
              "nccl_bw_bytes_per_s": 1e11, **extra}
    return machine_from_mapping(values, "toy.yaml")


def test_the_models_groups_are_the_traces_phase_terms():
    assert set(TERM_GROUP.values()) == set(N.PHASE_GROUP.values()) == set(GROUPS)


def test_launches_count_kernels_and_a_graph_has_none():
    m = machine(graph_launch_s=4e-6)
    eager = predict_batch(m, (784, 512, 10), 100, 1, comm="nccl", batch_transfer="resident")
    # no synchronisation: host-bound at 9 kernels (the output layer's backward fused) + the
    # NCCL call, 10 x 10 us = 100 us a step
    assert eager.detail["kernels"] == 9
    assert math.isclose(eager.terms["launches"], 100e-6, rel_tol=1e-3)
    graph = predict_batch(m, (784, 512, 10), 100, 1, comm="nccl", batch_transfer="resident", exec_mode="graph")
    # one replay (NCCL inside it, 4 us of host) after the piece's two device copies into the
    # graph's inputs (a launch each, 10 us): 24 us a step, no per-kernel launches
    assert graph.terms["launches"] == 0 and math.isclose(graph.terms["graph_launch"], 24e-6, rel_tol=1e-3)
    assert graph.detail["bytes_d2d"] == 4 * 100 * (784 + 10)
    staged = predict_batch(m, (784, 512, 10), 100, 1, comm="mpi-staged", batch_transfer="resident",
                           exec_mode="graph")
    assert staged.detail["exec"] == "graph" and staged.terms["launches"] == 0


def test_a_blocking_item_exposes_the_hosts_launches():
    free = [Item(10.0, 1.0), Item(1.0, 5.0)]
    assert timeline_batch_s(free) == 11.0  # max(host 1 + 5, GPU 10 + 1)
    # the host waits for the first item: issue 1 + GPU 10, then issue 5 (the GPU idles) = 16
    assert timeline_batch_s([Item(10.0, 1.0, blocking=True), Item(1.0, 5.0)]) == 16.0
    # a host-only item (MPI on host buffers) after the stream drains: 1 + 10 + 3 (+ 5 issuing, GPU 1 hidden) = 19
    assert timeline_batch_s([Item(10.0, 1.0), Item(0.0, 3.0, host_only=True), Item(1.0, 5.0)]) == 19.0


def test_overlap_pipeline_and_buckets():
    # compute 2 per stage, comm 3 per stage: comm ends at 5, 8, 11; compute at 6 -> 5 exposed
    assert overlap_pipeline([(2, 3), (2, 3), (2, 3)]) == (6, 11)
    assert overlap_pipeline([(5, 1), (5, 1)]) == (10, 11)  # only the last bucket's comm shows
    # 784-512-10 fp32, 1 MiB buckets (elements, in the trainer's order): W2 (10 x 512) whole; the biases
    # and the loss slot (512 + 10 + 1) once db1 is written; W1 (512 x 784, 334 rows fit in 1 MiB) in 2 blocks
    b = gradient_buckets((784, 512, 10), 4, 1 << 20)
    assert b == [5120, 523, 256 * 784, 256 * 784]
    assert 4 * sum(b) == grad_buffer_bytes((784, 512, 10), 4)
    m = load_machine("h200-calibrated")
    kw = dict(layer_sizes=(784, 1024, 1024, 1024, 10), batch=3200, procs=2, comm="nccl", batch_transfer="resident")
    plain, over = predict_batch(m, **kw), predict_batch(m, **kw, overlap=True, bucket_bytes=1 << 20)
    assert 0 < over.terms["allreduce"] < plain.terms["allreduce"]
    # the weight-gradient GEMMs run in row blocks: the same FLOPs, priced at the blocks' shapes
    assert over.detail["hidden_comm_s"] > 0 and over.flops_per_rank == plain.flops_per_rank
    # more buckets pay more latency: one byte per bucket is worse than the plain allreduce
    assert predict_batch(m, **kw, overlap=True, bucket_bytes=4096).terms["allreduce"] > plain.terms["allreduce"]


def test_shared_copies_wait_and_allreduce_table():
    m = machine(h2d_pinned_aggregate_bytes_per_s=2e10,
                allreduce_s=[{"comm": "mpi", "procs": 2, "bytes": 1000, "s": 1e-5},
                             {"comm": "mpi", "procs": 2, "bytes": 4000, "s": 4e-5}],
                collective_wait_s=[{"procs": 2, "s": 2e-6}, {"procs": 4, "s": 6e-6}])
    # own 10 GB/s; 4 ranks share 20 GB/s -> 5 GB/s each; 2 ranks -> min(10, 10) = 10
    assert m.shared_copy_bw("h2d", "pinned", 4) == 5e9 and m.shared_copy_bw("h2d", "pinned", 2) == 1e10
    assert math.isclose(allreduce_s(m, "mpi-staged", 2000, 2), 2e-5)  # log-log between points of t = n * 1e-8
    # beyond the table: the last point scaled by the ring model, 4e-5 * (2 us + 8 us) / (2 us + 4 us) = 6.67e-5
    assert math.isclose(allreduce_s(m, "mpi", 8000, 2), 4e-5 * 10 / 6)
    assert allreduce_s(m, "nccl", 2000, 2) == pytest.approx(1e-5 + 2000 / 1e11)  # no NCCL points: the ring
    assert m.wait_s(1) == 0 and m.wait_s(3) == pytest.approx(4e-6) and m.wait_s(8) == 6e-6
    with pytest.raises(MachineError, match="toy.yaml: allreduce_s\\[0\\] comm"):
        machine(allreduce_s=[{"comm": "gloo", "procs": 2, "bytes": 1, "s": 1.0}])
    with pytest.raises(MachineError, match="gemm_flops_per_s\\[0\\] kernel"):
        machine(gemm_flops_per_s=[{"m": 1, "n": 1, "k": 1, "precision": "float32", "flops_per_s": 1, "kernel": "x"}])


def test_a_graph_runs_loop_costs_the_host_what_the_calibration_left_after_the_launches():
    # graph step measured at 100 us of host a batch on one rank: 2 copy calls (10 us each) and the
    # launch (4 us) leave 76 us of the loop's own work, once a batch in graph mode only
    m, plain = machine(graph_launch_s=4e-6, graph_step_host_s=100e-6), machine(graph_launch_s=4e-6)
    assert graph_loop_host_s(m) == pytest.approx(76e-6) and graph_loop_host_s(plain) == 0.0
    assert graph_loop_host_s(machine(graph_launch_s=4e-6, graph_step_host_s=10e-6)) == 0.0   # never negative
    kw = dict(layer_sizes=(784, 512, 10), batch=100, procs=1, comm="nccl", batch_transfer="resident", exec_mode="graph")
    # the GPU work is negligible: the host's 100 us a batch is the step, all of it as measured
    assert predict_batch(m, **kw).total_s == pytest.approx(100e-6)
    assert predict_batch(plain, **kw).total_s == pytest.approx(24e-6)
    eager = {**kw, "exec_mode": "eager"}
    assert predict_batch(m, **eager).total_s == predict_batch(plain, **eager).total_s   # eager: in launch_s already
    # behind a replay, a pageable copy hides less of it when the loop's host work comes between
    pts = [{"procs": 1, "direction": "h2d", "memory": "pageable", "bytes": n, "s": n / 1e9, "ahead_s": 2e-4,
            "blocks": True, "ahead_delay_s": 1e-5} for n in (1_000_000, 20_000_000)]
    big = dict(graph_launch_s=4e-6, peak_flops_per_s_float32=5e13, host_copy_s=pts)   # a replay of 154 us
    pk = {**kw, "batch": 3200, "batch_transfer": "pageable"}
    a, b = predict_batch(machine(**big), **pk), predict_batch(machine(**big, graph_step_host_s=100e-6), **pk)
    assert a.detail["h2d_hidden_s"] > b.detail["h2d_hidden_s"] and b.total_s > a.total_s


def test_an_eager_steps_launches_cost_as_calibrated_at_its_size():
    factors = [{"hidden": 512, "batch": 800, "factor": 1.5}, {"hidden": 2048, "batch": 3200, "factor": 2.0}]
    m, plain = machine(launch_size_factor=factors), machine()
    assert plain.launch_factor(512, 800) == 1.0
    assert m.launch_factor(512, 800) == 1.5 and m.launch_factor(2048, 6400) == 2.0 and m.launch_factor(400, 100) == 1.5
    kw = dict(layer_sizes=(784, 512, 10), batch=800, procs=1, comm="nccl", batch_transfer="resident")
    # the toy's GPU work is negligible: host-bound at 10 operations of 10 us, 1.5 x at this size
    assert predict_batch(m, **kw).total_s == pytest.approx(1.5 * predict_batch(plain, **kw).total_s)
    graph = {**kw, "exec_mode": "graph"}   # a replay is not an eager launch: unchanged
    assert predict_batch(m, **graph).total_s == predict_batch(plain, **graph).total_s
    with pytest.raises(MachineError, match="toy.yaml: launch_size_factor\\[0\\] factor"):
        machine(launch_size_factor=[{"hidden": 512, "batch": 800, "factor": 0}])


def test_the_staged_exchange_waits_as_calibrated_for_its_memory():
    waits = [{"procs": 2, "s": 2e-6}, {"procs": 4, "s": 6e-6},
             {"procs": 2, "s": 1.5e-4, "memory": "pageable"}, {"procs": 2, "s": 3e-5, "memory": "pinned"}]
    m = machine(collective_wait_s=waits)
    assert m.wait_s(2) == 2e-6 and m.wait_s(2, "pageable") == 1.5e-4 and m.wait_s(2, "pinned") == 3e-5
    assert m.wait_s(4, "pageable") == 1.5e-4   # the nearest measured count beyond them
    assert m.wait_s(1, "pageable") == 0.0
    assert machine(collective_wait_s=waits[:2]).wait_s(2, "pinned") == 2e-6   # no staged points: equal ranks'
    kw = dict(layer_sizes=(784, 512, 10), batch=3200, procs=2, comm="mpi-staged")
    assert predict_batch(m, **kw, batch_transfer="pageable").terms["rank_wait"] == 1.5e-4
    assert predict_batch(m, **kw, batch_transfer="resident").terms["rank_wait"] == 3e-5   # staged through pinned
    assert predict_batch(m, **{**kw, "comm": "nccl"}, batch_transfer="pageable").terms["rank_wait"] == 2e-6
    # the staged wait is the host's: a step through pageable memory takes that much longer than with the
    # equal-ranks wait alone
    plain = machine(collective_wait_s=waits[:2])
    t = [predict_batch(x, **kw, batch_transfer="pageable").total_s for x in (plain, m)]
    assert t[1] - t[0] == pytest.approx(1.5e-4 - 2e-6)
    with pytest.raises(MachineError, match="toy.yaml: collective_wait_s\\[0\\] memory"):
        machine(collective_wait_s=[{"procs": 2, "s": 1e-6, "memory": "device"}])


def test_reference_kernels_use_their_own_rates():
    rows = [{"m": 512, "n": 3200, "k": 784, "precision": "float32", "flops_per_s": 3e13},
            {"m": 512, "n": 3200, "k": 784, "precision": "float32", "flops_per_s": 1e12, "kernel": "naive"}]
    m = machine(gemm_flops_per_s=rows)
    assert m.gemm_rate(512, 3200, 784, "float32") == 3e13
    assert m.gemm_rate(512, 3200, 784, "float32", kernel="naive") == 1e12
    assert m.gemm_rate(512, 3200, 784, "float32", kernel="tiled") == 1e18  # not calibrated: the peak


def test_model_command_takes_exec_and_overlap():
    r = subprocess.run([sys.executable, "-m", "perfmlp.model", "--machine", "h200-calibrated", "--exec", "graph",
                        "--procs", "2", "--comm", "nccl", "--batch-transfer", "resident", "--overlap",
                        "--bucket-bytes", "500000", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["config"]["exec"] == "graph" and s["config"]["overlap"] and s["prediction"]["terms_s"]["launches"] == 0
    # W2 whole, the biases with the loss slot, W1 in 4 row blocks (159 rows of 3,136 B fit in 500,000)
    assert s["prediction"]["detail"]["buckets"] == 1 + 1 + 4
    r = subprocess.run([sys.executable, "-m", "perfmlp.model", "--bucket-bytes", "0"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "bucket-bytes" in r.stderr


# ---- what-if ---------------------------------------------------------------------------

def test_whatif_without_a_change_is_the_measurement():
    from perfmlp.report.whatif import what_if_run as what_if
    records, m, _ = base_run()
    w = what_if(as_run(records), m, {})
    assert w.changed == () and math.isclose(w.total_ms, w.measured_ms)
    # the measurement: the model's groups plus the time between phases
    assert w.measured_ms == pytest.approx(1e3 * sum(base_run()[2].groups().values()) + OTHER_MS)


def test_whatif_replaces_only_the_affected_terms():
    from perfmlp.report.whatif import what_if_run as what_if
    records, m, _ = base_run()
    run = as_run(records)
    w = what_if(run, m, {"batch_transfer": "resident", "comm": "nccl"})
    assert w.groups_ms["h2d_batch"] == 0 and w.groups_ms["d2h_grad"] == 0 and w.groups_ms["h2d_grad"] == 0
    # compute: the GEMMs are unchanged; the tracer's events (8 -> 5) and the launches the pageable copy's
    # synchronisation exposed are: the measurement with those two terms replaced
    assert "gemm" not in w.changed_terms and {"tracing", "launches"} <= set(w.changed_terms)
    p0, p1 = w.predicted_before.terms, w.predicted_after.terms
    assert p1["tracing"] == pytest.approx(p0["tracing"] - 3 * m.trace_event_s)
    assert w.groups_ms["compute"] == pytest.approx(
        w.measured_groups_ms["compute"] + 1e3 * sum(p1[t] - p0[t] for t in ("tracing", "launches")))
    # the run measured what the model predicts of it: every group of the change is the model's own
    # prediction of the changed configuration, and the time between phases stays measured
    after = w.predicted_after.groups()
    for g in GROUPS:
        assert w.groups_ms[g] == pytest.approx(1e3 * after[g], abs=1e-9), g
    assert w.total_ms == pytest.approx(1e3 * sum(after.values()) + OTHER_MS)
    g = what_if(run, m, {"exec": "graph"}, procs=4)
    assert g.after.procs == 4 and g.after.exec_mode == "graph" and "gemm" in g.changed_terms
    # the eager run's time between phases is gone in one replay; kept when the change stays eager
    assert w.measured_groups_ms["other"] == pytest.approx(OTHER_MS)
    assert w.groups_ms["other"] == w.measured_groups_ms["other"]
    assert g.groups_ms["other"] == 0 and "other" in g.changed


def test_whatif_command_and_its_errors(tmp_path):
    base = write_run(tmp_path, base_run()[0])
    cmd = [sys.executable, "-m", "perfmlp.whatif", str(base)]
    r = subprocess.run(cmd + ["--set", "comm=nccl", "--set", "batch_transfer=pinned", "--set", "exec=graph",
                              "--procs", "4", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["after"]["procs"] == 4 and "h2d_batch" in out["changed"] and out["predicted_ms"] > 0
    for bad, word in ((["--set", "colour=red"], "colour"), (["--set", "comm=smoke"], "comm"),
                      (["--procs", "0"], "--procs")):
        r = whatif(base, *bad)   # the refusals in this process: no interpreter to start for each
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and word in r.stderr, r.stderr
    r = whatif("/nonexistent/run")
    assert r.returncode == 2 and "/nonexistent/run" in r.stderr


# ---- sweep: repeats, windows, blind predictions -------------------------------------------

def test_sweep_repeats_windows_and_predictions(tmp_path):
    from perfmlp.errors import PerfmlpError
    from perfmlp.sweep import expand, write_predictions
    spec = {"name": "v", "base": {"data": "synthetic", "hidden_sizes": [8], "batch_size": 50, "epochs": 2},
            "matrix": {"procs": [1, 2]}, "repeats": 3, "min_steady_batches": 20}
    runs = expand(spec, "v.yaml")
    assert len(runs) == 6 and len({r.run_id for r in runs}) == 6
    assert [r.repeat for r in runs] == [1, 1, 2, 2, 3, 3]  # every configuration once, then again
    assert runs[0].run_id.split("-")[-2] == "r1"
    # 20 steady over 2 epochs: 10 a epoch + its 3 warm-up batches = 13 batches of 50 = 650 samples
    assert runs[0].config.n_train == 650
    with pytest.raises(PerfmlpError, match="repeats must be a positive integer"):
        expand({**spec, "repeats": 0}, "v.yaml")
    f = tmp_path / "predictions.json"
    assert write_predictions(f, "h200-calibrated", runs[:2]) == 2
    first = json.loads(f.read_text())["runs"][runs[0].run_id]
    assert write_predictions(f, "h200-calibrated", runs) == 4  # only the new ones
    assert json.loads(f.read_text())["runs"][runs[0].run_id] == first  # never rewritten
    with pytest.raises(PerfmlpError, match="another machine file"):
        write_predictions(f, "h200", [*runs, *expand({**spec, "name": "w"}, "w.yaml")])


# ---- the report's validation section ----------------------------------------------------------

def test_validation_section_checks_blindness_and_groups_repeats(tmp_path):
    from perfmlp.report.analysis import analyse
    from perfmlp.report.study import load_study
    from perfmlp.report.model_error import blind_status
    from perfmlp.report.sections.validation import section_validation
    m = load_machine("h200-calibrated")
    started = "2026-11-21T13:14:21+00:00"
    # two repeats of one configuration (resident, NCCL) and the reference scheme, each run at `started`
    resident = dict(transfer="resident", comm="nccl", batches=6, start=started)
    runs = [gpu_run(**resident, run_id="modes-resident"),
            gpu_run(**resident, run_id="q2_2-resident", phase_ms={"forward": 0.12}),
            gpu_run(batches=6, start=started, run_id="modes-pageable")]
    pred = predict_batch(m, (784, 512, 10), 3200, 1, comm="nccl", batch_transfer="resident", trace_level="phases")
    write_predictions(tmp_path, {"modes-resident": prediction_entry(pred, "2026-11-21T00:00:00+00:00"),   # before
                                 "q2_2-resident": prediction_entry(pred, "2026-11-30T00:00:00+00:00")})   # after
    assert blind_status({"predicted_at": "2026-11-21T13:14:21.9+00:00"}, started) == "blind"
    assert blind_status({"predicted_at": "2026-11-21T13:14:22+00:00"}, started).startswith("not")
    sec = section_validation(analyse(runs, [], load_study(None), "h200-calibrated", tmp_path))
    rows = {t.name: t.rows for t in sec.tables}["validation_runs"]
    res = [r for r in rows if "resident/nccl" in r["configuration"]]
    # 5 phases of 0.1 ms, one of them 0.12 in the second repeat: 0.5 and 0.52 ms, spread 0.02 / 0.51
    assert len(res) == 1 and res[0]["repeats"] == 2 and res[0]["spread %"] == pytest.approx(100 * 0.02 / 0.51)
    assert res[0]["measured ms (median)"] == pytest.approx(0.51)
    assert res[0]["prediction"].startswith("not blind")  # one of its two predictions came after its run
    assert [r for r in rows if "pageable" in r["configuration"]][0]["prediction"] == "not blind (no prediction)"
    assert "first 3 batches of every epoch" in sec.paragraphs[0]


def test_sign_test_and_its_words():
    from perfmlp.report.model_error import sign_test_p
    from perfmlp.report.sections.validation import sign_verdict
    assert sign_test_p(0, 5) == 2 / 32                    # all 5 on one side: 2 x (1/2)^5 = 0.0625
    assert sign_test_p(1, 9) == pytest.approx(2 * (1 + 10) / 1024)  # 2 (C(10,0) + C(10,1)) / 2^10 = 0.0215
    assert sign_test_p(3, 2) == 1.0 and sign_test_p(0, 0) == 1.0
    assert "too few" in sign_verdict(0, 5) and "too fast" in sign_verdict(0, 5)
    assert sign_verdict(9, 1).startswith("9 above, 1 below: biased, the model is too slow")
    assert "within what chance gives" in sign_verdict(3, 2)


def repeat_records(n=3, spread=(1.0, 1.01, 1.02), start="2026-11-22T10:00:00+00:00", machine=None, **kw):
    """The records of `n` runs of one configuration, r1..rn, each measuring
    the calibrated model's phase times (CALIBRATED; 2 us where the model has
    none, as a one-rank MPI allreduce) times 1.1 times its entry of `spread`."""
    m = machine or load_machine(CALIBRATED)
    mode = {k: kw[k] for k in ("hidden", "batch", "procs", "transfer", "comm", "exec_mode") if k in kw}
    ms, _ = model_phase_ms(m, **mode, trace_level=level_of(kw.get("clock", "cuda-events")))
    h, b, p = kw.get("hidden", (512,)), kw.get("batch", 3200), kw.get("procs", 1)
    name = (f"validate-h{'x'.join(map(str, h))}-b{b}-p{p}-{kw.get('transfer', 'pageable')}-"
            f"{kw.get('comm', 'mpi-staged')}-{kw.get('exec_mode', 'eager')}")
    return [gpu_records(**kw, run_id=f"{name}-r{i + 1}", batches=6, start=start,
                        phase_ms={q: 1.1 * f * max(t, 0.002) for q, t in ms.items()})
            for i, f in zip(range(n), spread)]


def repeats(**kw) -> list:
    """repeat_records(**kw) as runs read from memory."""
    return [as_run(x) for x in repeat_records(**kw)]


def test_validation_summary_per_mode_and_host_enqueue_runs_left_out(tmp_path):
    from perfmlp.report.analysis import analyse
    from perfmlp.report.study import load_study
    from perfmlp.report.sections.validation import section_validation
    # two graph configurations (GPU-timed) and one eager one traced at `counters` whose epoch lines carry
    # no synchronised time: its batch times are the host's enqueue times
    graph = dict(exec_mode="graph", transfer="resident", comm="nccl", clock="cupti")
    runs = [*repeats(**graph, procs=1, spread=(1.0, 1.01, 1.02)), *repeats(**graph, procs=2, spread=(1.0, 1.05, 1.1)),
            *repeats(exec_mode="eager", transfer="resident", comm="nccl", clock="host", procs=2, steady_ms=None)]
    eager = [r for r in runs if "eager" in r.run_id]
    assert len(eager) == 3 and all(r.host_enqueue_times for r in eager)
    assert not any(r.host_enqueue_times for r in runs if r not in eager)
    sec = section_validation(analyse(runs, [], load_study(None), str(CALIBRATED), tmp_path))
    tables = {t.name: t.rows for t in sec.tables}
    judged = {r["configuration"]: r["judged"] for r in tables["validation_runs"]}
    assert sorted(judged.values()) == ["no: host enqueue times", "yes", "yes"]
    summary = {r["runs"]: r for r in tables["validation_summary"]}
    # the two graph configurations only: one per p, both NCCL, both resident
    modes = {"all", "p=1", "p=2", "comm nccl", "exec graph", "transfer resident"}
    assert modes <= set(summary) <= modes | {"spread < 3%", "spread >= 3%"}
    assert summary["all"]["n"] == 2 and summary["p=1"]["n"] == 1
    # the configurations whose repeats agree within the median target (3%: p=1's 2%), and the other (10%)
    spreads = {r["configuration"].split(" float32")[0]: r["spread %"] for r in tables["validation_runs"]
               if r["judged"] == "yes"}
    assert spreads == {"H=512 B=3200 p=1": pytest.approx(2 / 1.01), "H=512 B=3200 p=2": pytest.approx(10 / 1.05)}
    assert summary["spread < 3%"]["n"] == 1 and summary["spread >= 3%"]["n"] == 1
    assert "Where the repeats agree within 3% (" in " ".join(sec.paragraphs)
    for key in ("median |error| %", "signed median %", "above", "below", "within noise", "sign test p"):
        assert key in summary["all"] and f"datasheet {key}" in summary["all"]
    # measured 1.1 x the prediction (x the repeat's factor): the model is too fast, the error 1 / (1.1 f) - 1
    assert summary["all"]["above"] == 0 and summary["all"]["below"] == 2
    assert summary["p=1"]["median |error| %"] == pytest.approx(100 * (1 - 1 / (1.1 * 1.01)), rel=1e-3)
    assert summary["all"]["resolution"].startswith(("error larger", "spread larger"))
    note = " ".join(sec.paragraphs)
    assert "1 configuration(s) (3 runs) are left out of the error figures" in note
    assert "host's enqueue time" in note and "Judged: 2 configuration(s)" in note


def test_another_machine_files_predictions_are_shown_apart(tmp_path):
    from perfmlp.model.scaled import scaled_values
    from perfmlp.report.analysis import analyse
    from perfmlp.report.study import load_study
    from perfmlp.report.sections.validation import section_validation
    graph = dict(exec_mode="graph", transfer="resident", comm="nccl", clock="cupti", n=2)
    runs = [*repeats(**graph, batch=3200), *repeats(**graph, batch=800)]
    # the H200's calibration carried to the H100 and back to the H200 is the calibration itself
    cal = load_machine(CALIBRATED)
    there = machine_from_mapping(scaled_values(cal, load_machine("h200"), load_machine("h100-sxm")), "h100.yaml")
    back = machine_from_mapping(scaled_values(there, load_machine("h100-sxm"), load_machine("h200")), "back.yaml")
    entries = {}
    for r in runs:
        c = r.config
        pred = predict_batch(back, r.layer_sizes, c["batch_size"], r.procs, c["precision"], "nccl", "resident",
                             r.trace_level, exec_mode="graph")
        entries[r.run_id] = prediction_entry(pred, "2026-11-22T00:00:00+00:00")
    write_predictions(tmp_path, entries, "predictions-back.json", {"name": "back", "sha256": "0" * 64})
    sec = section_validation(analyse(runs, [], load_study(None), str(CALIBRATED), tmp_path))
    tables = {t.name: t.rows for t in sec.tables}
    main, other = tables["validation_summary"][0], tables["validation_predictions_back"][0]
    assert other["runs"] == "all" and other["n"] == main["n"] == 2
    # the same predictions as the report's own (no blind file here): the same errors
    assert other["median |error| %"] == pytest.approx(main["median |error| %"], rel=1e-6)
    assert other["worst |error| %"] == pytest.approx(main["worst |error| %"], rel=1e-6)
    note = next(p for p in sec.paragraphs if p.startswith("Predicted with another machine file, back"))
    assert "2 judged configuration(s), 2 blind" in note


def test_a_graph_runs_collectives_are_compared_inside_compute(tmp_path):
    # a graph run with NCCL times its allreduce inside the replay (compute): the per-term table compares
    # the prediction the same way, so the allreduce is not called 100% wrong while compute hides it
    cal = load_machine(CALIBRATED)
    runs = [as_run(x) for x in repeat_records(exec_mode="graph", transfer="resident", comm="nccl", procs=4,
                                              machine=cal)]
    for x in repeat_records(exec_mode="graph", transfer="resident", comm="nccl", procs=4, machine=cal):
        write_run(tmp_path / "t", x)
    entries = {}
    for r in runs:
        pred = predict_batch(cal, r.layer_sizes, 3200, 4, "float32", "nccl", "resident", "phases", exec_mode="graph")
        entries[r.run_id] = prediction_entry(pred, "2026-11-22T00:00:00+00:00")
    write_predictions(tmp_path / "t", entries)
    out = subprocess.run([sys.executable, "-m", "perfmlp.report", str(tmp_path / "t"), "--out", str(tmp_path / "r"),
                          "--machine", str(CALIBRATED), "--no-figures"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    row = next(csv.DictReader(open(tmp_path / "r" / "validation_terms.csv")))
    pred = entries[runs[0].run_id]
    assert "allreduce measured ms" not in row or float(row["allreduce predicted ms"]) == 0
    assert pred["groups_s"]["allreduce"] > 0
    assert float(row["compute predicted ms"]) == pytest.approx(
        1e3 * (pred["groups_s"]["compute"] + pred["groups_s"]["allreduce"]), rel=1e-6)
    # measured: the one graph phase, 1.1 x the model's compute and allreduce, median of the repeats (x 1.01)
    assert float(row["compute measured ms"]) == pytest.approx(1.1 * 1.01 * float(row["compute predicted ms"]))


def test_which_phases_a_host_clock_times():
    from perfmlp.trace.format import comparable_terms, host_clock_terms
    assert host_clock_terms("resident", "nccl") == frozenset()             # the NCCL call is enqueued
    assert host_clock_terms("pageable", "mpi-staged") == {"h2d_batch", "allreduce", "h2d_grad"}
    assert host_clock_terms("pinned", "mpi-staged") == {"allreduce"}      # pinned copies are enqueued
    assert host_clock_terms("pageable", "mpi-staged", "model") == frozenset()  # combine waits for forward
    for clock in ("cuda-events", "cupti"):                                # timed on the GPU: every group
        assert comparable_terms(clock, True, "resident", "nccl") == set(N.GROUPS)
    assert comparable_terms("host", False, "pageable", "mpi") == set(N.GROUPS)  # a CPU run's own work
    assert comparable_terms("host", True, "pinned", "mpi-staged") == {"allreduce"}


def clocked_run(exec_mode, transfer, comm, clock, procs=1, run_id=None):
    """A GPU run's trace as the tracer writes it (tests/synthetic.py): each
    batch has every phase names.batch_phases names for its mode, 0.1
    ms apiece, timed on `clock`; on the host clock (trace level counters) no
    t_ms_total, and the epoch line's synchronised time per batch, 1 ms,
    stands in for it."""
    return gpu_run(exec_mode=exec_mode, transfer=transfer, comm=comm, clock=clock, procs=procs, run_id=run_id)


def summary_of(run):
    from perfmlp.report.analysis import Machines, summarise
    return summarise(run, Machines(load_machine("h200"), load_machine("h200-calibrated")))


def test_a_graph_run_at_counters_has_no_comparable_compute():
    # its one compute phase, the graph replay, is the cudaGraphLaunch call on the host clock
    s = summary_of(clocked_run("graph", "resident", "nccl", "host"))
    assert s.phase_clock == "host" and "compute" not in s.comparable
    assert s.incomparable_terms == ("compute",)
    assert summary_of(clocked_run("graph", "resident", "nccl", "cupti")).incomparable_terms == ()


def test_an_eager_pageable_staged_run_at_counters_keeps_the_phases_that_block_the_host():
    s = summary_of(clocked_run("eager", "pageable", "mpi-staged", "host"))
    # the pageable copies and host MPI block the host; compute is enqueued, and the staged D2H
    # waits for the enqueued backward pass before its copy
    assert {"h2d_batch", "allreduce", "h2d_grad"} <= s.comparable
    assert s.incomparable_terms == ("compute", "d2h_grad")
    pinned = summary_of(clocked_run("eager", "pinned", "mpi-staged", "host"))
    assert pinned.incomparable_terms == ("h2d_batch", "compute", "d2h_grad", "h2d_grad")


def test_a_host_clock_runs_verdict_takes_the_models_split():
    # a graph replay's launch call (0.1 ms here) must not make the copies look like the whole batch
    from perfmlp.report.verdicts import COPIES, attribute
    v = attribute(summary_of(clocked_run("graph", "pinned", "nccl", "host", procs=2)))
    assert v.source == "the model's split" and v.share(COPIES) < 0.5
    events = attribute(summary_of(clocked_run("graph", "pinned", "nccl", "cuda-events", procs=2)))
    assert events.source == "measured phases"


@pytest.mark.parametrize("exec_mode, transfer, comm", [("graph", "resident", "nccl"), ("eager", "pinned", "nccl"),
                                                       ("eager", "pageable", "mpi-staged")])
def test_a_run_at_phases_keeps_every_term(exec_mode, transfer, comm):
    s = summary_of(clocked_run(exec_mode, transfer, comm, "cuda-events"))
    assert s.phase_clock == "cuda-events" and s.incomparable_terms == ()
    assert s.comparable == set(GROUPS)


def test_per_term_tables_show_host_clock_terms_apart():
    from perfmlp.report.analysis import analyse
    from perfmlp.report.analyses.accuracy import HOST_CLOCK_COLUMN
    from perfmlp.report.sections.validation import section_model
    from perfmlp.report.study import load_study
    from perfmlp.report.sections.validation import section_validation
    runs = [clocked_run("graph", "resident", "nccl", "host"), clocked_run("eager", "pageable", "mpi-staged", "host"),
            clocked_run("eager", "pageable", "mpi-staged", "cuda-events", procs=2)]
    a = analyse(runs, [], load_study(None), "h200-calibrated")
    sec = section_validation(a)
    tables = {t.name: t.rows for t in sec.tables}
    rows = {r["configuration"].split(" B=3200 ")[1]: r for r in tables["validation_terms"]}
    graph, staged = rows["p=1 float32 resident/nccl cublas graph"], rows["p=1 float32 pageable/mpi-staged cublas eager"]
    on_gpu = rows["p=2 float32 pageable/mpi-staged cublas eager"]
    # the host's times are shown apart (every phase 0.1 ms; compute in eager: forward, loss, backward, update)
    assert graph["compute measured ms"] is None and graph["compute error ms"] is None
    assert graph[HOST_CLOCK_COLUMN] == "compute 0.100"
    assert staged[HOST_CLOCK_COLUMN] == "compute 0.400, d2h_grad 0.100"
    assert staged["allreduce measured ms"] == pytest.approx(0.1) and staged["allreduce error ms"] is not None
    assert on_gpu[HOST_CLOCK_COLUMN] == "-" and on_gpu["compute error ms"] is not None
    # the summary: compute and d2h_grad from the GPU-timed run only; the copies and MPI from both staged runs
    counted = {r["term"]: r["configurations"] for r in tables["validation_terms_summary"]}
    assert counted == {"h2d_batch": 2, "compute": 1, "d2h_grad": 1, "allreduce": 2, "h2d_grad": 2}
    assert any(p.startswith("Per term: 3 measured term(s) in 2 of 3 configuration(s) are left out of the error "
                            "per term (compute in 2, d2h_grad in 1)") for p in sec.paragraphs)
    terms = {r["run"]: r for r in next(t.rows for t in section_model(a).tables if t.name == "terms")}
    assert terms[runs[0].run_id]["compute measured ms"] is None
    assert terms[runs[2].run_id]["compute measured ms"] == pytest.approx(0.4)


def test_host_clock_enqueue_times_are_shown_but_not_compared():
    # traced at counters (host clock): a graph replay's compute phase is the launch call; the staged,
    # pageable run's host MPI and pageable copies block the host. The p=4 graph runs: CUPTI.
    from perfmlp.report.analysis import analyse
    from perfmlp.report.study import load_study
    from perfmlp.report.analyses.accuracy import HOST_CLOCK_COLUMN
    from perfmlp.report.sections.validation import section_validation
    runs = [*repeats(exec_mode="graph", transfer="resident", comm="nccl", clock="host", hidden=(2048,), batch=6400),
            *repeats(exec_mode="eager", transfer="pageable", comm="mpi-staged", clock="host", batch=6400),
            *repeats(exec_mode="graph", transfer="resident", comm="nccl", clock="cupti", procs=4)]
    assert len(runs) == 9 and {r.phase_clock for r in runs} == {"host", "cupti"}
    sec = section_validation(analyse(runs, [], load_study(None), str(CALIBRATED), None))
    rows = {r["configuration"].split(" float32")[0]: r for r in
            next(t.rows for t in sec.tables if t.name == "validation_terms")}
    graph_host, staged, graph_gpu = rows["H=2048 B=6400 p=1"], rows["H=512 B=6400 p=1"], rows["H=512 B=3200 p=4"]
    assert graph_host["compute error ms"] is None and graph_host["compute measured ms"] is None
    assert graph_host[HOST_CLOCK_COLUMN].startswith("compute ") and "," not in graph_host[HOST_CLOCK_COLUMN]
    assert graph_gpu["compute error ms"] is not None and graph_gpu[HOST_CLOCK_COLUMN] == "-"
    for g in ("h2d_batch", "allreduce", "h2d_grad"):
        assert staged[f"{g} error ms"] is not None
    assert staged["compute error ms"] is None and staged["d2h_grad error ms"] is None
    summary = {r["term"]: r["configurations"]
               for r in next(t.rows for t in sec.tables if t.name == "validation_terms_summary")}
    assert summary == {"h2d_batch": 1, "compute": 1, "allreduce": 1, "h2d_grad": 1}
    assert any(p.startswith("Per term: 3 measured term(s) in 2 of 3 configuration(s)") for p in sec.paragraphs)


def test_a_sweep_names_the_sizes_its_calibration_needs(tmp_path, capsys):
    # per-rank pieces: B split over the ranks (data), whole (model), split over the data groups (hybrid)
    from perfmlp.sweep.__main__ import main
    f = tmp_path / "s.yaml"
    f.write_text("name: s\nbase: {data: synthetic, backend: cupy}\nruns:\n"
                 "  - {hidden_sizes: [1024, 256], batch_size: 800, procs: 2}\n"
                 "  - {hidden_sizes: [512], batch_size: 6400, procs: 4, parallel: model, comm: nccl}\n"
                 "  - {hidden_sizes: [512], batch_size: 3001, procs: 4, parallel: hybrid, model_procs: 2, comm: nccl}\n")
    assert main([str(f), "--calibration-sizes", "--trace-dir", str(tmp_path / "t")]) == 0
    assert capsys.readouterr().out.split() == ["256,512,1024", "400,1501,6400"]
    assert not (tmp_path / "t").exists()   # nothing run, nothing written


def test_a_staged_copy_waits_for_its_buffer_from_the_batch_before():
    # the host stages 5, the DMA of 1 waits for the stream, 10 of GPU work follows: the staging hides behind it.
    # Staging 12 for 3 of work: the next batch's staging waits for this batch's DMA to free the buffer
    free = [Item(1.0, 5.0), Item(10.0, 0.0)]
    reuse = [Item(1.0, 5.0, reuses=True), Item(10.0, 0.0)]
    assert timeline_batch_s(free) == 11.0
    assert timeline_batch_s(reuse) == 11.0   # the GPU's 11 still bounds it: the staging hides behind the work
    slow = [Item(1.0, 12.0, reuses=True), Item(3.0, 0.0)]
    assert timeline_batch_s(slow) == 13.0    # stage 12, its DMA 1 frees the buffer; the 3 runs during the next staging
    assert timeline_batch_s([Item(1.0, 12.0), Item(3.0, 0.0)]) == 12.0


def test_a_copy_staged_in_part_hides_the_queued_work_less_its_delay():
    # 10 of GPU work, then a blocking copy of 5 (host call 1) that stages 3 ahead: its call starts with 9 of the
    # work still queued, so it hides min(3, 9 - delay); the host waits for it, then launches the next work
    def period(hides):
        return timeline_batch_s([Item(10.0, 1.0), Item(5.0, 1.0, blocking=True, hides=hides)])
    assert period(None) == 16.0            # 1 launch + 10 work + 5 copy
    assert period((3.0, 2.0)) == 13.0      # all 3 staged ahead hidden: 9 queued, 2 of them the delay
    assert period((3.0, 8.0)) == 15.0      # 9 queued less a delay of 8: 1 hidden
    assert period((3.0, 9.0)) == 16.0      # the delay takes all the queued work
    assert period((0.0, 0.0)) == 16.0
    # nothing queued (the host is the slower side): nothing to hide
    assert timeline_batch_s([Item(1.0, 4.0), Item(5.0, 1.0, blocking=True, hides=(3.0, 0.0))]) == 10.0


def test_the_summary_has_a_row_per_precision_where_several_ran():
    from perfmlp.report.validation import ConfigError, summary_rows

    def row(prec, err):
        return ConfigError(f"H=8 {prec} {err}", 2, 20, 1.0, 1.0, 1.0 + err / 100, "blind", err, "no", None, "",
                           1, "nccl", "graph", "resident", "yes", prec)
    judged = [row("bf16", 2.0), row("bf16", -4.0), row("tf32", 8.0)]
    rows = {r.name: r for r in summary_rows(judged)}
    assert rows["precision bf16"].model.n == 2 and rows["precision tf32"].model.n == 1
    assert rows["precision bf16"].model.median_abs_pct == 3.0
    assert not any(n.startswith("precision") for n in (r.name for r in summary_rows(judged[:2])))
