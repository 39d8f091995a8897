import json
import math
import subprocess
import sys

import numpy as np
import pytest

from perfmlp.model import costs
from perfmlp.model.costs import batch_counts, op_cost, reference_approx, step_ops
from perfmlp.model.machine import MachineError, load_machine, machine_from_mapping, MODELS_DIR
from perfmlp.model.predict import TERMS, predict_batch, ring_allreduce_s
from perfmlp.model.roofline import modified_roofline, ridge_point, standard_roofline

from conftest import ROOT


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
    ops = step_ops(sizes, b)
    fwd = [op_cost(n, s, 4)[0] for n, s in ops["forward"] if n == "gemm"]  # layer 1, 2, 3
    bwd = [op_cost(n, s, 4)[0] for n, s in ops["backward"] if n == "gemm"]  # dW3, dA2, dW2, dA1, dW1
    assert bwd[0] + bwd[1] == 2 * fwd[2]
    assert bwd[2] + bwd[3] == 2 * fwd[1]
    assert bwd[4] == fwd[0]  # no gradient with respect to the input


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


def test_pieces_and_job_counts():
    assert costs.pieces(10, 4) == [3, 3, 2, 2]
    job = costs.job_counts((4, 3, 2), 10, 4, 4)
    assert sum(c.b for c in job) == 10


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


def test_shipped_machine_files_load():
    names = sorted(p.stem for p in MODELS_DIR.glob("*.yaml"))
    assert {"quadro-rtx-6000", "h100-sxm", "h200", "h200-calibrated"} <= set(names)
    for n in names:
        m = load_machine(n)
        assert m.source
    ref = load_machine(None)
    assert (ref.peak_flops_per_s_float32, ref.h2d_pageable_bytes_per_s, ref.mem_bw_bytes_per_s) == (16.3e12, 13e9, 672e9)
    assert load_machine("h200-calibrated").calibrated


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
])
def test_machine_validation(change, words):
    d = _good()
    change(d)
    with pytest.raises(MachineError) as e:
        machine_from_mapping(d, "x.yaml")
    assert str(e.value) == words or words in str(e.value)


def test_gemm_rate_uses_nearest_calibrated_shape():
    d = _good()
    d["gemm_flops_per_s"] = [{"m": 512, "n": 3200, "k": 784, "precision": "float32", "flops_per_s": 3e13},
                             {"m": 10, "n": 3200, "k": 512, "precision": "float32", "flops_per_s": 1e12}]
    m = machine_from_mapping(d, "x.yaml")
    assert m.gemm_rate(512, 3000, 784, "float32") == 3e13
    assert m.gemm_rate(10, 3200, 600, "float32") == 1e12
    assert m.gemm_rate(512, 3200, 784, "float64") == m.peak_flops_per_s_float64


def test_cli_table_and_json(tmp_path):
    r = subprocess.run([sys.executable, "-m", "perfmlp.model", "--json", "--procs", "2"], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["schema"] == "perfmlp.model/1" and s["config"]["procs"] == 2
    assert s["counts"]["per_rank"]["b"] == 1600
    assert math.isclose(sum(s["prediction"]["terms_s"].values()), s["prediction"]["total_s"])
    r = subprocess.run([sys.executable, "-m", "perfmlp.model", "--hidden-size", "1024"], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 0 and "modified" in r.stdout and "784-1024-10" in r.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    r = subprocess.run([sys.executable, "-m", "perfmlp.model", "--machine", str(bad)], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "missing key source" in r.stderr
