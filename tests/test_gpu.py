"""GPU tests: skipped without CuPy and a GPU; run on the GPU machine."""
import numpy as np
import pytest

from conftest import gpu, run_perfmlp, has_gpu
from perfmlp.mlp import Network, init_weights


def test_cupy_without_gpu_is_one_line_error():
    if has_gpu():
        pytest.skip("a GPU is present")
    r = run_perfmlp("--backend", "cupy", "--no-trace", "--data", "synthetic", "--n-train", "40",
                    "--batch-size", "20", "--input-size", "10", "--hidden-size", "4")
    assert r.returncode == 2
    assert "--backend cupy:" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@gpu
@pytest.mark.parametrize("kind", ["cublas", "naive", "tiled", "regblock"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, False), (False, True)])
def test_gemm_kernels_match_float64_reference(kind, dtype, trans_a, trans_b):
    import cupy as cp
    from perfmlp.gpu.gemm import gemm
    rng = np.random.default_rng(hash((kind, trans_a, trans_b)) % 2**32)
    M, N, K = 67, 131, 45  # odd sizes: partial tiles everywhere
    a = rng.standard_normal((K, M) if trans_a else (M, K))
    b = rng.standard_normal((N, K) if trans_b else (K, N))
    da, db = cp.asarray(a.astype(dtype)), cp.asarray(b.astype(dtype))
    da = da.T if trans_a else da
    db = db.T if trans_b else db
    out = cp.full((M, N), np.nan, dtype)  # poisoned: every element must be written
    gemm(cp, kind, da, db, out=out)
    ref = (a.T if trans_a else a) @ (b.T if trans_b else b)
    err = np.linalg.norm(out.get() - ref) / np.linalg.norm(ref)
    assert err < (1e-5 if dtype == np.float32 else 1e-12), err


@gpu
@pytest.mark.parametrize("dtype, tol", [(np.float32, 2e-5), (np.float64, 1e-12)])
@pytest.mark.parametrize("gemm_kind, fuse, sizes, b", [
    ("cublas", True, (33, 17, 10), 23), ("regblock", True, (33, 17, 10), 23), ("cublas", False, (33, 17, 10), 23),
    # the fused output kernels' edges: 16 classes (the most they take), rows not a multiple of
    # their row block, columns over a block's 256 threads, 3 classes, two hidden layers
    ("cublas", True, (33, 301, 16), 1000), ("cublas", True, (20, 9, 3), 40), ("cublas", True, (33, 17, 12, 10), 23)])
def test_gpu_step_matches_numpy(dtype, tol, gemm_kind, fuse, sizes, b):
    import cupy as cp
    from perfmlp.gpu.network import GpuNetwork
    rng = np.random.default_rng(5)
    C = sizes[-1]
    w = init_weights(sizes, 1)
    bs = [rng.standard_normal(n) * 0.1 for n in sizes[1:]]
    xrows = rng.random((b, sizes[0])).astype(dtype)
    yrows = np.eye(C, dtype=dtype)[rng.integers(0, C, b)]
    cpu = Network(np, sizes, dtype, lr=0.3, reg=0.01, global_batch=b + 17)
    gpu_net = GpuNetwork(cp, sizes, dtype, 0.3, 0.01, b + 17, max_local=b + 5, gemm_kind=gemm_kind)
    assert gpu_net.fuse_output
    gpu_net.fuse_output = fuse
    for net in (cpu, gpu_net):
        net.set_params(w, bs)
    cpu.forward(xrows.T); cpu.loss(yrows.T); cpu.backward()
    xd, yd = cp.asarray(xrows), cp.asarray(yrows)
    gpu_net.forward(xd.T); gpu_net.loss(yd.T); gpu_net.backward()
    g_cpu, g_gpu = cpu.g.flat, gpu_net.g.flat.get()
    assert np.abs(g_gpu - g_cpu).max() / np.abs(g_cpu).max() < tol
    cpu.update(); gpu_net.update()
    assert np.abs(gpu_net.p.flat.get() - cpu.p.flat).max() < tol
    # the update moved the loss slot into the epoch sum and cleared it
    assert float(gpu_net.g.extra.get()[0]) == 0.0
    assert np.isclose(gpu_net.take_epoch_loss_sum(), float(g_cpu[-1]), rtol=10 * tol)


