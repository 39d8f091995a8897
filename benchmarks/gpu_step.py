"""Time a training step on one GPU (CUDA events, warm-up, median of many).

For H in --hidden and each GEMM choice and transfer mode: the step of the
real trainer (perfmlp.step.step with the GPU network, batches and reducer),
beside the time of the same step's GEMMs alone, the unfused generic network
(the NumPy math run on CuPy: the "naive CuPy step"), and PyTorch eager fp32
on the same model, sizes and GPU (a benchmark-only comparison).

    python benchmarks/gpu_step.py --out reports/h100/benchmarks
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfmlp.comm import make_world  # noqa: E402
from perfmlp.config import from_mapping  # noqa: E402
from statistics import median  # noqa: E402

from perfmlp.backend import build  # noqa: E402
from perfmlp.gpu.gemm import gemm  # noqa: E402
from perfmlp.gpu.timing import time_ms  # noqa: E402
from perfmlp.trace.format import Counts  # noqa: E402
from perfmlp.mlp import Network, init_weights  # noqa: E402
from perfmlp.model.costs import batch_counts  # noqa: E402
from perfmlp.model.machine import load_machine, machine_files  # noqa: E402
from perfmlp.step import step  # noqa: E402

NOPHASE = lambda name: contextlib.nullcontext()  # noqa: E731


def trainer_step_ms(cp, world, H, B, gemm_kind, transfer, comm, reps, nbatches=4):
    cfg = from_mapping(dict(hidden_sizes=[H], batch_size=B, n_train=B * nbatches, gemm=gemm_kind,
                            batch_transfer=transfer, comm=comm, backend="cupy", trace=False))
    rng = np.random.default_rng(0)
    x = rng.random((cfg.n_train, 784)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, cfg.n_train)]
    be = build(cfg, world, x, y)
    net, batches, reducer = be.net, be.batches, be.reducer
    net.set_params(init_weights(cfg.layer_sizes, 0))
    k = [0]
    counts = Counts()

    def one():
        lo = (k[0] % nbatches) * B
        k[0] += 1
        step(net, batches, reducer, lo, lo + B, NOPHASE, counts)
        counts.reset()
    ts = time_ms(cp, one, warmup=5, reps=reps)
    gemms = None
    if transfer == "resident":
        net.capture = []
        one()
        calls = net.capture
        net.capture = None
        gemms = median(time_ms(cp, lambda: [gemm(cp, gemm_kind, a, b, out=o) for a, b, o in calls],
                               warmup=3, reps=reps))
    return median(ts), gemms


def generic_step_ms(cp, H, B, reps):
    """The NumPy math run on CuPy: unfused elementwise ops, many launches."""
    sizes = (784, H, 10)
    net = Network(cp, sizes, np.float32, 1e-4, 1e-4, B)
    net.set_params(init_weights(sizes, 0))
    x = cp.random.random((B, 784), dtype=cp.float32)
    y = cp.zeros((B, 10), cp.float32)
    y[cp.arange(B), cp.arange(B) % 10] = 1

    def one():
        net.forward(x.T); net.loss(y.T); net.backward(); net.update()
    return median(time_ms(cp, one, warmup=5, reps=reps))


def torch_step_ms(H, B, reps):
    try:
        import torch
    except ImportError:
        return None
    dev = "cuda"
    g = torch.Generator(device="cpu").manual_seed(0)
    W1 = (torch.randn(H, 784, generator=g) / 28).to(dev).requires_grad_()
    b1 = torch.zeros(H, device=dev, requires_grad=True)
    W2 = (torch.randn(10, H, generator=g) / H ** 0.5).to(dev).requires_grad_()
    b2 = torch.zeros(10, device=dev, requires_grad=True)
    X = torch.rand(B, 784, device=dev)
    Y = torch.randint(0, 10, (B,), device=dev)
    lr, reg = 1e-4, 1e-4

    def one():
        a1 = torch.sigmoid(X @ W1.T + b1)
        z = a1 @ W2.T + b2
        loss = torch.nn.functional.cross_entropy(z, Y) + 0.5 * reg * (W1.pow(2).sum() + W2.pow(2).sum())
        loss.backward()
        with torch.no_grad():
            for p in (W1, b1, W2, b2):
                p -= lr * p.grad
                p.grad = None
    for _ in range(5):
        one()
    torch.cuda.synchronize()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in evs:
        a.record(); one(); b.record()
    torch.cuda.synchronize()
    return median([a.elapsed_time(b) for a, b in evs])


def datasheet_for(gpu_name: str) -> str:
    """The shipped datasheet machine file (not a calibrated one) for a GPU CUDA names so, else h200."""
    for f in machine_files():
        m = load_machine(f)
        if m.describes(gpu_name) and not m.calibrated:
            return Path(f.name).stem
    return "h200"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", default="512,1024,2048")
    ap.add_argument("--batch", type=int, default=3200)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--machine", default=None, help="machine file whose fp32 peak the utilisation uses "
                                                     "(default: this GPU's datasheet file, else h200)")
    a = ap.parse_args()
    import cupy as cp
    world = make_world()
    gpu_name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    a.machine = a.machine or datasheet_for(gpu_name)
    peak = load_machine(a.machine).peak_flops_per_s_float32
    rows = []
    for H in [int(h) for h in a.hidden.split(",")]:
        flops = batch_counts((784, H, 10), a.batch, 4).flops_total
        base = {"H": H, "B": a.batch, "flops": flops}
        t_torch = torch_step_ms(H, a.batch, a.reps)
        t_generic = generic_step_ms(cp, H, a.batch, a.reps)
        rows.append({**base, "variant": "pytorch eager", "gemm": "-", "transfer": "resident", "comm": "-",
                     "step_ms": t_torch})
        rows.append({**base, "variant": "generic CuPy (unfused)", "gemm": "cublas", "transfer": "resident",
                     "comm": "-", "step_ms": t_generic})
        for kind in ("cublas", "regblock", "tiled", "naive"):
            modes = [("pageable", "mpi-staged"), ("pinned", "mpi-staged"), ("resident", "mpi-staged"),
                     ("resident", "nccl")]
            if kind != "cublas":
                modes = [("resident", "nccl")]
            for transfer, comm in modes:
                t, tg = trainer_step_ms(cp, world, H, a.batch, kind, transfer, comm,
                                        a.reps if kind in ("cublas", "regblock") else 10)
                rows.append({**base, "variant": "perfmlp (fused)", "gemm": kind, "transfer": transfer,
                             "comm": comm, "step_ms": t, "gemms_ms": tg})
                print(f"H={H} {kind} {transfer} {comm}: {t * 1e3:.1f} us" +
                      (f" (GEMMs alone {tg * 1e3:.1f} us)" if tg else ""), flush=True)
        print(f"H={H} pytorch eager {t_torch and t_torch * 1e3:.1f} us, generic CuPy {t_generic * 1e3:.1f} us",
              flush=True)
    for r in rows:
        if r["step_ms"]:
            r["tflops"] = r["flops"] / (r["step_ms"] * 1e-3) / 1e12
            r["util"] = r["tflops"] * 1e12 / peak
    import cupy
    meta = {"gpu": gpu_name, "date": dt.date.today().isoformat(), "cupy": cupy.__version__,
            "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(), "python": platform.python_version(),
            "peak_flops_per_s_float32": peak, "peak_source": a.machine, "command": " ".join(sys.argv)}
    try:
        import torch
        meta["torch"] = torch.__version__
    except ImportError:
        pass
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_step.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [f"# Training step on one GPU: {gpu_name}, {meta['date']}",
             "", f"CuPy {meta['cupy']}, CUDA runtime {meta['cuda_runtime']}, PyTorch {meta.get('torch', '-')}; "
             f"fp32, D=784, C=10, B={a.batch}; CUDA events, median of {a.reps} steps after 5 warm-up "
             f"(10 for the slow tiled/naive GEMMs). Utilisation against {peak / 1e12:.1f} TFLOP/s ({a.machine}).",
             f"Command: `{meta['command']}`", "",
             "| H | variant | GEMM | batch | comm | step (us) | GEMMs alone (us) | step / GEMMs | TFLOP/s | % peak |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        st, tg = r["step_ms"], r.get("gemms_ms")
        if not st:
            continue
        g = f"{tg * 1e3:.1f} | {st / tg:.2f}" if tg else "- | -"
        lines.append(f"| {r['H']} | {r['variant']} | {r['gemm']} | {r['transfer']} | {r['comm']} | "
                     f"{st * 1e3:.1f} | {g} | {r['tflops']:.2f} | {100 * r['util']:.1f} |")
    (out / "gpu_step.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
