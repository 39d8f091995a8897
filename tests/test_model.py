import dataclasses
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from perfmlp.model import costs
from perfmlp.model.__main__ import main as model_main
from perfmlp.model.costs import batch_counts, op_cost, step_ops
from perfmlp.model.machine import MachineError, load_machine, machine_files, machine_from_mapping
from perfmlp.model.strategies import predict_strategy, step_phases
from perfmlp.model.predict import TERMS, predict_batch, ring_allreduce_s
from perfmlp.names import TRACE_LEVELS
from perfmlp.model.roofline import modified_roofline, ridge_point, standard_roofline
from perfmlp.model.summary import reference_approx

from conftest import ROOT, in_process


def test_formulas_on_tiny_shapes():
    # GEMM 3 x 5 = (3 x 4) @ (4 x 5): 2 * 3 * 5 * 4 = 120 FLOPs; bytes 4 * (12 + 20 + 15) = 188
    assert op_cost("gemm", (3, 5, 4), 4) == (120, 188)
    # bias + sigmoid on 3 x 5: 4 * 15 = 60 FLOPs; bytes 4 * (2 * 15 + 3) = 132
    assert op_cost("bias_sigmoid", (3, 5), 4) == (60, 132)
    assert op_cost("bias_add", (2, 5), 8) == (10, 8 * (20 + 2))
    # softmax + CE + delta, C=2, b=3: 3 * (5*2 - 2 + 2 + 2*2) + (3 - 1) = 3 * 14 + 2 = 44
    assert op_cost("softmax_ce_grad", (2, 3), 4)[0] == 44
    # row sum of 3 x 5: 3 * 4 = 12; sigmoid_grad 3 x 5: 3 * 15 = 45
    assert op_cost("row_sum", (3, 5), 4)[0] == 12
    assert op_cost("sigmoid_grad", (3, 5), 4)[0] == 45
    # updates: 4 per weight, 2 per bias
    assert op_cost("update_weights", (10,), 4)[0] == 40
    assert op_cost("update_biases", (10,), 4)[0] == 20


def test_registering_twice_is_an_error():
    with pytest.raises(ValueError, match="already registered"):
        costs.register("gemm")(lambda m, n, k, s: (0, 0))
    with pytest.raises(KeyError, match="no cost formula"):
        op_cost("conv", (1,), 4)


def test_backward_gemms_are_twice_forward_except_the_first_layer():
    sizes, b = (7, 6, 5, 4), 9
    ops = step_ops(sizes, b, fuse_output=False)
    fwd = [op_cost(n, s, 4)[0] for n, s in ops["forward"] if n == "gemm"]  # layer 1, 2, 3
    bwd = [op_cost(n, s, 4)[0] for n, s in ops["backward"] if n == "gemm"]  # dW3, dA2, dW2, dA1, dW1
    assert bwd[0] + bwd[1] == 2 * fwd[2]
    assert bwd[2] + bwd[3] == 2 * fwd[1]
    assert bwd[4] == fwd[0]  # no gradient with respect to the input


@pytest.mark.parametrize("sizes", [(784, 512, 10), (7, 6, 5, 4)])
def test_fused_output_layer_counts_the_flops_of_the_operations_it_replaces(sizes):
    # the fused kernels move fewer bytes (nothing goes through memory between
    # the operations but the partial sums) and compute the same FLOPs, phase by phase
    for s in (4, 8):
        fused = batch_counts(sizes, 9, s)
        f_ops, p_ops = step_ops(sizes, 9, itemsize=s), step_ops(sizes, 9, itemsize=s, fuse_output=False)
        for phase in f_ops:
            f = sum(op_cost(n, sh, s)[0] for n, sh in f_ops[phase])
            p = sum(op_cost(n, sh, s)[0] for n, sh in p_ops[phase])
            assert f == p == fused.flops[phase]
            fb = sum(op_cost(n, sh, s)[1] for n, sh in f_ops[phase])
            pb = sum(op_cost(n, sh, s)[1] for n, sh in p_ops[phase])
            assert fb <= pb and (fb < pb) == (phase == "backward")


