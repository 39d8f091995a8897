"""The precisions' arithmetic on NumPy (what the GPU computes: perfmlp/mixed.py)
against the float64 reference, fp16's loss scaling, and what the trainer
refuses."""
import numpy as np
import pytest

from conftest import refusal_line
from perfmlp import mixed
from perfmlp.mlp import Network, init_weights
from perfmlp.mixed import LossScale, round_tf32, storage_dtype
from perfmlp.model.costs import step_ops, widths

# After K_STEPS steps of the test network, the relative error of the
# parameters' change, ||p - p64|| / ||p64 - p0||, against float64 is at most
# this: a few unit roundoffs of the GEMM inputs (2^-24 float32, 2^-11 tf32
# and fp16, 2^-8 bf16). Measured on NumPy: float32 1.2e-6, tf32 1.8e-4,
# bf16 2.7e-3, fp16 3.3e-4 (64-32-10) and 1.0e-6, 1.0e-4, 1.2e-3, 1.5e-4
# (100-48-24-10). tests/test_gpu_precision.py holds the GPU to the same.
K_STEPS = 10
BOUND = {"float32": 1e-5, "tf32": 2e-3, "bf16": 2e-2, "fp16": 2e-3}
CASES = [((64, 32, 10), 64), ((100, 48, 24, 10), 128)]


def train_steps(make, precision, sizes, b, k=K_STEPS, lr=0.5, reg=1e-3, seed=0):
    """(initial, final) parameters as float64 after k steps of a network made
    by make(precision) on fixed random data (the batch in its storage type)."""
    rng = np.random.default_rng(seed)
    X = rng.random((k * b, sizes[0]))
    Y = np.eye(sizes[-1])[rng.integers(0, sizes[-1], k * b)]
    net = make(precision)
    net.set_params(init_weights(sizes, 1))
    p0 = np.array(_host(net.p.flat), np.float64)   # a copy: the update works in place
    xp = net.xp
    put = (lambda a: a) if xp is np else (lambda a: xp.asarray(mixed.device_view(a)))  # the GPU: bf16 as its bits
    for i in range(k):
        x, y = (put(mixed.to_storage(a[i * b:(i + 1) * b], precision)) for a in (X, Y))
        net.global_batch = b
        net.forward(x.T)
        net.loss(y.T)
        net.backward()
        net.update()
    return p0, np.asarray(_host(net.p.flat), np.float64)


def _host(a):
    return a.get() if hasattr(a, "get") else a


def change_error(p, ref, p0):
    return np.linalg.norm(p - ref) / np.linalg.norm(ref - p0)


@pytest.mark.parametrize("sizes, b", CASES)
@pytest.mark.parametrize("precision", list(BOUND))
def test_steps_match_float64_within_the_precisions_bound(precision, sizes, b):
    make = lambda p: Network(np, sizes, p, 0.5, 1e-3, b)  # noqa: E731
    p0, ref = train_steps(make, "float64", sizes, b)
    _, p = train_steps(make, precision, sizes, b)
    err = change_error(p, ref, p0)
    assert err < BOUND[precision], err
    if precision != "float32":   # and the 16-bit and TF32 arithmetic did run: coarser than float32's
        _, p32 = train_steps(make, "float32", sizes, b)
        assert err > 10 * change_error(p32, ref, p0)


def test_tf32_rounds_the_mantissa_to_10_bits_to_nearest_even():
    ulp = 2.0 ** -10   # TF32's spacing at 1
    x = np.array([1 + ulp / 2, 1 + 1.5 * ulp, 1 + 0.6 * ulp, -(1 + 0.4 * ulp), np.inf, np.nan], np.float32)
    r = round_tf32(x)
    # ties to even: 1 + ulp/2 -> 1, 1 + 1.5 ulp -> 1 + 2 ulp; else to nearest
    np.testing.assert_array_equal(r[:5], np.array([1, 1 + 2 * ulp, 1 + ulp, -1, np.inf], np.float32))
    assert np.isnan(r[5]) and r.dtype == np.float32


def test_bfloat16_bits_round_to_nearest_even_as_ml_dtypes_does():
    x = np.random.default_rng(3).standard_normal(10000).astype(np.float32) * 1e3
    x[:4] = [np.inf, -np.inf, np.nan, 0.0]
    bits = mixed.bf16_bits(x)
    ref = x.astype(storage_dtype("bf16")).view(np.uint16)
    assert np.array_equal(bits[3:], ref[3:]) and np.array_equal(bits[:2], ref[:2]) and bits[2] == 0x7FC0
    # and back: the values the GPU holds, widened
    assert np.array_equal(mixed.from_device(bits[3:], "bf16"), x[3:].astype(storage_dtype("bf16")).astype(np.float32))


def test_mixed_network_stores_16_bits_and_keeps_float32_masters():
    net = Network(np, (6, 5, 3), "bf16", 0.1, 0.0, 4)
    net.set_params(init_weights((6, 5, 3), 0))
    net.forward(np.ones((4, 6), storage_dtype("bf16")).T)
    assert net.acts[1].dtype == storage_dtype("bf16") and net.p.flat.dtype == np.float32
    net.loss(np.eye(3, dtype=storage_dtype("bf16"))[[0, 1, 2, 0]].T)
    net.backward()
    assert net.delta.dtype == storage_dtype("bf16") and net.g.flat.dtype == np.float32