@gpu
@pytest.mark.parametrize("sizes", [(33, 17, 10), (33, 17, 12, 10), (33, 17, 12, 11, 10)])
@pytest.mark.parametrize("fuse", [True, False])
def test_gpu_network_launches_the_models_step(sizes, fuse):
    import cupy as cp
    from perfmlp.gpu.network import GpuNetwork
    from perfmlp.model.costs import step_kernels, step_ops
    from test_mlp import recorded_step
    b = 23
    net = GpuNetwork(cp, sizes, np.float32, 0.3, 0.01, b, max_local=b, gemm_kind="cublas")
    net.fuse_output = fuse
    net.set_params(init_weights(sizes, 1))
    x = cp.random.random((b, sizes[0]), dtype=cp.float32)
    y = cp.asarray(np.eye(10, dtype=np.float32)[np.arange(b) % 10])
    ops, kernels = recorded_step(net, x.T, y.T)
    assert ops == step_ops(sizes, b, fuse_output=fuse)
    assert kernels == sum(len(k) for k in step_kernels(sizes, b, fuse_output=fuse).values())


@gpu
def test_host_dispatch_alone_times_the_trainers_eager_step():
    # the calibration's host terms on one process: the step (step.py, resident batches, the NCCL reducer
    # over one rank) untraced and at the counters level; no table of several ranks on one
    import cupy as cp
    from perfmlp.calibrate.host import host_dispatch
    from perfmlp.comm import SingleWorld
    lines = []
    res = host_dispatch(cp, SingleWorld(), lines.append, rounds=2, reps=20)
    assert set(res) == {"launch_overhead_s", "trace_phase_host_s", "graph_step_host_s", "static_copy_host_s",
                        "pinned_copy_host_s", "_rounds"}
    assert [len(res["_rounds"][k]) for k in ("untraced", "graph")] == [2, 2]   # each round's time: the spread
    assert 1e-7 < res["launch_overhead_s"] < 1e-3 and 0 <= res["trace_phase_host_s"] < 1e-3
    # the graph step's host a batch: one replay and the two copies into its inputs, not the eager
    # step's 10 launches (the loop's own work in both)
    assert 1e-7 < res["graph_step_host_s"] < 10 * res["launch_overhead_s"]
    assert len(lines) == 3 and "1 rank(s) at once" in lines[0] and "graph step" in lines[1] and "copy call" in lines[2]
    # a copy call's host time: a cudaMemcpyAsync, or CuPy's set from pinned memory (more Python), each
    # well under a whole graph step's
    assert 1e-7 < res["static_copy_host_s"] < res["graph_step_host_s"]
    assert 1e-7 < res["pinned_copy_host_s"] < 10 * res["launch_overhead_s"]


@gpu
def test_the_eager_steps_host_time_by_size_is_a_ratio_to_the_tiny_one():
    import cupy as cp
    from perfmlp.calibrate.host import dispatch_size_factors
    lines = []
    out = dispatch_size_factors(cp, [512], [800, 3200], lines.append, rounds=2, reps=10)
    assert [(e["hidden"], e["batch"]) for e in out] == [(512, 800), (512, 3200)]
    # the same operations at a larger size: no faster than half the tiny step's, nor 10x slower on the host
    assert all(0.5 < e["factor"] < 10 for e in out) and len(lines) == 1


@gpu
def test_static_copies_time_each_piece_size_and_load():
    # the calibration's d2d_copy_s: X's and Y's pieces at each local batch and precision, GPU time
    import cupy as cp
    from perfmlp.calibrate.copies import static_copies
    from perfmlp.model.machine import machine_from_mapping
    lines = []
    pts = static_copies(cp, [100, 3200], ["float32", "float64"], lines.append)
    assert [p["bytes"] for p in pts] == sorted({i * b * n for i in (4, 8) for b in (100, 3200) for n in (784, 10)})
    assert all(1e-7 < p["s"] < 1e-3 for p in pts)
    assert pts[-1]["s"] > pts[0]["s"]   # 20 MB take longer than 4 KB
    m = machine_from_mapping({**machine_values("h200"), "d2d_copy_s": pts}, "x.yaml")
    assert m.device_copy_s(pts[0]["bytes"]) == pytest.approx(pts[0]["s"])
    assert len(lines) == 1


