"""`python -m perfmlp.model`: counts, AI, rooflines and predicted time per batch."""
from __future__ import annotations

import argparse
import json
import os
import sys

from .. import names as N
from ..errors import Parser, add_machine, positive_int_arg
from ..flags import add_fields
from .cluster import ClusterError, cluster_files, load_cluster
from .machine import DEFAULT_MACHINE, CpuMachine, MachineError, load_machine, machine_files
from .predict import default_trace_level, resolve_comm, resolve_exec, trace_words
from .strategies import StrategyError, strategy_exec
from .summary import (cluster_summary, cpu_summary, format_cluster, format_cpu, format_strategy, strategy_summary,
                      summary)


_positive = positive_int_arg("expected a positive integer, got {}")


def format_table(s: dict) -> str:
    c, r, p = s["counts"], s["roofline"], s["prediction"]
    per, cfg = c["per_rank"], s["config"]
    lines = [
        f"machine: {s['machine']['name']} ({s['machine']['path']}{', calibrated' if s['machine']['calibrated'] else ''})",
        f"network {'-'.join(map(str, cfg['layer_sizes']))}, batch {cfg['batch']} over {cfg['procs']} "
        f"process(es) ({per['b']} per rank), {cfg['precision']}, comm {cfg['comm']}, batch {cfg['batch_transfer']}, "
        f"exec {cfg['exec']}{', overlap (buckets of %d B)' % cfg['bucket_bytes'] if cfg['overlap'] else ''}, "
        f"gemm {cfg['gemm']}, {trace_words(cfg['trace_level'])}"
        f"{', first layer in %d slices' % cfg['slices'] if cfg.get('slices', 1) > 1 else ''}"
        f"{', gradients reduced in %s' % cfg['grad_precision'] if cfg.get('grad_precision', N.FLOAT32) != N.FLOAT32 else ''}",
        "",
        f"{'FLOPs per rank':<28}{'exact':>16}{'approx (job)':>16}",
    ]
    ap = c["approx"]
    for phase in ("forward", "loss", "backward", "update"):
        lines.append(f"  {phase:<26}{per['flops'][phase]:>16,}{(f'{ap[phase]:,}' if ap.get(phase) else ''):>16}")
    lines.append(f"  {'batch':<26}{per['flops_total']:>16,}{ap['batch']:>16,}")
    lines += [
        f"{'bytes H2D / D2H per rank':<28}{per['bytes_h2d']:>16,} / {per['bytes_d2h']:,}",
        *([f"{'bytes D2D per rank':<28}{per['bytes_d2d']:>16,}"] if per["bytes_d2d"] else []),
        f"{'bytes to MPI / NCCL':<28}{per['bytes_mpi']:>16,} / {per['bytes_nccl']:,}",
        f"{'job FLOPs / bytes copied':<28}{c['job']['flops_total']:>16,} / {c['job']['bytes_copied']:,}",
        "",
        f"AI (FLOPs per cudaMemcpy byte): {s['ai_flops_per_byte'] if s['ai_flops_per_byte'] is not None else 'inf (no copies)'}",
        f"peak {r['peak_flops_per_s'] / 1e12:.2f} TFLOP/s, PCIe {r['pcie_bytes_per_s'] / 1e9:.1f} GB/s, "
        f"ridge {r['ridge_flops_per_byte']:.0f} FLOP/B",
        f"roofline per GPU: standard {r['standard_flops_per_s'] / 1e12:.3f} TFLOP/s, "
        f"modified (copies serialised) {r['modified_flops_per_s'] / 1e12:.3f} TFLOP/s, "
        f"overlapped (prefetched) {r['overlapped_flops_per_s'] / 1e12:.3f} TFLOP/s",
        "",
        "predicted time per batch (us):",
    ]
    lines += [f"  {k:<26}{v * 1e6:>12.1f}" for k, v in p["terms_s"].items()]
    lines.append(f"  {'total (serialised)':<26}{p['total_s'] * 1e6:>12.1f}")
    lines.append(f"  {'overlapped lower bound':<26}{p['overlapped_s'] * 1e6:>12.1f}")
    lines.append(p["interval_note"])
    d = p["detail"]
    lines.append(f"step: {d['kernels']} kernels, host {d['host_s'] * 1e6:.1f} us, GPU compute "
                 f"{d['gpu_compute_s'] * 1e6:.1f} us"
                 + (f"; {d['buckets']} buckets, {d['hidden_comm_s'] * 1e6:.1f} of {d['comm_s'] * 1e6:.1f} us of "
                    f"communication hidden" if d.get("buckets") else ""))
    if d["trace_uncalibrated"]:
        lines.append(f"tracer, not in the prediction: {d['trace_uncalibrated']}")
    lines.append(f"predicted {p['job_flops_per_s'] / 1e12:.3f} TFLOP/s for the job, "
                 f"{100 * p['utilisation']:.2f}% of {cfg['procs']} x peak")
    return "\n".join(lines)


