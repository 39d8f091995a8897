"""The step's own kernels of two versions of perfmlp/gpu's CUDA source side
by side: the fused output backward (output_backward and partial_sums, by
rows a warp), the loss kernel (softmax_ce_grad) and fp16's gradient check,
in each precision at the trainer's shapes, each checked against the other
version (and the output backward against CuPy).

    git show COMMIT:perfmlp/gpu/kernels.cu COMMIT:perfmlp/gpu/output_backward.cu > /tmp/base.cu
    python benchmarks/diagnostics/own_kernels_ab.py --baseline /tmp/base.cu --out DIR

(the source files of kernels.py's SOURCES at COMMIT but the reference's
GEMMs; before 95cddd8 kernels.cu alone)

Method: C = 10, H = 512 and 2048, b = 400, 1600, 3200 and 12800 (one GPU's
pieces in the blind sweeps); each kernel is run 20 times to warm up, then
200 launches are captured in one CUDA graph and the replay is timed with
CUDA events, 5 repeats, the two versions (the output backward at 1 and 2
rows a warp in the baseline, 1, 2 and 4 in the new) in turn,
the order reversed every other repeat; the median per launch. The check:
the largest difference between the versions over the largest value, for
dz and for the partial sums (16-bit dz: both round to the storage type).
grad_check: n = the parameters of 784-H-10, one finite pass; the baseline
one block a thread's element, the new one kernels.cu's grid
(gpu/network.py check_grid). Writes DIR/own_kernels_ab.md.

Found on an H100 (2026-11-27, a8094bf against 493df76; own_kernels_ab.md
in reports/h100/benchmarks/kernels-ab): with two rows a warp the 16-byte
passes took 0.77-0.93 times as long at b = 12800, 0.81-0.95 at H = 2048,
b = 3200, and 0.97-1.07 elsewhere but float32 at H = 512, b = 400 (1.16)
and 1600 (1.06); with one row a warp they took up to 1.28 times the
baseline's time in 16 bits and with four up to 1.56, so LAUNCH takes two. The strided check took 4.37 us
against 10.79 at H = 2048 and 4.02 against 4.55 at H = 512. Against
a8094bf (95cddd8, reports/h100/benchmarks/kernels-ab2) the loss kernel with
its column in registers took 0.65-0.77 times as long (2.65 us against 4.02
at b = 3200 in bf16), and the same output backward at one row a warp
0.98-1.00 times the baseline's, two rows 0.72-1.35.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import median

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from perfmlp import mixed  # noqa: E402
from perfmlp.gpu.kernels import S_KIND, source  # noqa: E402
from perfmlp.gpu.timing import event_s  # noqa: E402

THREADS, C, D = 256, 10, 784
STORAGE = {"float32": "float", "bf16": "unsigned short", "fp16": "unsigned short"}
KIND = {"float32": S_KIND["float32"], "bf16": S_KIND["bfloat16"], "fp16": S_KIND["float16"]}


def module(cp, src: str, prec: str, wrows: int):
    defines = {"T": "float", "S": STORAGE[prec], "S_KIND": KIND[prec], "MAXC": C, "WCOPY": 0,
               "LOSS_SCALING": int(prec == "fp16"), "GROWTH_INTERVAL": 2000, "GROWTH_FACTOR": "2.0",
               "BACKOFF_FACTOR": "0.5", "OB_WROWS": wrows, "OB_THREADS": THREADS}
    return cp.RawModule(code="".join(f"#define {k} {v}\n" for k, v in defines.items()) + src,
                        options=("--std=c++14",))


def to_storage(cp, x, prec):
    """Host values x on the device in the precision's storage type (perfmlp.mixed's rounding)."""
    return cp.asarray(mixed.device_view(mixed.to_storage(np.asarray(x, np.float32), prec)))


def from_storage(cp, s, prec):
    """A storage-type device array's values as float32, on the device."""
    return cp.asarray(mixed.from_device(cp.asnumpy(s), prec))


def graph_timer(cp, launch):
    """A callable giving one timing (us per launch) of 200 launches replayed as a graph."""
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        for _ in range(20):
            launch()
        s.begin_capture()
        for _ in range(200):
            launch()
        g = s.end_capture()
        g.launch(s)
        s.synchronize()

    def timing():
        with s:
            return event_s(cp, lambda: g.launch(s)) * 1e6 / 200
    timing.keep = launch   # the graph writes into launch's buffers: they live as long as it
    return timing


def interleaved(timers: dict, repeats: int = 5) -> dict:
    got = {k: [] for k in timers}
    keys = list(timers)
    for r in range(repeats):
        for k in (keys if r % 2 == 0 else keys[::-1]):
            got[k].append(timers[k]())
    return {k: median(v) for k, v in got.items()}