@gpu
def test_host_copies_time_each_size_alone_and_load():
    # the calibration's host_copy_s on one process: rank 0 alone, each kind at each size, slowest = its own
    import cupy as cp
    from perfmlp.calibrate.copies import host_copies
    from perfmlp.comm import SingleWorld
    from perfmlp.model.machine import machine_from_mapping
    lines = []
    sizes = {"h2d": [32_000, 2_508_800, 10_035_200], "d2h": [1_628_204]}
    pts, aggregate = host_copies(cp, SingleWorld(), sizes, lines.append)
    assert aggregate == [] and {p["procs"] for p in pts} == {1}
    assert sorted((p["direction"], p["memory"], p["bytes"]) for p in pts) == sorted(
        (d, m, n) for d, ns in sizes.items() for m in ("pageable", "pinned") for n in ns)
    assert all(1e-7 < p["s"] < 0.1 for p in pts)
    h2d = {(p["memory"], p["bytes"]): p["s"] for p in pts if p["direction"] == "h2d"}
    assert h2d["pageable", 10_035_200] > h2d["pageable", 32_000] and h2d["pinned", 10_035_200] > h2d["pinned", 32_000]
    assert h2d["pageable", 10_035_200] > h2d["pinned", 10_035_200]   # a pageable copy is staged by the host
    # behind a busy stream a small pageable copy is staged whole and its call returns; 10 MB waits for the stream
    ahead = {p["bytes"]: (p["ahead_s"], p["blocks"]) for p in pts if "ahead_s" in p}
    assert sorted(ahead) == sizes["h2d"] and {p["memory"] for p in pts if "ahead_s" in p} == {"pageable"}
    assert not ahead[32_000][1] and ahead[10_035_200][1]
    # 10 MB stages only its first part ahead (the runtime's buffers), or none where the copy behind the spin
    # ran slower than alone (the host's pace drifts: an H100, 5ae0b5e, measured 0); a small one's call behind
    # a busy stream may take longer than the whole copy alone (2 x H200, e672497: 0.03 MB 22 us alone, 23 ahead)
    assert 0 <= ahead[10_035_200][0] < h2d["pageable", 10_035_200] and ahead[32_000][0] > 0
    # a copy that waits says how much of the work queued before it it does not hide: at most what it stages ahead
    delay = {p["bytes"]: p.get("ahead_delay_s") for p in pts if "ahead_s" in p}
    # (timed behind work of what it stages ahead, at least 20 us: copies.pageable_ahead)
    assert delay[32_000] is None and 0 <= delay[10_035_200] <= max(ahead[10_035_200][0], 20e-6)
    m = machine_from_mapping({**machine_values("h200"), "host_copy_s": pts}, "x.yaml")
    assert m.copy_s("h2d", "pinned", 2_508_800) == pytest.approx(h2d["pinned", 2_508_800])
    assert m.pageable_ahead(10_035_200) == (pytest.approx(min(ahead[10_035_200][0], h2d["pageable", 10_035_200])), True)
    assert m.pageable_ahead_delay(10_035_200) == pytest.approx(delay[10_035_200])
    assert len(lines) == 4


