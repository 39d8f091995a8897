"""GPU against CPU parameters after training (the correctness analysis).

Run under `mpirun -n P`: for each precision, communication mode, H and B,
train on the GPUs (real MNIST digits, one epoch) and compare with one NumPy
process trained on the same batches; also check that every rank holds
identical parameters. Rank 0 appends one JSON line per case to --out.

    mpirun -n 4 python benchmarks/correctness.py --out traces/correctness.jsonl
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfmlp.comm import SingleWorld, make_world  # noqa: E402
from perfmlp.config import from_mapping  # noqa: E402
from perfmlp.train import train  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", default="512,2048")
    ap.add_argument("--batch", default="800,3200")
    ap.add_argument("--lr", type=float, default=0.05)
    a = ap.parse_args()
    world = make_world()
    cpu_cache = {}
    for prec in ("float32", "float64"):
        for H in [int(h) for h in a.hidden.split(",")]:
            for B in [int(b) for b in a.batch.split(",")]:
                common = dict(hidden_sizes=[H], batch_size=B, n_train=8000, learning_rate=a.lr,
                              precision=prec, trace=False, quiet=True, epochs=1)
                if world.rank == 0 and (prec, H, B) not in cpu_cache:
                    cpu_cache[(prec, H, B)] = train(from_mapping({**common, "backend": "numpy"}),
                                                    SingleWorld()).params
                for comm in ("mpi-staged", "nccl"):
                    cfg = from_mapping({**common, "backend": "cupy", "comm": comm, "batch_transfer": "resident"})
                    gpu = train(cfg, world).params
                    every = world.allgather(gpu)
                    if world.rank != 0:
                        continue
                    cpu = cpu_cache[(prec, H, B)]
                    same = all(np.array_equal(e[k], every[0][k]) for e in every for k in gpu)
                    row = {"procs": world.size, "precision": prec, "comm": comm, "H": H, "B": B,
                           "batches": -(-8000 // B), "lr": a.lr, "ranks_identical": same}
                    for k in gpu:
                        d = np.abs(gpu[k].astype(np.float64) - cpu[k])
                        row[f"max_abs_{k}"] = float(d.max())
                        row[f"max_rel_{k}"] = float(d.max() / max(np.abs(cpu[k]).max(), 1e-300))
                    row["max_abs"] = max(row[f"max_abs_{k}"] for k in gpu)
                    row["max_rel"] = max(row[f"max_rel_{k}"] for k in gpu)
                    with open(a.out, "a") as f:
                        f.write(json.dumps(row) + "\n")
                    print(f"p={world.size} {prec} {comm} H={H} B={B}: max abs {row['max_abs']:.3g}, "
                          f"max rel {row['max_rel']:.3g}, ranks identical {same}", flush=True)


if __name__ == "__main__":
    main()
