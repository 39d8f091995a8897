"""Partitioning strategies as closed forms: what each rank computes and hands
to collectives per step, the predicted time per batch, and which strategy
wins where (docs/model.md, "Partitioning strategies").

Strategies (`run --parallel`, with `--comm` for the library):
- data: the batch split over p ranks, the whole gradient buffer allreduced
  (`predict.py`); with `--comm ps` / `ps-nccl` the parameter server instead:
  the gradient buffer reduced to rank 0, updated there, parameters broadcast.
- model: every rank holds the whole batch and a shard of every weight matrix
  (`layer_splits`); activations are combined inside the step, no gradient
  is exchanged.
- hybrid: a p = p_data x p_model grid; rank r sits at (d, m) = divmod(r,
  p_model): a model group per row (the ranks of one data piece), a data
  group per column (the ranks holding the same shard).

Layer splits of a network D - n_1 - ... - n_{L-1} - C over a model group
(layer l = 1..L):
- odd l ("row"): W_l split by rows (output units); needs the whole input
  (replicated), gives its own rows of the activation.
- even l ("col"): W_l split by columns (input units), so its input is the
  row shard the layer below produced; gives a partial sum of the whole
  pre-activation: one allreduce of n_l x b before the bias (the output
  layer: after adding the bias on the group's first rank, so that its
  sigmoid or softmax sees the whole sum).
- the output layer when L is odd ("rep"): replicated (C rows are too few to
  split); its input is whole (the col layer below it), so no collective.
Backward: a col layer's dA is its own rows (no collective); a row layer
l > 1 produces a partial sum of dA_{l-1}: one allreduce of n_{l-1} x b.
A shard is therefore a plain network of sizes (D, own_1, n_2, own_3, ...,
C) (`shard_sizes`), which the trainer runs with the same kernels.

Collectives over a group of one rank are not called (and not counted).

Execution modes: as data parallelism's, eager (kernel by kernel) or graph:
with NCCL (and the parameter server's ps-nccl) the whole step, the model
group's allreduces included, is one CUDA graph replayed per batch; the
staged and host exchanges need the host inside the step, so they run
eagerly (predict.py's graph_refusal and resolve_exec, which the trainer
uses too).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .costs import LOSS_SLOTS, batch_counts, itemsize as itemsize_of, n_params, piece, pieces
from .machine import Machine
from .predict import (TERMS, Prediction, graph_refusal, launch_host_s, predict_batch, resolve_exec, ring_allreduce_s,
                      staging_memory, trace_cost, trace_detail, trace_words)

PARALLEL = ("data", "model", "hybrid")
PS_COMMS = ("ps", "ps-nccl")           # the parameter server: host MPI (NumPy), NCCL (GPU)
DEVICE_COMMS = ("nccl", "ps-nccl")     # collectives on device buffers
ROOT = 0                               # the parameter server's rank


class PartitionError(ValueError):
    """A grid or strategy that cannot run (one-line message naming the value)."""


def grid(procs: int, parallel: str, model_procs: int = 0) -> tuple[int, int]:
    """(p_data, p_model) of a run on `procs` ranks."""
    if parallel == "data":
        return procs, 1
    if parallel == "model":
        return 1, procs
    if parallel != "hybrid":
        raise PartitionError(f"parallel must be one of {', '.join(PARALLEL)}, got {parallel!r}")
    if model_procs <= 0:
        raise PartitionError("parallel hybrid needs model_procs, the ranks of each model group (p = p_data x p_model)")
    if procs % model_procs:
        raise PartitionError(f"model_procs ({model_procs}) must divide the {procs} ranks (p = p_data x p_model)")
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
    """Layer sizes of shard m: a row layer's units split by `piece`."""
    sizes = list(layer_sizes)
    for l, split in enumerate(layer_splits(len(layer_sizes) - 1), start=1):
        if split == "row":
            lo, hi = piece(layer_sizes[l], p_model, m)
            sizes[l] = hi - lo
    return tuple(sizes)


def check_shard(layer_sizes, p_model: int) -> None:
    """Every shard owns at least one unit of every row-split layer."""
    for l, split in enumerate(layer_splits(len(layer_sizes) - 1), start=1):
        if split == "row" and layer_sizes[l] < p_model:
            raise PartitionError(f"hidden layer {l} has {layer_sizes[l]} units, fewer than the {p_model} ranks "
                                 f"of a model group")


