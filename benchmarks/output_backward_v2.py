"""A second design of the fused output backward (benchmarks/output_backward_v2.cu:
a warp per OB_WROWS rows, its lanes over the columns, the row sums kept in
registers over every column of the block and reduced once a warp) timed
beside the kernel in perfmlp/gpu/kernels.cu at its adopted shape, to decide
which the trainer launches.

    python benchmarks/output_backward_v2.py --out DIR

Method as benchmarks/output_backward_tune.py: fp32, C = 10, H = 512,
b = 3200, 1600 and 800 (the pieces of 1, 2 and 4 GPUs at B = 3200); each
variant checked against CuPy's matmuls, run 20 times to warm up, then 200
launches of the pair (with partial_sums) captured in a CUDA graph and its
replay timed with CUDA events, 5 repeats; the median per pair. Writes DIR/output_backward_v2.md.
"""
from __future__ import annotations

import argparse
import itertools
from importlib import resources
from pathlib import Path
from statistics import median

import numpy as np

V1 = {"OB_ROWS": 2, "OB_COLS": 1024}  # perfmlp/gpu/kernels.py LAUNCH at the time of writing


def timed(cp, launch) -> float:
    """GPU time per launch: 200 launches captured in one CUDA graph, the
    replay timed with events (launched one by one from Python, the pair
    would be timed by the host's launch rate: about 12 us at any size)."""
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        for _ in range(20):
            launch()
        s.begin_capture()
        for _ in range(200):
            launch()
        g = s.end_capture()
        g.launch(s)
        reps = []
        for _ in range(5):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(s)
            g.launch(s)
            e1.record(s)
            e1.synchronize()
            reps.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3 / 200)
    return median(reps)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import cupy as cp
    src = resources.files("perfmlp.gpu").joinpath("kernels.cu").read_text()
    v2 = (Path(__file__).parent / "output_backward_v2.cu").read_text()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    C, H, THREADS = 10, 512, 256
    i32 = np.int32
    rng = np.random.default_rng(0)
    md = ["| b | kernel | rows a warp | columns a block | blocks | pair (us) | max rel. error |",
          "| --- | --- | --- | --- | --- | --- | --- |"]
    mods = {}
    for b in (3200, 1600, 800):
        W = cp.asarray(rng.standard_normal((C, H)), dtype=cp.float32)
        d = cp.asarray(rng.standard_normal((C, b)) / b, dtype=cp.float32)
        act = cp.asarray(rng.random((H, b)), dtype=cp.float32)
        ref_dz = (W.T @ d) * act * (1 - act)
        ref = cp.concatenate([(d @ act.T).ravel(), ref_dz.sum(axis=1), d.sum(axis=1)])
        n = C * H + H + C
        dz = cp.empty((H, b), dtype=cp.float32)
        res = cp.empty(n, dtype=cp.float32)
        gw, gbb, gb = res[:C * H], res[C * H:C * H + H], res[C * H + H:]
        for kind, wrows, bcols in [("v1", None, V1["OB_COLS"])] + list(itertools.product(
                ["v2"], (1, 2), (128, 256, 512))):
            key = wrows or 0
            if key not in mods:
                defines = (f"#define T float\n#define MAXC {C}\n#define OB_ROWS {V1['OB_ROWS']}\n"
                           f"#define OB_COLS {V1['OB_COLS']}\n#define OB_THREADS {THREADS}\n"
                           f"#define OB_WROWS {wrows or 1}\n")
                mods[key] = cp.RawModule(code=defines + src + "\nextern \"C\" {\n" + v2 + "\n}\n",
                                         options=("--std=c++14",))
            mod = mods[key]
            ps = mod.get_function("partial_sums")
            splits = -(-b // bcols)
            part = cp.empty(splits * n, dtype=cp.float32)
            if kind == "v1":
                k = mod.get_function("output_backward")
                grid = ((H + V1["OB_ROWS"] - 1) // V1["OB_ROWS"] + 1, splits)
                args = (W, d, act, dz, part, i32(C), i32(H), i32(b))
            else:
                k = mod.get_function("output_backward_v2")
                rows = wrows * THREADS // 32
                grid = ((H + rows - 1) // rows + 1, splits)
                args = (W, d, act, dz, part, i32(C), i32(H), i32(b), i32(bcols))

            def pair():
                st = cp.cuda.get_current_stream()
                k(grid, (THREADS,), args, stream=st)
                ps(((n + 255) // 256,), (256,), (part, i32(splits), i32(C), i32(H), gw, gbb, gb), stream=st)
            dz.fill(cp.nan)
            res.fill(cp.nan)
            pair()
            err = float(max(cp.abs(res - ref).max() / cp.abs(ref).max(),
                            cp.abs(dz - ref_dz).max() / cp.abs(ref_dz).max()))
            t = timed(cp, pair)
            md.append(f"| {b} | {kind} | {wrows or '-'} | {bcols} | {grid[0] * grid[1]} | {t:.2f} | {err:.1e} |")
            print(md[-1], flush=True)
    (out / "output_backward_v2.md").write_text("# The fused output backward: the kernel in kernels.cu (v1) against "
                                               "a warp per rows (v2)\n\n" + "\n".join(md) + "\n")


if __name__ == "__main__":
    main()
