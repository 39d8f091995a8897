"""`python -m perfmlp.model`: counts, AI, rooflines and predicted time per batch."""
from __future__ import annotations

import argparse
import json
import os
import sys

from .cluster import ClusterError, cluster_files, load_cluster
from .costs import DEFAULT_BUCKET_BYTES
from .machine import DEFAULT_MACHINE, GEMM_KERNELS, MachineError, load_machine, machine_files
from .precision import NAMES as PRECISION_NAMES
from .predict import PREFETCH, TRACE_LEVELS, UNTRACED, default_trace_level, resolve_exec, trace_words
from .strategies import PARALLEL, PS_COMMS, StrategyError, format_strategy, strategy_exec, strategy_summary
from .projection import cluster_summary, format_cluster
from .summary import summary
from .. import names as N


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"perfmlp.model: error: {message}", file=sys.stderr)
        sys.exit(2)


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def _hidden(text: str) -> list[int]:
    return [_positive(t) for t in text.split(",")]


def format_table(s: dict) -> str:
    c, r, p = s["counts"], s["roofline"], s["prediction"]
    per = c["per_rank"]
    cfg = s["config"]
    lines = [
        f"machine: {s['machine']['name']} ({s['machine']['path']}{', calibrated' if s['machine']['calibrated'] else ''})",
        f"network {'-'.join(map(str, cfg['layer_sizes']))}, batch {cfg['batch']} over {cfg['procs']} "
        f"process(es) ({per['b']} per rank), {cfg['precision']}, comm {cfg['comm']}, batch {cfg['batch_transfer']}, "
        f"exec {cfg['exec']}{', overlap (buckets of %d B)' % cfg['bucket_bytes'] if cfg['overlap'] else ''}, "
        f"gemm {cfg['gemm']}, {trace_words(cfg['trace_level'])}",
        "",
        f"{'FLOPs per rank':<28}{'exact':>16}{'approx (job)':>16}",
    ]
    ap = c["approx"]
    for phase in ("forward", "loss", "backward", "update"):
        approx = ap.get(phase, None)
        lines.append(f"  {phase:<26}{per['flops'][phase]:>16,}{(f'{approx:,}' if approx else ''):>16}")
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
    for k, v in p["terms_s"].items():
        lines.append(f"  {k:<26}{v * 1e6:>12.1f}")
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


# The trainer's defaults (perfmlp/config.py Config, as it runs on a GPU: comm
# auto is mpi-staged, exec auto is CUDA graphs where the step can be
# captured, the tracer on at trace level auto): the model predicts the run
# `python -m perfmlp.run` makes. A test holds them equal.
DEFAULTS = {"input_size": 784, "hidden_sizes": (512,), "num_classes": 10, "batch_size": 100, "precision": "float32",
            "comm": N.MPI_STAGED, "parallel": "data", "batch_transfer": N.PAGEABLE, "exec": "auto", "overlap": False,
            "bucket_bytes": DEFAULT_BUCKET_BYTES, "gemm": N.CUBLAS, "trace_level": "auto"}
BATCH_TRANSFERS = (N.PAGEABLE, N.PINNED, N.RESIDENT, *PREFETCH)


