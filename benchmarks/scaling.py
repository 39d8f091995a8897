"""Time per batch on 1 and P GPUs: perfmlp's graph step with NCCL (data
parallelism, the sliced first layer with K = 2 and auto, model parallelism)
beside PyTorch (DDP eager, DDP's whole step in one CUDA graph), fp32 and
bf16, strong (B = 3200 split) and weak (3200 per GPU), and the one GPU.

    python benchmarks/scaling.py --mpirun "$MPIRUN" --procs 1,2 --out DIR [--quick]

starts each run (`mpirun -n P ... --run perfmlp|model|torch`), appending to
DIR/scaling.jsonl; writes DIR/scaling.md (again: `--table DIR/scaling.jsonl`).

Method: H = 512, D = 784, C = 10, resident data (4 batch positions, cycled,
copied into the graph's static inputs before each replay, perfmlp's as
PyTorch's), the batch split over the ranks (model parallelism: every rank
the whole batch, H/P hidden units; fp32 only, as the trainer refuses mixed
precision there). On one GPU: B = 3200 and 3200 / P for each P; on P GPUs
B = 3200 (strong) and 3200 P (weak). PyTorch: nn.Linear and SGD with weight
decay, TF32 off; bf16 under AMP autocast, float32 inputs and master
weights; at P > 1 DDP (NCCL), its graph form built and warmed up on a side
stream, captured with torch.cuda.graph (benchmarks/graph_step.py). Each
variant runs --warmup steps (captures, NCCL set-up), then --rounds rounds:
in each, every variant of the run in turn runs --steps steps between two
synchronisations of all ranks (device sync, MPI barrier): the wall time on
the slowest rank. The driver runs the implementations in turn, again while
--budget-s allows; the table pools every round of every run.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from perfmlp import names as N  # noqa: E402
from perfmlp.gpu.timing import rounds, summary  # noqa: E402

H, PER_GPU = 512, 3200
IMPLS = ("perfmlp", "model", "torch")         # one process each: model parallelism makes communicators of its own
PERFMLP = ("perfmlp data parallel", "perfmlp sliced, K=2", "perfmlp sliced, K=auto")
MODEL = "perfmlp model parallel"
BASE = PERFMLP[0]                             # the one-GPU step perfmlp's ratios are taken against
DDP_GRAPH = "pytorch graph"                  # DDP at P > 1, as "pytorch eager"
ROWS = (*PERFMLP, MODEL, "pytorch eager", DDP_GRAPH)
# the targets (set for p = 4): weak efficiency, bf16 strong speed-up, perfmlp over DDP's graph step
WEAK_TARGET = {N.FLOAT32: 0.95, N.BF16: 0.90}
STRONG_TARGET = {N.BF16: 1.3}
DDP_TARGET = {N.FLOAT32: 1.7, N.BF16: 2.0}
QUICK, FULL = dict(steps=100, rounds=3, warmup=10, passes=1), dict(steps=300, rounds=7, warmup=20, passes=2)


def batches(P: int, procs: list[int]) -> list[int]:
    """Global batches on P GPUs: one GPU, 3200 and 3200/p for each p; P GPUs, 3200 split and 3200 per GPU."""
    if P == 1:
        return list(dict.fromkeys([PER_GPU] + [PER_GPU // p for p in procs if p > 1]))
    return [PER_GPU, PER_GPU * P]


def plan(procs: list[int], precisions: list[str]) -> list[tuple[int, str]]:
    """(P, implementation) of one pass, in order (model parallelism at P > 1, in fp32)."""
    return [(p, impl) for p in procs for impl in IMPLS
            if impl != "model" or (p > 1 and N.FLOAT32 in precisions)]


# ---- one run, under mpirun -n P ---------------------------------------------------------------

def perfmlp_backend(world, size: int, precision: str, slices: str, parallel: str):
    """perfmlp's graph-mode backend with NCCL over resident data of `size` x 4 samples, and its K."""
    from graph_step import NPOS, data
    from perfmlp.backend import build
    from perfmlp.config import from_mapping
    from perfmlp.mixed import to_storage
    from perfmlp.mlp import init_weights
    from perfmlp.slices import resolve
    x, y = data(size)
    cfg = from_mapping(dict(hidden_sizes=[H], batch_size=size, n_train=size * NPOS, backend=N.CUPY, comm=N.NCCL,
                            batch_transfer=N.RESIDENT, exec=N.GRAPH, precision=precision, trace=False,
                            slices=slices, parallel=parallel))
    be = build(cfg, world, to_storage(x, precision), to_storage(y, precision))
    be.net.set_params(init_weights(cfg.layer_sizes, 0))
    gpu = be.xp.cuda.runtime.getDeviceProperties(be.xp.cuda.Device().id)["name"].decode()
    return be, resolve(cfg, world.size, N.CUPY, N.GRAPH, gpu)


