"""The CPU model (perfmlp/model/predict/cpu.py) on machine mappings made
here, with round rates so the arithmetic can be worked by hand."""
import pytest

from perfmlp import names as N
from perfmlp.model.predict.cpu import (ELEMENTWISE, GEMM, LAUNCHES, RANK_WAIT, TRACING, allreduce_s,
                                       cpu_alternatives, cpu_ceilings, gemm_rate, predict_cpu, roofline_rates,
                                       setting_of, slowest_of)

PASSES = ("bias_sigmoid", "bias_add", "softmax_ce_grad", "row_sum", "sigmoid_grad_row_sum", "sgd_update")
SIZES = (4, 3, 2)    # D, H, C


def machine(families=((1, 1), (2, 1)), spread=(), allreduce=(), ring=None, fp64=False):
    """A 2-core machine: GEMMs at 1 GFLOP/s per thread (half in float64),
    every pass at 1 GB/s, 1 us of Python per kernel."""
    precisions = (N.FLOAT32, N.FLOAT64) if fp64 else (N.FLOAT32,)
    m = {"name": "test-cpu", "cores": 2, "default_threads": 2, "kernel_host_s": 1e-6,
         "peak_flops_per_s_float32": 2e9, "mem_bw_bytes_per_s": 4e9,
         "gemm_flops_per_s": [{"m": 3, "n": 5, "k": 4, "precision": p, "threads": t, "ranks": r,
                               "flops_per_s": t * 1e9 / (2 if p == N.FLOAT64 else 1)}
                              for p in precisions for t, r in families],
         "pass_bytes_per_s": [{"kernel": k, "shape": [1], "precision": p, "threads": t, "ranks": r, "bytes": 100,
                               "bytes_per_s": 1e9} for k in PASSES for p in precisions for t, r in families],
         "allreduce_s": [{"procs": p, "bytes": n, "s": s} for p, n, s in allreduce],
         "spread": [{"source": s, "ratios": list(r)} for s, r in spread]}
    if ring:
        m["mpi_alpha_s"], m["mpi_bw_bytes_per_s"] = ring
    return m


def test_a_tiny_step_term_by_term():
    # 4-3-2 network, one rank, b = 5, float32, 1 thread (1 GFLOP/s)
    # GEMM FLOPs: forward 2*3*5*4 = 120 and 2*2*5*3 = 60; backward dW2 2*2*3*5 = 60, dA 2*3*5*2 = 60,
    # dW1 2*3*4*5 = 120: 420 FLOPs -> 420 ns
    # pass bytes (costs, 4-byte elements): bias_sigmoid 4*2*15 + 4*3 = 132, bias_add 4*2*10 + 4*2 = 88,
    # softmax_ce_grad 4*3*10 + 4 = 124, row_sum 4*10 + 4*2 = 48, sigmoid_grad + row_sum 4*3*15 + 4*15 + 4*3 = 252,
    # sgd_update 4*3*18 + 4*3*5 = 276: 920 B at 1 GB/s -> 920 ns
    # 11 kernels x 1 us = 11 us; the allreduce on one rank: 96 B (24 values) between (24 B, 1 us) and
    # (384 B, 4 us), log-log: 1 us * 4 ** (log 4 / log 16) = 2 us
    m = machine(allreduce=((1, 24, 1e-6), (1, 384, 4e-6)))
    p = predict_cpu(m, SIZES, 5, procs=1, threads=1)
    assert p.terms[GEMM] == pytest.approx(420e-9)
    assert p.terms[ELEMENTWISE] == pytest.approx(920e-9)
    assert p.terms[LAUNCHES] == pytest.approx(11e-6)
    assert p.terms[N.ALLREDUCE] == pytest.approx(2e-6)
    assert p.terms[RANK_WAIT] == 0.0
    assert p.total_s == pytest.approx(420e-9 + 920e-9 + 11e-6 + 2e-6)
    g = p.groups()     # the GPU model's groups; a CPU copies nothing
    assert g[N.COMPUTE] == pytest.approx(420e-9 + 920e-9 + 11e-6) and g[N.ALLREDUCE] == pytest.approx(2e-6)
    assert g[N.H2D_BATCH] == g[N.D2H_GRAD] == g[N.H2D_GRAD] == 0.0
    assert p.flops_per_rank > 420 and p.detail["bytes_mpi"] == 96
    # the tracer's host time per batch, in traced runs only
    m["trace_batch_host_s"] = 5e-6
    assert predict_cpu(m, SIZES, 5, threads=1).terms[TRACING] == pytest.approx(5e-6)
    assert predict_cpu(m, SIZES, 5, threads=1, traced=False).terms[TRACING] == 0.0