def test_reference_configuration_numbers():
    ap = reference_approx(784, 512, 3200)
    assert ap["batch"] == 4 * 3200 * 512 * 784 == 5_138_022_400  # "about 5.14 GFLOP"
    c = batch_counts((784, 512, 10), 3200, 4, "mpi-staged", "pageable")
    assert abs(c.flops_total / ap["batch"] - 1) < 0.03  # exact count: 2.2% more (small GEMMs, elementwise)
    # copies: X and Y: 4 * 3200 * (784 + 10) = 10,163,200; gradients twice:
    # 2 * 4 * (512*784 + 512 + 10*512 + 10 + 1 loss slot) = 3,256,408 -> 13,419,608 bytes (13.42 MB)
    assert c.bytes_copied == 10_163_200 + 3_256_408 == 13_419_608
    r = batch_counts((784, 512, 10), 3200, 4, "nccl", "resident")
    assert r.bytes_copied == 0 and r.bytes_nccl == 4 * 407_051


def test_pieces_cover_the_batch_contiguously():
    assert costs.pieces(10, 4) == [3, 3, 2, 2]
    # rank r's [lo, hi) starts where rank r-1's ends: 0-3, 3-6, 6-8, 8-10
    assert [costs.piece(10, 4, r) for r in range(4)] == [(0, 3), (3, 6), (6, 8), (8, 10)]
    for batch in range(1, 30):
        for procs in range(1, 6):
            sizes = costs.pieces(batch, procs)
            assert sum(sizes) == batch and max(sizes) - min(sizes) <= 1


def test_kernels_group_the_operations():
    # 784-512-10 with the output layer as GEMMs: 13 operations in 11 kernels
    # (sigmoid_grad + row_sum and the two updates are fused); backward GEMMs: dW2, da1, dW1
    sizes = (784, 512, 10)
    c = batch_counts(sizes, 100, 4)
    ops = step_ops(sizes, 100, fuse_output=False)
    assert sum(len(v) for v in ops.values()) == 13
    assert [name for name, _ in ops["backward"]] == ["gemm", "row_sum", "gemm", "sigmoid_grad", "row_sum", "gemm"]
    assert {k: len(v) for k, v in costs.step_kernels(sizes, 100, fuse_output=False).items()} == \
        {"forward": 4, "loss": 1, "backward": 5, "update": 1}
    # fused (the default for 10 classes): the output layer's backward is the fused pair
    assert c.kernels == {"forward": 4, "loss": 1, "backward": 3, "update": 1}
    assert sum(c.operations.values()) == 10
    assert [name for name, _ in step_ops(sizes, 100)["backward"]] == ["output_backward", "partial_sums", "gemm"]


def test_rooflines():
    P, BW = 10e12, 10e9
    ridge = ridge_point(P, BW)
    assert ridge == 1000
    assert math.isclose(modified_roofline(ridge, P, BW), P / 2)
    assert modified_roofline(1e9, P, BW) > 0.999 * P
    ai = np.logspace(-2, 6, 200)
    assert np.all(modified_roofline(ai, P, BW) <= standard_roofline(ai, P, BW) * (1 + 1e-12))
    assert float(standard_roofline(ridge * 2, P, BW)) == P


def test_prediction_terms_add_up():
    m = load_machine("quadro-rtx-6000")
    for comm, transfer, p in (("mpi-staged", "pageable", 1), ("mpi-staged", "pinned", 4), ("nccl", "resident", 2)):
        pr = predict_batch(m, (784, 512, 10), 3200, p, "float32", comm, transfer)
        assert set(pr.terms) == set(TERMS)
        assert math.isclose(sum(pr.terms.values()), pr.total_s)
        assert pr.overlapped_s <= pr.total_s
    one = predict_batch(m, (784, 512, 10), 3200, 1, comm="nccl", batch_transfer="resident")
    assert one.terms["allreduce"] == 0 and one.terms["h2d_batch"] == 0
    # ring: 2(p-1)/p n / bw + 2(p-1) alpha; p=4, n=1e6, bw=1e9, alpha=1e-6: 1.5e-3 + 6e-6
    assert math.isclose(ring_allreduce_s(10**6, 4, 1e-6, 1e9), 1.506e-3)