def shard_params(layer_sizes, p_model: int, m: int) -> int:
    return n_params(shard_sizes(layer_sizes, p_model, m))


def activation_collectives(layer_sizes, b: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(forward, backward) allreduces over the model group, each (layer, elements),
    in the order the step issues them; the forward's last is the output's (the
    `combine` phase) when the output layer is col-split."""
    L = len(layer_sizes) - 1
    splits = layer_splits(L)
    fwd = [(l, layer_sizes[l] * b) for l in range(1, L + 1) if splits[l - 1] == "col"]
    bwd = [(l, layer_sizes[l - 1] * b) for l in range(L, 1, -1) if splits[l - 1] == "row"]
    return fwd, bwd


# ---- what one rank hands to collectives and copies, per step ------------------------------------

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
    """One rank's step: its shard and piece, FLOPs per phase (the phases that
    compute), and the bytes it copies and hands to MPI / NCCL."""

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


def rank_collectives(layer_sizes, batch: int, procs: int, rank: int, parallel: str = "data",
                     model_procs: int = 0, comm: str = "nccl") -> tuple[Collective, ...]:
    p_data, p_model = grid(procs, parallel, model_procs)
    d, m = coords(rank, p_model)
    b = pieces(batch, p_data)[d]
    sizes = shard_sizes(layer_sizes, p_model, m)
    out = []
    if p_model > 1:
        fwd, bwd = activation_collectives(layer_sizes, b)
        L = len(layer_sizes) - 1
        out += [Collective("allreduce", n, p_model, "combine" if l == L else "forward") for l, n in fwd]
        out += [Collective("allreduce", n, p_model, "backward") for _, n in bwd]
    g = n_params(sizes) + LOSS_SLOTS
    if comm in PS_COMMS:
        if p_model > 1:
            raise PartitionError(f"--comm {comm} (the parameter server) is data parallelism's exchange")
        out.append(Collective("reduce", g, procs, "reduce"))
        # the host version broadcasts the loss slot too, so every rank sees a non-finite loss at once
        out.append(Collective("bcast", n_params(sizes) + (LOSS_SLOTS if comm == "ps" else 0), procs, "bcast"))
    elif p_data > 1 or parallel == "data":
        # data parallelism hands the buffer to the collective even on one process (predict.py's rule)
        out.append(Collective("allreduce", g, p_data, "allreduce"))
    return tuple(out)


def rank_counts(layer_sizes, batch: int, procs: int, rank: int, itemsize: int, parallel: str = "data",
                model_procs: int = 0, comm: str = "nccl", batch_transfer: str = "resident") -> RankCounts:
    """What rank `rank` computes, copies and communicates in one step of a
    batch of `batch` samples (the trace's counters, to the byte)."""
    p_data, p_model = grid(procs, parallel, model_procs)
    d, m = coords(rank, p_model)
    b = pieces(batch, p_data)[d]
    sizes = shard_sizes(layer_sizes, p_model, m)
    base = batch_counts(sizes, b, itemsize, "nccl", batch_transfer)  # compute and the batch copy only
    flops = dict(base.flops)
    kernels = sum(base.kernels.values())
    if comm in PS_COMMS and rank != ROOT:
        kernels -= base.kernels["update"]
        del flops["update"]  # only the server updates
    colls = rank_collectives(layer_sizes, batch, procs, rank, parallel, model_procs, comm)
    nbytes = itemsize * sum(c.elements for c in colls)
    staged = comm == "mpi-staged"
    return RankCounts(rank=rank, b=b, sizes=sizes, flops=flops, collectives=colls,
                      bytes_h2d=base.bytes_h2d + (nbytes if staged else 0), bytes_d2h=nbytes if staged else 0,
                      bytes_mpi=0 if comm in DEVICE_COMMS else nbytes, bytes_nccl=nbytes if comm in DEVICE_COMMS else 0,
                      kernels=kernels)


def step_bytes(layer_sizes, batch: int, procs: int, itemsize: int, parallel: str = "data", model_procs: int = 0,
               comm: str = "nccl") -> dict:
    """Bytes handed to collectives in one step: per rank (the most any rank
    hands) and summed over the ranks."""
    per = [rank_counts(layer_sizes, batch, procs, r, itemsize, parallel, model_procs, comm).bytes_comm
           for r in range(procs)]
    return {"per_rank": max(per), "job": sum(per)}


# ---- closed forms for one hidden layer (docs/model.md; tested equal to rank_counts) -----------

def closed_form_bytes(D: int, H: int, C: int, B: int, p: int, s: int, strategy: str, p_model: int = 1) -> int:
    """Bytes one rank (rank 0) hands to collectives per step, network D-H-C, fp size s."""
    n_theta = H * D + H + C * H + C
    if strategy == "data":
        return s * (n_theta + 1)
    if strategy == "ps":
        return s * (n_theta + 1) + s * (n_theta + 1)
    if strategy == "model":
        return s * C * B if p > 1 else 0
    if strategy == "hybrid":
        p_data = p // p_model
        b = -(-B // p_data)
        h = -(-H // p_model)
        shard = h * D + h + C * h + C
        return (s * C * b if p_model > 1 else 0) + (s * (shard + 1) if p_data > 1 else 0)
    raise PartitionError(f"no closed form for strategy {strategy!r}")


# ---- predicted time per batch -----------------------------------------------------------------

def collective_s(machine: Machine, c: Collective, nbytes: int, comm: str) -> float:
    """Time of one collective. Allreduce: the ring (predict.py). Reduce and
    broadcast, pipelined along a chain (NCCL) or a binomial tree (MPI): the
    buffer crosses each link once, n / bw, after one latency per step
    (NCCL: one; MPI: ceil(log2 p))."""
    if c.group <= 1:
        return 0.0
    device = comm in DEVICE_COMMS
    alpha, bw = ((machine.nccl_alpha_s, machine.nccl_bw_bytes_per_s) if device
                 else (machine.mpi_alpha_s, machine.mpi_bw_bytes_per_s))
    if c.kind == "allreduce":
        return ring_allreduce_s(nbytes, c.group, alpha, bw, steps_alpha=not device)
    steps = 1 if device else math.ceil(math.log2(c.group))
    return steps * alpha + nbytes / bw


def strategy_exec(exec_mode: str | None, parallel: str, comm: str) -> str:
    """The execution mode a strategy's step runs in (`auto`: resolve_exec);
    graph where the step cannot be captured is a PartitionError with the
    trainer's message (graph_refusal)."""
    mode = resolve_exec(exec_mode, "cupy", parallel, comm)
    if mode == "graph":
        why = graph_refusal("numpy" if comm in ("mpi", "ps") else "cupy", parallel, comm)
        if why:
            raise PartitionError(why)
    return mode


def traced_events(layer_sizes, procs: int, rank: int, parallel: str, model_procs: int, comm: str,
                  batch_transfer: str, exec_mode: str = "eager") -> int:
    """Phases a traced batch of this rank records, each with a CUDA event at
    the `phases` level (see perfmlp/partition.py's step)."""
    return len(step_phases(layer_sizes, procs, rank, parallel, model_procs, comm, batch_transfer, exec_mode))


def step_phases(layer_sizes, procs: int, rank: int, parallel: str, model_procs: int, comm: str,
                batch_transfer: str, exec_mode: str = "eager") -> tuple[str, ...]:
    """The phases one batch of this rank records, in order. In graph mode
    one replay (`graph`) stands for forward, combine, loss and backward, and
    with NCCL for the exchange and the update too (trace/format.py's
    batch_phases names data parallelism's the same way)."""
    p_data, p_model = grid(procs, parallel, model_procs)
    out = [] if batch_transfer == "resident" else ["h2d"]
    if strategy_exec(exec_mode, parallel, comm) == "graph":
        out.append("graph")
        if comm in DEVICE_COMMS:
            return tuple(out)
    else:
        out.append("forward")
        if p_model > 1 and layer_splits(len(layer_sizes) - 1)[-1] == "col":
            out.append("combine")
        out += ["loss", "backward"]
    if comm in PS_COMMS:
        out += ["reduce"] + (["update"] if rank == ROOT else []) + ["bcast"]
        return tuple(out)
    if p_data > 1 or parallel == "data":
        out += (["d2h", "allreduce", "h2d_grad"] if comm == "mpi-staged" else ["allreduce"])
    out.append("update")
    return tuple(out)


def predict_strategy(machine: Machine, layer_sizes, batch: int, procs: int = 1, precision: str = "float32",
                     comm: str = "nccl", batch_transfer: str = "resident", parallel: str = "data",
                     model_procs: int = 0, trace_level: str | None = None, exec_mode: str = "eager") -> Prediction:
    """Predicted time per batch of a strategy, with predict.py's terms. Data
    parallelism with an allreduce is predict_batch itself. Otherwise the
    compute terms are predict_batch's for the slowest rank's own step (rank
    0: the largest piece and the largest shard) and `allreduce` holds every
    collective of the step (combines, gradients, the server's reduce and
    broadcast); mpi-staged adds a D2H and an H2D copy around each.

    `exec_mode` (eager, graph; auto: resolve_exec's choice for the
    strategy): eager pays `launches`, the host's launches that the GPU work
    does not hide. Graph mode is one replay of the whole step (NCCL only:
    strategy_exec refuses the rest), as predict_batch predicts data
    parallelism's: no per-launch host term, the graph's kernel gaps, the
    resident piece's copy into the static inputs, and `graph_launch`, the
    host's one launch where it exceeds the replay's GPU time (the rank's own
    step's, predict_batch's timeline, less the collectives that the replay
    also holds)."""
    if parallel == "data" and comm not in PS_COMMS:
        return predict_batch(machine, layer_sizes, batch, procs, precision, comm, batch_transfer, trace_level,
                             exec_mode=exec_mode)
    mode = strategy_exec(exec_mode, parallel, comm)
    graph = mode == "graph"
    s = itemsize_of(precision)
    rc = rank_counts(layer_sizes, batch, procs, ROOT, s, parallel, model_procs, comm, batch_transfer)
    own = predict_batch(machine, rc.sizes, rc.b, 1, precision, "nccl", batch_transfer, trace_level, exec_mode=mode)
    cost = trace_cost(trace_level)
    phases = traced_events(layer_sizes, procs, ROOT, parallel, model_procs, comm, batch_transfer, mode) \
        if cost else 0
    terms = dict.fromkeys(TERMS, 0.0)
    for k in ("gemm", "elementwise", "h2d_batch") + (("kernel_gaps",) if graph else ()):
        terms[k] = own.terms[k]
    mem = staging_memory(batch_transfer)
    for c in rc.collectives:
        n = s * c.elements
        terms["allreduce"] += collective_s(machine, c, n, comm)
        if comm == "mpi-staged":
            terms["d2h_grad"] += machine.copy_s("d2h", mem, n)
            terms["h2d_grad"] += machine.copy_s("h2d", mem, n)
    if graph:
        # the collectives run inside the replay: they hide the launch too, unless a pageable copy
        # synchronised the host before it (pinned copies and resident data do not)
        hidden = terms["allreduce"] if batch_transfer != "pageable" else 0.0
        terms["graph_launch"] = max(0.0, own.terms["graph_launch"] - hidden)
    else:
        hidden_by = terms["gemm"] + terms["elementwise"]
        if batch_transfer == "resident" and comm in DEVICE_COMMS:
            hidden_by += terms["allreduce"]  # no synchronisation in the step: the host runs ahead
        host_s = rc.kernels * launch_host_s(machine, cost is not None, procs) + phases * machine.trace_host_s(procs)
        terms["launches"] = max(0.0, host_s - hidden_by)
    if cost and cost.events:
        terms["tracing"] = machine.trace_event_s * phases
    total = sum(terms.values())
    compute = terms["gemm"] + terms["elementwise"] + terms["kernel_gaps"] + terms["launches"] + terms["graph_launch"]
    job = sum(rank_counts(layer_sizes, batch, procs, r, s, parallel, model_procs, comm, batch_transfer).flops_total
              for r in range(procs))
    return Prediction(terms, total, max(compute, total - compute), rc.flops_total, job,
                      rc.bytes_h2d + rc.bytes_d2h, machine.name,
                      {"exec": mode, "kernels": own.detail["kernels"], **trace_detail(trace_level)})


# ---- which strategy wins ----------------------------------------------------------------------

@dataclass(frozen=True)
class Strategy:
    parallel: str
    model_procs: int
    comm: str


def label(parallel: str, model_procs: int, comm: str, procs: int) -> str:
    """A strategy's short name: data, ps, model, hybrid <p_data>x<p_model>."""
    if comm in PS_COMMS:
        return "ps"
    if parallel == "hybrid":
        p_data, p_model = grid(procs, parallel, model_procs)
        return f"hybrid {p_data}x{p_model}"
    return parallel


def candidates(procs: int, device: bool = True, staged: bool = False) -> list[Strategy]:
    """The strategies a run on `procs` ranks can choose from: data parallel
    (allreduce), the parameter server, model parallel, and each proper hybrid
    grid. device: NCCL (else host MPI, or mpi-staged when `staged`)."""
    comm = "nccl" if device else ("mpi-staged" if staged else "mpi")
    out = [Strategy("data", 0, comm)]
    if procs > 1:
        out.append(Strategy("data", 0, "ps-nccl" if device else "ps"))
        out.append(Strategy("model", 0, comm))
        out += [Strategy("hybrid", m, comm) for m in range(2, procs) if procs % m == 0]
    return out


def best_strategy(machine: Machine, layer_sizes, batch: int, procs: int, precision: str = "float32",
                  batch_transfer: str = "resident", device: bool = True, trace_level: str | None = None,
                  exec_mode: str = "eager") -> list[tuple[str, Prediction]]:
    """Every candidate strategy that can run, fastest first: (label,
    prediction). `exec_mode` graph or auto: each candidate in graph mode
    where its step can be captured, else eagerly."""
    out = []
    for st in candidates(procs, device):
        try:
            p_data, p_model = grid(procs, st.parallel, st.model_procs)
            check_shard(layer_sizes, p_model)
            if p_data > batch:
                continue
        except PartitionError:
            continue
        mode = "eager" if exec_mode == "eager" else resolve_exec("auto", "cupy", st.parallel, st.comm)
        pred = predict_strategy(machine, layer_sizes, batch, procs, precision, st.comm, batch_transfer,
                                st.parallel, st.model_procs, trace_level, mode)
        out.append((label(st.parallel, st.model_procs, st.comm, procs), pred))
    return sorted(out, key=lambda x: x[1].total_s)


def crossover_batch(machine: Machine, layer_sizes, procs: int, a: Strategy, b: Strategy, lo: int = 1,
                    hi: int = 1 << 20, precision: str = "float32", batch_transfer: str = "resident",
                    exec_mode: str = "eager") -> int | None:
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



# ---- one configuration as a JSON-ready dict (python -m perfmlp.model) ----------------------------

SCHEMA = "perfmlp.model.partition/1"


def partition_summary(machine: Machine, layer_sizes, batch: int, procs: int = 1, precision: str = "float32",
                      comm: str = "nccl", batch_transfer: str = "resident", parallel: str = "data",
                      model_procs: int = 0, exec_mode: str = "eager", trace_level: str | None = None) -> dict:
    """A strategy's counts per rank, bytes per step and predicted time, and
    every candidate strategy at the same size, fastest first (schema in
    docs/model.md)."""
    s = itemsize_of(precision)
    p_data, p_model = grid(procs, parallel, model_procs)
    check_shard(layer_sizes, p_model)
    ranks = [rank_counts(layer_sizes, batch, procs, r, s, parallel, model_procs, comm, batch_transfer)
             for r in range(procs)]
    mode = strategy_exec(exec_mode, parallel, comm)
    pred = predict_strategy(machine, layer_sizes, batch, procs, precision, comm, batch_transfer, parallel,
                            model_procs, trace_level, exec_mode=mode)
    device = comm in DEVICE_COMMS or comm == "mpi-staged"
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
        "prediction": {"terms_s": pred.terms, "total_s": pred.total_s, "overlapped_s": pred.overlapped_s,
                       "trace_uncalibrated": pred.detail["trace_uncalibrated"],
                       "job_flops_per_s": pred.flops_job / pred.total_s,
                       "utilisation": pred.flops_job / pred.total_s / (procs * machine.peak_flops_per_s(precision))},
        "strategies": [{"strategy": name, "total_s": p.total_s, "comm_s": p.terms["allreduce"]}
                       for name, p in best_strategy(machine, layer_sizes, batch, procs, precision, batch_transfer,
                                                    device=device or comm in ("nccl", "ps-nccl"),
                                                    trace_level=trace_level, exec_mode=mode)],
    }


def format_partition(s: dict) -> str:
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
    if p["trace_uncalibrated"]:
        lines.append(f"tracer, not in the prediction: {p['trace_uncalibrated']}")
    lines += ["", "every strategy at this size, fastest first (us, communication in brackets):"]
    lines += [f"  {x['strategy']:<14}{x['total_s'] * 1e6:>10.1f}  ({x['comm_s'] * 1e6:.1f})" for x in s["strategies"]]
    return "\n".join(lines)
