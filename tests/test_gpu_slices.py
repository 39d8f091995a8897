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
