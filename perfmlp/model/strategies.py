"""The strategies as closed forms: what each rank computes and hands to
collectives per step (the trace's counters, to the byte), the predicted time
per batch, and which wins where (docs/model.md, "Strategies", derives them):
data (the parameter server with `--comm ps`/`ps-nccl`), model (a shard of
every weight matrix a rank: odd layers split by rows, even by columns, a
row-split output replicated) and hybrid (a p_data x p_model grid, rank r at
divmod(r, p_model)).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .costs import LOSS_SLOTS, batch_counts, itemsize as itemsize_of, n_params, pieces
from .predict import (TERMS, Prediction, graph_refusal, launch_host_s, predict_batch, resolve_exec, ring_allreduce_s,
                      staging_memory, trace_cost, trace_detail)
from .. import names as N

if TYPE_CHECKING:
    from .machine import Machine

PS_COMMS = N.PS_COMMS
DEVICE_COMMS = N.DEVICE_COMMS
ROOT = 0                               # the parameter server's rank


class StrategyError(ValueError):
    """A grid or strategy that cannot run (one-line message naming the value)."""


def grid(procs: int, parallel: str, model_procs: int = 0) -> tuple[int, int]:
    """(p_data, p_model) of a run on `procs` ranks."""
    if parallel == N.DATA:
        return procs, 1
    if parallel == N.MODEL:
        return 1, procs
    if parallel != N.HYBRID:
        raise StrategyError(f"parallel must be one of {', '.join(N.STRATEGIES)}, got {parallel!r}")
    if model_procs <= 0:
        raise StrategyError("parallel hybrid needs model_procs, the ranks of each model group (p = p_data x p_model)")
    if procs % model_procs:
        raise StrategyError(f"model_procs ({model_procs}) must divide the {procs} ranks (p = p_data x p_model)")
    return procs // model_procs, model_procs


def coords(rank: int, p_model: int) -> tuple[int, int]:
    """(d, m): rank's data group index (its piece of the batch) and its shard."""
    return divmod(rank, p_model)


def layer_splits(n_layers: int) -> tuple[str, ...]:
    """How layer l = 1..L is split over a model group: row, col, rep."""
    out = ["row" if l % 2 else "col" for l in range(1, n_layers + 1)]
    if out[-1] == "row":
        out[-1] = "rep"
    return tuple(out)


def shard_sizes(layer_sizes, p_model: int, m: int) -> tuple[int, ...]:
    """Layer sizes of shard m: a row layer's units split by `pieces`."""
    splits = layer_splits(len(layer_sizes) - 1)
    return (layer_sizes[0], *(pieces(n, p_model)[m] if s == "row" else n for n, s in zip(layer_sizes[1:], splits)))


def check_shard(layer_sizes, p_model: int) -> None:
    """Every shard owns at least one unit of every row-split layer."""
    for l, split in enumerate(layer_splits(len(layer_sizes) - 1), start=1):
        if split == "row" and layer_sizes[l] < p_model:
            raise StrategyError(f"hidden layer {l} has {layer_sizes[l]} units, fewer than the {p_model} ranks "
                                 f"of a model group")


