"""The fused output backward (perfmlp/gpu/kernels.cu output_backward and
partial_sums) timed alone for each launch shape, to choose kernels.py's
LAUNCH and the model's OUTPUT_GRAD_COLS, beside the first design
(output_backward_v1.cu, beside this script) at the shape it was used with.

    python benchmarks/diagnostics/output_backward_tune.py --out DIR

Method: fp32, C = 10, H = 512, b = 3200, 1600 and 800 (the pieces of 1, 2
and 4 GPUs at B = 3200); each variant is checked against CuPy's matmuls,
run 20 times to warm up, then 200 launches of the pair are captured in one
CUDA graph and the replay is timed with CUDA events, 5 repeats; the median
per pair. (Launched one by one from Python, the pair is timed by the host's
launch rate: about 12 us at any size.) Writes DIR/output_backward_tune.md.

kernels.py's LAUNCH was chosen on an H200 with this script's first version
(commit dde65af, 2026-11-22), which held the design kernels.cu now has
under test as output_backward_v2.cu.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from importlib import resources
from pathlib import Path
from statistics import median

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from perfmlp.gpu.timing import event_s  # noqa: E402

THREADS = 256
V1 = {"OB_ROWS": 2, "OB_COLS": 1024}  # the first design's shape, as it was used


def timed(cp, launch) -> float:
    """GPU time per launch (us): 200 launches captured in one CUDA graph, the
    replay timed with events."""
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        for _ in range(20):
            launch()
        s.begin_capture()
        for _ in range(200):
            launch()
        g = s.end_capture()
        g.launch(s)
        reps = [event_s(cp, lambda: g.launch(s)) * 1e6 / 200 for _ in range(5)]
    return median(reps)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import cupy as cp
    src = resources.files("perfmlp.gpu").joinpath("kernels.cu").read_text()
    v1 = (Path(__file__).parent / "output_backward_v1.cu").read_text()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    C, H = 10, 512
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
        for kind, wrows, bcols in [("first design", None, V1["OB_COLS"])] + list(itertools.product(
                ["kernels.cu"], (1, 2), (128, 256, 512))):
            key = wrows or 1
            if key not in mods:
                defines = "".join(f"#define {k} {v}\n" for k, v in {
                    "T": "float", "MAXC": C, "OB_WROWS": key, "OB_THREADS": THREADS, **V1}.items())
                mods[key] = cp.RawModule(code=defines + src + '\nextern "C" {\n' + v1 + "\n}\n",
                                         options=("--std=c++14",))
            mod = mods[key]
            ps = mod.get_function("partial_sums")
            splits = -(-b // bcols)
            part = cp.empty(splits * n, dtype=cp.float32)
            if wrows is None:
                k = mod.get_function("output_backward_v1")
                grid = ((H + V1["OB_ROWS"] - 1) // V1["OB_ROWS"] + 1, splits)
                args = (W, d, act, dz, part, i32(C), i32(H), i32(b))
            else:
                k = mod.get_function("output_backward")
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
    (out / "output_backward_tune.md").write_text("# The fused output backward by launch shape, beside its first "
                                                 "design\n\n" + "\n".join(md) + "\n")


if __name__ == "__main__":
    main()
