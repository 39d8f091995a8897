"""Run under `mpiexec -n P`: the sliced first layer (perfmlp/slices.py)
trains to the unsliced step's parameters, on every rank, for several N, B
(a short last batch), hidden sizes and slice counts (uneven splits of H),
with and without --overlap; the 16-bit exchange counts its bytes at two per
element and stays near the float32 exchange. Exits non-zero with a
one-line reason on any mismatch. `--sizes 2,3`: each rank count in turn in
one job (tests/mpi_sizes.py).

`accuracy` as the first argument: the default job (python -m perfmlp.run's
defaults) with bf16 and with fp16 gradients, beside float32's; prints the
held-out accuracies and fails where one is 0.5 points or more below."""
import sys

import numpy as np

import perfmlp.train as T
from perfmlp import names as N
from perfmlp.comm import SingleWorld, make_world
from perfmlp.config import Config, from_mapping
from perfmlp.mlp import Network
from perfmlp.slices import SlicedExchange, wire
from perfmlp.trace.format import Counts

from mpi_sizes import each_size, sizes_argument

_build = T.build
T.build = lambda cfg, world, x, y: wire(cfg, world, _build(cfg, world, x, y))   # what backend.build will do

CASES = [
    # (N, B, hidden, slices, overlap): batches of B and a last one of N % B
    (31, 9, [6], "4", False),      # 9 9 9 4; H = 6 in slices of 2, 2, 1, 1
    (31, 9, [6], "6", True),       # one row a slice
    (40, 12, [7], "3", False),     # 12 12 12 4; slices of 3, 2, 2
    (24, 8, [7, 5], "2", False),   # two hidden layers: only the first is sliced
    (24, 8, [7, 5], "5", True),
]


def _cfg(**kw) -> Config:
    base = dict(data="synthetic", input_size=20, n_heldout=0, learning_rate=0.5, reg=0.01, epochs=2,
                precision="float64", trace=False, quiet=True, backend="numpy", bucket_bytes=200)
    return from_mapping({**base, **kw})


def _compare(world, cfg, ref_cfg, tol, label, failures) -> None:
    par = T.train(cfg, world).params
    allp = world.allgather(par)
    if world.rank != 0:
        return
    ref = T.train(ref_cfg, SingleWorld()).params
    for r, p in enumerate(allp):
        for k in ref:
            d = float(np.abs(p[k].astype(np.float64) - ref[k]).max())
            if not d <= tol * max(1.0, float(np.abs(ref[k]).max())):
                failures.append(f"{label} rank {r} {k}: max diff {d:.3g}")
            if not np.array_equal(p[k], allp[0][k]):
                failures.append(f"{label} rank {r} {k} differs from rank 0")


def sliced_equals_unsliced(world, failures) -> None:
    for n, b, hidden, k, overlap in CASES:
        cfg = _cfg(n_train=n, batch_size=b, hidden_sizes=hidden, slices=k, overlap=overlap)
        ref = _cfg(n_train=n, batch_size=b, hidden_sizes=hidden)
        _compare(world, cfg, ref, 1e-12, f"N={n} B={b} H={hidden} K={k} overlap={overlap}", failures)


def half_exchange(world, failures) -> None:
    """16-bit gradients: sliced equals unsliced within 16-bit rounding, and near the float32 exchange."""
    for grad in (N.BF16, N.FP16):
        cfg = _cfg(n_train=40, batch_size=12, hidden_sizes=[7], precision="float32", slices="3",
                   grad_precision=grad)
        _compare(world, cfg, _cfg(n_train=40, batch_size=12, hidden_sizes=[7], precision="float32"), 3e-2,
                 f"{grad} gradients against float32's", failures)


def half_bytes(world, failures) -> None:
    """The counters: two bytes an element of every gradient and the loss slot, in K + 0 collectives."""
    for grad, width in ((N.FLOAT32, 4), (N.BF16, 2), (N.FP16, 2)):
        net = Network(np, (20, 7, 10), "float32", 0.1, 0.0, 12)
        net.set_params([np.full((7, 20), 0.01), np.full((10, 7), 0.01)])
        sched = SlicedExchange(world, net, 3, grad)
        rng = np.random.default_rng(world.rank)
        x = rng.random((20, 12 // world.size))
        y = np.eye(10)[:, rng.integers(0, 10, x.shape[1])]
        counts = Counts()
        phase = lambda name: _Null()  # noqa: E731
        sched.compute(net, x, y, phase, counts)
        sched.exchange(net, sched, phase, counts)
        sched.drain()
        if world.rank == 0 and world.size > 1:
            want = width * net.g.flat.size
            if counts.bytes_mpi != want or len(counts.collectives) != 3:
                failures.append(f"{grad}: {counts.bytes_mpi} bytes in {len(counts.collectives)} collectives, "
                                f"want {want} in 3")


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def accuracy(world, short: bool) -> None:
    # the default job (10 epochs of 8,000 samples), or its first 3 epochs on 4,000 (CI's time)
    acc = {}
    size = dict(epochs=3, n_train=4000) if short else {}
    for grad in (N.FLOAT32, N.BF16, N.FP16):
        acc[grad] = T.train(from_mapping(dict(grad_precision=grad, trace=False, quiet=True, backend="numpy",
                                              **size)), world).epochs[-1].accuracy
    if world.rank == 0:
        print("held-out accuracy: " + ", ".join(f"{g} {a:.4f}" for g, a in acc.items()))
        low = [g for g in (N.BF16, N.FP16) if acc[g] <= acc[N.FLOAT32] - 0.005]
        if low:
            print(f"FAIL {', '.join(low)} gradients 0.5 points or more below float32's")
            sys.exit(1)


def check(world) -> tuple[list[str], str]:
    failures: list[str] = []
    sliced_equals_unsliced(world, failures)
    half_exchange(world, failures)
    half_bytes(world, failures)
    return failures, f"{world.size} ranks, {len(CASES)} sliced cases, 16-bit exchanges"


if __name__ == "__main__":
    if sys.argv[1:2] == ["accuracy"]:
        accuracy(make_world(), sys.argv[2:] == ["short"])
    else:
        each_size(check, sizes_argument())
