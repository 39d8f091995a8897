import numpy as np
import pytest

from perfmlp.mlp import Network, init_weights
from perfmlp.model.costs import step_kernels, step_ops


def loss_J(net, x, y, B):
    net.forward(x)
    net.loss(y)
    return float(net.g.extra[0]) / B + net.weight_penalty()


@pytest.mark.parametrize("sizes", [(6, 5, 3), (6, 5, 4, 3)])
def test_gradient_matches_finite_differences(sizes):
    rng = np.random.default_rng(1)
    B = 7
    net = Network(np, sizes, np.float64, lr=0.1, reg=0.05, global_batch=B)
    net.set_params(init_weights(sizes, 2), [rng.standard_normal(n) for n in sizes[1:]])
    x = rng.random((sizes[0], B))
    y = np.eye(sizes[-1])[:, rng.integers(0, sizes[-1], B)]
    net.forward(x)
    net.loss(y)
    net.backward()
    analytic = net.g.params.copy()
    analytic[:net.p.n_weights] += net.reg * net.p.weights  # the update adds the penalty's gradient
    numeric = np.zeros_like(analytic)
    eps = 1e-6
    for i in range(net.p.n_params):
        old = net.p.flat[i]
        net.p.flat[i] = old + eps
        jp = loss_J(net, x, y, B)
        net.p.flat[i] = old - eps
        jm = loss_J(net, x, y, B)
        net.p.flat[i] = old
        numeric[i] = (jp - jm) / (2 * eps)
    rel = np.abs(analytic - numeric).max() / np.abs(numeric).max()
    assert rel < 1e-7, rel


def test_update_is_sgd_with_penalty_on_weights_only():
    sizes = (3, 2, 2)
    net = Network(np, sizes, np.float64, lr=0.5, reg=0.1, global_batch=1)
    net.p.flat[:] = 1.0
    net.g.flat[:] = 2.0
    net.update()
    # weights: 1 - 0.5 * (2 + 0.1 * 1) = -0.05 ; biases: 1 - 0.5 * 2 = 0
    assert np.allclose(net.p.weights, -0.05) and np.allclose(net.p.biases, 0.0)


def recorded_step(net, x, y):
    """(operations recorded per phase, kernels launched) of one step."""
    net.ops, net.kernels_launched = [], 0
    per_phase = {}
    for phase, run in (("forward", lambda: net.forward(x)), ("loss", lambda: net.loss(y)),
                       ("backward", net.backward), ("update", net.update)):
        i0 = len(net.ops)
        run()
        per_phase[phase] = net.ops[i0:]
    return per_phase, net.kernels_launched


@pytest.mark.parametrize("sizes", [(8, 6, 3), (8, 6, 5, 3), (8, 6, 5, 4, 3)])
@pytest.mark.parametrize("fuse", [True, False])
def test_recorded_ops_are_the_models_step(sizes, fuse):
    net = Network(np, sizes, np.float32, lr=0.1, reg=0.0, global_batch=4)
    assert net.fuse_output  # 3 classes: the fused output layer by default
    net.fuse_output = fuse
    net.set_params(init_weights(sizes, 0))
    ops, kernels = recorded_step(net, np.ones((8, 4), np.float32), np.eye(3, 4, dtype=np.float32))
    assert ops == step_ops(sizes, 4, fuse_output=fuse)
    L = len(sizes) - 1
    if fuse:
        # forward 2L, loss 1, backward: the output layer's fused pair, L - 1 weight-gradient
        # GEMMs, (L - 2) x (W^T delta GEMM + sigmoid gradient), update 1
        expected = 2 * L + 1 + 2 + (L - 1) + 2 * (L - 2) + 1
    else:
        # forward 2L, loss 1, backward L + (L - 1) GEMMs + 1 row_sum + (L - 1) fused, update 1
        expected = 2 * L + 1 + 3 * L - 1 + 1
    assert kernels == sum(len(k) for k in step_kernels(sizes, 4, fuse_output=fuse).values()) == expected


