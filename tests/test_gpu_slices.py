"""On one GPU: the sliced first layer (perfmlp/gpu/sliced.py) trains to the
unsliced step's parameters, in graph mode and eagerly, a short last batch
and an uneven split of H included."""
import numpy as np
import pytest

import perfmlp.train as T
from conftest import gpu
from perfmlp import names as N
from perfmlp.comm import SingleWorld
from perfmlp.config import from_mapping
from perfmlp.mlp import init_weights
from perfmlp.slices import wire


@gpu
@pytest.mark.parametrize("exec_mode", [N.GRAPH, N.EAGER])
@pytest.mark.parametrize("precision,tol", [(N.FLOAT64, 1e-10), (N.FLOAT32, 1e-4), (N.BF16, 2e-2)])
def test_sliced_step_equals_unsliced_on_one_gpu(monkeypatch, exec_mode, precision, tol):
    build = T.build
    monkeypatch.setattr(T, "build", lambda cfg, world, x, y: wire(cfg, world, build(cfg, world, x, y)))

    def params(slices):
        # 1000 samples in batches of 300: 300 300 300 100 (two graphs); H = 64 in slices of 22, 21, 21
        cfg = from_mapping(dict(data="synthetic", n_train=1000, batch_size=300, hidden_sizes=[64], epochs=2,
                                n_heldout=0, learning_rate=0.5, backend="cupy", comm="nccl", exec=exec_mode,
                                batch_transfer="resident", precision=precision, trace=False, quiet=True,
                                slices=slices))
        return T.train(cfg, SingleWorld()).params

    ref, sliced = params("1"), params("3")
    for k in ref:
        d = float(np.abs(sliced[k].astype(np.float64) - ref[k]).max())
        assert d <= tol * max(1.0, float(np.abs(ref[k]).max())), (k, d)
    moved = float(np.abs(ref["W1"] - init_weights((784, 64, 10), 0)[0]).max())
    assert moved > 1e-3   # the comparison is not vacuous: training moved W1


def _trained(monkeypatch, **over):
    build = T.build
    monkeypatch.setattr(T, "build", lambda cfg, world, x, y: wire(cfg, world, build(cfg, world, x, y)))
    cfg = from_mapping(dict(dict(data="synthetic", n_train=1000, batch_size=300, hidden_sizes=[64], epochs=2,
                                 n_heldout=0, learning_rate=0.5, backend="cupy", comm="nccl",
                                 batch_transfer="resident", trace=False, quiet=True), **over))
    return T.train(cfg, SingleWorld())


def _gap(a, b) -> float:
    return max(float(np.abs(a[k].astype(np.float64) - b[k]).max()) for k in a)


@gpu
@pytest.mark.parametrize("exec_mode", [N.GRAPH, N.EAGER])
@pytest.mark.parametrize("slices", ["1", "3"])
def test_a_16bit_exchange_rounds_as_numpy_does(monkeypatch, exec_mode, slices):
    # fp16 gradients on one GPU (reduced by NCCL in 16 bits) beside NumPy's fp16 exchange of the same job:
    # nearer each other than either is to the float32 exchange, so the rounding is there and is the same
    run = lambda **o: _trained(monkeypatch, exec=exec_mode, slices=slices, **o).params   # noqa: E731
    gpu16, gpu32 = run(grad_precision=N.FP16), run()
    cpu16 = _trained(monkeypatch, backend="numpy", comm="auto", exec="eager", batch_transfer="pageable",
                     grad_precision=N.FP16).params
    assert _gap(gpu16, gpu32) > 0
    assert _gap(gpu16, cpu16) <= 0.25 * _gap(gpu16, gpu32), (_gap(gpu16, cpu16), _gap(gpu16, gpu32))
    bf16 = run(grad_precision=N.BF16)
    assert 0 < _gap(bf16, gpu32) <= 2e-2 * max(1.0, max(float(np.abs(v).max()) for v in gpu32.values()))


