"""The model in every precision: byte widths, ceilings, and the prefetching
input pipeline priced as overlapped."""
import math

import numpy as np
import pytest

from perfmlp.model.costs import Widths, batch_counts, n_params, op_cost, widths
from perfmlp.model.machine import MachineError, load_machine
from perfmlp.model.predict import predict_batch
from perfmlp.model.roofline import modified_roofline, overlapped_roofline


def test_widths_of_the_precisions():
    assert widths("float32") == Widths(4, 4) and widths("float64") == Widths(8, 8)
    assert widths("tf32") == Widths(4, 4)                     # float32 storage: only the products change
    assert widths("bf16") == Widths(2, 4) and widths("fp16") == Widths(2, 4, grad_check=True)


def test_elementwise_bytes_at_the_widths_that_run():
    bf16 = widths("bf16")
    # bias + sigmoid on 2 x 3: reads z and writes a at 2 bytes (2 * 2 * 6 = 24), reads the float32 bias (4 * 2 = 8)
    assert op_cost("bias_sigmoid", (2, 3), bf16) == (24, 32)
    assert op_cost("bias_sigmoid", (2, 3), 4) == (24, 4 * (12 + 2))
    # the update of 5 weights: p, g read and p written in float32 (4 * 3 * 5 = 60), the 16-bit copy (2 * 5 = 10)
    assert op_cost("update_weights", (5,), bf16) == (20, 70)
    # a GEMM's operands and result at 2 bytes: 2 * (2*4 + 4*3 + 2*3) = 52; FLOPs 2 * 2 * 3 * 4 = 48
    assert op_cost("gemm", (2, 3, 4), bf16) == (48, 52)


def test_batch_counts_in_bf16_copy_16_bits_and_reduce_32():
    sizes, b = (784, 512, 10), 100
    c16, c32 = (batch_counts(sizes, b, widths(p), "mpi-staged", "pinned") for p in ("bf16", "float32"))
    assert c16.flops == c32.flops                                # a multiply-add is 2 FLOPs in every precision
    g = 4 * (n_params(sizes) + 1)                                # the float32 gradients and the loss slot
    assert c16.bytes_d2h == g and c16.bytes_mpi == g
    assert c16.bytes_h2d == 2 * b * (784 + 10) + g               # the batch at 2 bytes, the gradients back at 4
    # the first layer's weight gradient (512 x 784) is written in float32 by a 16-bit GEMM: 2 more bytes each
    wgrad = op_cost("gemm", (512, 784, b), widths("bf16"))[1] + 2 * 512 * 784
    assert c16.mem_bytes["backward"] - wgrad == sum(op_cost(n, s, widths("bf16"))[1] for n, s in (
        ("output_backward", (10, 512, b)), ("partial_sums", (10 * 512 + 512 + 10, 1))))


def test_fp16_adds_the_gradients_finite_check_to_the_update():
    sizes = (20, 8, 3)
    c = batch_counts(sizes, 4, widths("fp16"), "nccl", "resident")
    assert c.kernels["update"] == 2                               # grad_check, then the update
    assert c.mem_bytes["update"] == 4 * n_params(sizes) + op_cost("update_weights", (20 * 8 + 8 * 3,), widths(
        "fp16"))[1] + op_cost("update_biases", (11,), widths("fp16"))[1]


def test_ceilings_per_precision_from_the_datasheets():
    h100, quadro = load_machine("h100-sxm"), load_machine("quadro-rtx-6000")
    assert h100.peak_flops_per_s("tf32") == 494.7e12 and h100.peak_flops_per_s("bf16") == 989.4e12
    assert h100.peak_flops_per_s("fp16") == 989.4e12 and h100.peak_flops_per_s("float32") == 67e12
    assert quadro.peak_flops_per_s("fp16") == 130.5e12
    with pytest.raises(MachineError, match="no tf32 ceiling") as e:   # Turing: no TF32 or BF16 tensor cores
        quadro.peak_flops_per_s("tf32")
    assert "\n" not in str(e.value)
    assert set(quadro.ceilings()) == {"float32", "float64", "fp16"}