def perfmlp_run(world, be, B: int):
    """run(n): n steps of global batch B on `be` (its net's 1/B set first, as the trainer sets a short batch's)."""
    from graph_step import NPOS
    from perfmlp.model.costs import piece
    from perfmlp.step import step
    from perfmlp.trace.format import Counts
    lo, hi = piece(B, *be.data_group) if be.data_group else piece(B, world.size, world.rank)
    counts, nophase, k = Counts(), (lambda name: contextlib.nullcontext()), [0]

    def run(n):
        be.net.global_batch = B
        with be.stream:
            for _ in range(n):
                off = (k[0] % NPOS) * B
                k[0] += 1
                step(be.net, be.batches, be.reducer, off + lo, off + hi, nophase, counts, be.graph, be.parts)
                counts.reset()
    return run


def variants(impl: str, world, procs: list[int], precisions: list[str]) -> dict:
    """(variant, precision, B) -> (run(n), sync, K or None) of one implementation on this world."""
    P, out = world.size, {}
    for prec in precisions:
        for B in batches(P, procs):
            if impl == "perfmlp":
                for name, slices in zip(PERFMLP, ("1", "2", N.AUTO)):
                    be, k = perfmlp_backend(world, B, prec, slices, N.DATA)
                    out[(name, prec, B)] = (perfmlp_run(world, be, B), be.sync, k)
            elif impl == "torch":
                from graph_step import torch_variants
                for name, (run, sync) in torch_variants(world, (H,), B, False, prec == N.BF16).items():
                    out[(name.replace(" (DDP)", ""), prec, B)] = (run, sync, None)
    if impl == "model" and N.FLOAT32 in precisions:
        # one backend for both batches (buffers for the larger; a graph per batch), so one set of communicators
        be, _ = perfmlp_backend(world, max(batches(P, procs)), N.FLOAT32, "1", N.MODEL)
        for B in batches(P, procs):
            out[(MODEL, N.FLOAT32, B)] = (perfmlp_run(world, be, B), be.sync, None)
    return out


def run_main(a) -> int:
    """One implementation's variants on this MPI world, interleaved in rounds; JSON lines from rank 0."""
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")   # DDP inside a graph capture
    try:
        import cupy as cp
    except ImportError:
        sys.exit(f"--run {a.run}: needs CuPy and a GPU (no cupy here)")
    from perfmlp.comm import close_communicators, make_world
    world = make_world()
    cp.cuda.Device(world.rank % cp.cuda.runtime.getDeviceCount()).use()
    meta = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"), "host": platform.node(),
            "gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "procs": world.size,
            "perfmlp_git": os.environ.get("PERFMLP_GIT_COMMIT"), "cupy": cp.__version__, "impl": a.run,
            "steps": a.steps, "rounds": a.rounds, "warmup": a.warmup,
            "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}}
    if a.run == "torch":
        import torch
        torch.cuda.set_device(world.rank % torch.cuda.device_count())
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")   # torch.distributed's rendezvous (one host)
        os.environ["MASTER_PORT"] = str(world.comm.bcast(_free_port() if world.rank == 0 else None))
        meta["torch"] = torch.__version__
    from graph_step import step_s
    vs = variants(a.run, world, _ints(a.procs), a.precisions.split(","))
    for run, sync, _ in vs.values():
        run(a.warmup)
        sync()
    times = rounds({key: (lambda run=run, sync=sync: step_s(world, run, sync, a.steps))
                    for key, (run, sync, _) in vs.items()}, a.rounds)
    if world.rank == 0:
        with open(Path(a.out) / "scaling.jsonl", "a") as f:
            for (name, prec, B), ts in times.items():
                us = [t * 1e6 for t in ts]
                s = summary(us)
                f.write(json.dumps({**meta, "variant": name, "precision": prec, "B": B, "us_per_batch": us,
                                    "median_us": s.median, "slices": vs[(name, prec, B)][2]}) + "\n")
                print(f"p={world.size} {prec} B={B} {name}: median {s.median:.1f} us [{s.min:.1f}-{s.max:.1f}]")
    if a.run == "torch" and world.size > 1:
        import torch.distributed as dist
        dist.destroy_process_group()
    close_communicators()   # before MPI ends, on every rank
    return 0


