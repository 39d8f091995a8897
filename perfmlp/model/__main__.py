"""`python -m perfmlp.model`: counts, AI, rooflines and predicted time per batch."""
from __future__ import annotations

import argparse
import json
import os
import sys

from .costs import DEFAULT_BUCKET_BYTES
from .machine import DEFAULT_MACHINE, MachineError, load_machine, machine_files
from .precision import NAMES as PRECISIONS
from .predict import PREFETCH, TRACE_LEVELS, UNTRACED, trace_words
from .strategies import PARALLEL, PS_COMMS, StrategyError, format_strategy, strategy_summary
from .summary import summary


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


def main(argv=None) -> int:
    ap = _Parser(prog="python -m perfmlp.model", description=__doc__)
    ap.add_argument("--machine", default=None,
                    help=f"machine file (a .yaml path) or the name of a shipped one: "
                         f"{', '.join(f.name.removesuffix('.yaml') for f in _shipped())} (default: {DEFAULT_MACHINE})")
    ap.add_argument("--input-size", type=_positive, default=784, metavar="D", help="input features (default: 784)")
    ap.add_argument("--hidden-size", "--hidden-sizes", dest="hidden", type=_hidden, default=[512], metavar="H1,H2,...",
                    help="hidden layer sizes, comma separated (default: 512)")
    ap.add_argument("--num-classes", type=_positive, default=10, metavar="C", help="output classes (default: 10)")
    ap.add_argument("--batch-size", type=_positive, default=3200, metavar="B",
                    help="samples per batch, split over the processes (default: 3200)")
    ap.add_argument("--procs", type=_positive, default=1, metavar="P", help="processes, one GPU each (default: 1)")
    ap.add_argument("--precision", choices=PRECISIONS, default="float32",
                    help="arithmetic of the step: float32, float64, tf32, bf16 or fp16, as perfmlp.model.precision "
                         "says (default: float32)")
    ap.add_argument("--comm", choices=("mpi-staged", "nccl", "mpi", *PS_COMMS), default="mpi-staged",
                    help="gradient all-reduce: mpi-staged (GPU buffers through the host), nccl, or mpi "
                         "(host buffers, the NumPy backend); or the parameter server, ps-nccl (GPU) or ps (host "
                         "MPI) (default: mpi-staged)")
    ap.add_argument("--parallel", choices=PARALLEL, default="data",
                    help="partitioning: data (batch split), model (every layer split, whole batch on every "
                         "rank), hybrid (a p_data x p_model grid); any but data with an allreduce prints the "
                         "strategy's counts per rank and every strategy's predicted time (default: data)")
    ap.add_argument("--model-procs", type=_positive, default=None, metavar="M",
                    help="ranks per model group with --parallel hybrid (default: none, hybrid needs it)")
    ap.add_argument("--batch-transfer", choices=("pageable", "pinned", "resident", *PREFETCH), default="pageable",
                    help="how each batch reaches the GPU (default: pageable)")
    ap.add_argument("--exec", dest="exec_mode", choices=("eager", "graph", "auto"), default="eager",
                    help="how the step is issued: eager (kernel by kernel, host launch per kernel), graph "
                         "(one captured graph replayed per step) or auto (as the trainer on a GPU: graph where "
                         "the step can be captured) (default: eager)")
    ap.add_argument("--overlap", action="store_true",
                    help="gradient allreduce started per layer during the backward pass (default: after it)")
    ap.add_argument("--bucket-bytes", type=_positive, default=DEFAULT_BUCKET_BYTES, metavar="BYTES",
                    help="with --overlap, the largest piece of a weight gradient reduced alone; larger ones are "
                         f"computed and reduced in row blocks (default: {DEFAULT_BUCKET_BYTES})")
    ap.add_argument("--gemm", choices=("cublas", "naive", "tiled", "regblock"), default="cublas",
                    help="GEMM kernel (the machine file's rates for it where calibrated, else the peak) "
                         "(default: cublas)")
    ap.add_argument("--trace-level", choices=(UNTRACED, *TRACE_LEVELS), default=UNTRACED,
                    help="predict a run with perfmlp's tracer at this level: counters, timeline and kernels its "
                         "host time per phase, phases that and a CUDA event per phase; the CUPTI cost of "
                         "timeline and kernels is not calibrated (default: untraced)")
    ap.add_argument("--json", action="store_true", help="print JSON, schema in docs/model.md (default: a table)")
    a = ap.parse_args(argv)
    if a.procs > a.batch_size:
        print(f"perfmlp.model: error: {a.procs} processes but a batch of {a.batch_size}", file=sys.stderr)
        return 2
    try:
        m = load_machine(a.machine)
    except MachineError as e:
        print(f"perfmlp.model: error: {e}", file=sys.stderr)
        return 2
    sizes = (a.input_size, *a.hidden, a.num_classes)
    trace_level = None if a.trace_level == UNTRACED else a.trace_level
    if a.parallel != "data" or a.comm in PS_COMMS or a.model_procs:
        try:
            if a.model_procs and a.parallel != "hybrid":
                raise StrategyError(f"--model-procs ({a.model_procs}) is for --parallel hybrid")
            s = strategy_summary(m, sizes, a.batch_size, a.procs, a.precision, a.comm, a.batch_transfer,
                                  a.parallel, a.model_procs or 0, a.exec_mode, trace_level)
        except StrategyError as e:
            print(f"perfmlp.model: error: {e}", file=sys.stderr)
            return 2
        text = format_strategy(s)
    else:
        s = summary(m, sizes, a.batch_size, a.procs, a.precision, a.comm, a.batch_transfer,
                    exec_mode=a.exec_mode, overlap=a.overlap, bucket_bytes=a.bucket_bytes, gemm=a.gemm,
                    trace_level=trace_level)
        text = format_table(s)
    try:
        print(json.dumps(s, indent=1) if a.json else text, flush=True)
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush cannot fail
        return 1
    return 0


def _shipped():
    try:
        return machine_files()
    except MachineError:
        return []


if __name__ == "__main__":
    sys.exit(main())
