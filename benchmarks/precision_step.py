"""The one-GPU step in each precision: perfmlp's CUDA-graph step against
PyTorch's, the step's own GEMMs alone, and the input pipeline's targets.

    python benchmarks/precision_step.py --out DIR

writes DIR/precision_step.json and DIR/precision_step.md (machine, date,
commit, command). Method: D=784, C=10, resident data (4 batch positions,
cycled; each graph variant copies the piece into its static inputs before
its replay), NCCL on one GPU, H = 512 and 2048, B = 800 and 3200, in
float32, tf32, bf16 and fp16:
- "perfmlp": the trainer's graph step (perfmlp.train.step, --exec graph)
  in that --precision;
- "GEMMs alone": that step's own cuBLAS calls (recorded through
  GpuNetwork.capture) in one CUDA graph, replayed;
- "pytorch": nn.Linear/Sigmoid/CrossEntropyLoss and SGD with weight decay,
  the whole step captured in one CUDA graph with static inputs (PyTorch's
  CUDA-graph recipe); fp32 with TF32 off, tf32 with
  torch.backends.cuda.matmul.allow_tf32, bf16 and fp16 under torch.autocast
  (fp16 with a static loss scale of 2^16, the gradients unscaled by one
  _foreach_mul_ in the graph: GradScaler's skip reads a flag on the host,
  which a graph cannot).
Then the input pipeline (`--parts input`), H=512, B=3200, float32, NCCL, in
each --input-exec (graph, eager): perfmlp's step with the batch resident,
copied from pinned or pageable memory, and prefetched from either
(prefetch-pageable once per --stage-threads count: the pipeline's staging
threads, perfmlp/gpu/prefetch.py), the batches taken in turn from
--input-positions positions (19: 60,800 samples, MNIST's size, a pageable
source larger than a host's last-level cache), each with the host's
staging time per batch (Pipeline.stage_s) where staged.
Every variant runs --warmup steps (captures included), then --rounds rounds
in which every variant of a configuration, in turn, runs --steps steps
between two synchronisations: its time per step is that wall time over the
steps; reported: the median over rounds (and the range, and the spread:
max / min - 1).

    python benchmarks/precision_step.py --parts input --out DIR   # the input pipeline alone
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import platform
import os
import subprocess
import sys
from pathlib import Path
from statistics import median

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PRECISIONS = ("float32", "tf32", "bf16", "fp16")
NPOS = 4
NOPHASE = lambda name: contextlib.nullcontext()  # noqa: E731


def data(B, npos=NPOS):
    rng = np.random.default_rng(0)
    return (rng.random((B * npos, 784), dtype=np.float32),
            np.eye(10, dtype=np.float32)[rng.integers(0, 10, B * npos)])


def perfmlp_step(world, H, B, precision, transfer="resident", exec_mode="graph", npos=NPOS):
    """(run(n), sync, the backend) of perfmlp's step (graph or eager)."""
    from perfmlp.backend import build
    from perfmlp.config import from_mapping
    from perfmlp.mixed import to_storage
    from perfmlp.mlp import init_weights
    from perfmlp.trace.format import Counts
    from perfmlp.train import step
    x, y = (to_storage(a, precision) for a in data(B, npos))
    cfg = from_mapping(dict(hidden_sizes=[H], batch_size=B, n_train=B * npos, backend="cupy", comm="nccl",
                            batch_transfer=transfer, exec=exec_mode, precision=precision, trace=False))
    be = build(cfg, world, x, y)
    be.net.set_params(init_weights(cfg.layer_sizes, 0))
    counts = Counts()
    pre = be.batches.prefetcher

    def sync():   # the prefetched batches in flight too: none is staged or copied into the next variant's time
        be.sync()
        if pre is not None:
            pre.pipe.settle()

    def run(n, k=[0]):
        with be.stream:
            for _ in range(n):
                off = (k[0] % npos) * B
                k[0] += 1
                step(be.net, be.batches, be.reducer, off, off + B, NOPHASE, counts, be.graph)
                counts.reset()
    return run, sync, be


def gemms_alone(world, H, B, precision):
    """The GEMMs of one eager step in that precision, captured in one graph
    (graph_step.gemms_alone), with their FLOPs."""
    from graph_step import gemms_alone as captured   # benchmarks/ is sys.path[0] when run as a script
    from perfmlp.trace.format import Counts
    from perfmlp.train import step
    _, sync, be = perfmlp_step(world, H, B, precision)
    run, calls = captured(be, step, 0, B, NOPHASE, Counts(), be.net.fuse_output)
    flops = sum(2 * a.shape[0] * b.shape[1] * a.shape[1] for a, b, _ in calls)
    return run, sync, flops