def _free_port() -> int:
    with __import__("socket").create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]


# ---- the driver ---------------------------------------------------------------------------------

def launch(cmd: list[str], timeout_s: float) -> int:
    """Run cmd in a process group of its own: its return code, 124 past
    timeout_s. Past it, or should the driver end first (SIGTERM, Ctrl-C),
    SIGTERM to the group (mpirun ends its ranks), SIGKILL 10 s later."""
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return 124
    finally:
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            if proc.returncode is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=wait)


def drive(a) -> int:
    procs, precisions, out = _ints(a.procs), a.precisions.split(","), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    mpirun = shlex.split(a.mpirun)
    jsonl = out / "scaling.jsonl"
    if jsonl.is_file():   # the table is of this run's rounds only
        jsonl.replace(out / "scaling.previous.jsonl")
        print(f"{jsonl}: the previous run's lines moved to scaling.previous.jsonl", flush=True)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))   # a timeout's: ends the run too
    t0, took = time.monotonic(), {}
    try:
        for n, (P, impl) in ((n, job) for n in range(a.passes) for job in plan(procs, precisions)):
            if n > 0 and time.monotonic() - t0 + took.get((P, impl), a.timeout_s) > a.budget_s:
                print(f"pass {n + 1}: p={P} {impl} left out: it would pass the {a.budget_s:.0f} s budget", flush=True)
                continue
            cmd = [*mpirun, "-n", str(P), sys.executable, str(Path(__file__).resolve()), "--run", impl,
                   "--procs", a.procs, "--precisions", a.precisions, "--out", str(out),
                   "--steps", str(a.steps), "--rounds", str(a.rounds), "--warmup", str(a.warmup)]
            start = time.monotonic()
            rc = launch(cmd, a.timeout_s)
            took[(P, impl)] = time.monotonic() - start
            if rc:
                print(f"p={P} {impl}: {'timed out after' if rc == 124 else f'exit {rc} after'} "
                      f"{took[(P, impl)]:.0f} s; the table goes on without it", flush=True)
    except SystemExit:   # SIGTERM (an outer timeout): the run in flight ended, the table of those done
        print("ended by SIGTERM: the table of the runs done", flush=True)
    if not jsonl.is_file():
        print(f"no run wrote {jsonl}", file=sys.stderr)
        return 1
    text = table(jsonl, f"python benchmarks/scaling.py {shlex.join(a.argv)}")
    (out / "scaling.md").write_text(text)
    print(text)
    return 0


# ---- the table ----------------------------------------------------------------------------------

def load(path: Path) -> list[dict]:
    """The file's JSON lines (a bad line or none: SystemExit with one line naming the file)."""
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SystemExit(f"{path}: not JSON lines ({e})") from None
    return rows or sys.exit(f"{path}: no rows")


def cells(rows: list[dict]) -> dict:
    """(variant, precision, p, B) -> every round's us of every run, pooled; and its slice counts."""
    out: dict = {}
    for r in rows:
        c = out.setdefault((r["variant"], r["precision"], r["procs"], r["B"]), {"us": [], "k": set()})
        c["us"].extend(r["us_per_batch"])
        if r.get("slices") and "auto" in r["variant"]:
            c["k"].add(r["slices"])
    return out