def test_the_ring_model_prices_ranks_the_table_lacks():
    # 2 ranks, no 2-rank points: 2 (p - 1) alpha + 2 (p - 1) / p n / bw = 2 us + 96 B / 1 GB/s = 2.096 us
    m = machine(ring=(1e-6, 1e9))
    assert allreduce_s(m, 96, 2) == pytest.approx(2.096e-6)
    assert allreduce_s(m, 96, 1) == 0.0          # one rank, no one-rank points: nothing measured, nothing priced


def test_more_work_more_time():
    m = machine(fp64=True)

    def t(**kw):
        args = {"layer_sizes": SIZES, "batch": 50, "procs": 1, "threads": 2, "precision": N.FLOAT32, **kw}
        return predict_cpu(m, **args).total_s
    assert t(batch=100) > t(batch=50) > t(batch=10)
    assert t(layer_sizes=(4, 30, 2)) > t(layer_sizes=(4, 3, 2))
    assert t(precision=N.FLOAT64) > t(precision=N.FLOAT32)     # twice the bytes, half the GEMM rate
    assert t(threads=1) > t(threads=2)                         # one rank alone: a second core helps its GEMMs


def test_oversubscribed_ranks_are_slower_per_rank():
    # the same piece per rank (b = 50): 1 rank of 2 threads has both cores; 2 ranks of 2 threads share them
    # (each rank's GEMMs at min(2, 2 / 2) = 1 core, half the rate); 4 ranks a half core each
    m = machine(families=((1, 1), (2, 1)), ring=(1e-6, 1e9))
    one, two, four = (predict_cpu(m, SIZES, 50 * p, procs=p, threads=2) for p in (1, 2, 4))
    assert two.detail["oversubscribed"] and not one.detail["oversubscribed"]
    assert one.terms[GEMM] < two.terms[GEMM] < four.terms[GEMM]
    assert two.terms[GEMM] == pytest.approx(2 * one.terms[GEMM])
    assert one.terms[ELEMENTWISE] == pytest.approx(two.terms[ELEMENTWISE])   # one core each: no sharing yet
    assert four.terms[ELEMENTWISE] == pytest.approx(2 * two.terms[ELEMENTWISE])
    # a measured (threads, ranks) family is used as measured, not scaled
    m2 = machine(families=((1, 1), (2, 1), (2, 2)))
    assert gemm_rate(m2, (3, 5, 4), N.FLOAT32, setting_of(m2, 2, 2)) == pytest.approx(2e9)


def test_gemm_rates_between_shapes_are_weighted_geometric_means():
    m = machine()
    m["gemm_flops_per_s"] = [{"m": 100, "n": 100, "k": 100, "precision": N.FLOAT32, "threads": 1, "ranks": 1,
                              "flops_per_s": 1e9},
                             {"m": 400, "n": 100, "k": 100, "precision": N.FLOAT32, "threads": 1, "ranks": 1,
                              "flops_per_s": 4e9}]
    s = setting_of(m, 1, 1)
    assert gemm_rate(m, (100, 100, 100), N.FLOAT32, s) == pytest.approx(1e9)   # a measured shape: its own rate
    # m = 200 sits halfway in log between them: equal weights, the geometric mean sqrt(1e9 * 4e9) = 2e9
    assert gemm_rate(m, (200, 100, 100), N.FLOAT32, s) == pytest.approx(2e9)


