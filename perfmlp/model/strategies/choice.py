"""Which strategy wins: every candidate on a number of ranks, fastest
first, and the batch where one overtakes another."""
from __future__ import annotations

from dataclasses import dataclass

from ..machine import Machine
from ..predict import Prediction, resolve_exec
from .grid import PS_COMMS, StrategyError, check_shard, grid
from .prediction import predict_strategy
from ... import names as N

@dataclass(frozen=True)
class Strategy:
    parallel: str
    model_procs: int
    comm: str


def label(parallel: str, model_procs: int, comm: str, procs: int) -> str:
    """A strategy's short name: data, ps, model, hybrid <p_data>x<p_model>."""
    if comm in PS_COMMS:
        return "ps"
    if parallel == N.HYBRID:
        p_data, p_model = grid(procs, parallel, model_procs)
        return f"hybrid {p_data}x{p_model}"
    return parallel


def candidates(procs: int, device: bool = True, staged: bool = False) -> list[Strategy]:
    """The strategies a run on `procs` ranks can choose from: data parallel
    (allreduce), the parameter server, model parallel, and each proper hybrid
    grid. device: on GPUs, the collectives by NCCL, or with `staged` through
    host MPI (mpi-staged; the GPU's parameter server is ps-nccl either way);
    else the NumPy backend's host MPI (mpi, ps)."""
    comm = (N.MPI_STAGED if staged else N.NCCL) if device else "mpi"
    out = [Strategy("data", 0, comm)]
    if procs > 1:
        out.append(Strategy("data", 0, N.PS_NCCL if device else "ps"))
        out.append(Strategy("model", 0, comm))
        out += [Strategy(N.HYBRID, m, comm) for m in range(2, procs) if procs % m == 0]
    return out


def best_strategy(machine: Machine, layer_sizes, batch: int, procs: int, precision: str = "float32",
                  batch_transfer: str = N.RESIDENT, device: bool = True, trace_level: str | None = None,
                  exec_mode: str = N.EAGER, staged: bool = False) -> list[tuple[str, Prediction]]:
    """Every candidate strategy that can run (candidates: `device`,
    `staged`), fastest first: (label, prediction). `exec_mode` graph or
    auto: each candidate in graph mode where its step can be captured, else
    eagerly."""
    out = []
    for st in candidates(procs, device, staged):
        try:
            p_data, p_model = grid(procs, st.parallel, st.model_procs)
            check_shard(layer_sizes, p_model)
            if p_data > batch:
                continue
        except StrategyError:
            continue
        mode = N.EAGER if exec_mode == N.EAGER else resolve_exec("auto", "cupy", st.parallel, st.comm)
        pred = predict_strategy(machine, layer_sizes, batch, procs, precision, st.comm, batch_transfer,
                                st.parallel, st.model_procs, trace_level, mode)
        out.append((label(st.parallel, st.model_procs, st.comm, procs), pred))
    return sorted(out, key=lambda x: x[1].total_s)


def crossover_batch(machine: Machine, layer_sizes, procs: int, a: Strategy, b: Strategy, lo: int = 1,
                    hi: int = 1 << 20, precision: str = "float32", batch_transfer: str = N.RESIDENT,
                    exec_mode: str = N.EAGER) -> int | None:
    """The smallest batch in [lo, hi] at which strategy b is predicted no
    slower than a, found by bisection where the sign changes once (None: b
    never catches up in the range)."""
    def b_wins(B):
        ta = predict_strategy(machine, layer_sizes, B, procs, precision, a.comm, batch_transfer, a.parallel,
                              a.model_procs, exec_mode=exec_mode).total_s
        tb = predict_strategy(machine, layer_sizes, B, procs, precision, b.comm, batch_transfer, b.parallel,
                              b.model_procs, exec_mode=exec_mode).total_s
        return tb <= ta
    if b_wins(lo):
        return lo
    if not b_wins(hi):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if b_wins(mid) else (mid, hi)
    return hi
