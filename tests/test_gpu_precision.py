"""GPU tests of the precisions and the prefetching input pipeline: skipped
without CuPy and a GPU; run on the GPU machine."""
import contextlib

import numpy as np
import pytest

from conftest import gpu, run_perfmlp
from perfmlp import mixed
from test_precision import BOUND, CASES, change_error, train_steps

TENSOR = ("tf32", "bf16", "fp16")
# a GEMM's relative error against float64 with K = 300 (operands rounded to
# 10 or 7 mantissa bits, float32 accumulation): about sqrt(K) u / 8 measured
# on NumPy; bounds with room
GEMM_BOUND = {"tf32": 2e-3, "bf16": 1.5e-2, "fp16": 2e-3}


@gpu
@pytest.mark.parametrize("precision", TENSOR)
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("out32", [False, True])
def test_tensor_core_gemm_matches_float64(precision, trans_a, trans_b, out32):
    import cupy as cp
    from perfmlp.gpu.gemm import cublas_gemm
    from perfmlp.gpu.kernels import device_dtype
    from perfmlp.mixed import device_view, from_device, round_tf32, to_storage
    rng = np.random.default_rng(7)
    M, N, K = 67, 131, 300
    a = rng.standard_normal((K, M) if trans_a else (M, K))
    b = rng.standard_normal((N, K) if trans_b else (K, N))
    ha, hb = (device_view(to_storage(x, precision)) for x in (a, b))
    da, db = cp.asarray(ha), cp.asarray(hb)
    da, db = (da.T if trans_a else da), (db.T if trans_b else db)
    odt = np.float32 if out32 or precision == "tf32" else device_dtype(precision)
    out = cp.zeros((M, N), odt)
    cublas_gemm(cp, np.float32, precision=precision)(da, db, out)
    cp.cuda.get_current_stream().synchronize()
    got = from_device(out.get(), precision).astype(np.float64)
    # the reference from the operands as stored (the 16-bit rounding of the inputs is not the GEMM's error)
    ra, rb = (from_device(x, precision) for x in (ha, hb))
    if precision == "tf32":   # what the tensor cores multiply
        ra, rb = (round_tf32(x) for x in (ra, rb))
    ra, rb = ra.astype(np.float64), rb.astype(np.float64)
    ref = (ra.T if trans_a else ra) @ (rb.T if trans_b else rb)
    err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert err < GEMM_BOUND[precision], err


@gpu
@pytest.mark.parametrize("sizes, b", CASES)
@pytest.mark.parametrize("precision", ["float32", *TENSOR])
def test_gpu_steps_match_float64_within_the_precisions_bound(precision, sizes, b):
    import cupy as cp
    from perfmlp.gpu.network import GpuNetwork
    from perfmlp.mlp import Network
    make_gpu = lambda p: GpuNetwork(cp, sizes, p, 0.5, 1e-3, b, b, "cublas")  # noqa: E731
    p0, ref = train_steps(lambda p: Network(np, sizes, p, 0.5, 1e-3, b), "float64", sizes, b)
    _, gpu_p = train_steps(make_gpu, precision, sizes, b)
    assert change_error(gpu_p, ref, p0) < BOUND[precision]
    if precision == "bf16" and mixed.ml_dtypes is None:
        pytest.skip("NumPy's bfloat16 needs ml_dtypes (the GPU's bound above is checked)")
    _, cpu_p = train_steps(lambda p: Network(np, sizes, p, 0.5, 1e-3, b), precision, sizes, b)
    # the GPU computes what NumPy computes, up to the order of its sums
    assert change_error(gpu_p, cpu_p, p0) < BOUND[precision]


@gpu
def test_fp16_device_loss_scale_skips_an_overflowing_step():
    import cupy as cp
    from perfmlp.gpu.network import GpuNetwork
    from perfmlp.mixed import INIT_SCALE
    from perfmlp.mlp import init_weights
    sizes, b = (8, 6, 3), 5
    net = GpuNetwork(cp, sizes, "fp16", 0.5, 0.0, b, b, "cublas")
    net.set_params(init_weights(sizes, 2))
    x = cp.asarray(np.random.default_rng(0).random((b, 8)).astype(np.float16))
    y = cp.asarray(np.eye(3, dtype=np.float16)[[0, 1, 2, 0, 1]])

    def step():
        net.forward(x.T)
        net.loss(y.T)
        net.backward()
        net.update()
    step()   # a finite step at the initial scale: the update ran
    assert net.loss_scale() == (INIT_SCALE, 0)
    net.ls[0] = 2.0 ** 40   # the scaled delta overflows float16
    before = net.p.flat.get()
    step()
    step()
    assert np.array_equal(net.p.flat.get(), before)       # both skipped
    assert net.loss_scale() == (2.0 ** 38, 2)             # halved twice, two skipped
    # the 16-bit weight copy still holds the float32 weights, rounded
    w16 = net.wcopy.get().astype(np.float32)
    assert np.array_equal(w16, before[:net.p.n_weights].astype(np.float16).astype(np.float32))


