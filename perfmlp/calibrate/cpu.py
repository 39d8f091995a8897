"""A CPU as a machine: what a NumPy step of this trainer spends, measured with microbenchmarks and written
as a machine file (model/predict/cpu.py reads it): `mpiexec -n P python -m perfmlp.calibrate.cpu --out
FILE.yaml`. At each BLAS thread count of --threads, one rank alone and all P ranks at once on the same
cores (the slowest rank's): each GEMM's rate and the other kernels' pass bandwidth at the trainer's
shapes, and the trainer's own Python per kernel, the tracer's host time per batch and MPI allreduce (all
three timed in cpu_bench.py); a large GEMM and a triad (the compute and memory roofs); a small NumPy
call's host time; and the spread of each (SOURCES). --quick measures a few small shapes in seconds."""
from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from statistics import median

import numpy as np

from .. import names as N
from ..config import Config
from ..model.costs import grad_buffer_bytes, itemsize, kernel_name, kernel_shape, op_cost, step_kernels
from ..blas import cpu_cores, cpu_name, find_blas
from ..gpu.timing import wall_s
from .cpu_bench import GEMM, QUICK_SIZES, SIZES, exchange, quiet_barrier, time_step, trace_host_s
from . import write_machine
from .spread import ratios, spread_table

D, C = Config.input_size, Config.num_classes    # the trainer's input and output layers
HIDDEN = (64, 128, 256, 512, 1024)
LOCAL = (25, 100, 400, 1600, 3200)
QUICK = {"hidden": (16, 32), "local": (8, 25), "budget_s": 0.01, "peak_n": 128, "triad_n": 1 << 16,
         "sizes": QUICK_SIZES, "trace_rounds": (3, 20)}
FULL = {"budget_s": 0.1, "peak_n": 1024, "triad_n": 1 << 23, "sizes": SIZES, "trace_rounds": (7, 200)}
SOURCES = ("blas", "memory", "step", "host", "collective")   # the spread's sources (predict/cpu.py prices them)


def rates_of(res: dict, sizes, precision: str, b: int, threads: int, ranks: int) -> tuple[list, list]:
    """gemm_flops_per_s and pass_bytes_per_s entries from one time_step result."""
    w = itemsize(precision)
    step_bytes = {(kernel_name(k), kernel_shape(k)): sum(op_cost(op, s, w)[1] for op, s in k)   # costs' bytes
                  for ks in step_kernels(sizes, b, None, w, fuse_output=False).values() for k in ks}
    gemm, passes = [], []
    for (name, shape), s in res["kernels"].items():
        tag = {"precision": precision, "threads": threads, "ranks": ranks}
        if name == GEMM:
            m, n, k = shape
            gemm.append({"m": m, "n": n, "k": k, **tag, "flops_per_s": op_cost(GEMM, shape, w)[0] / s})
        else:
            nbytes = step_bytes[name, shape]
            passes.append({"kernel": name, "shape": list(shape), **tag, "bytes": nbytes, "bytes_per_s": nbytes / s})
    return gemm, passes


def _slowest(comm, res: dict) -> dict:
    """Each kernel's and the step's slowest rank's median (a collective)."""
    every = comm.allgather({"kernels": res["kernels"], "step_s": res["step_s"]})
    return {**res, "kernels": {k: max(r["kernels"][k] for r in every) for k in res["kernels"]},
            "step_s": max(r["step_s"] for r in every)}


def step_sweep(comm, ranks: int, threads: int, grid, budget_s: float, spread: dict) -> dict:
    """The kernels of every (precision, H, b) of `grid`, `ranks` ranks measuring at once (the others wait idle)."""
    out = {"gemm_flops_per_s": [], "pass_bytes_per_s": [], "_host": []}
    group = comm.Split(0 if comm.Get_rank() < ranks else 1, comm.Get_rank())
    if comm.Get_rank() < ranks:
        for precision, H, b in grid:
            sizes = (D, H, C)
            res = _slowest(group, time_step(sizes, precision, b, budget_s, start=group.Barrier))
            g, p = rates_of(res, sizes, precision, b, threads, ranks)
            out["gemm_flops_per_s"] += g
            out["pass_bytes_per_s"] += p
            out["_host"].append(res["host_s"])
            for source, key in (("blas", "gemm_steps"), ("memory", "pass_steps"), ("step", "plain_steps")):
                spread[source] += ratios(res[key])
    group.Free()
    quiet_barrier(comm)
    return out


