"""A calibrated machine file carried to another GPU by datasheet ratios:
`python -m perfmlp.model.scaled CAL.yaml --from h200 --to h100-sxm --out FILE`.

Every measured number is multiplied by the ratio of the two datasheets'
figure for its resource (machine/fields.py `scales`): FLOP rates by the peak
of their format, device copies by memory bandwidth, host copies by their
kind's link (their latency kept), allreduces by the MPI or NCCL bandwidth.
Host, driver and software times (latencies, launches, gaps, the tracer, the
own kernels' latency-bound times) are kept as measured; the file's `source:`
line says so.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from .machine import Machine, MachineError, load_machine, machine_from_mapping, machine_to_yaml
from .machine.fields import FIELDS, TABLES
from .. import names as N

COPY_KEYS = tuple(f"{d}_{m}" for d in ("h2d", "d2h") for m in (N.PAGEABLE, N.PINNED))


def ratios(source_datasheet: Machine, target_datasheet: Machine) -> dict[str, float]:
    """target / source for each datasheet figure a measured number scales by."""
    s, t = source_datasheet, target_datasheet
    # the FFMA peaks, and the tensor-core ceilings both files have (model/precision.py: gemm formats)
    tensor = sorted(set(s.ceilings()) & set(t.ceilings()) - {"float32", "float64"})
    out = {f"flops_{p}": t.peak_flops_per_s(p) / s.peak_flops_per_s(p) for p in ("float32", "float64", *tensor)}
    out["mem_bw"] = t.mem_bw_bytes_per_s / s.mem_bw_bytes_per_s
    for k in (*COPY_KEYS, "mpi_bw", f"{N.NCCL}_bw"):   # copies by kind, allreduces by library
        out[k.removesuffix("_bw")] = getattr(t, f"{k}_bytes_per_s") / getattr(s, f"{k}_bytes_per_s")
    return out


def d2d_scaled(nbytes: int, s: float, mem_bw: float, ratio: float) -> float:
    """A device copy's time on the target: its bytes at mem_bw x `ratio`, its fixed cost as measured."""
    moved = 2 * nbytes / mem_bw
    return max(s - moved, 0.0) + moved / ratio


def copy_scaled(c, measured: Machine, ratio: float) -> float:
    """A host copy on a link `ratio` times as fast: its latency as measured, the rest divided."""
    lat = min(getattr(measured, f"{c.direction}_{c.memory}_latency_s") or measured.copy_latency_s, c.s)
    return lat + (c.s - lat) / ratio


def _ratio_key(key: str, f) -> str | None:
    """The key of `ratios` a scalar figure scales by; None: carried as measured."""
    if f.check == "table":
        return None
    if f.scales == "flops":
        return "flops_" + key.removeprefix("peak_flops_per_s_")
    if f.scales == "copy":
        return "_".join(key.split("_")[:2])
    if f.scales == "collective":
        return key.split("_")[0]
    return "mem_bw" if f.scales == "mem_bw" else None


def scaled_values(measured: Machine, source_datasheet: Machine, target_datasheet: Machine) -> dict:
    """The machine-file mapping of `measured` carried to the target GPU."""
    r = ratios(source_datasheet, target_datasheet)
    v = {f.name: getattr(measured, f.name) for f in dataclasses.fields(Machine)
         if f.name not in ("path", "device_names")}
    for key, f in FIELDS.items():   # each scalar by its declared rule (machine/fields.py)
        rule = _ratio_key(key, f)
        if rule is not None:   # a tensor ceiling only where both GPUs have it
            v[key] = v[key] * r[rule] if rule in r else 0.0
    scale = {"gemm_flops_per_s": {"flops_per_s": lambda g: g.flops_per_s * r.get(f"flops_{g.precision}", 0.0)},
             "allreduce_s": {"s": lambda a: a.s / r[a.comm]},
             "copy_aggregate_bytes_per_s": {"bytes_per_s": lambda c: c.bytes_per_s * r[f"{c.direction}_{c.memory}"]},
             "d2d_copy_s": {"s": lambda c: d2d_scaled(c.bytes, c.s, measured.mem_bw_bytes_per_s, r["mem_bw"])},
             "host_copy_s": {"s": lambda c: copy_scaled(c, measured, r[f"{c.direction}_{c.memory}"])}}
    for key in TABLES:   # the host's tables, the waits, own kernels and spread as measured
        changed = scale.get(key, {})
        rows = [{**dataclasses.asdict(p), **{k: f(p) for k, f in changed.items()}} for p in getattr(measured, key)]
        # as a file holds them: lists, and a wait's memory only where it has one
        v[key] = [{k: list(x) if isinstance(x, tuple) else x for k, x in row.items() if k != "memory" or x is not None}
                  for row in rows]
    v["gemm_flops_per_s"] = [g for g in v["gemm_flops_per_s"] if f"flops_{g['precision']}" in r]   # both have
    v["name"] = f"{measured.name} scaled to {target_datasheet.name}"
    v["gpus"] = target_datasheet.gpus
    v["source"] = (f"{measured.name} ({Path(measured.path).name}) carried to {target_datasheet.name} by the ratios "
                   f"of {Path(target_datasheet.path).name} to {Path(source_datasheet.path).name} "
                   f"(perfmlp.model.scaled): FLOP rates x{r['flops_float32']:.3f} (fp32) x{r['flops_float64']:.3f} "
                   f"(fp64), memory bandwidth x{r['mem_bw']:.3f}, copies " +
                   ", ".join(f"{k} x{r[k]:.3f}" for k in COPY_KEYS) +
                   f", MPI x{r['mpi']:.3f}, NCCL x{r[N.NCCL]:.3f}; latencies, host launch times, kernel gaps, "
                   "the own kernels' times, the tracer's costs, the collective wait, the host's staging of pageable "
                   "copies ahead of the stream (ahead_s), the launches after a pageable copy and the measured "
                   "spread (ratios) as measured")
    return v


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfmlp.model.scaled", description=__doc__.splitlines()[0])
    ap.add_argument("calibrated", help="the measured machine file (python -m perfmlp.calibrate)")
    ap.add_argument("--from", dest="source", required=True, help="the datasheet file of the GPU it measured")
    ap.add_argument("--to", dest="target", required=True, help="the datasheet file of the GPU to predict")
    ap.add_argument("--out", required=True, help="machine file to write (YAML)")
    a = ap.parse_args(argv)
    try:
        measured = load_machine(a.calibrated)
        if not measured.calibrated:
            raise MachineError(f"{a.calibrated}: not a calibrated file (no gemm_flops_per_s)")
        values = scaled_values(measured, load_machine(a.source), load_machine(a.target))
        machine_from_mapping(values, a.out)  # the file we write must load
        Path(a.out).write_text("# Written by python -m perfmlp.model.scaled; do not edit by hand.\n"
                               + machine_to_yaml(values))
    except MachineError as e:
        print(f"perfmlp.model.scaled: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"perfmlp.model.scaled: error: cannot write {a.out}: {e.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