@gpu
def test_the_staged_step_and_its_parts_on_one_rank():
    # calibrate.staged_wait's measurement on one process: the staged step's parts each alone, then in order
    import cupy as cp
    from perfmlp.calibrate.collectives import staged_parts, staged_wait
    from perfmlp.gpu.timing import spin_cycles_per_s
    from perfmlp.comm import SingleWorld
    from perfmlp.model.costs import grad_buffer_bytes
    cycles = np.int64(100e-6 * spin_cycles_per_s(cp))
    for memory in ("pageable", "pinned"):
        parts, step = staged_parts(cp, None, memory, (4 * 800 * 784, 4 * 800 * 10),
                                    grad_buffer_bytes((784, 512, 10), 4), cycles, reps=10)
        # the step makes the same copies, one after another (less its spin's GPU time), and its host's
        # calls and one kernel launch add microseconds, not the parts again; in the step's order the
        # pageable copies may be faster than alone (one H100, d6f14f8: 0.71 ms against 1.02)
        assert 0 < parts < 0.05 and 0.4 * parts < step < 2 * parts + 1e-3, (memory, parts, step)
    assert staged_wait(cp, SingleWorld(), print, [(1000, 100)], [1000]) == []   # one rank waits for none


def machine_values(name) -> dict:
    """A shipped machine file's keys and values, as a calibration writes them."""
    from perfmlp.model.machine import load_machine
    m = load_machine(name)
    return {k: getattr(m, k) for k in m.__dataclass_fields__ if k != "path"}


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_own_kernel_times_cover_the_models_step(dtype):
    # the calibration's kernel_s (perfmlp/calibrate/kernels.py own_kernel_times) on a small network
    import cupy as cp
    from perfmlp.calibrate.gemm import step_network
    from perfmlp.calibrate.kernels import own_kernel_times
    from perfmlp.model.costs import kernel_name, kernel_shape, step_kernels
    from perfmlp.model.machine import load_machine, machine_from_mapping
    sizes, b = (33, 17, 10), 23
    net, x, y = step_network(cp, sizes, dtype, b)

    def own(fuse):
        return [k for ks in step_kernels(sizes, b, fuse_output=fuse).values() for k in ks if kernel_name(k) != "gemm"]
    for fuse in (True, False):
        net.fuse_output, net.capture_kernels = fuse, []
        net.forward(x.T); net.loss(y.T); net.backward(); net.update()
        launched, net.capture_kernels = net.capture_kernels, None
        assert [name for name, _ in launched] == [kernel_name(k) for k in own(fuse)]
        if fuse:  # a relaunch repeats the launch: partial_sums writes the output layer's dW again
            (relaunch,) = [call for name, call in launched if name == "partial_sums"]
            want = net.g.W[-1].copy()
            net.g.W[-1][...] = cp.nan
            relaunch()
            assert cp.array_equal(net.g.W[-1], want)
    net.fuse_output = True
    rows = own_kernel_times(cp, net, x, y, calls=10)
    assert net.fuse_output and net.capture_kernels is None   # left as it was
    # every own kernel of the step, fused and not, once per shape, with a positive GPU time
    assert sorted((r["kernel"], tuple(r["shape"])) for r in rows) == \
        sorted({(kernel_name(k), kernel_shape(k)) for fuse in (True, False) for k in own(fuse)})
    assert all(r["s"] > 0 and r["precision"] == dtype for r in rows)
    # the entries load as a machine file's table
    h200 = load_machine("h200")
    values = {f: getattr(h200, f) for f in h200.__dataclass_fields__
              if f not in ("path", "gemm_flops_per_s", "allreduce_s", "collective_wait_s", "kernel_s", "device_names")}
    assert len(machine_from_mapping({**values, "kernel_s": rows}, "x.yaml").kernel_s) == len(rows)


@gpu
@pytest.mark.parametrize("transfer", ["pageable", "pinned", "resident", "prefetch", "prefetch-pageable"])
@pytest.mark.parametrize("comm", ["mpi-staged", "nccl"])
def test_gpu_training_matches_cpu(tmp_path, transfer, comm):
    """Shuffled: every epoch's order is a permutation of the first order,
    on the GPU as on the CPU (not of the last epoch's)."""
    base = ["--data", "synthetic", "--n-train", "230", "--batch-size", "50", "--input-size", "64",
            "--hidden-size", "32", "--learning-rate", "0.5", "--epochs", "3", "--shuffle", "--precision",
            "float64", "--no-trace"]
    r = run_perfmlp(*base, "--backend", "numpy", "--save-params", str(tmp_path / "cpu"))
    assert r.returncode == 0, r.stderr
    r = run_perfmlp(*base, "--backend", "cupy", "--batch-transfer", transfer, "--comm", comm,
                    "--save-params", str(tmp_path / "gpu"))
    assert r.returncode == 0, r.stderr
    a = np.load(tmp_path / "cpu" / "final.npz")
    b = np.load(tmp_path / "gpu" / "final.npz")
    for k in a.files:
        assert np.abs(a[k] - b[k]).max() < 1e-10, k


