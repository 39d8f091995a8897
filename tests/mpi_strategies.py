"""Run under `mpiexec -n P`: every strategy that fits P ranks
(model parallel, each hybrid grid, the parameter server) trains to the
parameters of one process on the whole batch, on every rank.

Tolerance, float64: 1e-12 of the largest parameter (at least 1). The only
difference from one process is the order of the sums: a combine adds P
partial dot products, a data group adds P partial gradients, where one
process sums in one GEMM. Each is a few units of roundoff (1.1e-16) of
values of order one, carried through at most 2 epochs x 4 batches of SGD
at lr 0.5: observed about 1e-15; a wrong shard, a missing bias or a lost
sample moves parameters by 1e-3 or more (and the check that they moved at
all guards against a vacuous pass). float32: 1e-5 (unit roundoff 6e-8).
Every rank's gathered parameters must be identical.

`--backend cupy` runs the same on the GPUs (NCCL or staged), comparing with
one NumPy process; `--exec` (default auto: on the GPU, the NCCL and ps-nccl
strategies as CUDA graphs, the staged ones eagerly) sets the execution
mode. Exits non-zero with a one-line reason on any mismatch. `--sizes 1,2,3,4`:
each rank count in turn in one job (tests/mpi_sizes.py).
"""
import argparse
import dataclasses

import numpy as np

from perfmlp.comm import SingleWorld
from perfmlp.config import from_mapping
from perfmlp.train import train

from mpi_sizes import each_size, rank_counts

CASES = [
    # (N, B, hidden, precision, tolerance): batches of B and a last one of N % B
    (31, 9, [7], "float64", 1e-12),      # 9 9 9 4; H=7 divides by none of 2, 3, 4
    (24, 8, [7, 5], "float64", 1e-12),   # two hidden layers: row, col, replicated output
    (26, 8, [6, 5, 3], "float64", 1e-12),  # three: row, col, row, col; short last batch of 2
    (40, 12, [6], "float32", 1e-5),      # 12 12 12 4
]


def strategies(procs: int, backend: str):
    host = backend == "numpy"
    comms = ["mpi"] if host else ["nccl", "mpi-staged"]
    out = [dict(parallel="model", comm=c) for c in comms]
    out += [dict(parallel="hybrid", model_procs=m, comm=c) for m in range(1, procs + 1) if procs % m == 0
            for c in comms]
    out.append(dict(parallel="data", comm="ps" if host else "ps-nccl"))
    return out


def check(world, a) -> tuple[list[str], str]:
    failures, checked = [], 0
    for n, b, hidden, prec, tol in CASES:
        if world.size > min(b, n % b or b):
            continue
        common = dict(data="synthetic", input_size=20, hidden_sizes=hidden, n_train=n, batch_size=b,
                      n_heldout=0, learning_rate=0.5, reg=0.01, epochs=2, precision=prec, trace=False, quiet=True)
        ref = None
        if world.rank == 0:
            ref = train(from_mapping({**common, "backend": "numpy"}), SingleWorld()).params
            cfg0 = dataclasses.replace(from_mapping({**common, "backend": "numpy"}), epochs=0)
            start = train(cfg0, SingleWorld()).params
            moved = max(float(np.abs(ref[k] - start[k]).max()) for k in ref)
            if moved < 1e-3:
                failures.append(f"N={n} B={b}: parameters barely moved ({moved:.3g}); the check is vacuous")
        for st in strategies(world.size, a.backend):
            if st.get("model_procs", 1) > min(hidden[::2]):
                continue  # a row-split layer needs a unit per rank of the model group
            par = train(from_mapping({**common, **st, "backend": a.backend, "exec": a.exec_mode}), world).params
            every = world.allgather(par)
            checked += 1
            if world.rank != 0:
                continue
            what = f"N={n} B={b} H={hidden} {prec} {st}"
            for r, p in enumerate(every):
                for k in ref:
                    d = float(np.abs(p[k].astype(np.float64) - ref[k]).max())
                    if not d <= tol * max(1.0, float(np.abs(ref[k]).max())):
                        failures.append(f"{what} rank {r} {k}: max diff {d:.3g}")
                    if not np.array_equal(p[k], every[0][k]):
                        failures.append(f"{what} rank {r} {k} differs from rank 0")
    return failures, f"{world.size} ranks, {checked} strategy cases"


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="numpy", choices=("numpy", "cupy"))
    ap.add_argument("--exec", dest="exec_mode", default="auto", choices=("auto", "eager"))
    ap.add_argument("--sizes", type=rank_counts)
    a = ap.parse_args()
    each_size(lambda world: check(world, a), a.sizes)