def peak_rate(precision: str, n: int, reps: int = 3) -> float:
    """FLOP/s of an n x n x n GEMM at this process's BLAS threads (the best of reps)."""
    rng = np.random.default_rng(0)
    a, b = (rng.random((n, n)).astype(precision) for _ in range(2))
    c = np.empty((n, n), dtype=precision)
    np.matmul(a, b, out=c)
    best = min(wall_s(lambda: np.matmul(a, b, out=c)) for _ in range(reps))
    return 2 * n ** 3 / best


def triad_bandwidth(n: int, reps: int = 5) -> float:
    """Bytes/s of c = a + b over float64 arrays of n elements (two read, one written)."""
    a, b, c = np.ones(n), np.ones(n), np.empty(n)
    np.add(a, b, out=c)
    return 3 * 8 * n / min(wall_s(lambda: np.add(a, b, out=c)) for _ in range(reps))


def op_host_times(calls: int = 2000, blocks: int = 7) -> list[float]:
    """Seconds per call of a one-element np.add into its output, in blocks."""
    x, y, z = np.ones(1), np.ones(1), np.empty(1)
    return [wall_s(lambda: [np.add(x, y, out=z) for _ in range(calls)]) / calls for _ in range(blocks)]


def measure(comm, hidden, local, precisions, threads, setting: dict, log) -> dict:
    """Every measurement in the module docstring's order; rank 0's results ({} on the other ranks)."""
    blas, rank, P = find_blas(), comm.Get_rank(), comm.Get_size()
    if blas is None and len(threads) > 1:
        raise RuntimeError("no BLAS thread-count call found: run one --threads value at a time, "
                           "with OPENBLAS_NUM_THREADS (or MKL_NUM_THREADS) set before the run")
    grid = [(p, H, b) for p in precisions for H in hidden for b in local]
    spread = {s: [] for s in SOURCES}
    res: dict = {"gemm_flops_per_s": [], "pass_bytes_per_s": [], "peaks": [], "_host": [],
                 "default_threads": (blas.threads() if blas is not None else None) or cpu_cores()}
    t0 = time.perf_counter()
    for t in threads:
        if blas is not None:
            blas.set_threads(t)
        for ranks in sorted({1, P}):
            part = step_sweep(comm, ranks, t, grid, setting["budget_s"], spread)
            for k in ("gemm_flops_per_s", "pass_bytes_per_s"):
                res[k] += part[k]
            res["_host"] += part["_host"] if ranks == 1 else []
            log(f"threads {t}, {ranks} rank(s) at once: {len(part['gemm_flops_per_s'])} GEMMs, "
                f"{len(part['pass_bytes_per_s'])} passes timed ({time.perf_counter() - t0:.0f} s)")
        if rank == 0:
            res["peaks"] += [{"precision": p, "threads": t, "flops_per_s": peak_rate(p, setting["peak_n"])}
                             for p in precisions]
        quiet_barrier(comm)
    if blas is not None:
        blas.set_threads(max(threads))
    grads = {grad_buffer_bytes((D, H, C), itemsize(p)) for p in precisions for H in hidden}
    ex = exchange(comm, sorted(set(setting["sizes"]) | grads), setting["budget_s"], log)
    spread["collective"] = ex.pop("_spread_collective")
    res.update(ex)
    if rank != 0:
        return {}
    res["mem_bw_bytes_per_s"] = triad_bandwidth(setting["triad_n"])
    res["trace_batch_host_s"] = trace_host_s(log, *setting["trace_rounds"])
    host = op_host_times()
    res["op_host_s"], spread["host"] = float(median(host)), ratios(host)
    res["spread"] = spread_table(spread, SOURCES)
    res["blas"] = blas.words() if blas is not None else "unknown BLAS (threads fixed at load)"
    return res


def kernel_host_s(excess: list[float], log) -> float:
    """The trainer's own Python per kernel: the median of the one-rank sweeps' host_s (at least 0, said)."""
    m = float(median(excess)) if excess else 0.0
    if m < 0:
        log(f"the timed step's time beyond its kernels is negative ({m * 1e6:.2f} us a kernel): written as 0")
    return max(m, 0.0)


