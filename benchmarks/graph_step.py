"""Time per training step: perfmlp eager against its CUDA-graph step, with
and without the overlapped gradient exchange, the step's own GEMMs alone,
and PyTorch written as its experts write it (eager, DDP at p > 1, the whole
step in a CUDA graph, torch.compile on one GPU), on P GPUs. Run under
`mpirun -n P`, once per implementation:

    mpirun -n P python benchmarks/graph_step.py --impl perfmlp --out DIR
    mpirun -n P python benchmarks/graph_step.py --impl torch --out DIR

(benchmarks/gpu_suite.sh's `graph` part runs both, alternating, twice.)
`python benchmarks/graph_step.py --table DIR/graph_step.jsonl` writes the
table (DIR/graph_step.md) from the rounds of every run in the file.

Method: fp32, D=784, C=10, resident data (4 batch positions, cycled; each
graph variant copies the piece into its static inputs before the replay,
perfmlp's as PyTorch's), the batch B split over the P ranks. Configurations
(`--configs`, default by P): on one GPU H = 512, 1024, 2048 and 1024x3 at
B = 800 and 3200; on P > 1 B = 3200 split (strong scaling), B = 3200 P
(weak scaling: 3200 per GPU) and 1024x3 (the overlap showcase). Each
variant first runs --warmup steps (captures, NCCL set-up, DDP's 11 eager
iterations before a capture, torch.compile's compilation); the first of
them is timed alone (synchronised: for a graph variant, its capture). Then
--reps rounds; in each round every variant, in turn, runs --steps steps
between two synchronisations of all ranks (MPI barrier, device sync) and
its time per step is the wall time over those steps, taken on the slowest
rank. Reported: the median over rounds and the range. One JSON line per
(variant, configuration) is appended to DIR/graph_step.jsonl.

"perfmlp GEMMs alone" is the step's own cuBLAS calls (the shapes, layouts
and buffers one eager step launches, recorded through GpuNetwork.capture)
captured in one CUDA graph and replayed. Since the output layer's backward
runs as two fused kernels of perfmlp's own (perfmlp/model/costs.py
fused_output) those are 3 of the 5 products for 784-H-10; "the five
products as cuBLAS GEMMs" records a step with the output layer's backward
as GEMMs too (the GEMM floor of a step that, as PyTorch's, runs every
product through cuBLAS). "perfmlp graph, output backward as GEMMs" is the
graph step without the fused output backward.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import sys
from pathlib import Path
from statistics import median

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfmlp.gpu.timing import per_call_s, rounds, summary  # noqa: E402

ONE_GPU = "512x800,512x3200,1024x800,1024x3200,2048x800,2048x3200,1024-1024-1024x3200"
MULTI_GPU = "512x3200,512x{weak},1024-1024-1024x3200"  # {weak}: 3200 per GPU
LAYER_BUCKET = 16 << 20  # no weight gradient of these networks is larger: one bucket per layer
NPOS = 4  # batch positions cycled through


def configs(spec: str, procs: int) -> list[tuple[tuple[int, ...], int]]:
    """'512x3200,1024-1024-1024x3200' -> [((512,), 3200), ((1024, 1024, 1024), 3200)]."""
    out = []
    for item in spec.format(weak=3200 * procs).split(","):
        hidden, B = item.split("x")
        out.append((tuple(int(h) for h in hidden.split("-")), int(B)))
    return list(dict.fromkeys(out))


def data(B, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.random((B * NPOS, 784)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, B * NPOS)]
    return x, y


def perfmlp_variants(world, hidden, B):
    """name -> a function running n steps (no synchronisation)."""
    from perfmlp.backend import build
    from perfmlp.config import from_mapping
    from perfmlp.mlp import init_weights
    from perfmlp.model.costs import piece
    from perfmlp.trace.format import Counts
    from perfmlp.step import step
    x, y = data(B)
    nophase = lambda name: contextlib.nullcontext()  # noqa: E731
    out = {}
    variants = [("perfmlp eager", "eager", None, True), ("perfmlp graph", "graph", None, True),
                ("perfmlp graph, output backward as GEMMs", "graph", None, False),
                ("perfmlp eager + overlap", "eager", 1 << 20, True), ("perfmlp graph + overlap", "graph", 1 << 20, True),
                ("perfmlp graph + overlap, a bucket per layer", "graph", LAYER_BUCKET, True)]
    for name, ex, bucket, fuse in variants:
        cfg = from_mapping(dict(hidden_sizes=list(hidden), batch_size=B, n_train=B * NPOS, backend="cupy",
                                comm="nccl", batch_transfer="resident", exec=ex, overlap=bucket is not None,
                                bucket_bytes=bucket or 1 << 20, trace=False))
        be = build(cfg, world, x, y)
        be.net.fuse_output = be.net.fuse_output and fuse  # before the first step (a graph's capture)
        be.net.set_params(init_weights(cfg.layer_sizes, 0))
        counts = Counts()
        lo, hi = piece(B, world.size, world.rank)

        def run(n, be=be, counts=counts, k=[0], lo=lo, hi=hi):
            with be.stream:  # each variant's kernels on its own backend's stream
                for _ in range(n):
                    off = (k[0] % NPOS) * B
                    k[0] += 1
                    step(be.net, be.batches, be.reducer, off + lo, off + hi, nophase, counts, be.graph)
                    counts.reset()
        out[name] = (run, be.sync)
        if name == "perfmlp eager":
            out["perfmlp GEMMs alone"] = (gemms_alone(be, step, lo, hi, nophase, counts, True)[0], be.sync)
            out["the five products as cuBLAS GEMMs"] = (gemms_alone(be, step, lo, hi, nophase, counts, False)[0],
                                                        be.sync)
    return out


def gemms_alone(be, step, lo, hi, nophase, counts, fuse):
    """The GEMMs one eager step launches (recorded by GpuNetwork.capture),
    captured in one CUDA graph on the step's stream: (a function running n
    replays, the GEMMs' (a, b, out) operands). `fuse=False`: the step with
    its output layer as GEMMs too (all of the step's products through
    cuBLAS, as PyTorch runs them). precision_step.py uses it too."""
    net = be.net
    with be.stream:
        net.capture = []
        was, net.fuse_output = net.fuse_output, net.fuse_output and fuse
        step(net, be.batches, be.reducer, lo, hi, nophase, counts)
        calls, net.capture, net.fuse_output = net.capture, None, was
        counts.reset()
        be.sync()
        be.stream.begin_capture()
        try:
            for a, b, c in calls:
                net._gemm(a, b, c)
        finally:
            g = be.stream.end_capture()
    g.upload(be.stream)

    def run(n):
        for _ in range(n):
            g.launch(be.stream)
    return run, calls


def torch_variants(world, hidden, B, compile_ok=True, bf16=False):
    """name -> (a function running n steps, its synchronisation); `bf16`:
    each forward under AMP autocast to bf16 (benchmarks/scaling.py)."""
    import torch
    import torch.distributed as dist
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 FFMA, as perfmlp's cuBLAS calls
    dev = torch.device("cuda", torch.cuda.current_device())
    P = world.size
    if P > 1 and not dist.is_initialized():
        dist.init_process_group("nccl", rank=world.rank, world_size=P, device_id=dev)
    x, y = data(B)
    from perfmlp.model.costs import piece
    lo, hi = piece(B, P, world.rank)
    X = torch.from_numpy(x).to(dev)
    Yi = torch.from_numpy(y.argmax(1)).to(dev)
    out = {}

    def model():
        torch.manual_seed(0)
        layers, n = [], 784
        for h in hidden:
            layers += [torch.nn.Linear(n, h), torch.nn.Sigmoid()]
            n = h
        layers.append(torch.nn.Linear(n, 10))
        m = torch.nn.Sequential(*layers).to(dev)
        decay = [p for n_, p in m.named_parameters() if n_.endswith("weight")]
        rest = [p for n_, p in m.named_parameters() if n_.endswith("bias")]
        groups = [{"params": decay, "weight_decay": 1e-4}, {"params": rest, "weight_decay": 0.0}]
        return (_autocast(torch, m) if bf16 else m), groups

    loss_fn = torch.nn.CrossEntropyLoss()

    # eager: nn.Linear, SGD with weight decay; DDP (NCCL, its gradient buckets overlap the backward) at P > 1
    m, groups = model()
    if P > 1:
        m = torch.nn.parallel.DistributedDataParallel(m, device_ids=[dev.index])
    opt = torch.optim.SGD(groups, lr=0.1)

    def loop(m, opt):
        """n steps of module m with optimizer opt over the cycled batch positions."""
        k = [0]

        def run(n):
            for _ in range(n):
                off = (k[0] % NPOS) * B
                k[0] += 1
                opt.zero_grad(set_to_none=True)
                loss_fn(m(X[off + lo:off + hi]), Yi[off + lo:off + hi]).backward()
                opt.step()
        return run
    out["pytorch eager" + (" (DDP)" if P > 1 else "")] = (loop(m, opt), torch.cuda.synchronize)

    # the whole step captured in a CUDA graph (torch.cuda.graph, static input
    # buffers copied into before each replay), as PyTorch's CUDA-graph
    # documentation writes whole-network capture; DDP built on a side stream
    # and warmed up 11 iterations before the capture, as it requires
    try:
        out.update(_torch_graph(torch, world, hidden, B, model, loss_fn, X, Yi, lo, hi))
    except Exception as e:  # say so and keep the other variants' numbers
        print(f"rank {world.rank}: pytorch graph, H={hidden} B={B}: failed: {type(e).__name__}: {e}", flush=True)

    # torch.compile (inductor, default mode) of the model, on one GPU: the
    # fused SGD step beside it; its compilation happens in the warm-up
    if P == 1 and compile_ok:
        mc, groups_c = model()
        mc = torch.compile(mc)
        optc = torch.optim.SGD(groups_c, lr=0.1, fused=True)
        out["pytorch torch.compile"] = (loop(mc, optc), torch.cuda.synchronize)
    return out


def _autocast(torch, m):
    """m with its forward under AMP autocast to bf16, the logits widened to
    float32 for the loss as autocast widens cross_entropy's input; the cast
    cache off, as CUDA-graph capture under autocast requires."""
    class Autocast(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, x):
            with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
                return self.m(x).float()
    return Autocast()


def _torch_graph(torch, world, hidden, B, model, loss_fn, X, Yi, lo, hi):
    P = world.size
    dev = torch.device("cuda", torch.cuda.current_device())
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        m2, groups2 = model()
        if P > 1:
            m2 = torch.nn.parallel.DistributedDataParallel(m2, device_ids=[dev.index])
        opt2 = torch.optim.SGD(groups2, lr=0.1)
        sx, sy = X[lo:hi].clone(), Yi[lo:hi].clone()
        for _ in range(11):
            opt2.zero_grad(set_to_none=True)
            loss_fn(m2(sx), sy).backward()
            opt2.step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    opt2.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        loss_fn(m2(sx), sy).backward()
        opt2.step()

    def graph(n, k=[0]):
        for _ in range(n):
            off = (k[0] % NPOS) * B
            k[0] += 1
            sx.copy_(X[off + lo:off + hi])
            sy.copy_(Yi[off + lo:off + hi])
            g.replay()
    return {"pytorch graph" + (" (DDP)" if P > 1 else ""): (graph, torch.cuda.synchronize)}


def _label(r: dict) -> str:
    """A row's variant, with the NCCL protocol where the run forced one."""
    proto = (r.get("nccl_env") or {}).get("NCCL_PROTO")
    return r["variant"].replace(" (DDP)", "") + (f" [NCCL_PROTO={proto}]" if proto else "")