def output_backward_rows(cp, mods, prec, H, b):
    i32 = np.int32
    rng = np.random.default_rng(0)
    W = cp.asarray(rng.standard_normal((C, H)), dtype=cp.float32)
    d = to_storage(cp, rng.standard_normal((C, b)) / b, prec)
    a = to_storage(cp, rng.random((H, b)), prec)
    n = C * H + H + C
    splits = -(-b // 256)
    timers, results = {}, {}
    for (version, wrows), mod in mods.items():
        k, ps = mod.get_function("output_backward"), mod.get_function("partial_sums")
        rows = wrows * THREADS // 32
        grid = ((H + rows - 1) // rows + 1, splits)
        part = cp.empty(splits * n, dtype=cp.float32)
        dz = cp.zeros((H, b), dtype=a.dtype)
        res = cp.zeros(n, dtype=cp.float32)
        args = (W, d, a, dz, part, i32(C), i32(H), i32(b), i32(256))

        def pair(k=k, ps=ps, grid=grid, args=args, part=part, res=res):
            st = cp.cuda.get_current_stream()
            k(grid, (THREADS,), args, stream=st)
            ps(((n + 255) // 256,), (256,), (part, i32(splits), i32(C), i32(H), res[:C * H], res[C * H:C * H + H],
                                             res[C * H + H:]), stream=st)
        pair()
        cp.cuda.get_current_stream().synchronize()
        results[version, wrows] = (from_storage(cp, dz, prec).copy(), res.copy())
        timers[version, wrows] = graph_timer(cp, pair)
    t = interleaved(timers)
    base_dz, base_res = results["baseline", 1]
    af, df = from_storage(cp, a, prec), from_storage(cp, d, prec)
    ref_dz = (W.T @ df) * af * (1 - af)
    rows = []
    for key, (dz, res) in results.items():
        vs = max(float(cp.abs(dz - base_dz).max() / cp.abs(base_dz).max()),
                 float(cp.abs(res - base_res).max() / cp.abs(base_res).max()))
        ref = float(cp.abs(dz - ref_dz).max() / cp.abs(ref_dz).max())
        rows.append(f"| {prec} | {H} | {b} | output_backward + partial_sums | {key[0]} | {key[1]} | {t[key]:.2f} "
                    f"| {vs:.1e} | {ref:.1e} |")
    return rows


def softmax_rows(cp, mods, prec, b):
    rng = np.random.default_rng(2)
    z = to_storage(cp, rng.standard_normal((C, b)) * 3, prec)
    y = to_storage(cp, np.eye(C)[rng.integers(0, C, b)], prec)   # one sample a row, as in the batch
    ls = cp.asarray([1024.0, 0.0], dtype=cp.float32)
    timers, got = {}, {}
    for version in ("baseline", "new"):
        k = mods[version, 1].get_function("softmax_ce_grad")
        delta, ce = cp.zeros((C, b), dtype=z.dtype), cp.zeros(1, dtype=cp.float32)

        def launch(k=k, delta=delta, ce=ce):
            k(((b + 255) // 256,), (256,), (z, y, delta, ce, np.int32(C), np.int32(b), np.float32(1.0 / b), ls),
              stream=cp.cuda.get_current_stream())
        launch()
        cp.cuda.get_current_stream().synchronize()
        got[version] = (from_storage(cp, delta, prec).copy(), float(ce[0]))
        timers[version] = graph_timer(cp, launch)
    t = interleaved(timers)
    (d0, c0), (d1, c1) = got["baseline"], got["new"]
    vs = max(float(cp.abs(d1 - d0).max() / cp.abs(d0).max()), abs(c1 - c0) / abs(c0))
    return [f"| {prec} | - | {b} | softmax_ce_grad | {v} | - | {t[v]:.2f} | {vs if v == 'new' else 0:.1e} | - |"
            for v in timers]


def grad_check_rows(cp, mods, H):
    from perfmlp.gpu.network import check_grid
    n = H * D + C * H + H + C
    g = cp.asarray(np.random.default_rng(1).standard_normal(n), dtype=cp.float32)
    timers, flags = {}, {}
    for version in ("baseline", "new"):
        mod = mods[version, 1]
        k = mod.get_function("grad_check")
        ls = cp.asarray([1024.0, 0.0], dtype=cp.float32)
        state = cp.zeros(4, dtype=cp.int32)
        grid = ((n + 255) // 256,) if version == "baseline" else check_grid(cp, n)

        def launch(k=k, grid=grid, ls=ls, state=state):
            k(grid, (256,), (g, np.int64(n), ls, state), stream=cp.cuda.get_current_stream())
        launch()
        flags[version] = float(ls[1])
        timers[version] = graph_timer(cp, launch)
        g[n // 2] = cp.inf
        launch()
        flags[version] = (flags[version], float(ls[1]))   # finite: 1 / scale; after an inf: 0 (skip)
        g[n // 2] = 0.5
    t = interleaved(timers)
    return [f"| fp16 | {H} | - | grad_check (n = {n}) | {v} | - | {t[v]:.2f} | finite, inf: {flags[v]} | - |"
            for v in timers]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", required=True, help="the other version's CUDA source, one file (above)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import cupy as cp
    new = source()
    base = Path(a.baseline).read_text()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    md = ["| precision | H | b | kernel | version | rows a warp | us a launch | against the baseline | against CuPy |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for prec in ("float32", "bf16", "fp16"):
        mods = {("baseline", w): module(cp, base, prec, w) for w in (1, 2)}
        mods.update({("new", w): module(cp, new, prec, w) for w in (1, 2, 4)})
        for b in (400, 1600, 3200, 12800):
            for line in softmax_rows(cp, mods, prec, b):
                md.append(line)
                print(line, flush=True)
        for H in (512, 2048):
            for b in (400, 1600, 3200, 12800):
                for line in output_backward_rows(cp, mods, prec, H, b):
                    md.append(line)
                    print(line, flush=True)
            if prec == "fp16":
                for line in grad_check_rows(cp, mods, H):
                    md.append(line)
                    print(line, flush=True)
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    (out / "own_kernels_ab.md").write_text(
        f"# The step's own kernels, two versions side by side\n\nGPU: {dev}. Baseline: {a.baseline}.\n\n"
        + "\n".join(md) + "\n")


if __name__ == "__main__":
    main()