def columns(procs: list[int]) -> list[tuple[str, int, int]]:
    """(heading, p, B) of the time table's columns."""
    cols = [(f"1 GPU, B={PER_GPU}", 1, PER_GPU)]
    for P in procs:
        if P > 1:
            cols += [(f"1 GPU, B={PER_GPU // P}", 1, PER_GPU // P), (f"p={P}, B={PER_GPU} split", P, PER_GPU),
                     (f"p={P}, {PER_GPU} per GPU", P, PER_GPU * P)]
    return list(dict.fromkeys(cols))


def _cell(c: dict | None) -> str:
    if not c or not c["us"]:
        return "-"
    s = summary(c["us"])
    k = f" K={','.join(map(str, sorted(c['k'])))}" if c["k"] else ""
    return f"{s.median:.1f} [{s.min:.1f}-{s.max:.1f}]{k}"


def _ratio(num: dict | None, den: dict | None, target: float | None, pct: bool = False) -> str:
    """median(num) / median(den), with the target met or missed."""
    if not num or not den or not num["us"] or not den["us"]:
        return "-"
    r = median(num["us"]) / median(den["us"])
    text = f"{100 * r:.1f}%" if pct else f"{r:.2f}x"
    if target is None:
        return text
    return text + (" (met)" if r >= target else f" (missed: {f'{100 * target:.0f}%' if pct else f'{target}x'})")


def ratio_rows(cs: dict, procs: list[int], prec: str) -> list[str]:
    """Per variant: over PyTorch's graph step on one GPU, then per P > 1 the weak
    efficiency and strong speed-up against the one-GPU step, and over DDP's graph step."""
    lines = []
    for v in ROWS:
        if not any(key[0] == v and key[1] == prec for key in cs):
            continue
        ours = v.startswith("perfmlp")
        one = cs.get((BASE if ours else v, prec, 1, PER_GPU))
        vals = [_ratio(cs.get((DDP_GRAPH, prec, 1, PER_GPU)), cs.get((v, prec, 1, PER_GPU)),
                       DDP_TARGET.get(prec)) if ours else "-"]
        for P in procs[1:]:
            strong, weak = cs.get((v, prec, P, PER_GPU)), cs.get((v, prec, P, PER_GPU * P))
            vals += [_ratio(one, weak, WEAK_TARGET.get(prec) if ours else None, pct=True),
                     _ratio(one, strong, STRONG_TARGET.get(prec) if ours else None)]
            vals += [_ratio(cs.get((DDP_GRAPH, prec, P, B)), mine, DDP_TARGET.get(prec)) if ours else "-"
                     for B, mine in ((PER_GPU, strong), (PER_GPU * P, weak))]
        lines.append(f"| {prec} | {v} | " + " | ".join(vals) + " |")
    return lines


def table(path: Path, command: str | None = None) -> str:
    rows = load(path)
    cs = cells(rows)
    procs = sorted({r["procs"] for r in rows} | {1})
    meta = rows[0]
    runs = len({(r["procs"], r["impl"], r["date"]) for r in rows})
    cols = columns(procs)
    torch = next((r["torch"] for r in rows if r.get("torch")), None)
    head = [f"# Scaling: time per batch on 1 to {procs[-1]} GPUs, perfmlp against PyTorch", "",
            f"{meta['gpu']}, {meta.get('host', '')}, {meta['date']}, commit {meta.get('perfmlp_git')}, "
            f"CuPy {meta.get('cupy')}" + (f", PyTorch {torch}." if torch else "."), "",
            f"    {command or 'python benchmarks/scaling.py --table ' + str(path)}", "",
            f"H={H}, D=784, C=10, resident data, graph mode, NCCL; {meta['steps']} steps per measurement between "
            f"synchronisations of all ranks, wall time on the slowest rank; {meta['rounds']} rounds per run after "
            f"{meta['warmup']} warm-up steps, {runs} runs (implementations in turn, one process each); "
            "median over every round and [min-max], us per batch. PyTorch at p > 1 is DDP; its graph form "
            "is the whole step in one CUDA graph (bf16: AMP autocast). Model parallelism: fp32 only. "
            "K: the slice count `auto` chose.", ""]
    out = head + ["| precision | variant | " + " | ".join(c[0] for c in cols) + " |",
                  "| --- " * (2 + len(cols)) + "|"]
    precs = [p for p in (N.FLOAT32, N.BF16) if any(k[1] == p for k in cs)]
    for prec in precs:
        for v in ROWS:
            if any(k[0] == v and k[1] == prec for k in cs):
                out.append(f"| {prec} | {v} | " + " | ".join(_cell(cs.get((v, prec, p, B))) for _, p, B in cols)
                           + " |")
    out += ["", TARGETS, "", *ratio_table(cs, procs, precs)]
    return "\n".join(out) + "\n"


TARGETS = ("Targets (set for p = 4; shown at each p measured): weak-scaling efficiency "
           f"(the one-GPU step at {PER_GPU}, data parallelism's for every perfmlp row, over the P-GPU weak step) "
           ">= 95% fp32, >= 90% bf16; bf16 strong speed-up over that one-GPU step >= 1.3x; perfmlp over "
           "PyTorch's graph step (DDP at p > 1) >= 1.7x fp32, >= 2x bf16. PyTorch rows: its own one-GPU step.")


def ratio_table(cs: dict, procs: list[int], precs: list[str]) -> list[str]:
    """The ratios against the targets, as a Markdown table (its rows: ratio_rows)."""
    rcols = ["over PyTorch graph, 1 GPU"]
    for P in procs[1:]:
        rcols += [f"weak efficiency p={P}", f"strong speed-up p={P}", f"over DDP graph p={P} split",
                  f"over DDP graph p={P} per GPU"]
    out = ["| precision | variant | " + " | ".join(rcols) + " |", "| --- " * (2 + len(rcols)) + "|"]
    for prec in precs:
        out += ratio_rows(cs, procs, prec)
    return out


def _ints(text: str) -> list[int]:
    return sorted({int(x) for x in text.split(",")})


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder of scaling.jsonl and scaling.md")
    ap.add_argument("--table", metavar="JSONL", help="only write the table (beside the file) from its JSON lines")
    ap.add_argument("--run", choices=IMPLS, help="one run of an implementation (under mpirun -n P)")
    ap.add_argument("--mpirun", default=os.environ.get("MPIRUN", "mpirun"), help="the MPI launcher with its flags")
    ap.add_argument("--procs", default="1,2", help="GPU counts, comma-separated (1 is always measured)")
    ap.add_argument("--precisions", default=f"{N.FLOAT32},{N.BF16}")
    ap.add_argument("--quick", action="store_true", help=f"the short form: {QUICK}")
    for k, v in FULL.items():
        ap.add_argument(f"--{k}", type=int, help=f"default {v} (--quick: {QUICK[k]})")
    ap.add_argument("--budget-s", type=float, default=330.0, help="a later pass only while within it (default 330)")
    ap.add_argument("--timeout-s", type=float, default=150.0, help="one run's limit (default 150)")
    a = ap.parse_args(argv)
    a.argv = list(sys.argv[1:] if argv is None else argv)
    for k, v in (QUICK if a.quick else FULL).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
        if getattr(a, k) < 1:
            ap.error(f"--{k} {getattr(a, k)}: give 1 or more")
    procs = _ints(a.procs) if all(x.isdigit() for x in a.procs.split(",")) else [0]
    if procs[0] < 1 or any(PER_GPU % p for p in procs):
        ap.error(f"--procs {a.procs}: GPU counts such as 1,2, each dividing {PER_GPU}")
    a.procs = ",".join(map(str, sorted(set(procs) | {1})))
    bad = [p for p in a.precisions.split(",") if p not in (N.FLOAT32, N.BF16)]
    if bad:
        ap.error(f"--precisions {a.precisions}: {N.FLOAT32} and {N.BF16} only")
    if a.table is None and a.out is None:
        ap.error("give --out DIR (or --table JSONL)")
    return a


def main(argv=None) -> int:
    a = parse(argv)
    if a.table:
        text = table(Path(a.table))
        (Path(a.table).parent / "scaling.md").write_text(text)
        print(text)
        return 0
    if a.run:
        return run_main(a)
    return drive(a)


if __name__ == "__main__":
    sys.exit(main())