def test_fused_output_layer_only_for_few_classes_and_a_hidden_layer():
    from perfmlp.model.costs import FUSED_OUTPUT_MAX_CLASSES
    assert Network(np, (8, 6, FUSED_OUTPUT_MAX_CLASSES), np.float32, 0.1, 0.0, 4).fuse_output
    assert not Network(np, (8, 6, FUSED_OUTPUT_MAX_CLASSES + 1), np.float32, 0.1, 0.0, 4).fuse_output
    assert not Network(np, (8, 3), np.float32, 0.1, 0.0, 4).fuse_output
    kinds = [op for kernel in step_kernels((8, 6, FUSED_OUTPUT_MAX_CLASSES + 1), 4)["backward"] for op, _ in kernel]
    assert "output_backward" not in kinds


@pytest.mark.parametrize("sizes", [(8, 6, 3), (8, 6, 5, 3)])
def test_fused_output_layer_computes_what_the_unfused_one_does(sizes):
    # the fused kernels' NumPy form runs the same operations: equal to the bit
    rng = np.random.default_rng(5)
    b = 7
    x = rng.random((sizes[0], b))
    y = np.eye(sizes[-1])[:, rng.integers(0, sizes[-1], b)]
    nets = []
    for fuse in (True, False):
        n = Network(np, sizes, np.float64, lr=0.1, reg=0.01, global_batch=b)
        n.fuse_output = fuse
        n.set_params(init_weights(sizes, 3))
        for _ in range(3):
            n.forward(x); n.loss(y); n.backward(); n.update()
        nets.append(n)
    assert np.array_equal(nets[0].p.flat, nets[1].p.flat)
    assert np.array_equal(nets[0].g.flat, nets[1].g.flat)


def test_loss_is_stable_for_large_logits():
    sizes = (2, 2, 2)
    net = Network(np, sizes, np.float32, lr=0.1, reg=0.0, global_batch=1)
    net.p.flat[:] = 0
    net.p.b[1][...] = [500.0, -500.0]  # softmax(z) would underflow naively
    net.forward(np.zeros((2, 1), np.float32))
    net.loss(np.array([[0.0], [1.0]], np.float32))
    assert np.isclose(float(net.g.extra[0]), 1000.0, rtol=1e-5)


@pytest.mark.parametrize("sizes", [(8, 6, 3), (8, 6, 5, 3), (8, 6, 5, 4, 3)])
@pytest.mark.parametrize("bucket_bytes", [None, 40, 100])
def test_overlapped_backward_announces_every_piece_once_complete(sizes, bucket_bytes):
    # with buckets, each weight gradient is computed in row blocks (the
    # model's step lists the same GEMMs) and every flat gradient element is
    # announced exactly once, after its final value is written
    from perfmlp.model.costs import step_ops
    rng = np.random.default_rng(2)
    b = 5
    x = rng.random((sizes[0], b))
    y = np.eye(sizes[-1])[:, rng.integers(0, sizes[-1], b)]
    plain = Network(np, sizes, np.float64, lr=0.1, reg=0.01, global_batch=b)
    net = Network(np, sizes, np.float64, lr=0.1, reg=0.01, global_batch=b)
    for n in (plain, net):
        n.set_params(init_weights(sizes, 0))
    plain.forward(x); plain.loss(y); plain.backward()
    net.set_buckets(bucket_bytes)
    seen = []
    net.grad_ready = lambda lo, hi: seen.append((lo, hi, net.g.flat[lo:hi].copy()))
    ops, _ = recorded_step(net, x, y)
    assert ops == step_ops(sizes, b, bucket_bytes, itemsize=8)
    covered = np.zeros(net.g.flat.size, int)
    for lo, hi, values in seen:
        covered[lo:hi] += 1
        assert np.allclose(values, plain.g.flat[lo:hi], rtol=1e-13, atol=1e-15)
    assert (covered == 1).all()
    n_blocks = sum(len(blocks) for blocks in net._blocks)
    assert len(seen) == n_blocks + 1  # the weight row blocks, then the biases and the loss slot together
    if bucket_bytes == 40:
        assert n_blocks > len(sizes) - 1  # 40 bytes is under one row of W1: every row its own block