def _cell(us: list[float]) -> str:
    """'median [min-max]' of a cell's times, '-' for none."""
    if not us:
        return "-"
    s = summary(us)
    return f"{s.median:.1f} [{s.min:.1f}-{s.max:.1f}]"


def table(path: Path) -> str:
    """Markdown: per configuration and variant, the median over every round of
    every run in the file, the range, the speed-up over one GPU (strong
    scaling: the same B split) and the first step's time; then weak scaling
    (3200 per GPU: B = 3200 p against B = 3200 on one GPU)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    cells: dict = {}
    first: dict = {}
    for r in rows:
        key = (tuple(r["hidden"]), r["B"], _label(r), r["procs"])
        cells.setdefault(key, []).extend(r["us_per_step"])
        if "first_step_ms" in r:
            first.setdefault(key, []).append(r["first_step_ms"])
    meta = rows[0]
    procs = sorted({r["procs"] for r in rows})
    P = procs[-1]
    lines = [f"# Time per training step, {meta['gpu']}, {meta['date']} (perfmlp {meta['perfmlp_git']})", "",
             f"fp32, D=784, C=10, resident data, B split over p GPUs; wall time over {meta['steps']} steps between "
             f"synchronisations, slowest rank; median over all rounds ({meta['reps']} per run, runs of the two "
             "implementations alternating) and [min-max]. PyTorch at p > 1 is DDP. First step: the first "
             "warm-up step alone, synchronised (a graph's capture and instantiation; torch.compile's compilation), "
             "median over runs, p=1. Command: `benchmarks/gpu_suite.sh <set> graph` (benchmarks/graph_step.py).", "",
             "| H | B | variant | " + " | ".join(f"p={p} (us)" for p in procs) + f" | speed-up p=1 to p={P} "
             "| first step p=1 (ms) |", "| --- " * (5 + len(procs)) + "|"]
    for (hidden, B, variant, _p) in dict.fromkeys((k[0], k[1], k[2], 0) for k in cells):
        vals = [cells.get((hidden, B, variant, p)) for p in procs]
        cols = [_cell(v) for v in vals]
        su = f"{median(vals[0]) / median(vals[-1]):.2f}x" if vals[0] and vals[-1] and len(procs) > 1 else "-"
        f1 = first.get((hidden, B, variant, procs[0]))
        lines.append(f"| {'-'.join(map(str, hidden))} | {B} | {variant} | " + " | ".join(cols) + f" | {su} | "
                     + (f"{median(f1):.1f}" if f1 else "-") + " |")
    if len(procs) > 1:
        lines += ["", f"Weak scaling, 3200 samples per GPU: time at p=1 (B=3200) over time at p={P} (B={3200 * P}).",
                  "", f"| H | variant | p=1 (us) | p={P} (us) | efficiency |", "| --- | --- | --- | --- | --- |"]
        for (hidden, B, variant, p) in cells:
            if p != P or B != 3200 * P or (hidden, 3200, variant, 1) not in cells:
                continue
            t1, tp = median(cells[(hidden, 3200, variant, 1)]), median(cells[(hidden, B, variant, P)])
            lines.append(f"| {'-'.join(map(str, hidden))} | {variant} | {t1:.1f} | {tp:.1f} | {100 * t1 / tp:.1f}% |")
    return "\n".join(lines) + "\n"


def step_s(world, run, sync, n: int) -> float:
    """Seconds per step of run(n) between two synchronisations of all ranks
    (device sync, MPI barrier; device sync at the end), the slowest rank's."""
    from mpi4py import MPI
    t = per_call_s(lambda: run(n), 1, start=lambda: (sync(), world.comm.Barrier()), end=sync) / n
    return world.comm.allreduce(t, op=MPI.MAX)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--table":
        path = Path(sys.argv[2])
        text = table(path)
        (path.parent / "graph_step.md").write_text(text)
        print(text)
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", choices=("perfmlp", "torch"), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--configs", help="HIDDENxB,... with hidden sizes joined by '-' (default: by process count)")
    ap.add_argument("--no-compile", action="store_true", help="leave out torch.compile (its compilation is slow)")
    a = ap.parse_args()
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")  # DDP inside a graph capture
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")  # torch.distributed's rendezvous (one host)
    os.environ.setdefault("MASTER_PORT", "29517")
    import cupy as cp
    from perfmlp.comm import make_world
    world = make_world()
    cp.cuda.Device(world.rank % cp.cuda.runtime.getDeviceCount()).use()
    if a.impl == "torch":
        import torch
        torch.cuda.set_device(world.rank % torch.cuda.device_count())
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"date": dt.date.today().isoformat(), "gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
            "procs": world.size, "cupy": cp.__version__, "python": platform.python_version(),
            "perfmlp_git": os.environ.get("PERFMLP_GIT_COMMIT"), "command": " ".join(sys.argv),
            "steps": a.steps, "reps": a.reps, "warmup": a.warmup,
            "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}}
    if a.impl == "torch":
        meta["torch"] = torch.__version__
    for hidden, B in configs(a.configs or (ONE_GPU if world.size == 1 else MULTI_GPU), world.size):
        if a.impl == "perfmlp":
            variants = perfmlp_variants(world, hidden, B)
        else:
            variants = torch_variants(world, hidden, B, compile_ok=not a.no_compile)
        first = {}
        for name, (run, sync) in variants.items():
            first[name] = step_s(world, run, sync, 1)  # a graph variant's capture, torch.compile's compilation
            run(a.warmup - 1)
            sync()
        times = rounds({name: (lambda run=run, sync=sync: step_s(world, run, sync, a.steps))
                        for name, (run, sync) in variants.items()}, a.reps)
        if world.rank == 0:
            with open(out / "graph_step.jsonl", "a") as f:
                for name, ts in times.items():
                    us = [t * 1e6 for t in ts]
                    s = summary(us)
                    f.write(json.dumps({**meta, "variant": name, "hidden": list(hidden), "B": B,
                                        "us_per_step": us, "median_us": s.median,
                                        "first_step_ms": first[name] * 1e3}) + "\n")
                    print(f"p={world.size} H={'-'.join(map(str, hidden))} B={B} {name}: median {s.median:.1f} us "
                          f"(range {s.min:.1f}-{s.max:.1f}, {a.reps} x {a.steps} steps; first step "
                          f"{first[name] * 1e3:.1f} ms)", flush=True)
        del variants


if __name__ == "__main__":
    main()