@gpu
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("b", [1000, 1003])   # 16-byte passes of the fused output backward; one element a lane
def test_wide_16_bit_steps_compute_what_numpy_computes(precision, b):
    import cupy as cp
    from perfmlp.gpu.network import GpuNetwork
    from perfmlp.mlp import Network
    if precision == "bf16" and mixed.ml_dtypes is None:
        pytest.skip("NumPy's bfloat16 needs ml_dtypes")
    sizes = (33, 301, 10)   # rows not a multiple of a block's, columns over a block's 256
    make_gpu = lambda p: GpuNetwork(cp, sizes, p, 0.5, 1e-3, b, b, "cublas")  # noqa: E731
    p0, gpu_p = train_steps(make_gpu, precision, sizes, b, k=3)
    _, cpu_p = train_steps(lambda p: Network(np, sizes, p, 0.5, 1e-3, b), precision, sizes, b, k=3)
    assert change_error(gpu_p, cpu_p, p0) < BOUND[precision]


@gpu
@pytest.mark.parametrize("where", [0, -1])
def test_fp16_grad_check_finds_one_overflow_in_a_large_gradient(where):
    import cupy as cp
    from perfmlp.gpu.network import GpuNetwork
    from perfmlp.mixed import INIT_SCALE
    from perfmlp.mlp import init_weights
    sizes = (784, 2048, 10)   # 1.6 million gradients: many more than the check's threads
    net = GpuNetwork(cp, sizes, "fp16", 0.5, 0.0, 8, 8, "cublas")
    net.set_params(init_weights(sizes, 2))
    n = net.p.n_params   # the gradients (g.flat holds the loss slot after them)
    net.g.flat[:n] = cp.asarray(np.random.default_rng(3).standard_normal(n), dtype=net.g.flat.dtype)
    before = net.p.flat.get()
    net.g.flat[where % n] = cp.inf
    net.update()
    assert np.array_equal(net.p.flat.get(), before)
    assert net.loss_scale() == (INIT_SCALE * mixed.BACKOFF_FACTOR, 1)
    net.g.flat[where % n] = 0.25
    net.update()
    assert not np.array_equal(net.p.flat.get(), before)
    assert net.loss_scale() == (INIT_SCALE * mixed.BACKOFF_FACTOR, 1)


@gpu
@pytest.mark.parametrize("mode, chunked", [("prefetch", False), ("prefetch-pageable", False),
                                           ("prefetch-pageable", True)])
def test_prefetched_pieces_are_the_datas_rows_in_order_and_after_a_shuffle(mode, chunked):
    import cupy as cp
    from perfmlp.backend import _next_piece
    from perfmlp.batches import DeviceBatches
    from perfmlp.trace.format import Counts
    nophase = lambda name: contextlib.nullcontext()  # noqa: E731
    N, B, D, C = 230, 50, 7, 3
    rng = np.random.default_rng(0)
    x, y = rng.random((N, D)).astype(np.float32), rng.random((N, C)).astype(np.float32)
    batches = DeviceBatches(cp, x, y, mode, B, next_piece=_next_piece(B, N, 1, 0))
    pipe = batches.prefetcher.pipe
    if chunked:   # each piece staged by several tasks, each copying its rows at their offset
        pipe.min_chunk_bytes = 0
        assert len(pipe._chunks(B)) > 1
    counts = Counts()
    for epoch in range(3):
        if epoch == 2:   # a shuffle drops what was prefetched
            order = rng.permutation(N)
            batches.reorder(order)
            x, y = x[order], y[order]
        for lo in range(0, N, B):
            hi = min(lo + B, N)
            xd, yd = batches.get(lo, hi, nophase, counts)
            cp.cuda.get_current_stream().synchronize()
            assert np.array_equal(xd.T.get(), x[lo:hi]) and np.array_equal(yd.T.get(), y[lo:hi])
            assert len(pipe.ahead) == pipe.lookahead   # the next pieces are on their way meanwhile
    assert counts.bytes_h2d == 3 * N * (D + C) * 4
    pipe.close()


BASE = ["--data", "synthetic", "--n-train", "230", "--batch-size", "50", "--input-size", "64", "--hidden-size",
        "32", "--learning-rate", "0.5", "--epochs", "2", "--no-trace", "--backend", "cupy", "--comm", "nccl"]


def _final(tmp_path, name, *flags):
    r = run_perfmlp(*BASE, *flags, "--save-params", str(tmp_path / name), timeout=180)
    assert r.returncode == 0, r.stderr
    with np.load(tmp_path / name / "final.npz") as f:
        return {k: f[k] for k in f.files}


@gpu
@pytest.mark.parametrize("precision", TENSOR)
def test_graph_and_prefetch_leave_the_arithmetic_alone(tmp_path, precision):
    # the same kernels and GEMMs whatever issues them and wherever the batch lands: bit-identical
    runs = {(ex, bt): _final(tmp_path, f"{ex}-{bt}", "--precision", precision, "--exec", ex, "--batch-transfer", bt)
            for ex, bt in (("eager", "pinned"), ("graph", "resident"), ("graph", "prefetch"),
                           ("eager", "prefetch-pageable"), ("graph", "prefetch-pageable"))}
    ref = runs[("eager", "pinned")]
    for key, params in runs.items():
        for k in ref:
            assert np.array_equal(params[k], ref[k]), (key, k)