def parser() -> argparse.ArgumentParser:
    d = DEFAULTS
    ap = _Parser(prog="python -m perfmlp.model", description=__doc__)
    ap.add_argument("--machine", default=None,
                    help=f"machine file (a .yaml path) or the name of a shipped one: "
                         f"{', '.join(f.name.removesuffix('.yaml') for f in _shipped())} (default: {DEFAULT_MACHINE})")
    ap.add_argument("--input-size", type=_positive, default=d["input_size"], metavar="D",
                    help=f"input features (default: {d['input_size']})")
    ap.add_argument("--hidden-size", "--hidden-sizes", dest="hidden", type=_hidden, default=list(d["hidden_sizes"]),
                    metavar="H1,H2,...", help=f"hidden layer sizes, comma separated "
                                              f"(default: {','.join(map(str, d['hidden_sizes']))})")
    ap.add_argument("--num-classes", type=_positive, default=d["num_classes"], metavar="C",
                    help=f"output classes (default: {d['num_classes']})")
    ap.add_argument("--batch-size", type=_positive, default=d["batch_size"], metavar="B",
                    help=f"samples per batch, split over the processes (default: {d['batch_size']}, the trainer's)")
    ap.add_argument("--procs", type=_positive, default=1, metavar="P", help="processes, one GPU each (default: 1)")
    ap.add_argument("--precision", choices=PRECISION_NAMES, default=d["precision"],
                    help="arithmetic of the step: float32, float64, tf32, bf16 or fp16, as perfmlp.model.precision "
                         f"says (default: {d['precision']})")
    ap.add_argument("--comm", choices=("mpi-staged", "nccl", "mpi", *PS_COMMS), default=d["comm"],
                    help="gradient all-reduce: mpi-staged (GPU buffers through the host), nccl, or mpi "
                         "(host buffers, the NumPy backend); or the parameter server, ps-nccl (GPU) or ps (host "
                         f"MPI) (default: {d['comm']}, the trainer's on a GPU)")
    ap.add_argument("--parallel", choices=PARALLEL, default=d["parallel"],
                    help="the strategy: data (batch split), model (every layer split, whole batch on every "
                         "rank), hybrid (a p_data x p_model grid); any but data with an allreduce prints the "
                         f"strategy's counts per rank and every strategy's predicted time (default: {d['parallel']})")
    ap.add_argument("--model-procs", type=_positive, default=None, metavar="M",
                    help="ranks per model group with --parallel hybrid (default: none, hybrid needs it)")
    ap.add_argument("--batch-transfer", choices=BATCH_TRANSFERS, default=d["batch_transfer"],
                    help=f"how each batch reaches the GPU (default: {d['batch_transfer']})")
    ap.add_argument("--exec", dest="exec_mode", choices=("eager", "graph", "auto"), default=d["exec"],
                    help="how the step is issued: eager (kernel by kernel, host launch per kernel), graph "
                         "(one captured graph replayed per step) or auto (as the trainer on a GPU: graph where "
                         f"the step can be captured) (default: {d['exec']})")
    ap.add_argument("--overlap", action="store_true",
                    help="gradient allreduce started per layer during the backward pass (default: after it)")
    ap.add_argument("--bucket-bytes", type=_positive, default=d["bucket_bytes"], metavar="BYTES",
                    help="with --overlap, the largest piece of a weight gradient reduced alone; larger ones are "
                         f"computed and reduced in row blocks (default: {d['bucket_bytes']})")
    ap.add_argument("--gemm", choices=GEMM_KERNELS, default=d["gemm"],
                    help="GEMM kernel (the machine file's rates for it where calibrated, else the peak) "
                         f"(default: {d['gemm']})")
    ap.add_argument("--trace-level", choices=("auto", UNTRACED, *TRACE_LEVELS), default=d["trace_level"],
                    help="predict a run with perfmlp's tracer at this level: counters, timeline and kernels its "
                         "host time per phase, phases that and a CUDA event per phase; the CUPTI cost of "
                         "timeline and kernels is not calibrated; auto: the trainer's default level for the "
                         f"execution mode (default: {d['trace_level']})")
    ap.add_argument("--cluster", default=None, metavar="NAME|FILE.yaml",
                    help="project onto a cluster (a models/clusters file: "
                         f"{', '.join(f.name.removesuffix('.yaml') for f in cluster_files())}): every strategy "
                         "at --procs GPUs with each exchange's fastest collective, compute from --machine "
                         "(default: the cluster's GPUs' file) (default: one node, the options above)")
    ap.add_argument("--json", action="store_true", help="print JSON, schema in docs/model.md (default: a table)")
    return ap


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    try:
        if a.cluster:   # every strategy at --procs on a cluster (perfmlp/model/projection.py)
            cluster = load_cluster(a.cluster)
            s = cluster_summary(cluster, load_machine(a.machine or cluster.machine),
                                (a.input_size, *a.hidden, a.num_classes), a.batch_size, a.procs, a.precision)
            return _print(json.dumps(s, indent=1) if a.json else format_cluster(s))
        if a.procs > a.batch_size:
            raise StrategyError(f"{a.procs} processes but a batch of {a.batch_size}")
        if a.model_procs and a.parallel != N.HYBRID:
            raise StrategyError(f"--model-procs ({a.model_procs}) is for --parallel hybrid")
        s, text = _prediction(a, load_machine(a.machine))
    except (MachineError, ClusterError, StrategyError) as e:
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


def _prediction(a: argparse.Namespace, m) -> tuple[dict, str]:
    """(the JSON-ready summary, its table) of the configuration asked for."""
    sizes = (a.input_size, *a.hidden, a.num_classes)
    strategy = a.parallel != N.DATA or a.comm in PS_COMMS
    exec_mode = strategy_exec(a.exec_mode, a.parallel, a.comm) if strategy else resolve_exec(a.exec_mode,
                                                                                             comm=a.comm)
    trace_level = (None if a.trace_level == UNTRACED else
                   default_trace_level(exec_mode) if a.trace_level == "auto" else a.trace_level)
    if strategy:
        s = strategy_summary(m, sizes, a.batch_size, a.procs, a.precision, a.comm, a.batch_transfer,
                             a.parallel, a.model_procs or 0, exec_mode, trace_level)
        return s, format_strategy(s)
    s = summary(m, sizes, a.batch_size, a.procs, a.precision, a.comm, a.batch_transfer, exec_mode=exec_mode,
                overlap=a.overlap, bucket_bytes=a.bucket_bytes, gemm=a.gemm, trace_level=trace_level)
    return s, format_table(s)


def _shipped():
    try:
        return machine_files()
    except MachineError:
        return []


if __name__ == "__main__":
    sys.exit(main())