def machine_values(res: dict, name: str | None, procs: int, threads, log) -> dict:
    """The CPU machine file's mapping (fields: predict/cpu.py FIELDS)."""
    cpu, date = cpu_name(), dt.date.today().isoformat()
    top = max(threads)
    out = {"name": name or f"{cpu} x {cpu_cores()} cores (calibrated)", "backend": N.NUMPY,
           "source": f"measured by perfmlp.calibrate.cpu (microbenchmarks only) on {cpu}, {cpu_cores()} cores, "
                     f"{procs} rank(s), {date}; {res['blas']}; peak_flops_per_s_* is a large GEMM's rate at "
                     f"{top} threads, mem_bw_bytes_per_s a triad's, not a datasheet's",
           "date": date, "cpu_name": cpu, "cores": cpu_cores(), "calibrated_ranks": procs,
           "default_threads": res["default_threads"], "blas": res["blas"]}
    for p in {e["precision"] for e in res["peaks"]}:
        out[f"peak_flops_per_s_{p}"] = max(e["flops_per_s"] for e in res["peaks"] if e["precision"] == p)
    out.update(mem_bw_bytes_per_s=res["mem_bw_bytes_per_s"], op_host_s=res["op_host_s"],
               kernel_host_s=kernel_host_s(res["_host"], log), trace_batch_host_s=res["trace_batch_host_s"])
    out.update({k: float(res[k]) for k in ("mpi_alpha_s", "mpi_bw_bytes_per_s") if k in res})
    out.update({k: res[k] for k in ("gemm_flops_per_s", "pass_bytes_per_s", "allreduce_s", "spread")})
    return _plain(out)


def _plain(x):
    """Python numbers for YAML (NumPy scalars written as plain floats and ints)."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return float(f"{float(x):.6g}")
    return int(x) if isinstance(x, np.integer) else x


def _ints(flag: str, text: str) -> tuple[int, ...]:
    try:
        out = tuple(int(v) for v in text.replace(",", " ").split())
    except ValueError:
        raise ValueError(f"{flag}: {text!r} is not a list of integers") from None
    if not out or min(out) < 1:
        raise ValueError(f"{flag}: {text!r}: give positive integers")
    return out


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m perfmlp.calibrate.cpu",
                                 description="Measure this CPU with microbenchmarks of the NumPy step and write a "
                                             "machine file (under mpiexec -n P for what P local ranks share)")
    ap.add_argument("--out", required=True, help="machine file to write (YAML)")
    ap.add_argument("--name", default=None, help="machine name (default: the CPU's name and cores)")
    ap.add_argument("--hidden", default=None, help="hidden sizes H (comma-separated)")
    ap.add_argument("--local-batch", default=None, help="per-rank batches (comma-separated)")
    ap.add_argument("--precisions", default=f"{N.FLOAT32},{N.FLOAT64}", help="float32 and/or float64")
    ap.add_argument("--threads", default=None, help="BLAS threads per rank to measure (default: 1 to the cores)")
    ap.add_argument("--quick", action="store_true", help="a few small shapes, in seconds (for tests)")
    return ap


def options(a) -> tuple:
    """(hidden, local, precisions, threads, setting) from the parsed flags; ValueError names the bad one."""
    setting = {**FULL, **(QUICK if a.quick else {})}
    if a.quick:
        hidden, local = setting.get("hidden"), setting.get("local")
    else:
        hidden = HIDDEN if a.hidden is None else _ints("--hidden", a.hidden)
        local = LOCAL if a.local_batch is None else _ints("--local-batch", a.local_batch)
    precisions = tuple(p for p in a.precisions.split(",") if p)
    bad = [p for p in precisions if p not in (N.FLOAT32, N.FLOAT64)]
    if bad or not precisions:
        raise ValueError(f"--precisions: {a.precisions!r}: a CPU runs {N.FLOAT32} and {N.FLOAT64}")
    threads = _ints("--threads", a.threads) if a.threads else (
        (1,) if a.quick else tuple(sorted({1, *(2 ** i for i in range(1, 8) if 2 ** i < cpu_cores()), cpu_cores()})))
    return hidden, local, precisions, threads, setting


def main(argv=None) -> int:
    return calibrate(_parser().parse_args(argv))


def calibrate(a) -> int:
    """The calibration the flags `a` ask for (this parser's, or perfmlp.calibrate's on a machine without a GPU)."""
    try:
        hidden, local, precisions, threads, setting = options(a)
    except ValueError as e:
        print(f"perfmlp.calibrate.cpu: error: {e}", file=sys.stderr)
        return 2
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    log = (lambda m: print(m, flush=True)) if comm.Get_rank() == 0 else (lambda m: None)
    try:
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            res = measure(comm, hidden, local, precisions, threads, setting, log)
        if comm.Get_rank() == 0:
            values = machine_values(res, a.name, comm.Get_size(), threads, log)
            write_machine(values, a.out, "perfmlp.calibrate.cpu", check=False)   # one precision: not a loadable file
            log(f"wrote {a.out}")
    except Exception as e:   # one line; the other ranks, which may wait in a collective, end with it
        print(f"perfmlp.calibrate.cpu: error: rank {comm.Get_rank()}: {type(e).__name__}: {e}".splitlines()[0],
              file=sys.stderr, flush=True)
        comm.Abort(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