@gpu
@pytest.mark.parametrize("precision, flags", [("bf16", ("--comm", "mpi-staged", "--exec", "eager")),
                                              ("fp16", ("--overlap", "--bucket-bytes", "2048")),
                                              ("tf32", ("--parallel", "model"))])
def test_precisions_with_the_staged_exchange_overlap_and_partitions(tmp_path, precision, flags):
    params = _final(tmp_path, "run", "--precision", precision, "--batch-transfer", "resident", *flags)
    assert all(np.isfinite(v).all() for v in params.values())


@gpu
def test_bf16_prefetch_trace_counts_16_bit_batches(tmp_path):
    from perfmlp.model.costs import batch_counts, widths
    from perfmlp.trace.reader import read_run
    r = run_perfmlp(*[f for f in BASE if f != "--no-trace"], "--precision", "bf16", "--batch-transfer", "prefetch",
                    "--trace-dir", str(tmp_path), "--run-id", "g", "--trace-level", "phases")
    assert r.returncode == 0, r.stderr
    run = read_run(tmp_path / "g")
    for b in run.ranks[0].batches:
        want = batch_counts((64, 32, 10), b.local_samples, widths("bf16"), "nccl", "prefetch", exec_mode=run.exec)
        assert (b.bytes_h2d, b.bytes_nccl) == (want.bytes_h2d, want.bytes_nccl)   # 2-byte batch, 4-byte grads
        assert "h2d" in b.t_ms


@gpu
def test_calibration_times_the_trainers_gemms_and_kernels_in_each_tensor_precision():
    import cupy as cp
    from perfmlp.calibrate.precision import precision_rates, stage_rate
    from perfmlp.model.machine import load_machine, machine_from_mapping
    from perfmlp.model.predict import predict_batch
    lines = []
    res = precision_rates(cp, [64], [128], ["float32", "bf16", "fp16"], lines.append)
    assert {e["precision"] for e in res["gemm_flops_per_s"]} == {"bf16", "fp16"}   # float32 is gemm.py's
    # 784-64-10 on 128 samples: the forward and the first layer's weight-gradient GEMMs (the output layer's
    # backward is the fused kernels), per precision
    assert sorted((e["m"], e["n"], e["k"]) for e in res["gemm_flops_per_s"] if e["precision"] == "bf16") == \
        sorted([(64, 128, 784), (10, 128, 64), (64, 784, 128)])
    assert any(e["kernel"] == "grad_check" and e["precision"] == "fp16" for e in res["kernel_s"])
    assert 1e12 < res["peak_flops_per_s_bf16"] < 2e15
    res.update(stage_rate(cp, [1 << 20], lines.append))
    assert 1e8 < res["host_stage_bytes_per_s"] < 1e12
    h200 = load_machine("h200")
    values = {f: getattr(h200, f) for f in h200.__dataclass_fields__ if f not in ("path", "device_names")}
    m = machine_from_mapping({**values, **res, "allreduce_s": [], "collective_wait_s": [], "host_dispatch_s": [],
                              "copy_aggregate_bytes_per_s": [], "d2d_copy_s": [], "host_copy_s": []}, "x.yaml")
    slow = predict_batch(m, (784, 64, 10), 128, 1, "bf16", "nccl", "resident").terms["gemm"]
    fast = predict_batch(h200, (784, 64, 10), 128, 1, "bf16", "nccl", "resident").terms["gemm"]
    assert slow > fast   # the measured rates at these small shapes are under the datasheet peak


@gpu
def test_a_cublas_handle_keeps_its_stream_alive():
    """A handle outliving its stream was found again under a later stream's
    address and its launches failed (cuBLAS status 13)."""
    import gc

    import cupy as cp
    from perfmlp.gpu.gemm import cublas_gemm
    s = cp.cuda.Stream(non_blocking=True)
    g = cublas_gemm(cp, np.float32, s)
    assert g.stream is s and cublas_gemm(cp, np.float32, s) is g
    ptr = s.ptr
    del s
    gc.collect()
    assert g.stream.ptr == ptr                     # not destroyed: the handle holds it
    s2 = cp.cuda.Stream(non_blocking=True)
    assert s2.ptr != ptr                           # its address not reused while the handle lives
    g2 = cublas_gemm(cp, np.float32, s2)
    assert g2.stream is s2
    a, b = cp.ones((64, 32), cp.float32), cp.ones((32, 16), cp.float32)
    out = cp.empty((64, 16), cp.float32)
    cp.cuda.get_current_stream().synchronize()    # s2 does not wait for the stream that filled a and b
    g2(a, b, out)
    s2.synchronize()
    assert float(out[0, 0]) == 32.0