def _tracer_machine():
    # round numbers for the tracer's two costs: a CUDA event 2 us of GPU time, the hooks 3 us of host time a phase
    # (no table of several ranks launching at once: the one-rank figures hold at every p)
    return dataclasses.replace(load_machine("h200-calibrated"), trace_event_s=2e-6, trace_phase_host_s=3e-6,
                               host_dispatch_s=())


@pytest.mark.parametrize("exec_mode, phases", [("eager", 5), ("graph", 1)])
def test_the_tracers_cost_per_level(exec_mode, phases):
    # resident + NCCL records forward, loss, backward, allreduce, update eagerly: 5 phases; one replay in graph mode
    m = _tracer_machine()
    kw = dict(comm="nccl", batch_transfer="resident", exec_mode=exec_mode)
    at = {lv: predict_batch(m, (784, 512, 10), 3200, 1, trace_level=lv, **kw) for lv in (None, *TRACE_LEVELS)}
    assert predict_batch(m, (784, 512, 10), 3200, 1, **kw) == at[None]  # untraced is the default
    assert at[None].terms["tracing"] == 0 and at[None].detail["trace_level"] == "untraced"
    # counters: the hooks' host time at each phase (5 x 3 = 15 us eagerly), no GPU time
    assert at["counters"].terms["tracing"] == 0
    assert at["counters"].detail["gpu_compute_s"] == at[None].detail["gpu_compute_s"]
    assert at["counters"].detail["host_s"] - at[None].detail["host_s"] == pytest.approx(phases * 3e-6)
    # phases: the same host time and a CUDA event a phase (5 x 2 = 10 us of GPU time eagerly)
    assert at["phases"].terms["tracing"] == pytest.approx(phases * 2e-6)
    assert at["phases"].detail["host_s"] == at["counters"].detail["host_s"]
    # timeline, kernels: priced as counters, and the prediction says what is left out
    for lv in ("timeline", "kernels"):
        assert at[lv].terms == at["counters"].terms
        assert "CUPTI" in at[lv].detail["trace_uncalibrated"] and lv in at[lv].detail["trace_uncalibrated"]
    assert at["counters"].detail["trace_uncalibrated"] is None is at["phases"].detail["trace_uncalibrated"]


def test_a_synchronising_step_pays_the_counters_hooks():
    # eager, staged, pageable: 8 phases (h2d, forward, loss, backward, d2h, allreduce, h2d_grad, update),
    # 8 x 3 = 24 us of host time, and the step waits for the host after each synchronisation
    m = _tracer_machine()
    kw = dict(comm="mpi-staged", batch_transfer="pageable")
    off = predict_batch(m, (784, 512, 10), 3200, 2, **kw)
    on = predict_batch(m, (784, 512, 10), 3200, 2, trace_level="counters", **kw)
    assert on.total_s > off.total_s and on.terms["tracing"] == 0
    assert on.detail["host_s"] - off.detail["host_s"] == pytest.approx(8 * 3e-6)


def test_the_tracers_cost_of_a_strategy():
    # model parallelism on 2 ranks, eagerly: rank 0's phases, each with an event at `phases`
    m = _tracer_machine()
    n = len(step_phases((784, 512, 10), 2, 0, "model", 0, "nccl", "resident"))
    at = {lv: predict_strategy(m, (784, 512, 10), 3200, 2, parallel="model", trace_level=lv)
          for lv in (None, "counters", "phases", "kernels")}
    assert at[None].terms["tracing"] == at["counters"].terms["tracing"] == 0
    assert at["phases"].terms["tracing"] == pytest.approx(n * 2e-6)
    assert at["counters"].total_s >= at[None].total_s and at["kernels"].terms == at["counters"].terms
    assert "CUPTI" in at["kernels"].detail["trace_uncalibrated"]


@pytest.mark.parametrize("level", ["auto", "cupti", "untraced", True])
def test_an_unknown_trace_level_is_a_clear_error(level):
    with pytest.raises(ValueError, match="trace level must be one of counters, phases, timeline, kernels or None"):
        predict_batch(load_machine("h200-calibrated"), (784, 512, 10), 3200, trace_level=level)
    with pytest.raises(ValueError, match="trace level must be one of"):
        predict_strategy(load_machine("h200-calibrated"), (784, 512, 10), 3200, 2, parallel="model",
                         trace_level=level)