def torch_step(H, B, precision):
    import torch
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    x, y = data(B)
    X, Yi = torch.from_numpy(x).to(dev), torch.from_numpy(y.argmax(1)).to(dev)
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(784, H), torch.nn.Sigmoid(), torch.nn.Linear(H, 10)).to(dev)
    decay = [p for n, p in m.named_parameters() if n.endswith("weight")]
    rest = [p for n, p in m.named_parameters() if n.endswith("bias")]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 1e-4}, {"params": rest, "weight_decay": 0.0}], lr=0.1)
    loss_fn = torch.nn.CrossEntropyLoss()
    scale = 2.0 ** 16 if precision == "fp16" else None
    params = list(m.parameters())
    sx, sy = X[:B].clone(), Yi[:B].clone()

    def body():
        # cache_enabled=False: autocast's cast cache must not outlive a graph capture (PyTorch's AMP notes)
        with torch.autocast("cuda", dtype=amp, enabled=amp is not None, cache_enabled=False):
            loss = loss_fn(m(sx), sy)
        (loss * scale if scale else loss).backward()
        if scale:
            torch._foreach_mul_([p.grad for p in params], 1.0 / scale)
        opt.step()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(11):
            opt.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        body()

    def run(n, k=[0]):
        for _ in range(n):
            off = (k[0] % NPOS) * B
            k[0] += 1
            sx.copy_(X[off:off + B])
            sy.copy_(Yi[off:off + B])
            g.replay()
    return run, torch.cuda.synchronize


def interleaved(variants: dict, warmup: int, reps: int, steps: int) -> dict:
    """name -> per-step seconds of each round (perfmlp.gpu.timing.rounds: the
    variants interleaved), each the wall time of `steps` steps between two
    synchronisations over the steps."""
    from perfmlp.gpu.timing import per_call_s, rounds
    for run, sync in variants.values():
        run(warmup)
        sync()
    return rounds({name: (lambda run=run, sync=sync: per_call_s(lambda: run(1), steps, start=sync, end=sync))
                   for name, (run, sync) in variants.items()}, reps)


def row(name, ts, **extra) -> dict:
    from perfmlp.gpu.timing import summary
    s = summary(ts)
    return {"variant": name, "median_us": 1e6 * s.median, "min_us": 1e6 * s.min, "max_us": 1e6 * s.max,
            "spread": s.spread, **extra}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--parts", default="precision,input", help="precision, input, or both")
    ap.add_argument("--hidden", default="512,2048")
    ap.add_argument("--batches", default="800,3200")
    ap.add_argument("--precisions", default=",".join(PRECISIONS))
    ap.add_argument("--input-exec", default="graph,eager")
    ap.add_argument("--input-positions", type=int, default=19)
    ap.add_argument("--stage-threads", default=None,
                    help="prefetch-pageable once per count of staging threads (default: the pipeline's own)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--no-torch", action="store_true")
    a = ap.parse_args()
    import cupy as cp
    from perfmlp.comm import make_world
    world = make_world()
    parts = a.parts.split(",")
    rows = precision_rows(world, a, cp) if "precision" in parts else []
    if "input" in parts:
        for ex in a.input_exec.split(","):
            rows += input_rows(world, a, ex)
            cp.get_default_memory_pool().free_all_blocks()
    write(Path(a.out), rows, " ".join(sys.argv), cp)
    return 0


def precision_rows(world, a, cp) -> list:
    rows = []
    for H in map(int, a.hidden.split(",")):
        for B in map(int, a.batches.split(",")):
            for prec in a.precisions.split(","):
                run, sync, _ = perfmlp_step(world, H, B, prec)
                grun, gsync, gflops = gemms_alone(world, H, B, prec)
                v = {"perfmlp": (run, sync), "GEMMs alone": (grun, gsync)}
                if not a.no_torch:
                    try:
                        v["pytorch"] = torch_step(H, B, prec)
                    except Exception as e:   # say so and keep perfmlp's numbers
                        print(f"pytorch H={H} B={B} {prec}: {type(e).__name__}: {e}", file=sys.stderr)
                for name, ts in interleaved(v, a.warmup, a.rounds, a.steps).items():
                    rows.append(row(name, ts, part="precision", H=H, B=B, precision=prec,
                                    gemm_tflops=gflops / median(ts) / 1e12 if name == "GEMMs alone" else None))
                print(" ".join(f"{r['variant']} {r['median_us']:.1f}" for r in rows[-len(v):]), f"us  H={H} B={B} {prec}",
                      file=sys.stderr, flush=True)
                cp.get_default_memory_pool().free_all_blocks()
    return rows