@gpu
def test_16bit_gradients_keep_the_default_jobs_accuracy_on_the_gpu(monkeypatch):
    build = T.build
    monkeypatch.setattr(T, "build", lambda cfg, world, x, y: wire(cfg, world, build(cfg, world, x, y)))
    acc = {g: T.train(from_mapping(dict(grad_precision=g, backend="cupy", comm="nccl", trace=False, quiet=True)),
                      SingleWorld()).epochs[-1] for g in (N.FLOAT32, N.BF16, N.FP16)}
    print({g: (e.accuracy, e.loss) for g, e in acc.items()})
    for g in (N.BF16, N.FP16):
        assert acc[g].accuracy > acc[N.FLOAT32].accuracy - 0.005, (g, acc[g].accuracy, acc[N.FLOAT32].accuracy)
        assert abs(acc[g].loss - acc[N.FLOAT32].loss) < 0.05 * acc[N.FLOAT32].loss   # and its loss near float32s



@gpu
@pytest.mark.parametrize("exec_mode", [N.EAGER, N.GRAPH])
def test_the_tracer_records_each_stream_of_the_sliced_step(tmp_path, exec_mode):
    # K = 2 with bf16 gradients: at p = 1 NCCL moves nothing, so the exchange's kernels are its casts,
    # launched in the forward pass (the head: the last batch's slice 1) and in the backward pass (slice 0
    # with the rest). GEMM-bound shapes, so that a stream running beside another shows.
    pytest.importorskip("cupti", reason="kernel records need cupti-python")
    from conftest import run_perfmlp
    from perfmlp.report.timeline import run_breakdowns
    from perfmlp.trace.reader import read_run
    r = run_perfmlp("--backend", "cupy", "--comm", "nccl", "--exec", exec_mode, "--data", "synthetic",
                    "--n-train", "32000", "--batch-size", "3200", "--hidden-size", "512", "--epochs", "2",
                    "--batch-transfer", "resident", "--slices", "2", "--grad-precision", "bf16",
                    "--trace-dir", str(tmp_path), "--run-id", "s", "--trace-level", N.KERNELS)
    assert r.returncode == 0, r.stderr
    run = read_run(tmp_path / "s")
    wire = lambda b: [g for g in b.gpu if g.name in N.EXCHANGE_KERNELS]   # noqa: E731
    # a batch after a drain (an epoch's first, the steady window's) has no head: one pack, not two
    headed = [b for b in run.ranks[0].batches if b.gpu and sum(g.name == N.WIRE_PACK for g in wire(b)) == 2]
    assert len(headed) >= 12, [len(wire(b)) for b in run.ranks[0].batches if b.gpu]
    hidden = 0
    for b in headed:
        assert {g.cat for g in wire(b)} == {"comm"}
        comm = [(g.start_ns, g.end_ns) for g in b.gpu if g.cat == "comm"]
        gemms = [(g.start_ns, g.end_ns) for g in b.gpu if g.cat == "compute" and "gemm" in (g.name or "")]
        hidden += any(s < e2 and s2 < e for s, e in comm for s2, e2 in gemms)
        if exec_mode == N.EAGER:   # a replayed graph's kernels carry the launch's phase, and its own streams
            assert sorted(g.phase for g in wire(b) if g.name == N.WIRE_PACK) == ["backward", "forward"]
            assert len({g.stream for g in wire(b)}) == 1
            assert not {g.stream for g in wire(b)} & {g.stream for g in b.gpu if g.cat == "compute"}
    breakdowns = run_breakdowns(run)[0]
    under = sorted(bd.comm - bd.exposed_comm for bd in breakdowns)
    print(exec_mode, {"headed": len(headed), "beside a GEMM": hidden, "median ms of comm under compute":
                      under[len(under) // 2]})
    if exec_mode == N.GRAPH:   # eager: the host's launches pace both streams, so they seldom meet
        assert hidden >= len(headed) // 2 and under[len(under) // 2] > 0
