"""The reference's published times beside the model
(perfmlp/report/sections/published.py), the implied unknowns put back into the
model, and the section as rendered."""
import csv
import math

import pytest
import yaml

from perfmlp.errors import PerfmlpError
from perfmlp.model.costs import grad_buffer_bytes
from perfmlp.model.machine import load_machine
from perfmlp.model.predict import ring_allreduce_s
from perfmlp.report import build_from_runs
from perfmlp.model.published import (explain, implied_copy_bw, implied_gemm_rate, implied_mpi_bw,
                                      reference_prediction, ring_fit, solve, with_copy_bw, with_gemm_rate, with_mpi,
                                      with_scaled_kernel)
from perfmlp.report.study import load_study

from conftest import ROOT, yaml_dump, yaml_load
from test_report import fake_run, four_runs

CALIBRATED = ROOT / "tests" / "data" / "h200-x2-calibrated.yaml"  # a 2 x H200 calibration with the kernels' rates

STUDY = load_study()
REF = load_machine(STUDY.reference_machine)
PUB = STUDY.reference_ms_per_batch


def ms(machine, p):
    return reference_prediction(machine, STUDY, p).total_s * 1e3


def test_solve_brackets_and_bisects():
    assert solve(lambda x: x * x, 2.0, 1e-3, 1e3) == pytest.approx(math.sqrt(2), rel=1e-8)
    assert solve(lambda x: 1 / x, 0.25, 1e-3, 1e3) == pytest.approx(4.0, rel=1e-8)   # decreasing too
    assert solve(lambda x: 1 / x, 1e6, 1e-3, 1e3) is None                          # not bracketed


def test_ring_fit_recovers_alpha_and_bandwidth():
    n = 1_000_000
    # 2 ranks: 2 alpha + n/bw = 20 us + 1 ms; 4 ranks: 6 alpha + 1.5 n/bw = 60 us + 1.5 ms (alpha 10 us, 1 GB/s)
    times = {p: ring_allreduce_s(n, p, 10e-6, 1e9) for p in (2, 4)}
    assert times == pytest.approx({2: 1.02e-3, 4: 1.56e-3})
    alpha, bw = ring_fit(times, n)
    assert alpha == pytest.approx(10e-6) and bw == pytest.approx(1e9)
    assert ring_fit({2: 1e-3}, n) is None                      # one point: two unknowns
    assert ring_fit({2: 2e-3, 4: 1e-3}, n) is None             # faster on more ranks: no positive pair


def test_the_datasheet_model_is_too_fast_and_falls_with_p():
    # the reference's scheme on the Quadro datasheet, regblock priced at the 16.3 TFLOP/s peak (no rate)
    t = {p: ms(REF, p) for p in (1, 2, 4)}
    assert t[1] > t[2] > t[4]                                  # falling where the published times rise
    assert all(3 < PUB[p] / t[p] < 8 for p in t)               # 3.3x to 7.3x too fast


def test_each_implied_value_put_back_gives_the_published_time():
    k, prec = STUDY.scheme["gemm"], STUDY.precision
    for p in (1, 2, 4):
        target = PUB[p] * 1e-3
        rate = implied_gemm_rate(REF, STUDY, p, target)
        assert ms(with_gemm_rate(REF, k, prec, rate), p) == pytest.approx(PUB[p], rel=0.01)
        bw = implied_copy_bw(REF, STUDY, p, target)
        assert ms(with_copy_bw(REF, "pageable", bw), p) == pytest.approx(PUB[p], rel=0.01)
        mpi = implied_mpi_bw(REF, STUDY, p, target)
        if p == 1:
            assert mpi is None                                 # no allreduce on one process
        else:
            assert ms(with_mpi(REF, REF.mpi_alpha_s, mpi), p) == pytest.approx(PUB[p], rel=0.01)
    # a slower kernel on smaller pieces would be needed: no one rate explains the rise
    r1, r4 = (implied_gemm_rate(REF, STUDY, p, PUB[p] * 1e-3) for p in (1, 4))
    assert r1 / r4 > 2
    # 1 ms is below what the other terms alone take at p = 1 (1.16 ms): no GEMM rate gives it
    assert implied_gemm_rate(REF, STUDY, 1, 1e-3) is None