def test_cli_trace_level(capsys):
    from perfmlp.model.__main__ import main
    assert main(["--json", "--comm", "nccl", "--batch-transfer", "resident", "--trace-level", "timeline"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["config"]["trace_level"] == "timeline"
    assert "CUPTI" in s["prediction"]["detail"]["trace_uncalibrated"]
    assert main(["--comm", "nccl", "--batch-transfer", "resident", "--trace-level", "untraced"]) == 0
    out = capsys.readouterr().out
    assert "gemm cublas, untraced" in out and "tracer" not in out
    assert main(["--comm", "nccl", "--batch-transfer", "resident"]) == 0   # the trainer's default: traced
    assert "gemm cublas, traced at counters" in capsys.readouterr().out
    assert main(["--parallel", "model", "--procs", "2", "--comm", "nccl", "--trace-level", "kernels"]) == 0
    out = capsys.readouterr().out
    assert "traced at kernels" in out and "tracer, not in the prediction: CUPTI activity records" in out
    with pytest.raises(SystemExit) as e:
        main(["--traced"])
    assert e.value.code == 2


def test_shipped_machine_files_load():
    names = [p.name.removesuffix(".yaml") for p in machine_files()]
    assert {"quadro-rtx-6000", "h100-sxm", "h200", "h200-calibrated"} <= set(names)
    for n in names:
        m = load_machine(n)
        assert m.source
    ref = load_machine(None)
    assert (ref.peak_flops_per_s_float32, ref.h2d_pageable_bytes_per_s, ref.mem_bw_bytes_per_s) == (16.3e12, 13e9, 672e9)
    assert load_machine("h200-calibrated").calibrated
    # the report reads only the kind of file its runs need, each file's kind told by its backend line
    from perfmlp.model.machine import CpuMachine
    from perfmlp.model.machine.choose import shipped_machines
    cpus, gpus = shipped_machines(cpu=True), shipped_machines(cpu=False)
    assert cpus and all(isinstance(m, CpuMachine) for m in cpus) and len(cpus) + len(gpus) == len(names)
    assert not any(isinstance(m, CpuMachine) for m in gpus)


def _good():
    m = load_machine("quadro-rtx-6000")
    d = {k: getattr(m, k) for k in m.__dataclass_fields__ if k not in ("path", "gemm_flops_per_s", "date",
                                                                          "traced_launch_overhead_s")}
    return d


@pytest.mark.parametrize("change, words", [
    (lambda d: d.pop("mem_bw_bytes_per_s"), "x.yaml: missing key mem_bw_bytes_per_s"),
    (lambda d: d.update(copy_latency_s=-1.0), "x.yaml: copy_latency_s must not be negative"),
    (lambda d: d.update(peak_flops=1.0), "x.yaml: unknown key peak_flops"),
    (lambda d: d.update(mpi_alpha_s="fast"), "x.yaml: mpi_alpha_s must be a number"),
    (lambda d: d.update(h2d_pinned_bytes_per_s=0), "x.yaml: h2d_pinned_bytes_per_s must be positive"),
    (lambda d: d.update(source=""), "x.yaml: source must be a non-empty string"),
    # a peak of 0 divided by zero in the roofline before
    (lambda d: d.update(peak_flops_per_s_float32=0), "x.yaml: peak_flops_per_s_float32 must be positive"),
    (lambda d: d.update(peak_flops_per_s_float64=-1e12), "x.yaml: peak_flops_per_s_float64 must be positive"),
    (lambda d: d.update(nccl_bw_bytes_per_s=float("inf")), "x.yaml: nccl_bw_bytes_per_s must be finite"),
    (lambda d: d.update(gpus=0), "x.yaml: gpus must be positive"),
    (lambda d: d.update(trace_event_s=-1e-6), "x.yaml: trace_event_s must not be negative"),
    (lambda d: d.update(gemm_flops_per_s=[{"m": 1, "n": 2, "k": 3, "precision": "float16", "flops_per_s": 1.0}]),
     "x.yaml: gemm_flops_per_s[0] precision must be one of float32, float64"),
    (lambda d: d.update(gemm_flops_per_s=[{"m": 1, "n": 2, "k": 3, "precision": "float32", "flops_per_s": 0}]),
     "x.yaml: gemm_flops_per_s[0] flops_per_s must be positive"),
])
def test_machine_validation(change, words):
    d = _good()
    change(d)
    with pytest.raises(MachineError) as e:
        machine_from_mapping(d, "x.yaml")
    assert str(e.value) == words or words in str(e.value)


def test_machine_numbers_in_any_spelling():
    # PyYAML reads 16.3e12 and 5E-6 as strings (its float needs a signed exponent)
    d = _good()
    d["peak_flops_per_s_float32"] = "16.3e12"
    d["mpi_alpha_s"] = "5E-6"
    m = machine_from_mapping(d, "x.yaml")
    assert m.peak_flops_per_s_float32 == 16.3e12 and m.mpi_alpha_s == 5e-6


def test_gemm_rate_uses_nearest_calibrated_shape():
    d = _good()
    d["gemm_flops_per_s"] = [{"m": 512, "n": 3200, "k": 784, "precision": "float32", "flops_per_s": 3e13},
                             {"m": 10, "n": 3200, "k": 512, "precision": "float32", "flops_per_s": 1e12}]
    m = machine_from_mapping(d, "x.yaml")
    assert m.gemm_rate(512, 3000, 784, "float32") == 3e13
    assert m.gemm_rate(10, 3200, 600, "float32") == 1e12
    assert m.gemm_rate(512, 3200, 784, "float64") == m.peak_flops_per_s_float64


def test_cli_table_and_json(tmp_path):
    r = in_process(model_main, ["--json", "--procs", "2", "--batch-size", "3200"])
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["schema"] == "perfmlp.model/1" and s["config"]["procs"] == 2
    assert s["counts"]["per_rank"]["b"] == 1600
    assert math.isclose(sum(s["prediction"]["terms_s"].values()), s["prediction"]["total_s"])
    r = in_process(model_main, ["--hidden-size", "1024"])
    assert r.returncode == 0 and "modified" in r.stdout and "784-1024-10" in r.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    r = in_process(model_main, ["--machine", bad])
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "missing key source" in r.stderr


def test_cli_stops_quietly_when_the_reader_goes_away():
    # `python -m perfmlp.model --json | head -1`, made deterministic: the pipe's
    # read end is closed before the command writes anything
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run([sys.executable, "-m", "perfmlp.model", "--json"], stdout=write_end,
                           stderr=subprocess.PIPE, text=True, cwd=ROOT)
    finally:
        os.close(write_end)
    assert "BrokenPipeError" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert r.stderr == ""


def test_cli_machine_by_name_and_by_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # a name is found wherever the command runs
    by_name = in_process(model_main, ["--machine", "h200", "--json"])
    by_path = in_process(model_main, ["--machine", ROOT / "models" / "h200.yaml", "--json"])
    assert by_name.returncode == 0 and by_path.returncode == 0, by_name.stderr + by_path.stderr
    a, b = json.loads(by_name.stdout), json.loads(by_path.stdout)
    assert a["machine"]["name"] == b["machine"]["name"] == "NVIDIA H200"
    assert a["prediction"] == b["prediction"]
    r = in_process(model_main, ["--machine", "h300"])
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no machine named 'h300'" in r.stderr


def test_peak_of_zero_is_one_line(tmp_path):
    text = (ROOT / "models" / "h200.yaml").read_text().replace("peak_flops_per_s_float32: 67.0e+12",
                                                               "peak_flops_per_s_float32: 0")
    bad = tmp_path / "zero.yaml"
    bad.write_text(text)
    r = in_process(model_main, ["--machine", bad])
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"{bad}: peak_flops_per_s_float32 must be positive" in r.stderr


def test_a_calibration_carried_to_another_gpu_by_datasheet_ratios(tmp_path):
    from perfmlp.model.machine import load_machine
    from perfmlp.model.scaled import main, scaled_values
    cal, h200, h100 = load_machine("h200-calibrated"), load_machine("h200"), load_machine("h100-sxm")
    v = scaled_values(cal, h200, h100)
    # memory 3.35 / 4.8 TB/s; FLOP rates 67 / 67 (the same fp32 and fp64 peaks); copies 64 / 64 GB/s
    assert v["mem_bw_bytes_per_s"] == pytest.approx(cal.mem_bw_bytes_per_s * 3.35 / 4.8)
    assert v["peak_flops_per_s_float32"] == pytest.approx(cal.peak_flops_per_s_float32)
    assert v["h2d_pinned_bytes_per_s"] == pytest.approx(cal.h2d_pinned_bytes_per_s)
    assert v["launch_overhead_s"] == cal.launch_overhead_s   # the host's, as measured
    # a GPU with half the fp32 peak: every fp32 GEMM rate halves, fp64 ones do not
    half = dataclasses.replace(h100, peak_flops_per_s_float32=h200.peak_flops_per_s_float32 / 2)
    g = scaled_values(cal, h200, half)["gemm_flops_per_s"]
    assert [x["flops_per_s"] for x in g] == pytest.approx(
        [r.flops_per_s / (2 if r.precision == "float32" else 1) for r in cal.gemm_flops_per_s])
    out = tmp_path / "x.yaml"
    assert main([str(ROOT / "models/h200-calibrated.yaml"), "--from", "h200", "--to", "h100-sxm",
                 "--out", str(out)]) == 0
    m = load_machine(out)
    assert m.calibrated and "x0.698" in m.source and m.name.endswith("scaled to NVIDIA H100 SXM5 80GB")
    assert main(["h200", "--from", "h200", "--to", "h100-sxm", "--out", str(out)]) == 2   # not calibrated


def test_a_datasheet_file_names_the_device_cuda_reports():
    from perfmlp.model.machine import load_machine
    h100 = load_machine(ROOT / "models/h100-sxm.yaml")
    assert h100.describes("NVIDIA H100 80GB HBM3") and h100.describes(h100.name)
    assert not h100.describes("NVIDIA H100 PCIe")   # another part: another datasheet


# ---- the model's command predicts the run the trainer makes -----------------------------------

def test_the_model_command_by_default_predicts_the_trainers_default_run(capsys):
    from perfmlp.backend import exec_mode
    from perfmlp.config import Config
    from perfmlp.model.__main__ import main
    assert main(["--json", "--machine", "h200-calibrated"]) == 0
    s = json.loads(capsys.readouterr().out)
    ran = exec_mode(Config(backend="cupy"), "cupy")   # what the trainer runs on a GPU with its defaults
    assert ran == "graph"
    assert s["config"]["exec"] == ran and s["config"]["batch"] == 100 and s["config"]["trace_level"] == "counters"
    m = load_machine("h200-calibrated")
    assert s["prediction"]["total_s"] == predict_batch(m, (784, 512, 10), 100, 1, "float32", "mpi-staged",
                                                       "pageable", "counters", exec_mode="graph").total_s


def test_the_strategy_comparison_prices_each_strategy_with_the_runs_library():
    # with mpi-staged, data parallelism in the comparison is the staged exchange's, as predicted alone,
    # not NCCL's (which is faster: the comparison would favour it)
    from perfmlp.model.summary import strategy_summary
    m = load_machine("h200-calibrated")
    for comm in ("mpi-staged", "nccl"):
        s = strategy_summary(m, (784, 512, 10), 3200, 2, comm=comm, batch_transfer="pageable", parallel="model",
                             exec_mode="eager")
        listed = {x["strategy"]: x["total_s"] for x in s["strategies"]}
        alone = predict_strategy(m, (784, 512, 10), 3200, 2, comm=comm, batch_transfer="pageable", parallel="data",
                                 exec_mode="eager").total_s
        assert listed["data"] == alone, comm
        assert listed["model"] == s["prediction"]["total_s"]
    nccl = predict_strategy(m, (784, 512, 10), 3200, 2, comm="nccl", batch_transfer="pageable", exec_mode="eager")
    staged = predict_strategy(m, (784, 512, 10), 3200, 2, comm="mpi-staged", batch_transfer="pageable",
                              exec_mode="eager")
    assert staged.total_s > nccl.total_s   # so the difference shows
