"""One strategy as a JSON-ready dict and as the table `python -m
perfmlp.model` prints (schema in docs/model.md)."""
from __future__ import annotations

from ..costs import itemsize as itemsize_of
from ..interval import interval, interval_json
from ..machine import Machine
from ..predict import trace_words
from .counts import DEVICE_COMMS, check_shard, grid, layer_splits, rank_counts
from .prediction import best_strategy, label, predict_strategy, step_phases, strategy_exec
from ... import names as N

SCHEMA = "perfmlp.model.strategy/1"


def strategy_summary(machine: Machine, layer_sizes, batch: int, procs: int = 1, precision: str = "float32",
                      comm: str = N.NCCL, batch_transfer: str = N.RESIDENT, parallel: str = "data",
                      model_procs: int = 0, exec_mode: str = N.EAGER, trace_level: str | None = None) -> dict:
    """A strategy's counts per rank, bytes per step, predicted time, and every candidate fastest first."""
    s = itemsize_of(precision)
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
        "schema": SCHEMA,
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
             f"{', '.join(cfg['layer_splits'])}), {cfg['precision']}, comm {cfg['comm']}, batch {cfg['batch_transfer']}, "
             f"exec {cfg['exec']}, {trace_words(cfg['trace_level'])}",
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
