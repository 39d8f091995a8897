"""What `python -m perfmlp.model` prints, as JSON-ready dicts (schemas in
docs/model.md) and tables: one data-parallel configuration (counts,
arithmetic intensity, rooflines, the predicted time), a NumPy run on a CPU
file, a strategy beside every candidate, and every strategy on a cluster."""
from __future__ import annotations

import math

from .cluster import Cluster
from .costs import DEFAULT_BUCKET_BYTES, batch_counts, grad_buffer_bytes, itemsize, pieces, widths
from .interval import interval, interval_json
from .machine import Machine
from .predict import predict_batch, resolve_exec, staging_memory, trace_words
from .predict.cpu import cpu_ceilings, predict_cpu, roofline_rates
from .predict.schedule import grad_bytes
from .predict.slices import slice_count
from .projection import strategy_steps
from .roofline import modified_roofline, overlapped_roofline, ridge_point, standard_roofline
from .strategies import (DEVICE_COMMS, StrategyError, best_strategy, check_shard, grid, label, layer_splits,
                         predict_strategy, rank_counts, step_phases, strategy_exec)
from .. import names as N

SCHEMA = "perfmlp.model/1"
STRATEGY_SCHEMA = "perfmlp.model.strategy/1"
CLUSTER_SCHEMA = "perfmlp.model.cluster/1"


def reference_approx(D: int, H: int, B: int) -> dict[str, int]:
    """The reference's Question 2.1 approximations (one dominant GEMM each)."""
    return {"forward": 2 * B * H * D, "backward": 2 * B * H * D, "batch": 4 * B * H * D}


def summary(machine: Machine, layer_sizes, batch: int, procs: int = 1, precision: str = "float32",
            comm: str = N.MPI_STAGED, batch_transfer: str = N.PAGEABLE, exec_mode: str = N.EAGER,
            overlap: bool = False, bucket_bytes: int = DEFAULT_BUCKET_BYTES, gemm: str = N.CUBLAS,
            trace_level: str | None = None, slices="1", grad_precision: str = N.FLOAT32) -> dict:
    """`slices`: a count or `auto` (the model's choice on `machine`)."""
    itemsize = widths(precision)   # the batch at its activation width, the gradients at its parameters'
    k = slice_count(slices, machine, layer_sizes, batch, procs, precision, grad_precision, comm, batch_transfer,
                    resolve_exec(exec_mode, comm=comm), gemm)

    def predict(m):
        return predict_batch(m, layer_sizes, batch, procs, precision, comm, batch_transfer, trace_level,
                             exec_mode=exec_mode, overlap=overlap, bucket_bytes=bucket_bytes, gemm=gemm,
                             slices=k, grad_precision=grad_precision)
    pred = predict(machine)
    per = [batch_counts(layer_sizes, b, itemsize, comm, batch_transfer, bucket_bytes if overlap else None,
                        pred.detail["exec"], grad_width=grad_bytes(precision, grad_precision))
           for b in pieces(batch, procs)]
    big = per[0]  # the largest piece (the first ranks get the extra sample)
    P = machine.peak_flops_per_s(precision)
    bw = machine.copy_bw("h2d", staging_memory(batch_transfer))   # the memory kind of the run's host copies
    ai = big.flops_total / big.bytes_copied if big.bytes_copied else math.inf
    job_flops = sum(c.flops_total for c in per)
    return {
        "schema": SCHEMA,
        "machine": {"name": machine.name, "path": machine.path, "calibrated": machine.calibrated},
        "config": {"layer_sizes": list(layer_sizes), "batch": batch, "procs": procs, "precision": precision,
                   "comm": comm, "batch_transfer": batch_transfer, "exec": pred.detail["exec"],
                   "overlap": overlap, "bucket_bytes": bucket_bytes, "gemm": gemm,
                   "trace_level": pred.detail["trace_level"], "slices": k, "grad_precision": grad_precision},
        "counts": {
            "per_rank": {"b": big.b, "flops": big.flops, "flops_total": big.flops_total,
                         "operations": big.operations, "kernels": big.kernels, "mem_bytes": big.mem_bytes,
                         "bytes_h2d": big.bytes_h2d, "bytes_d2h": big.bytes_d2h, "bytes_d2d": big.bytes_d2d,
                         "bytes_mpi": big.bytes_mpi, "bytes_nccl": big.bytes_nccl},
            "job": {"flops_total": job_flops, "bytes_copied": sum(c.bytes_copied for c in per)},
            "approx": reference_approx(layer_sizes[0], layer_sizes[1], batch),
        },
        "ai_flops_per_byte": float(ai) if math.isfinite(ai) else None,
        "roofline": {
            "peak_flops_per_s": P,
            "pcie_bytes_per_s": bw,
            "ridge_flops_per_byte": ridge_point(P, bw),
            **{f"{name}_flops_per_s": float(roof(ai, P, bw)) if math.isfinite(ai) else P
               for name, roof in (("standard", standard_roofline), ("modified", modified_roofline),
                                  ("overlapped", overlapped_roofline))},
            "job_peak_flops_per_s": procs * P,
        },
        "prediction": {
            "terms_s": pred.terms,
            "groups_s": pred.groups(),
            "detail": pred.detail,
            "total_s": pred.total_s,
            **interval_json(interval(machine, predict)),
            "overlapped_s": pred.overlapped_s,
            "staging_memory": staging_memory(batch_transfer) if comm == N.MPI_STAGED else None,
            "job_flops_per_s": job_flops / pred.total_s,
            "utilisation": job_flops / pred.total_s / (procs * P),
        },
    }


