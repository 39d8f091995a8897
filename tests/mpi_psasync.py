"""Run under `mpiexec -n P` (P >= 2): the asynchronous parameter server with
staleness 0 equals synchronous SGD, on every rank, in float64, for N and B
with a short last batch (divisible by the P - 1 workers or not), with and
without shuffling and with a straggler that changes the arrival order.
Synchronous SGD here is one process on the whole batch, which data-parallel
training on W ranks equals up to summation order (tests/mpi_equivalence.py).
`mpi_psasync.py cupy` runs the workers and the server on the GPU (staged
through the host) against the same NumPy reference.
Exits non-zero with a one-line reason on any mismatch. `--sizes 2,3,4`: each
rank count in turn in one job (tests/mpi_sizes.py)."""
import dataclasses
import sys

import numpy as np

from perfmlp.comm import SingleWorld
from perfmlp.config import from_mapping
from perfmlp.train import train

from mpi_sizes import each_size, sizes_argument

CASES = [
    # (N, B, hidden, shuffle, straggler ms): batches of B and a last one of N % B
    (31, 9, [6], False, 0.0),     # 9 9 9 4: not divisible by 2 or 3, short last batch
    (24, 8, [7, 5], True, 0.0),   # two hidden layers, a new sample order each epoch
    (40, 12, [6], False, 2.0),    # 12 12 12 4, the last rank 2 ms late in every piece
]


def check(world, backend: str) -> tuple[list[str], str]:
    tol = 1e-12 if backend == "numpy" else 1e-10   # the GPU's float64 GEMMs sum in another order
    failures = []
    for n, b, hidden, shuffle, delay in CASES:
        base = dict(data="synthetic", input_size=20, hidden_sizes=hidden, n_train=n, batch_size=b, n_heldout=0,
                    learning_rate=0.5, reg=0.01, epochs=2, precision="float64", trace=False, quiet=True,
                    backend="numpy", shuffle=shuffle)
        cfg = from_mapping(dict(base, comm="ps-async", staleness=0, straggler_delay_ms=delay,
                                straggler_rank=world.size - 1, backend=backend))
        par = train(cfg, world).params
        allp = world.allgather(par)
        if world.rank == 0:
            sync = from_mapping(base)
            ref = train(sync, SingleWorld()).params
            start = train(dataclasses.replace(sync, epochs=0), SingleWorld()).params
            for r, p in enumerate(allp):
                for k in ref:
                    d = float(np.abs(p[k] - ref[k]).max())
                    if not d <= tol * max(1.0, float(np.abs(ref[k]).max())):
                        failures.append(f"N={n} B={b} rank {r} {k}: max diff {d:.3g} from synchronous SGD")
            if float(np.abs(ref["W1"] - start["W1"]).max()) < 1e-3:
                failures.append(f"N={n} B={b}: parameters barely moved; the check is vacuous")
    return failures, f"{world.size} ranks, {len(CASES)} cases ({backend})"


if __name__ == "__main__":
    each_size(lambda world: check(world, "cupy" if "cupy" in sys.argv[1:] else "numpy"), sizes_argument())
