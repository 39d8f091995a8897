"""A strategy's predicted time per batch (with the model's terms), the
phases a rank's batch records, and which strategy wins: every candidate,
fastest first, and the batch where one overtakes another."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..costs import itemsize as itemsize_of
from ..machine import Machine
from ..predict import (TERMS, Prediction, graph_refusal, launch_host_s, predict_batch, resolve_exec, ring_allreduce_s,
                       staging_memory, trace_cost, trace_detail)
from .counts import (DEVICE_COMMS, PS_COMMS, ROOT, Collective, StrategyError, check_shard, grid, layer_splits,
                     rank_counts)
from ... import names as N


def collective_s(machine: Machine, c: Collective, nbytes: int, comm: str) -> float:
    """One collective: the ring allreduce; reduce and broadcast n / bw after one latency a step
    (NCCL's chain: one step; MPI's binomial tree: ceil(log2 p))."""
    if c.group <= 1:
        return 0.0
    device = comm in DEVICE_COMMS
    alpha, bw = ((machine.nccl_alpha_s, machine.nccl_bw_bytes_per_s) if device
                 else (machine.mpi_alpha_s, machine.mpi_bw_bytes_per_s))
    if c.kind == N.ALLREDUCE:
        return ring_allreduce_s(nbytes, c.group, alpha, bw, steps_alpha=not device)
    steps = 1 if device else math.ceil(math.log2(c.group))
    return steps * alpha + nbytes / bw


def strategy_exec(exec_mode: str | None, parallel: str, comm: str) -> str:
    """The execution mode a strategy's step runs in; graph where it cannot is a StrategyError."""
    mode = resolve_exec(exec_mode, "cupy", parallel, comm)
    if mode == N.GRAPH:
        why = graph_refusal("numpy" if comm in (N.MPI, N.PS) else "cupy", parallel, comm)
        if why:
            raise StrategyError(why)
    return mode


def step_phases(layer_sizes, procs: int, rank: int, parallel: str, model_procs: int, comm: str,
                batch_transfer: str, exec_mode: str = N.EAGER) -> tuple[N.Phase, ...]:
    """The phases one batch of this rank records, in order (names.batch_phases with the strategy's part)."""
    p_data, p_model = grid(procs, parallel, model_procs)
    return N.batch_phases(comm, batch_transfer, strategy_exec(exec_mode, parallel, comm),
                          combine=p_model > 1 and layer_splits(len(layer_sizes) - 1)[-1] == "col",
                          exchange=p_data > 1 or parallel == N.DATA,
                          updates=comm not in PS_COMMS or rank == ROOT)


def predict_strategy(machine: Machine, layer_sizes, batch: int, procs: int = 1, precision: str = "float32",
                     comm: str = N.NCCL, batch_transfer: str = N.RESIDENT, parallel: str = "data",
                     model_procs: int = 0, trace_level: str | None = None, exec_mode: str = N.EAGER) -> Prediction:
    """Predicted time per batch of a strategy: data parallelism with an allreduce is
    predict_batch itself; otherwise rank 0's own step (the largest piece and shard)
    with every collective in `allreduce` (mpi-staged: a D2H and an H2D copy around
    each). Eager pays the launches the GPU work does not hide; graph mode is one
    replay, its launch less the collectives the replay holds."""
    if parallel == N.DATA and comm not in PS_COMMS:
        return predict_batch(machine, layer_sizes, batch, procs, precision, comm, batch_transfer, trace_level,
                             exec_mode=exec_mode)
    mode = strategy_exec(exec_mode, parallel, comm)
    graph = mode == N.GRAPH
    s = itemsize_of(precision)
    rc = rank_counts(layer_sizes, batch, procs, ROOT, s, parallel, model_procs, comm, batch_transfer)
    own = predict_batch(machine, rc.sizes, rc.b, 1, precision, N.NCCL, batch_transfer, trace_level, exec_mode=mode)
    cost = trace_cost(trace_level)
    phases = 0
    if cost:   # the phases a traced batch records, a CUDA event each at the `phases` level
        phases = len(step_phases(layer_sizes, procs, ROOT, parallel, model_procs, comm, batch_transfer, mode))
    terms = dict.fromkeys(TERMS, 0.0)
    for k in ("gemm", "elementwise", N.H2D_BATCH) + (("kernel_gaps",) if graph else ()):
        terms[k] = own.terms[k]
    _collective_terms(machine, rc.collectives, s, comm, batch_transfer, terms)
    if graph:
        # the collectives run inside the replay: they hide the launch too, unless a pageable copy
        # synchronised the host before it (pinned copies and resident data do not)
        hidden = terms["allreduce"] if batch_transfer != N.PAGEABLE else 0.0
        terms["graph_launch"] = max(0.0, own.terms["graph_launch"] - hidden)
    else:
        terms["launches"] = _eager_launches(machine, rc.kernels, phases, procs, cost is not None, comm,
                                            batch_transfer, terms)
    if cost and cost.events:
        terms["tracing"] = machine.trace_event_s * phases
    total = sum(terms.values())
    compute = terms["gemm"] + terms["elementwise"] + terms["kernel_gaps"] + terms["launches"] + terms["graph_launch"]
    job = sum(rank_counts(layer_sizes, batch, procs, r, s, parallel, model_procs, comm, batch_transfer).flops_total
              for r in range(procs))
    return Prediction(terms, total, max(compute, total - compute), rc.flops_total, job,
                      rc.bytes_h2d + rc.bytes_d2h, machine.name,
                      {"exec": mode, "kernels": own.detail["kernels"], **trace_detail(trace_level)})


def _collective_terms(machine: Machine, collectives, itemsize: int, comm: str, batch_transfer: str,
                      terms: dict) -> None:
    """Add every collective to `allreduce` (mpi-staged: its copies to d2h_grad and h2d_grad)."""
    mem = staging_memory(batch_transfer)
    for c in collectives:
        n = itemsize * c.elements
        terms["allreduce"] += collective_s(machine, c, n, comm)
        if comm == N.MPI_STAGED:
            terms[N.D2H_GRAD] += machine.copy_s("d2h", mem, n)
            terms[N.H2D_GRAD] += machine.copy_s("h2d", mem, n)


def _eager_launches(machine: Machine, kernels: int, phases: int, procs: int, traced: bool, comm: str,
                    batch_transfer: str, terms: dict) -> float:
    """The host's launch and tracer time the GPU work does not hide."""
    hidden_by = terms["gemm"] + terms["elementwise"]
    if batch_transfer == N.RESIDENT and comm in DEVICE_COMMS:
        hidden_by += terms["allreduce"]
    host_s = kernels * launch_host_s(machine, traced, procs) + phases * machine.trace_host_s(procs)
    return max(0.0, host_s - hidden_by)


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
    """The strategies a run on `procs` ranks can choose from (`device`: on GPUs)."""
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
    """(label, prediction) of every candidate that can run, fastest first."""
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
    """The smallest batch in [lo, hi] where b is predicted no slower than a, by bisection (None: never)."""
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