def part_flops(layer_sizes, batch: int, precision: str) -> dict[str, int]:
    """Exact FLOPs per part of one process's batch and their sum (`batch`)."""
    c = batch_counts(layer_sizes, batch, itemsize(precision))
    return {**{part: c.flops[part] for part in ("forward", "backward", "loss", "update")}, "batch": c.flops_total}


def gradient_bytes(layer_sizes, precision: str) -> int:
    """Bytes of the host exchange's gradient buffer in a precision (the reference's scheme: activations' width)."""
    return grad_buffer_bytes(layer_sizes, itemsize(precision))


def cpu_summary(m, layer_sizes, batch: int, procs: int = 1, threads: int | None = None,
                precision: str = N.FLOAT32, traced: bool = True) -> dict:
    """The prediction of a NumPy run on the CPU `m` describes."""
    p = predict_cpu(m, layer_sizes, batch, procs, threads, precision, traced)
    ceil = cpu_ceilings(m, precision, procs, threads)
    ai_copy = p.flops_per_rank / p.detail["bytes_mpi"] if procs > 1 else None   # the slowest rank's, per exchanged byte
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


def strategy_summary(machine: Machine, layer_sizes, batch: int, procs: int = 1, precision: str = "float32",
                      comm: str = N.NCCL, batch_transfer: str = N.RESIDENT, parallel: str = "data",
                      model_procs: int = 0, exec_mode: str = N.EAGER, trace_level: str | None = None) -> dict:
    """A strategy's counts per rank, bytes per step, predicted time, and every candidate fastest first."""
    s = itemsize(precision)
    p_data, p_model = grid(procs, parallel, model_procs)
    check_shard(layer_sizes, p_model)
    ranks = [rank_counts(layer_sizes, batch, procs, r, s, parallel, model_procs, comm, batch_transfer)
             for r in range(procs)]
    mode = strategy_exec(exec_mode, parallel, comm)

    def predict(m):
        return predict_strategy(m, layer_sizes, batch, procs, precision, comm, batch_transfer, parallel,
                                model_procs, trace_level, exec_mode=mode)
    pred = predict(machine)
    device = comm in DEVICE_COMMS or comm == N.MPI_STAGED
    return {
        "schema": STRATEGY_SCHEMA,
        "machine": {"name": machine.name, "path": machine.path, "calibrated": machine.calibrated},
        "config": {"layer_sizes": list(layer_sizes), "batch": batch, "procs": procs, "precision": precision,
                   "comm": comm, "batch_transfer": batch_transfer, "exec": mode, "parallel": parallel,
                   "grid": [p_data, p_model], "strategy": label(parallel, model_procs, comm, procs),
                   "layer_splits": list(layer_splits(len(layer_sizes) - 1)), "trace_level": pred.detail["trace_level"]},
        "ranks": [{"rank": c.rank, "b": c.b, "sizes": list(c.sizes), "flops": c.flops, "flops_total": c.flops_total,
                   "bytes_h2d": c.bytes_h2d, "bytes_d2h": c.bytes_d2h, "bytes_mpi": c.bytes_mpi,
                   "bytes_nccl": c.bytes_nccl, "collectives": c.collective_list(comm),
                   "phases": list(step_phases(layer_sizes, procs, c.rank, parallel, model_procs, comm,
                                              batch_transfer, mode))} for c in ranks],
        "bytes_per_step": {"per_rank": max(c.bytes_comm for c in ranks), "job": sum(c.bytes_comm for c in ranks)},
        "prediction": {"terms_s": pred.terms, "total_s": pred.total_s, **interval_json(interval(machine, predict)),
                       "overlapped_s": pred.overlapped_s,
                       "trace_uncalibrated": pred.detail["trace_uncalibrated"],
                       "job_flops_per_s": pred.flops_job / pred.total_s,
                       "utilisation": pred.flops_job / pred.total_s / (procs * machine.peak_flops_per_s(precision))},
        "strategies": [{"strategy": name, "total_s": p.total_s, "comm_s": p.terms["allreduce"]}
                       for name, p in best_strategy(machine, layer_sizes, batch, procs, precision, batch_transfer,
                                                    device=device, trace_level=trace_level, exec_mode=mode,
                                                    staged=comm == N.MPI_STAGED)],
    }


