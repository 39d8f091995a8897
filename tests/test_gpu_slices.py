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
