"""Run under `mpiexec -n P`: data-parallel training equals one process on the
whole batch, on every rank, for several N, B (divisible by P or not, a short
last batch), with the exchange after the backward pass and overlapped with it
(one MPI_Iallreduce per gradient row block as the backward pass writes it).
Exits non-zero with a one-line reason on any mismatch. `--sizes 1,2,3,4`: each
rank count in turn in one job (tests/mpi_sizes.py); default: the whole job."""
import numpy as np

from perfmlp.comm import SingleWorld
from perfmlp.config import from_mapping
from perfmlp.train import train

from mpi_sizes import each_size, sizes_argument

CASES = [
    # (N, B, hidden, precision, tolerance): batches of B and a last one of N % B
    (24, 8, [7, 5], "float64", 1e-12),
    (31, 9, [6], "float64", 1e-12),     # 9 9 9 4: not divisible by 2 or 4, short last batch
    (40, 12, [6], "float32", 1e-5),     # 12 12 12 4
]


def check(world) -> tuple[list[str], str]:
    failures = []
    for (n, b, hidden, prec, tol), overlap in [(c, o) for c in CASES for o in (False, True)]:
        # overlapped: buckets of one or two rows (20 inputs per row), so many collectives
        cfg = from_mapping(dict(data="synthetic", input_size=20, hidden_sizes=hidden, n_train=n, batch_size=b,
                                n_heldout=0, learning_rate=0.5, reg=0.01, epochs=2, precision=prec,
                                trace=False, quiet=True, backend="numpy", overlap=overlap, bucket_bytes=200))
        par = train(cfg, world).params
        allp = world.allgather(par)
        if world.rank == 0:
            ref = train(cfg.__class__(**{**cfg.__dict__, "overlap": False}), SingleWorld()).params
            for r, p in enumerate(allp):
                for k in ref:
                    d = float(np.abs(p[k].astype(np.float64) - ref[k]).max())
                    scale = float(np.abs(ref[k]).max())
                    if not d <= tol * max(1.0, scale):
                        failures.append(f"N={n} B={b} {prec} overlap={overlap} rank {r} {k}: max diff {d:.3g}")
                    if not np.array_equal(p[k], allp[0][k]):
                        failures.append(f"N={n} B={b} rank {r} {k} differs from rank 0")
            moved = float(np.abs(ref["W1"] - train(cfg.__class__(**{**cfg.__dict__, "epochs": 0}),
                                                    SingleWorld()).params["W1"]).max())
            if moved < 1e-3:
                failures.append(f"N={n} B={b}: parameters barely moved ({moved:.3g}); the check is vacuous")
    return failures, f"{world.size} ranks, {len(CASES)} cases, each with and without overlap"


if __name__ == "__main__":
    each_size(check, sizes_argument())