def format_strategy(s: dict) -> str:
    """The table `python -m perfmlp.model` prints for a strategy."""
    cfg, p = s["config"], s["prediction"]
    lines = [f"machine: {s['machine']['name']} ({s['machine']['path']})",
             f"network {'-'.join(map(str, cfg['layer_sizes']))}, batch {cfg['batch']}, {cfg['procs']} process(es) as "
             f"{cfg['strategy']} (p_data x p_model = {cfg['grid'][0]} x {cfg['grid'][1]}, layers "
             f"{', '.join(cfg['layer_splits'])}), {cfg['precision']}, comm {cfg['comm']}, "
             f"batch {cfg['batch_transfer']}, exec {cfg['exec']}, {trace_words(cfg['trace_level'])}",
             "", f"{'rank':<6}{'b':>7}{'shard':>20}{'FLOPs':>16}{'bytes MPI':>12}{'bytes NCCL':>12}  collectives"]
    for r in s["ranks"]:
        coll = ", ".join(f"{n} {e:,}" for n, e in r["collectives"]) or "none"
        lines.append(f"{r['rank']:<6}{r['b']:>7}{'-'.join(map(str, r['sizes'])):>20}{r['flops_total']:>16,}"
                     f"{r['bytes_mpi']:>12,}{r['bytes_nccl']:>12,}  {coll}")
    lines += ["", f"bytes to collectives per step: {s['bytes_per_step']['per_rank']:,} per rank, "
                  f"{s['bytes_per_step']['job']:,} over the job", "", "predicted time per batch (us):"]
    lines += [f"  {k:<26}{v * 1e6:>12.1f}" for k, v in p["terms_s"].items()]
    lines.append(f"  {'total (serialised)':<26}{p['total_s'] * 1e6:>12.1f}")
    lines.append(p["interval_note"])
    if p["trace_uncalibrated"]:
        lines.append(f"tracer, not in the prediction: {p['trace_uncalibrated']}")
    lines += ["", "every strategy at this size, fastest first (us, communication in brackets):"]
    lines += [f"  {x['strategy']:<14}{x['total_s'] * 1e6:>10.1f}  ({x['comm_s'] * 1e6:.1f})" for x in s["strategies"]]
    return "\n".join(lines)