def test_one_explanation_reproduces_every_published_time():
    ex = explain(REF, STUDY)
    # the GEMM rate from p = 1, then the host ring allreduce's alpha and bandwidth from p = 2 and 4
    assert 0 < ex.gemm_flops_per_s < REF.peak_flops_per_s_float32
    alpha, bw = ex.network
    assert alpha > 0 and bw > 0
    for p in (1, 2, 4):
        assert ex.predicted_ms(STUDY, p) == pytest.approx(PUB[p], rel=0.01)
    # the allreduce times left for p = 2 and 4 are the ring model's at (alpha, bw)
    n = grad_buffer_bytes(STUDY.layer_sizes, 4)
    for p, t in ex.allreduce_s.items():
        assert ring_allreduce_s(n, p, alpha, bw) == pytest.approx(t, rel=1e-6)
    # every other term is c + X/p with c + X = T1 (the GEMM rate solved at p = 1), so the ring's latency is
    # the published times' alone: (T1/2 - 3 T2/2 + T4) / 3 = (2.45 - 10.5 + 8.2) / 3 ms = 50 us
    assert alpha == pytest.approx((PUB[1] / 2 - 1.5 * PUB[2] + PUB[4]) / 3 * 1e-3, rel=1e-6)
    # slower than 10 Gb/s Ethernet's line rate, faster than 1 Gb/s: the study's networks bracket it
    names = {net.name: net.mpi_bw_bytes_per_s for net in STUDY.networks}
    assert names["1 Gb/s Ethernet"] < bw < names["10 Gb/s Ethernet"]


def test_scaled_kernel_rates_are_the_measured_times_the_ratio():
    cal = load_machine(CALIBRATED)
    ratio = REF.peak_flops_per_s_float32 / load_machine("h200").peak_flops_per_s_float32   # 16.3 / 67
    m = with_scaled_kernel(REF, cal, "regblock", ratio)
    shape = (512, 3200, 784)
    assert m.gemm_rate(*shape, "float32", kernel="regblock") == pytest.approx(
        cal.gemm_rate(*shape, "float32", kernel="regblock") * 16.3 / 67)
    assert m.gemm_rate(*shape, "float32") == REF.gemm_rate(*shape, "float32")   # cuBLAS untouched


def read_csv(path):
    return list(csv.DictReader(open(path)))


def test_the_section_renders_with_and_without_the_kernels_rates(tmp_path):
    # a calibration without the reference kernels' rates: the same file less its rows with a kernel
    data = yaml_load(CALIBRATED.read_text())
    data["gemm_flops_per_s"] = [r for r in data["gemm_flops_per_s"] if "kernel" not in r]
    data.pop("kernel_s", None)
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml_dump(data))
    assert not load_machine(plain).has_gemm_kernel("regblock")
    out = build_from_runs(four_runs(), [], tmp_path / "plain", machine=str(plain), draw=False)
    md = (out / "report.md").read_text()
    assert "## The reference's published times beside the model" in md
    assert "not compared with a measured one" in md
    explained = read_csv(out / "published_explained.csv")
    assert [float(explained[0][f"p={p} ms"]) for p in (1, 2, 4)] == pytest.approx([4.9, 7.0, 8.2], rel=0.01)
    unknowns = {r["unknown, alone"].split(" ")[0]: r for r in read_csv(out / "published_unknowns.csv")}
    assert unknowns["MPI"]["p=1"] == "" and float(unknowns["regblock"]["the file's"]) == pytest.approx(16.3)
    # with the validation's calibrated file (it has the reference kernels' rates): the comparison is there
    out = build_from_runs(four_runs(), [], tmp_path / "cal", machine=str(CALIBRATED), draw=False)
    kernels = {r["kernel"]: r for r in read_csv(out / "published_kernels.csv")}
    assert set(kernels) == {"naive", "tiled", "regblock"}
    reg = kernels["regblock"]
    assert float(reg["x fp32 peak ratio TFLOP/s"]) == pytest.approx(
        float(reg["measured on NVIDIA H200 (calibrated) TFLOP/s"]) * 16.3 / 67, rel=1e-6)
    assert "predicts" in (out / "report.md").read_text()


def test_a_study_without_the_reference_run_has_no_such_section(tmp_path):
    data = yaml.safe_load((ROOT / "perfmlp/report/studies/cme213.yaml").read_text())
    for k in ("reference_machine", "reference_scheme", "networks"):
        data.pop(k)
    f = tmp_path / "plain.yaml"
    f.write_text(yaml.safe_dump(data))
    out = build_from_runs([fake_run(1, "resident", "nccl", 0.25)], [], tmp_path / "rep", study=str(f),
                          draw=False)
    assert "published times beside" not in (out / "report.md").read_text()
    bad = dict(data, reference_machine="quadro-rtx-6000",
               reference_scheme={"gemm": "fastest", "batch_transfer": "pageable", "comm": "mpi-staged",
                                 "exec": "eager"})
    f.write_text(yaml.safe_dump(bad))
    with pytest.raises(PerfmlpError, match=r"plain.yaml: reference_scheme.gemm"):
        load_study(str(f))
    f.write_text(yaml.safe_dump(dict(bad, reference_scheme={"gemm": "naive"})))
    with pytest.raises(PerfmlpError, match=r"plain.yaml: reference_scheme must give exactly"):
        load_study(str(f))
