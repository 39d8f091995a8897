"""The fused output backward (perfmlp/gpu/kernels.cu output_backward and
partial_sums) timed alone for each launch shape, to choose kernels.py's
LAUNCH: MAXC (register accumulators per class; the trainer compiles it as
the network's C), OB_ROWS (rows a block, each thread takes them all),
OB_COLS (columns a block), with OB_THREADS = 256 threads a block.

    python benchmarks/output_backward_tune.py --out DIR

Method: fp32, C = 10, H = 512, b = 3200 and 1600 (the pieces of 1 and 2
GPUs at B = 3200); for each shape the module is compiled with those defines,
the pair is checked against CuPy's matmuls, run 20 times to warm up, then
timed with CUDA events around 200 back-to-back launches of the pair (and of
output_backward alone), 5 repeats; the median per launch is reported.
Writes DIR/output_backward_tune.md and .jsonl.
"""
from __future__ import annotations

import argparse
import itertools
import json
from importlib import resources
from pathlib import Path
from statistics import median

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import cupy as cp
    src = resources.files("perfmlp.gpu").joinpath("kernels.cu").read_text()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    C, H = 10, 512
    rows_md = ["| b | MAXC | OB_ROWS | OB_COLS | pair (us) | output_backward (us) | max rel. error |",
               "| --- | --- | --- | --- | --- | --- | --- |"]
    rng = np.random.default_rng(0)
    with open(out / "output_backward_tune.jsonl", "w") as f:
        for b in (3200, 1600):
            W = cp.asarray(rng.standard_normal((C, H)), dtype=cp.float32)
            d = cp.asarray(rng.standard_normal((C, b)) / b, dtype=cp.float32)
            act = cp.asarray(rng.random((H, b)), dtype=cp.float32)
            ref_dz = (W.T @ d) * act * (1 - act)
            ref = cp.concatenate([(d @ act.T).ravel(), ref_dz.sum(axis=1), d.sum(axis=1)])
            for maxc, rows, cols in itertools.product((10, 16), (2, 4, 8), (256, 512, 1024)):
                defines = (f"#define T float\n#define MAXC {maxc}\n#define OB_ROWS {rows}\n#define OB_COLS {cols}\n"
                           "#define OB_THREADS 256\n")
                mod = cp.RawModule(code=defines + src, options=("--std=c++14",))
                k, ps = mod.get_function("output_backward"), mod.get_function("partial_sums")
                splits = -(-b // cols)
                n = C * H + H + C
                part = cp.empty(splits * n, dtype=cp.float32)
                dz = cp.empty((H, b), dtype=cp.float32)
                res = cp.empty(n, dtype=cp.float32)
                gw, gbb, gb = res[:C * H], res[C * H:C * H + H], res[C * H + H:]
                i32 = np.int32

                def one(pair=True):
                    k(((H + rows - 1) // rows + 1, splits), (256,), (W, d, act, dz, part, i32(C), i32(H), i32(b)))
                    if pair:
                        ps(((n + 255) // 256,), (256,), (part, i32(splits), i32(C), i32(H), gw, gbb, gb))
                one()
                err = float(max(cp.abs(res - ref).max() / cp.abs(ref).max(),
                                cp.abs(dz - ref_dz).max() / cp.abs(ref_dz).max()))
                times = {}
                for pair in (True, False):
                    for _ in range(20):
                        one(pair)
                    reps = []
                    for _ in range(5):
                        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                        e0.record()
                        for _ in range(200):
                            one(pair)
                        e1.record()
                        e1.synchronize()
                        reps.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3 / 200)
                    times[pair] = median(reps)
                row = {"b": b, "MAXC": maxc, "OB_ROWS": rows, "OB_COLS": cols, "pair_us": times[True],
                       "output_backward_us": times[False], "max_rel_error": err}
                f.write(json.dumps(row) + "\n")
                rows_md.append(f"| {b} | {maxc} | {rows} | {cols} | {times[True]:.2f} | {times[False]:.2f} | {err:.1e} |")
                print(rows_md[-1], flush=True)
    (out / "output_backward_tune.md").write_text("# The fused output backward by launch shape\n\n" +
                                                 "\n".join(rows_md) + "\n")


if __name__ == "__main__":
    main()