def cluster_summary(cluster: Cluster, machine: Machine, layer_sizes, batch: int, procs: int,
                    precision: str = "float32") -> dict:
    """Every strategy that can run at this size on the cluster, fastest first (schema in docs/model.md)."""
    if procs > cluster.max_procs:
        raise StrategyError(f"{procs} GPUs, more than the {cluster.max_procs} of {cluster.path} "
                            f"({cluster.nodes} nodes of {cluster.gpus_per_node})")
    left_out: dict = {}
    steps = sorted(strategy_steps(cluster, machine, layer_sizes, batch, procs, precision, left_out).values(),
                   key=lambda st: st.total_s)
    if not steps:
        why = "; ".join(f"{k}: {v}" for k, v in left_out.items())
        raise StrategyError(f"no strategy runs {'-'.join(map(str, layer_sizes))} with a batch of {batch} on "
                            f"{procs} GPUs ({why})")
    return {
        "schema": CLUSTER_SCHEMA,
        "cluster": {"name": cluster.name, "path": cluster.path, "gpus_per_node": cluster.gpus_per_node,
                    "nodes": -(-procs // cluster.gpus_per_node)},
        "machine": {"name": machine.name, "path": machine.path, "calibrated": machine.calibrated},
        "config": {"layer_sizes": list(layer_sizes), "batch": batch, "procs": procs, "precision": precision,
                   "exec": "graph", "batch_transfer": N.RESIDENT},
        "strategies": [{"strategy": st.strategy, "grid": list(st.grid), "compute_s": st.compute_s,
                        "comm_s": st.comm_s, "total_s": st.total_s, "samples_per_s": st.samples_per_s,
                        "exchanges": [{"kind": e.kind, "bytes": e.nbytes, "ranks": e.ranks,
                                       "algorithm": e.algorithm, "s": e.s, "algorithms_s": dict(e.alternatives)}
                                      for e in st.exchanges]} for st in steps],
        "left_out": [{"strategy": k, "why": v} for k, v in left_out.items()],
    }


def format_cluster(s: dict) -> str:
    """The table `python -m perfmlp.model --cluster` prints."""
    c, cfg = s["cluster"], s["config"]
    lines = [f"cluster: {c['name']} ({c['path']}), {cfg['procs']} GPUs on {c['nodes']} node(s) of "
             f"{c['gpus_per_node']}; compute: {s['machine']['name']} ({s['machine']['path']})",
             f"network {'-'.join(map(str, cfg['layer_sizes']))}, batch {cfg['batch']}, {cfg['precision']}, "
             "graph mode, resident data, NCCL; each exchange by its fastest collective", "",
             f"{'strategy':<10}{'grid':>10}{'compute us':>12}{'comm us':>12}{'total us':>12}{'samples/s':>14}"]
    for st in s["strategies"]:
        lines.append(f"{st['strategy']:<10}{'x'.join(map(str, st['grid'])):>10}{st['compute_s'] * 1e6:>12.1f}"
                     f"{st['comm_s'] * 1e6:>12.1f}{st['total_s'] * 1e6:>12.1f}{st['samples_per_s']:>14.3g}")
        for e in st["exchanges"]:
            if e["ranks"] > 1:
                every = ", ".join(f"{a} {t * 1e6:.1f}" for a, t in e["algorithms_s"].items())
                lines.append(f"    {e['kind']} {e['bytes']:,} B over {e['ranks']}: {e['algorithm']} "
                             f"({every} us)")
    for gone in s.get("left_out", ()):
        lines.append(f"{gone['strategy']:<10}left out: {gone['why']}")
    return "\n".join(lines)
