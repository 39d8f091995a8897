"""`python -m perfmlp.model --machine <a CPU file>`: a NumPy run's
prediction (predict/cpu.py), its interval and the CPU's rooflines, as
JSON-ready data and as a table."""
from __future__ import annotations

from .. import names as N
from .costs import grad_buffer_bytes, itemsize
from .predict.cpu import cpu_ceilings, predict_cpu, roofline_rates, step_flops


def cpu_summary(m, layer_sizes, batch: int, procs: int = 1, threads: int | None = None,
                precision: str = N.FLOAT32, traced: bool = True) -> dict:
    """The prediction of a NumPy run on the CPU `m` describes."""
    p = predict_cpu(m, layer_sizes, batch, procs, threads, precision, traced)
    b = -(-batch // procs)
    flops = step_flops(layer_sizes, b, precision)
    nbytes = grad_buffer_bytes(layer_sizes, itemsize(precision))
    ceil = cpu_ceilings(m, precision, procs, threads)
    ai_copy = flops / nbytes if procs > 1 else None
    rates = roofline_rates(m, float("inf"), ai_copy or float("inf"), precision, procs, threads)
    return {"machine": {"name": m.name, "path": m.path, "backend": N.NUMPY, "cores": m["cores"]},
            "config": {"layer_sizes": list(layer_sizes), "batch": batch, "procs": procs,
                       "threads": p.detail["threads"], "precision": precision, "traced": traced},
            "ceilings": ceil, "ai_flops_per_exchanged_byte": ai_copy, "roofline": rates,
            "prediction": {"terms_s": dict(p.terms), "total_s": p.total_s,
                           "groups_s": p.groups(),
                           "interval_s": p.detail["interval_s"], "oversubscribed": p.detail["oversubscribed"],
                           "job_flops_per_s": p.flops_job / p.total_s}}


def format_cpu(s: dict) -> str:
    c, p, r = s["config"], s["prediction"], s["ceilings"]
    lines = [f"machine: {s['machine']['name']} ({s['machine']['path']}), a CPU of {s['machine']['cores']} cores",
             f"network {'-'.join(map(str, c['layer_sizes']))}, batch {c['batch']} over {c['procs']} rank(s) of "
             f"{c['threads']} BLAS thread(s), {c['precision']}, {'traced' if c['traced'] else 'not traced'}"
             + (" (more threads than cores: ranks time-share)" if p["oversubscribed"] else ""),
             "",
             f"ceilings per rank: GEMM {r['peak_flops_per_s'] / 1e9:.1f} GFLOP/s, memory "
             f"{r['mem_bw_bytes_per_s'] / 1e9:.1f} GB/s"
             + (f", MPI exchange (the modified roofline's copy) {r['copy_bytes_per_s'] / 1e9:.2f} GB/s"
                if r.get("copy_bytes_per_s") else ""),
             "", "predicted time per batch (us):"]
    lines += [f"  {k:<26}{v * 1e6:>12.1f}" for k, v in p["terms_s"].items()]
    lines.append(f"  {'total':<26}{p['total_s'] * 1e6:>12.1f}")
    iv = p["interval_s"]
    lines.append(f"90% interval: {iv[0] * 1e6:.1f} to {iv[1] * 1e6:.1f} us (the file's measured spread)" if iv
                 else "90% interval: unknown (the file records no spread)")
    lines.append(f"predicted {p['job_flops_per_s'] / 1e9:.2f} GFLOP/s for the job")
    return "\n".join(lines)
