"""`python -m perfmlp.calibrate --out models/NAME.yaml`: the command line,
the order of the measurements and the machine file written. Without CuPy or
a GPU it calibrates the CPU instead (calibrate/cpu.py) with the same flags."""
from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from ..errors import Parser
from ..config import Config
from ..model.costs import grad_buffer_bytes, itemsize
from ..model.machine import load_machine
from ..model.machine.fields import BASE_SCALARS, MEASURED_ONLY, TABLES
from . import write_machine
from .collectives import collective_times, staged_wait
from .copies import copy_latency, device_bandwidth, host_bandwidth, host_copies, static_copies
from .gemm import peak_rates, step_network, step_rates
from .host import copied_launch_factors, dispatch_size_factors, host_dispatch, mean_dispatch
from .kernels import event_gap, kernel_gaps
from .pipeline import prefetch_points
from .precision import TENSOR, precision_rates, stage_rate
from .spread import gpu_rounds, spread_table, spread_words
from .. import names as N

# the sliced first layer (--slices K) runs its GEMMs at H / K rows: timed at these K too
SLICED_K = (2, 4)


def with_slices(hidden) -> list[int]:
    """The hidden sizes whose step GEMMs are timed: each H and its slices' rows."""
    return sorted(set(hidden) | {h // k for h in hidden for k in SLICED_K if h // k})


def gemms(cp, hidden, local_batches, precisions, log, gemm_kernels=()) -> dict:
    """gemm_flops_per_s, kernel_s (each H of with_slices(hidden), batch, precision) and tensor peaks."""
    hidden = with_slices(hidden)
    res = step_rates(cp, hidden, local_batches, [p for p in precisions if p not in TENSOR], log, gemm_kernels)
    tensor = precision_rates(cp, hidden, local_batches, precisions, log)   # tf32, bf16, fp16 where asked for
    for k in ("gemm_flops_per_s", "kernel_s"):
        res[k] += tensor.pop(k)
    res.update(tensor)
    return res


def merged(old: dict, res: dict, gpu_name: str, hidden) -> dict:
    """--gemm-only: an existing machine file's values with the GEMM and kernel entries of `res` in place
    of those of the same shape, its source saying what was added."""
    keys = {"gemm_flops_per_s": ("m", "n", "k", "precision", "kernel"), "kernel_s": ("kernel", "shape", "precision")}
    out = dict(old)
    for table, fields in keys.items():
        def shape(e):
            return tuple(str(e.get(f, N.CUBLAS if f == "kernel" else "")) for f in fields)
        new = {shape(e): e for e in res[table]}
        out[table] = [e for e in old.get(table, []) if shape(e) not in new] + list(new.values())
    out["source"] = (f"{old.get('source', '')}; gemm_flops_per_s and kernel_s at H = "
                     f"{', '.join(map(str, with_slices(hidden)))} measured by perfmlp.calibrate --gemm-only on "
                     f"{gpu_name}, {dt.date.today().isoformat()}")
    return out


def single_gpu(cp, hidden, local_batches, precisions, log, gemm_kernels=()) -> dict:
    """What rank 0's GPU measures alone."""
    D, C = Config.input_size, Config.num_classes
    res = peak_rates(cp, precisions, log)
    res.update(gemms(cp, hidden, local_batches, precisions, log, gemm_kernels))
    res.update(kernel_gaps(cp, log))
    res["_spread_gpu"] = gpu_rounds(cp, *step_network(cp, (D, max(hidden), C), "float32", max(local_batches)))
    res.update(device_bandwidth(cp, log))
    res["d2d_copy_s"] = static_copies(cp, local_batches, precisions, log)
    res.update(host_bandwidth(cp, hidden, local_batches, log))
    res.update(stage_rate(cp, [itemsize(p) * b * (D + C) for p in precisions for b in local_batches], log))
    res.update(event_gap(cp, log))
    res.update(copy_latency(cp, log))
    return res


def measure(cp, world, hidden, local, precisions, gemm_kernels, log) -> dict:
    """Every measurement, every rank taking part where ranks share one (rank 0's results; {} elsewhere).
    The host's speed drifts over minutes: its dispatch is drawn first and last, and the file takes the mean."""
    D, C = Config.input_size, Config.num_classes
    first = host_dispatch(cp, world, log)
    res = single_gpu(cp, hidden, local, precisions, log, gemm_kernels) if world.rank == 0 else {}
    world.barrier()
    grads = sorted({grad_buffer_bytes((D, h, C), itemsize(p)) for h in hidden for p in precisions})
    pieces = sorted({itemsize(p) * b * n for p in precisions for b in local for n in (D, C)})
    spread = {"gpu": res.pop("_spread_gpu", [])}
    res["host_copy_s"], res["copy_aggregate_bytes_per_s"] = host_copies(
        cp, world, {"h2d": sorted(set(pieces) | set(grads)), "d2h": grads}, log, spread)
    col = collective_times(cp, world, log, grads)
    spread["collective"] = col.pop("_spread_collective", [])
    res["host_copy_s"] += col.pop("host_copy_s", [])
    res.update(col)
    hs = sorted({min(hidden), max(hidden)})   # the staged step's wait: float32, the sizes' extremes
    waits = staged_wait(cp, world, log, [(4 * b * D, 4 * b * C) for b in sorted({min(local), max(local)})],
                        [grad_buffer_bytes((D, h, C), 4) for h in hs])
    if world.rank == 0 and waits:
        res["collective_wait_s"] = res.get("collective_wait_s", []) + waits
    res.update(mean_dispatch(first, host_dispatch(cp, world, log)))
    spread["host"] = res.pop("_spread_host", [])
    if world.rank == 0:
        res["prefetch_s"] = prefetch_points(cp, [itemsize(p) * b * (D + C) for p in precisions for b in local], log)
        res["launch_size_factor"] = dispatch_size_factors(cp, hidden, local, log)
        # the launches after a pageable copy: the smallest, middle and largest H, the extremes of b
        hs = sorted({min(hidden), sorted(hidden)[len(hidden) // 2], max(hidden)})
        res.update(copied_launch_factors(cp, hs, sorted({min(local), max(local)}), log))
        res["spread"] = spread_table(spread)
        log(spread_words(res["spread"]))
    world.barrier()
    return res


def machine_values(res: dict, base, name: str | None, gpu_name: str, procs: int) -> dict:
    """The machine file's mapping: the measured values, the rest from base, a source line saying which."""
    date = dt.date.today().isoformat()
    measured = sorted(k for k in res if k not in TABLES) + [t for t in TABLES if res.get(t)]
    values = {"name": name or f"{gpu_name} (calibrated)",
              "source": (f"measured by perfmlp.calibrate (microbenchmarks only) on {gpu_name} x {procs}, "
                         f"{date}: {', '.join(measured)}; GEMM rates and kernel_s are GPU time (calls queued behind "
                         f"a spin kernel), host dispatch is launch_overhead_s; the rest from {Path(base.path).name} "
                         f"({base.name}); peak_flops_per_s_* is the large-GEMM rate, not the datasheet peak"),
              "date": date, "gpus": procs if procs > 1 else max(procs, base.gpus)}
    values.update({k: float(res.get(k, getattr(base, k))) for k in BASE_SCALARS})
    values.update({k: res.get(k, []) for k in TABLES})
    values.update({k: float(res[k]) for k in MEASURED_ONLY if k in res})
    return values


def _parser() -> argparse.ArgumentParser:
    ap = Parser(prog="python -m perfmlp.calibrate",
                description="Measure this machine with microbenchmarks and write a machine file "
                                             "(run under mpirun -n P for what several ranks share)")
    ap.add_argument("--out", required=True, help="machine file to write (YAML)")
    ap.add_argument("--base", default="h200", help="datasheet machine file for what is not measured (a GPU's)")
    ap.add_argument("--name", default=None, help="machine name (default: the GPU's name, calibrated)")
    ap.add_argument("--hidden", default=None, help="hidden sizes H, comma-separated (default: 512,1024,2048 "
                    "on a GPU; on a CPU calibrate/cpu.py's)")
    ap.add_argument("--local-batch", default=None, help="per-rank batches, comma-separated (default: "
                    "800,1600,3200 on a GPU; on a CPU calibrate/cpu.py's)")
    ap.add_argument("--precisions", default="float32,float64",
                    help="float32, float64, and the tensor cores' tf32, bf16, fp16 (default: float32,float64)")
    ap.add_argument("--gemm-kernels", default="",
                    help="the reference's GEMM kernels to calibrate too (naive,tiled,regblock; float32) "
                         "(default: none)")
    ap.add_argument("--threads", default=None, help="on a CPU: BLAS threads per rank to measure "
                    "(default: 1 to the cores)")
    ap.add_argument("--quick", action="store_true", help="on a CPU: a few small shapes, in seconds (for tests)")
    ap.add_argument("--gemm-only", action="store_true", help="on a GPU: time only the GEMMs and own kernels (at "
                    "--hidden, their slices' rows, --local-batch, --precisions) and put them into the existing "
                    "machine file --out in place of those of the same shape")
    return ap


def main(argv=None) -> int:
    a = _parser().parse_args(argv)
    from ..comm import make_world
    from ..errors import PerfmlpError
    from ..gpu import available, require_cupy
    if not available():   # no CuPy or no GPU: the CPU's calibration with the same flags
        if a.gemm_kernels or a.gemm_only:
            flag = "--gemm-kernels: the reference's GPU kernels" if a.gemm_kernels else "--gemm-only: a GPU's"
            print(f"perfmlp.calibrate: error: {flag}; a CPU calibration measures its BLAS", file=sys.stderr)
            return 2
        from .cpu import calibrate
        return calibrate(a)
    try:
        cp = require_cupy()
        base = load_machine(a.base)
        hidden = [int(h) for h in (a.hidden or "512,1024,2048").split(",")]
        local = [int(b) for b in (a.local_batch or "800,1600,3200").split(",")]
        kernels = tuple(k for k in a.gemm_kernels.split(",") if k)
        bad = [k for k in kernels if k not in N.REFERENCE_KERNELS]
        if bad:
            raise PerfmlpError(f"--gemm-kernels: unknown kernel {bad[0]!r} ({', '.join(N.REFERENCE_KERNELS)})")
    except (ValueError, PerfmlpError) as e:
        print(f"perfmlp.calibrate: error: {e}", file=sys.stderr)
        return 2
    if a.gemm_only:
        return gemm_only(cp, a, hidden, local, kernels)
    world = make_world()
    cp.cuda.Device(world.rank % cp.cuda.runtime.getDeviceCount()).use()
    log = (lambda m: print(m, flush=True)) if world.rank == 0 else (lambda m: None)
    gpu_name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    try:
        res = measure(cp, world, hidden, local, a.precisions.split(","), kernels, log)
    except Exception as e:   # one line (a CUDA, cuBLAS or NCCL error too); the other ranks, which may wait
        what = str(e) if isinstance(e, PerfmlpError) else f"{type(e).__name__}: {e}"   # in a collective, end with it
        print(f"perfmlp.calibrate: error: rank {world.rank}: {what}".splitlines()[0], file=sys.stderr, flush=True)
        world.abort(1)
    if world.rank != 0:
        return 0
    write_machine(machine_values(res, base, a.name, gpu_name, world.size), a.out)
    print(f"wrote {a.out}")
    return 0


def gemm_only(cp, a, hidden, local, kernels) -> int:
    """--gemm-only: one GPU's GEMMs and own kernels merged into the file --out names."""
    from ..checks import CheckError, read_yaml
    try:
        old = read_yaml(Path(a.out), "machine file")
        load_machine(a.out)
    except (CheckError, ValueError) as e:
        print(f"perfmlp.calibrate: error: --gemm-only puts its entries into an existing machine file: {e}",
              file=sys.stderr)
        return 2
    gpu_name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    res = gemms(cp, hidden, local, a.precisions.split(","), print, kernels)
    write_machine(merged(old, res, gpu_name, hidden), a.out)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