@gpu
@pytest.mark.parametrize("transfer, comm", [("pageable", "mpi-staged"), ("resident", "nccl")])
def test_gpu_trace_counters_and_event_times(tmp_path, transfer, comm):
    from perfmlp.model.costs import batch_counts
    from perfmlp.trace.reader import read_run
    r = run_perfmlp("--backend", "cupy", "--data", "synthetic", "--n-train", "230", "--batch-size", "50",
                    "--input-size", "64", "--hidden-size", "32", "--epochs", "2", "--batch-transfer", transfer,
                    "--comm", comm, "--trace-dir", str(tmp_path), "--run-id", "g", "--trace-level", "phases")
    assert r.returncode == 0, r.stderr
    run = read_run(tmp_path / "g")
    assert run.complete
    batches = run.ranks[0].batches
    assert len(batches) == 10  # 5 a epoch (50 50 50 50 30), 2 epochs, none lost
    for b in batches:
        want = batch_counts((64, 32, 10), b.local_samples, 4, comm, transfer, exec_mode=run.exec)
        assert (b.bytes_h2d, b.bytes_d2h, b.bytes_d2d, b.bytes_nccl) == (
            want.bytes_h2d, want.bytes_d2h, want.bytes_d2d, want.bytes_nccl)
        assert b.clock == "cuda-events"
        assert ("h2d" in b.t_ms) == (transfer != "resident")
        # phases are contiguous: their durations add up to the batch's time
        assert sum(s.ms for s in b.t_ms.values()) == pytest.approx(b.t_ms_total, rel=1e-3, abs=1e-3)


def gpus() -> int:
    import cupy
    return cupy.cuda.runtime.getDeviceCount()


# float32, a short last batch (230 = 4 x 50 + 30, its own graph), shuffled
# every epoch (resident pieces copied into the graph's static inputs)
GRAPH_JOB = ["--data", "synthetic", "--n-train", "230", "--batch-size", "50", "--input-size", "64",
             "--hidden-size", "32", "--learning-rate", "0.5", "--epochs", "3", "--shuffle", "--no-trace",
             "--backend", "cupy"]


def _final(tmp_path, name, *flags, procs=None):
    r = run_perfmlp(*flags, "--save-params", str(tmp_path / name), procs=procs, timeout=180)
    assert r.returncode == 0, r.stderr
    with np.load(tmp_path / name / "final.npz") as f:
        return {k: f[k] for k in f.files}


@gpu
@pytest.mark.parametrize("procs", [1, 2])
@pytest.mark.parametrize("transfer", ["pageable", "pinned", "resident"])
@pytest.mark.parametrize("comm", ["mpi-staged", "nccl"])
def test_graph_mode_is_bit_identical_to_eager(tmp_path, procs, transfer, comm):
    if procs > gpus():
        pytest.skip(f"needs {procs} GPUs")
    flags = (*GRAPH_JOB, "--batch-transfer", transfer, "--comm", comm)
    p = procs if procs > 1 else None
    eager = _final(tmp_path, "eager", *flags, "--exec", "eager", procs=p)
    graph = _final(tmp_path, "graph", *flags, "--exec", "graph", procs=p)
    for k in eager:
        assert np.array_equal(eager[k], graph[k]), k