def test_loss_scale_skips_on_overflow_and_grows_after_the_interval(monkeypatch):
    monkeypatch.setattr(mixed, "GROWTH_INTERVAL", 3)
    s = LossScale(8.0)
    assert s.unscale(False) == 0.0 and s.scale == 4.0 and s.skipped == 1   # skipped, halved
    # 3 finite steps in a row at scale 4: each unscales by 1/4, then the scale doubles
    assert [s.unscale(True) for _ in range(3)] == [0.25, 0.25, 0.25] and s.scale == 8.0
    assert s.unscale(True) == 0.125 and s.good == 1


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # the overflow is the point
def test_fp16_step_with_an_overflowing_scale_is_skipped_and_the_scale_halved():
    sizes, b = (8, 6, 3), 5
    net = Network(np, sizes, "fp16", 0.5, 0.0, b)
    net.set_params(init_weights(sizes, 2))
    net.scaler.scale = 2.0 ** 40   # the scaled delta overflows float16 (max 65504)
    before = net.p.flat.copy()
    x = np.random.default_rng(0).random((b, 8)).astype(np.float16)
    y = np.eye(3, dtype=np.float16)[[0, 1, 2, 0, 1]]
    for _ in range(2):
        net.forward(x.T)
        net.loss(y.T)
        net.backward()
        net.update()
    np.testing.assert_array_equal(net.p.flat, before)   # neither step updated
    assert net.scaler.scale == 2.0 ** 38 and net.scaler.skipped == 2


def test_fp16_loss_scaling_keeps_small_gradients_that_16_bits_flush_to_zero():
    # a confident network (outputs weights x 30, labels its own predictions):
    # p - y is about 1e-8 / 100 per sample, below float16's smallest
    # subnormal (6e-8) unless scaled by 2^16
    sizes, b = (20, 16, 10), 100
    w = init_weights(sizes, 1)
    w[1] = w[1] * 30
    x = np.random.default_rng(0).random((b, 20))

    def grads(precision, scale=None):
        net = Network(np, sizes, precision, 0.1, 0.0, b)
        net.set_params(w)
        if scale is not None:
            net.scaler.scale = scale
        net.forward(x.astype(net.act_dtype).T)
        y = np.eye(10)[np.asarray(net.acts[-1], np.float64).argmax(axis=0)].astype(net.act_dtype)
        net.loss(y.T)
        net.backward()
        return net.g.params.astype(np.float64) / (net.scaler.scale if net.scaler else 1.0)

    ref = grads("float64")
    err = {s: np.linalg.norm(grads("fp16", s) - ref) / np.linalg.norm(ref) for s in (1.0, mixed.INIT_SCALE)}
    assert err[mixed.INIT_SCALE] < 0.05 and err[1.0] > 0.5, err


@pytest.mark.parametrize("precision", ["tf32", "bf16", "fp16"])
def test_recorded_operations_are_the_models_in_every_precision(precision):
    sizes, b = (12, 7, 5, 3), 9
    net = Network(np, sizes, precision, 0.1, 0.0, b)
    net.set_params(init_weights(sizes, 0))
    net.ops = []
    net.forward(np.zeros((b, 12), net.act_dtype).T)
    net.loss(np.eye(3, dtype=net.act_dtype)[np.arange(b) % 3].T)
    net.backward()
    net.update()
    expected = [op for ops in step_ops(sizes, b, itemsize=widths(precision)).values() for op in ops]
    assert net.ops == expected
    assert (("grad_check", (net.p.n_params,)) in net.ops) == (precision == "fp16")


REFUSED = [
    (("--precision", "bf16", "--parallel", "model"), "--precision bf16 is for data parallelism"),
    (("--precision", "fp16", "--comm", "ps"), "--precision fp16 is for data parallelism"),
    (("--batch-transfer", "prefetch"), "--batch-transfer prefetch needs the cupy backend"),
    (("--precision", "half"), "invalid choice: 'half'"),
]


@pytest.mark.parametrize("args, words", REFUSED)
def test_refused_combinations_are_one_line(args, words):
    line = refusal_line("--backend", "numpy", "--no-trace", "--data", "synthetic", "--n-train", "40", "--batch-size",
                        "20", "--input-size", "10", "--hidden-size", "4", *args, process=args == REFUSED[0][0])
    assert words in line and line.count("\n") == 0, line


def test_without_ml_dtypes_bf16_is_bits_for_the_gpu_and_one_line_on_numpy(monkeypatch):
    from perfmlp.errors import PerfmlpError
    monkeypatch.setattr(mixed, "ml_dtypes", None)
    x = np.array([1.0, 1 / 3, -2.5], np.float32)
    assert mixed.to_storage(x, "bf16").dtype == np.uint16    # what the GPU reads
    assert mixed.to_storage(x, "fp16").dtype == np.float16
    with pytest.raises(PerfmlpError, match="needs ml_dtypes") as e:
        Network(np, (4, 3, 2), "bf16", 0.1, 0.0, 2)
    assert "\n" not in str(e.value)