def input_rows(world, a, exec_mode: str) -> list:
    """The input pipeline's variants at H=512, B=3200, float32 in one
    execution mode, interleaved; prefetch-pageable once per staging-thread
    count, each with its host staging time per batch."""
    from perfmlp.gpu import prefetch
    default = prefetch.STAGE_THREADS
    counts = [int(n) for n in a.stage_threads.split(",")] if a.stage_threads else [default]
    step_of = lambda bt: perfmlp_step(world, 512, 3200, "float32", bt, exec_mode, a.input_positions)  # noqa: E731
    built = {bt: step_of(bt) for bt in ("resident", "pinned", "prefetch", "pageable")}
    try:
        for n in counts:
            prefetch.STAGE_THREADS = n   # read when the pipeline is made
            built["prefetch-pageable" if n == default else f"prefetch-pageable, {n} threads"] = \
                step_of("prefetch-pageable")
    finally:
        prefetch.STAGE_THREADS = default
    rows = []
    for name, ts in interleaved({k: v[:2] for k, v in built.items()}, a.warmup, a.rounds, a.steps).items():
        pipe = built[name][2].batches.prefetcher
        staged = pipe is not None and pipe.pipe.staged_pieces
        extra = dict(stage_us=1e6 * pipe.pipe.stage_s / pipe.pipe.staged_pieces,
                     stage_gb_per_s=pipe.pipe.staged_bytes / pipe.pipe.stage_s / 1e9) if staged else {}
        rows.append(row(name, ts, part="input", H=512, B=3200, precision="float32", exec=exec_mode,
                        positions=a.input_positions, **extra))
        print(f"{exec_mode} {name}: {rows[-1]['median_us']:.1f} us", file=sys.stderr, flush=True)
    return rows


def precision_table(rows: list) -> list[str]:
    if not rows:
        return []
    get = {(r["H"], r["B"], r["precision"], r["variant"]): r for r in rows}
    lines = ["", "Median us per step over rounds (range in brackets); x: PyTorch's time over perfmlp's; "
             "/GEMMs: perfmlp's time over its GEMMs alone.", "",
             "| H | B | precision | perfmlp graph | PyTorch graph | x | GEMMs alone (TFLOP/s) | /GEMMs |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    cell = lambda x: f"{x['median_us']:.1f} [{x['min_us']:.1f}-{x['max_us']:.1f}]" if x else "-"  # noqa: E731
    for (H, B, prec, name), r in get.items():
        if name != "perfmlp":
            continue
        t, g = get.get((H, B, prec, "pytorch")), get[(H, B, prec, "GEMMs alone")]
        ratio = f"{t['median_us'] / r['median_us']:.2f}" if t else "-"
        lines.append(f"| {H} | {B} | {prec} | {cell(r)} | {cell(t)} | {ratio} | {cell(g)} ({g['gemm_tflops']:.0f}) | "
                     f"{r['median_us'] / g['median_us']:.2f} |")
    return lines


def input_table(rows: list) -> list[str]:
    """The input pipeline's lines: per execution mode, each transfer against
    resident and against pageable, and the host's staging where staged."""
    inp = [r for r in rows if r.get("part") == "input"]
    if not inp:
        return []
    lines = ["", f"Input pipeline, H=512, B=3200, float32, NCCL, {inp[0]['positions']} batch positions "
             "(x resident, pageable over it: times; staging: the host's staging time per batch and its rate)", "",
             "| exec | batch transfer | us per step [range] | spread | x resident | pageable over it | "
             "staging us (GB/s) |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for ex in dict.fromkeys(r["exec"] for r in inp):
        mine = {r["variant"]: r for r in inp if r["exec"] == ex}
        res, pag = mine.get("resident"), mine.get("pageable")
        for name, r in mine.items():
            stage = f"{r['stage_us']:.0f} ({r['stage_gb_per_s']:.1f})" if "stage_us" in r else "-"
            lines.append(f"| {ex} | {name} | {r['median_us']:.1f} [{r['min_us']:.1f}-{r['max_us']:.1f}] | "
                         f"{r['spread']:.3f} | {r['median_us'] / res['median_us']:.3f} | "
                         f"{pag['median_us'] / r['median_us']:.2f} | {stage} |")
    return lines


def write(out: Path, rows: list, command: str, cp) -> None:
    out.mkdir(parents=True, exist_ok=True)
    try:
        # PERFMLP_GIT_COMMIT where the copy's .git is not the code's (the GPU machine's copy)
        commit = os.environ.get("PERFMLP_GIT_COMMIT") or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
            cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        commit = ""
    props = cp.cuda.runtime.getDeviceProperties(0)
    meta = {"machine": f"{props['name'].decode()} ({platform.node()})", "date": dt.date.today().isoformat(),
            "commit": commit or "unknown", "command": f"python {command}"}
    (out / "precision_step.json.tmp").write_text(json.dumps({**meta, "rows": rows}, indent=1))
    (out / "precision_step.json.tmp").replace(out / "precision_step.json")
    lines = ["# Step time per precision, one GPU", "", f"machine: {meta['machine']}, date: {meta['date']}, "
             f"commit: {meta['commit']}", f"command: `{meta['command']}`"]
    lines += precision_table([r for r in rows if r.get("part") == "precision"])
    lines += input_table(rows)
    (out / "precision_step.md.tmp").write_text("\n".join(lines) + "\n")
    (out / "precision_step.md.tmp").replace(out / "precision_step.md")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