# The configuration's flags: the trainer's with its defaults (perfmlp/flags.py), so that with none given
# the model predicts the run `python -m perfmlp.run` makes on a GPU.
CONFIG_FLAGS = ("input_size", "hidden_sizes", "num_classes", "batch_size", "precision", "comm", "parallel",
                "model_procs", "batch_transfer", "exec", "overlap", "bucket_bytes", "gemm", "trace_level", "slices",
                "grad_precision")


def parser() -> argparse.ArgumentParser:
    ap = Parser(prog="python -m perfmlp.model", description=__doc__)
    add_machine(ap, DEFAULT_MACHINE, shipped=tuple(f.name.removesuffix(".yaml") for f in _shipped()))
    add_fields(ap, CONFIG_FLAGS, dests={"hidden_sizes": "hidden", "exec": "exec_mode"},
                     aliases={"hidden_sizes": ("--hidden-size",)},
                     choices={"comm": (N.AUTO, *N.ALLREDUCE_COMMS, *N.PS_COMMS), "parallel": N.STRATEGIES,
                              "gemm": N.GEMM_KERNELS, "trace_level": (*N.TRACE_LEVEL_CHOICES, N.UNTRACED)},
                     convert={"comm": lambda t: resolve_comm(t, N.CUPY), "trace_level": str})
    ap.add_argument("--procs", type=_positive, default=1, metavar="P", help="processes, one GPU each (default: 1)")
    ap.add_argument("--threads", type=_positive, default=None, metavar="T",
                    help="BLAS threads per rank, for a CPU machine file (default: the file's default_threads)")
    ap.add_argument("--cluster", default=None, metavar="NAME|FILE.yaml",
                    help="project onto a cluster (a models/clusters file: "
                         f"{', '.join(f.name.removesuffix('.yaml') for f in cluster_files())}): every strategy "
                         "at --procs GPUs with each exchange's fastest collective, compute from --machine "
                         "(default: the cluster's GPUs' file) (default: one node, the options above)")
    ap.add_argument("--json", action="store_true", help="print JSON, schema in docs/model.md (default: a table)")
    return ap


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    sizes = (a.input_size, *a.hidden, a.num_classes)
    try:
        if a.cluster:   # every strategy at --procs on a cluster (perfmlp/model/projection.py)
            cluster = load_cluster(a.cluster)
            s = cluster_summary(cluster, load_machine(a.machine or cluster.machine), sizes, a.batch_size, a.procs,
                                a.precision)
            return _print(json.dumps(s, indent=1) if a.json else format_cluster(s))
        if a.procs > a.batch_size:
            raise StrategyError(f"{a.procs} processes but a batch of {a.batch_size}")
        if a.model_procs and a.parallel != N.HYBRID:
            raise StrategyError(f"--model-procs ({a.model_procs}) is for --parallel hybrid")
        m = load_machine(a.machine)
        if isinstance(m, CpuMachine):   # a NumPy run on this CPU (model/predict/cpu.py)
            s = cpu_summary(m, sizes, a.batch_size, a.procs, a.threads, a.precision, a.trace_level != N.UNTRACED)
            return _print(json.dumps(s, indent=1) if a.json else format_cpu(s))
        s, text = _prediction(a, m, sizes)
    except (MachineError, ClusterError, StrategyError, ValueError) as e:
        print(f"perfmlp.model: error: {e}", file=sys.stderr)
        return 2
    return _print(json.dumps(s, indent=1) if a.json else text)


def _print(text: str) -> int:
    try:
        print(text, flush=True)
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush cannot fail
        return 1
    return 0


def _prediction(a: argparse.Namespace, m, sizes: tuple) -> tuple[dict, str]:
    """(the JSON-ready summary, its table) of the configuration asked for."""
    strategy = a.parallel != N.DATA or a.comm in N.PS_COMMS
    exec_mode = strategy_exec(a.exec_mode, a.parallel, a.comm) if strategy else resolve_exec(a.exec_mode,
                                                                                             comm=a.comm)
    trace_level = (None if a.trace_level == N.UNTRACED else
                   default_trace_level(exec_mode) if a.trace_level == "auto" else a.trace_level)
    if strategy:
        s = strategy_summary(m, sizes, a.batch_size, a.procs, a.precision, a.comm, a.batch_transfer,
                             a.parallel, a.model_procs or 0, exec_mode, trace_level)
        return s, format_strategy(s)
    s = summary(m, sizes, a.batch_size, a.procs, a.precision, a.comm, a.batch_transfer, exec_mode=exec_mode,
                overlap=a.overlap, bucket_bytes=a.bucket_bytes, gemm=a.gemm, trace_level=trace_level,
                slices=a.slices, grad_precision=a.grad_precision)
    return s, format_table(s)


def _shipped():
    try:
        return machine_files()
    except MachineError:
        return []


if __name__ == "__main__":
    sys.exit(main())