@gpu
@pytest.mark.parametrize("gemm_kind", ["naive", "regblock"])
def test_graph_mode_runs_the_reference_gemms(tmp_path, gemm_kind):
    flags = (*GRAPH_JOB, "--batch-transfer", "resident", "--comm", "nccl", "--gemm", gemm_kind)
    eager = _final(tmp_path, "eager", *flags, "--exec", "eager")
    graph = _final(tmp_path, "graph", *flags, "--exec", "graph")
    for k in eager:
        assert np.array_equal(eager[k], graph[k]), k


@gpu
@pytest.mark.parametrize("procs", [1, 2])
def test_overlapped_exchange_equals_the_plain_one(tmp_path, procs):
    # float64, three hidden layers, buckets of 2 KiB (4 rows of W1): many
    # collectives in flight on the communication stream. The overlapped step
    # differs from the plain one only in how the weight-gradient GEMMs are
    # split into row blocks (cuBLAS may sum the b products of a block in
    # another order) and in which pieces NCCL sums together; on 2 ranks a
    # sum of two values does not depend on order. Bound: 1e-12 relative.
    if procs > gpus():
        pytest.skip(f"needs {procs} GPUs")
    flags = ("--data", "synthetic", "--n-train", "230", "--batch-size", "50", "--input-size", "64",
             "--hidden-sizes", "48,40,32", "--learning-rate", "0.5", "--epochs", "2", "--precision", "float64",
             "--no-trace", "--backend", "cupy", "--batch-transfer", "resident", "--comm", "nccl")
    p = procs if procs > 1 else None
    plain = _final(tmp_path, "plain", *flags, "--exec", "eager", procs=p)
    eager = _final(tmp_path, "eager", *flags, "--exec", "eager", "--overlap", "--bucket-bytes", "2048", procs=p)
    graph = _final(tmp_path, "graph", *flags, "--exec", "graph", "--overlap", "--bucket-bytes", "2048", procs=p)
    for k in plain:
        assert np.array_equal(eager[k], graph[k]), k
        scale = np.abs(plain[k]).max()
        assert np.abs(eager[k] - plain[k]).max() <= 1e-12 * max(1.0, scale), k


@gpu
@pytest.mark.parametrize("transfer, comm, overlap", [("pageable", "mpi-staged", False), ("resident", "nccl", False),
                                                     ("pinned", "nccl", True)])
def test_graph_mode_trace_counts_every_batch(tmp_path, transfer, comm, overlap):
    from perfmlp.model.costs import batch_counts
    from perfmlp.names import batch_phases
    from perfmlp.trace.reader import read_run
    bucket = 4096
    r = run_perfmlp("--backend", "cupy", "--data", "synthetic", "--n-train", "230", "--batch-size", "50",
                    "--input-size", "64", "--hidden-size", "32", "--epochs", "2", "--batch-transfer", transfer,
                    "--comm", comm, "--exec", "graph", "--trace-dir", str(tmp_path), "--run-id", "g",
                    "--trace-level", "phases",
                    *(("--overlap", "--bucket-bytes", str(bucket)) if overlap else ()))
    assert r.returncode == 0, r.stderr
    run = read_run(tmp_path / "g")
    assert run.complete and run.exec == "graph"
    assert run.exec == "graph"
    batches = run.ranks[0].batches
    assert len(batches) == 10
    for b in batches:
        want = batch_counts((64, 32, 10), b.local_samples, 4, comm, transfer, bucket if overlap else None, "graph")
        assert (b.bytes_h2d, b.bytes_d2h, b.bytes_d2d, b.bytes_nccl) == (
            want.bytes_h2d, want.bytes_d2h, want.bytes_d2d, want.bytes_nccl)
        assert (b.bytes_d2d > 0) == (transfer == "resident")
        assert sum(b.flops.values()) == want.flops_total
        assert sum(b.ops.values()) == sum(want.operations.values())
        assert tuple(b.t_ms) == batch_phases(comm, transfer, "graph")
        assert sum(s.ms for s in b.t_ms.values()) == pytest.approx(b.t_ms_total, rel=1e-3, abs=1e-3)
    if overlap:  # W2 (10 x 32), the biases and the loss slot (written before dW1), W1 (8 KiB) in two buckets
        assert [n for _, n in batches[0].collectives] == [320, 43, 1024, 1024]