def test_an_uncalibrated_gemm_runs_at_its_precisions_ceiling():
    m = load_machine("h100-sxm")
    t = {p: predict_batch(m, (784, 512, 10), 3200, 1, p, "nccl", "resident").terms["gemm"]
         for p in ("float32", "tf32", "bf16")}
    assert math.isclose(t["tf32"] / t["float32"], 67 / 494.7) and math.isclose(t["bf16"] / t["float32"], 67 / 989.4)


@pytest.mark.parametrize("machine, hidden", [("h100-sxm", 2048), ("quadro-rtx-6000", 128)])
def test_prefetch_is_priced_as_the_larger_of_copy_and_step(machine, hidden):
    m = load_machine(machine)
    sizes, B = (784, hidden, 10), 3200
    pred = {bt: predict_batch(m, sizes, B, 1, "float32", "nccl", bt, exec_mode="graph")
            for bt in ("pinned", "prefetch", "resident")}
    p = pred["prefetch"]
    copy = p.detail["prefetch_s"]
    rest = p.total_s - p.terms["h2d_batch"]                      # the step with the copies off its stream
    assert math.isclose(p.total_s, max(copy, rest), rel_tol=1e-9)
    assert math.isclose(copy, pred["pinned"].terms["h2d_batch"])  # the same copies, from pinned memory
    assert p.total_s < pred["pinned"].total_s                     # overlapped beats serialised
    assert p.total_s >= max(copy, pred["resident"].total_s - pred["resident"].terms["elementwise"])


def test_prefetch_pageable_is_bounded_by_the_host_threads_staging():
    m = load_machine("h100-sxm")
    p = predict_batch(m, (784, 512, 10), 3200, 1, "float32", "nccl", "prefetch-pageable", exec_mode="graph")
    nbytes = 4 * 3200 * (784 + 10)
    assert math.isclose(p.detail["prefetch_s"], max(nbytes / m.stage_bw(), sum(
        m.copy_s("h2d", "pinned", 4 * 3200 * n) for n in (784, 10))))


def test_the_overlapped_roofline_is_above_the_serialised_one():
    ai = np.logspace(-1, 4, 50)
    over, ser = overlapped_roofline(ai, 1e12, 1e10), modified_roofline(ai, 1e12, 1e10)
    assert np.all(over >= ser) and math.isclose(over[-1] / ser[-1], 1, rel_tol=0.02)
    ridge = 1e12 / 1e10
    assert math.isclose(float(overlapped_roofline(ridge, 1e12, 1e10) / modified_roofline(ridge, 1e12, 1e10)), 2)


def test_the_report_places_each_run_under_its_precisions_ceiling(tmp_path, drawing_only):
    drawing_only("roofline_ceilings")
    from perfmlp.report import build_from_runs
    from perfmlp.report.analysis import analyse
    from perfmlp.report.sections.questions import ceilings_points
    from perfmlp.report.study import load_study
    from synthetic import gpu_run
    runs = [gpu_run(precision=p, transfer=t, comm=c, run_id=f"{p}-{t}")
            for p, t, c in (("float32", "pinned", "mpi-staged"), ("bf16", "resident", "nccl"),
                            ("tf32", "prefetch", "nccl"))]
    out = build_from_runs(runs, [], tmp_path / "rep")
    assert (out / "roofline_ceilings.svg").stat().st_size > 1000
    pts = {p["run"]: p for p in ceilings_points(analyse(runs, [], load_study()))}
    assert {k: p["precision"] for k, p in pts.items()} == {"float32-pinned": "float32", "bf16-resident": "bf16",
                                                           "tf32-prefetch": "tf32"}
    assert pts["bf16-resident"]["ai_pcie"] is None            # resident and NCCL: nothing copied
    # the bf16 step's device-memory bytes at its widths: FLOPs over them
    c = batch_counts((784, 512, 10), 3200, widths("bf16"), "nccl", "resident", exec_mode="eager")
    flops = batch_counts((784, 512, 10), 3200, 8, "nccl", "resident").flops_total   # (the fixture counts)
    assert pts["bf16-resident"]["ai_hbm"] == pytest.approx(flops / sum(c.mem_bytes.values()))