def test_the_slowest_rank_and_the_interval_come_from_the_spread():
    ratios = [0.9, 0.95, 1.0, 1.05, 1.5]
    assert slowest_of(ratios, 1) == pytest.approx(1.0)              # the median
    # p = 2: the quantile 0.5 ** 0.5 = 0.7071 of 5 ratios, index 2.83: 1.0 + 0.83 * 0.05 = 1.0414
    assert slowest_of(ratios, 2) == pytest.approx(1.0 + (0.5 ** 0.5 * 4 - 2) * 0.05)
    quiet = machine(ring=(1e-6, 1e9))
    assert predict_cpu(quiet, SIZES, 50).detail["interval_s"] is None     # no spread, no interval
    narrow = machine(ring=(1e-6, 1e9), spread=[(s, (0.98, 1.0, 1.02)) for s in ("blas", "memory", "host", "step")])
    wide = machine(ring=(1e-6, 1e9), spread=[(s, (0.7, 1.0, 1.5)) for s in ("blas", "memory", "host", "step")])
    pn, pw = predict_cpu(narrow, SIZES, 50, procs=2), predict_cpu(wide, SIZES, 50, procs=2)
    (nlo, nhi), (wlo, whi) = pn.detail["interval_s"], pw.detail["interval_s"]
    assert nlo <= pn.total_s <= nhi and wlo <= pw.total_s <= whi
    assert whi - wlo > 10 * (nhi - nlo)
    assert pw.terms[RANK_WAIT] > pn.terms[RANK_WAIT] > 0
    # the model's blind error on top: the whole total's factor, so the interval follows its ratios
    biased = machine(ring=(1e-6, 1e9), spread=[(s, (0.98, 1.0, 1.02)) for s in ("blas", "memory", "host", "step")]
                     + [("model_eager_pageable", (0.5, 0.6, 0.7))])
    pb = predict_cpu(biased, SIZES, 50, procs=2)
    blo, bhi = pb.detail["interval_s"]
    assert pb.total_s == pytest.approx(pn.total_s) and bhi < pn.total_s     # the point unmoved, the interval below it
    assert 0.45 * pn.total_s < blo < 0.55 * pn.total_s and 0.6 * pn.total_s < bhi < 0.75 * pn.total_s


def test_ceilings_are_the_ranks_share():
    m = machine(ring=(1e-6, 1e9))
    c = cpu_ceilings(m, N.FLOAT32, procs=2, threads=2)
    # 2 ranks of 2 threads on 2 cores: one core each, half the 2 GFLOP/s roof; one NumPy thread's memory roof
    assert c == {"peak_flops_per_s": 1e9, "mem_bw_bytes_per_s": 4e9, "copy_bytes_per_s": 1e9}
    r = roofline_rates(m, ai_mem=0.1, ai_copy=1.0, procs=2, threads=2)
    # standard min(1e9, 0.1 * 4e9) = 4e8; modified 1 / (1 / 1e9 + 1 / 1e9) = 5e8
    assert r["standard"] == pytest.approx(4e8) and r["modified"] == pytest.approx(5e8)


def test_bad_settings_are_refused_in_words():
    m = machine()
    with pytest.raises(ValueError, match="float32 or float64"):
        predict_cpu(m, SIZES, 50, precision=N.BF16)
    with pytest.raises(ValueError, match="cannot split"):
        predict_cpu(m, SIZES, 2, procs=4)
    with pytest.raises(ValueError, match="no float64"):
        predict_cpu(m, SIZES, 50, precision=N.FLOAT64)


def test_the_alternatives_are_each_single_change_fastest_first():
    m = machine(families=((1, 1), (2, 1)), ring=(1e-6, 1e9), fp64=True)
    alts = cpu_alternatives(m, SIZES, 50, procs=1, threads=1)
    changes = [a.change for a in alts]
    # 2 cores: one more rank, one more thread, half and twice the batch, float64; and the run as it is
    assert sorted(map(str, changes)) == sorted(map(str, [{}, {"procs": 2}, {"threads": 2}, {"batch": 25},
                                                         {"batch": 100}, {"precision": N.FLOAT64}]))
    per_sample = [a.s_per_sample for a in alts]
    assert per_sample == sorted(per_sample)
    asis = next(a for a in alts if a.change == {})
    assert asis.prediction.total_s == pytest.approx(predict_cpu(m, SIZES, 50, procs=1, threads=1).total_s)
    # a second thread doubles the GEMM rate of a rank alone: faster than the run as it is
    assert next(a for a in alts if a.change == {"threads": 2}).s_per_sample < asis.s_per_sample