def activation_collectives(layer_sizes, b: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(forward, backward) allreduces over the model group, each (layer, elements), in issue order."""
    L = len(layer_sizes) - 1
    splits = layer_splits(L)
    fwd = [(l, layer_sizes[l] * b) for l in range(1, L + 1) if splits[l - 1] == "col"]
    bwd = [(l, layer_sizes[l - 1] * b) for l in range(L, 1, -1) if splits[l - 1] == "row"]
    return fwd, bwd


_NAMES = {("allreduce", False): "MPI_Allreduce", ("allreduce", True): "ncclAllReduce",
          ("reduce", False): "MPI_Reduce", ("reduce", True): "ncclReduce",
          ("bcast", False): "MPI_Bcast", ("bcast", True): "ncclBroadcast"}


@dataclass(frozen=True)
class Collective:
    kind: str         # allreduce, reduce, bcast
    elements: int
    group: int        # ranks taking part
    phase: str        # the trace phase it runs in

    def name(self, comm: str) -> str:
        return _NAMES[(self.kind, comm in DEVICE_COMMS)]


@dataclass(frozen=True)
class RankCounts:
    """One rank's step: shard, piece, FLOPs per phase, and the bytes it copies and hands to MPI / NCCL."""
    rank: int
    b: int                      # samples this rank computes on
    sizes: tuple[int, ...]      # the network it runs (a shard, or the whole one)
    flops: dict                 # phase -> FLOPs
    collectives: tuple[Collective, ...]
    bytes_h2d: int
    bytes_d2h: int
    bytes_mpi: int
    bytes_nccl: int
    kernels: int                # kernels launched (a host launch each, eager)

    @property
    def flops_total(self) -> int:
        return sum(self.flops.values())

    @property
    def bytes_comm(self) -> int:
        return self.bytes_mpi + self.bytes_nccl

    def collective_list(self, comm: str) -> list[list]:
        """As the trace's `collectives`: [[name, elements], ...]."""
        return [[c.name(comm), c.elements] for c in self.collectives]


def _place(layer_sizes, batch: int, procs: int, rank: int, parallel: str, model_procs: int):
    """(p_data, p_model, the rank's samples, its shard's layer sizes)."""
    p_data, p_model = grid(procs, parallel, model_procs)
    d, m = coords(rank, p_model)
    return p_data, p_model, pieces(batch, p_data)[d], shard_sizes(layer_sizes, p_model, m)


def rank_collectives(layer_sizes, batch: int, procs: int, rank: int, parallel: str = "data",
                     model_procs: int = 0, comm: str = N.NCCL) -> tuple[Collective, ...]:
    p_data, p_model, b, sizes = _place(layer_sizes, batch, procs, rank, parallel, model_procs)
    out = []
    if p_model > 1:
        fwd, bwd = activation_collectives(layer_sizes, b)
        L = len(layer_sizes) - 1
        out += [Collective("allreduce", n, p_model, "combine" if l == L else "forward") for l, n in fwd]
        out += [Collective("allreduce", n, p_model, "backward") for _, n in bwd]
    g = n_params(sizes) + LOSS_SLOTS
    if comm in PS_COMMS:
        if p_model > 1:
            raise StrategyError(f"--comm {comm} (the parameter server) is data parallelism's exchange")
        out.append(Collective("reduce", g, procs, "reduce"))
        # the host version broadcasts the loss slot too, so every rank sees a non-finite loss at once
        out.append(Collective("bcast", n_params(sizes) + (LOSS_SLOTS if comm == N.PS else 0), procs, "bcast"))
    elif p_data > 1 or parallel == N.DATA:
        # data parallelism hands the buffer to the collective even on one process (model/predict's rule)
        out.append(Collective("allreduce", g, p_data, "allreduce"))
    return tuple(out)


def rank_counts(layer_sizes, batch: int, procs: int, rank: int, itemsize: int, parallel: str = "data",
                model_procs: int = 0, comm: str = N.NCCL, batch_transfer: str = N.RESIDENT) -> RankCounts:
    """What rank `rank` computes, copies and communicates in one step (the trace's counters)."""
    _, _, b, sizes = _place(layer_sizes, batch, procs, rank, parallel, model_procs)
    base = batch_counts(sizes, b, itemsize, N.NCCL, batch_transfer)  # compute and the batch copy only
    flops = dict(base.flops)
    kernels = sum(base.kernels.values())
    if comm in PS_COMMS and rank != ROOT:
        kernels -= base.kernels["update"]
        del flops["update"]  # only the server updates
    colls = rank_collectives(layer_sizes, batch, procs, rank, parallel, model_procs, comm)
    nbytes = itemsize * sum(c.elements for c in colls)
    staged = comm == N.MPI_STAGED
    return RankCounts(rank=rank, b=b, sizes=sizes, flops=flops, collectives=colls,
                      bytes_h2d=base.bytes_h2d + (nbytes if staged else 0), bytes_d2h=nbytes if staged else 0,
                      bytes_mpi=0 if comm in DEVICE_COMMS else nbytes, bytes_nccl=nbytes if comm in DEVICE_COMMS else 0,
                      kernels=kernels)


def step_bytes(layer_sizes, batch: int, procs: int, itemsize: int, parallel: str = "data", model_procs: int = 0,
               comm: str = N.NCCL) -> dict:
    """Bytes handed to collectives in one step: the most of any rank, and the job's."""
    per = [rank_counts(layer_sizes, batch, procs, r, itemsize, parallel, model_procs, comm).bytes_comm
           for r in range(procs)]
    return {"per_rank": max(per), "job": sum(per)}


# ---- closed forms for one hidden layer (docs/model.md; tested equal to rank_counts) -----------

def closed_form_bytes(D: int, H: int, C: int, B: int, p: int, s: int, strategy: str, p_model: int = 1) -> int:
    """Bytes one rank (rank 0) hands to collectives per step, network D-H-C, fp size s."""
    n_theta = H * D + H + C * H + C
    if strategy == N.DATA:
        return s * (n_theta + 1)
    if strategy == N.PS:
        return 2 * s * (n_theta + 1)
    if strategy == N.MODEL:
        return s * C * B if p > 1 else 0
    if strategy == N.HYBRID:
        p_data = p // p_model
        b = -(-B // p_data)
        h = -(-H // p_model)
        shard = h * D + h + C * h + C
        return (s * C * b if p_model > 1 else 0) + (s * (shard + 1) if p_data > 1 else 0)
    raise StrategyError(f"no closed form for strategy {strategy!r}")


# ---- the predicted time per batch, and which strategy wins --------------------------------------

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
    cost = trace_cost(trace_level)   # the phases a traced batch records, a CUDA event each at the `phases` level
    phases = len(step_phases(layer_sizes, procs, ROOT, parallel, model_procs, comm, batch_transfer, mode)) \
        if cost else 0
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
        out += [Strategy("data", 0, N.PS_NCCL if device else "ps"), Strategy("model", 0, comm)]
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
    def total_s(st: Strategy, B: int) -> float:
        return predict_strategy(machine, layer_sizes, B, procs, precision, st.comm, batch_transfer, st.parallel,
                                st.model_procs, exec_mode=exec_mode).total_s

    def b_wins(B):
        return total_s(b, B) <= total_s(a, B)
    if b_wins(lo):
        return lo
    if not b_wins(hi):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if b_wins(mid) else (mid, hi)
    return hi
