"""The one configuration object: defaults, then a YAML file, then flags.

The defaults are a small job that visibly learns on the shipped MNIST digits
(the reference configuration: configs/reference.yaml). Every value is
converted and checked by perfmlp.checks, unknown keys rejected by name; the
resolved configuration goes into every trace manifest.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from . import checks
from .errors import PerfmlpError
from .safeio import key, prefix
from .model.costs import DEFAULT_BUCKET_BYTES
from . import names as N
from .trace.format import OVERHEAD_TARGET

# each choice field's values, from the vocabulary (N.AUTO: resolved at run time)
CHOICES = {
    "precision": N.PRECISIONS,
    "backend": (N.AUTO, *N.BACKENDS),
    "comm": (N.AUTO, *N.COMMS),
    "batch_transfer": N.TRANSFERS,
    "gemm": N.GEMM_KERNELS,
    "exec": (N.AUTO, *N.EXECS),
    "data": (N.AUTO, *N.DATA_SOURCES),
    "trace_level": N.TRACE_LEVEL_CHOICES,
    "parallel": N.STRATEGIES,
    "grad_precision": N.GRAD_PRECISIONS,
}


@dataclass(frozen=True)
class Config:
    """Hyperparameters and run options (defaults: the job that learns)."""

    input_size: int = 784            # D
    hidden_sizes: tuple[int, ...] = (512,)  # H (one entry per hidden layer)
    num_classes: int = 10            # C
    reg: float = 1e-4                # lambda
    learning_rate: float = 1.0
    n_train: int = 8000              # N
    epochs: int = 10
    batch_size: int = 100            # B
    precision: str = N.FLOAT32
    seed: int = 0
    shuffle: bool = False
    data: str = N.AUTO
    data_dir: str = "data/mnist"
    n_heldout: int = 2000
    backend: str = N.AUTO
    comm: str = N.AUTO
    batch_transfer: str = N.PAGEABLE
    gemm: str = N.CUBLAS
    exec: str = N.AUTO
    overlap: bool = False
    bucket_bytes: int = DEFAULT_BUCKET_BYTES
    trace: bool = True
    trace_level: str = N.AUTO
    trace_dir: str = "traces"
    run_id: str = ""
    save_params: str = ""
    resume: str = ""
    cprofile: bool = False
    quiet: bool = False
    stall_limit: float = 300.0
    parallel: str = N.DATA
    model_procs: int = 0
    staleness: int = 0
    straggler_delay_ms: float = 0.0
    straggler_rank: int = 1
    grad_precision: str = N.FLOAT32
    slices: str = "1"                # K, or auto (perfmlp/slices.py)

    @property
    def layer_sizes(self) -> tuple[int, ...]:
        return (self.input_size, *self.hidden_sizes, self.num_classes)

    @property
    def batches_per_epoch(self) -> int:
        return -(-self.n_train // self.batch_size)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["hidden_sizes"] = list(self.hidden_sizes)
        return d


# What each field is, for --help (the default is added from the dataclass).
HELP = {
    "input_size": "input features per sample, D",
    "hidden_sizes": "hidden layer sizes, H1,H2,... or H1 H2 ...",
    "num_classes": "output classes, C",
    "reg": "L2 regularisation strength, lambda",
    "learning_rate": "SGD step size",
    "n_train": "training samples, N; cut to those available",
    "epochs": "passes over the training samples",
    "batch_size": "samples per batch, B, split over the ranks",
    "precision": "arithmetic of the step: float32 or float64 throughout; tf32 (float32, the GEMMs on TF32 tensor "
                 "cores); bf16 or fp16 (mixed precision: 16-bit activations and GEMM inputs, float32 accumulation, "
                 "master weights, update and gradient reduction; fp16 with dynamic loss scaling)",
    "seed": "seed of the initial weights, the synthetic data and the shuffle",
    "shuffle": "shuffle the samples each epoch",
    "data": "training data: auto (MNIST in --data-dir, else the shipped digits), mnist or synthetic",
    "data_dir": "folder of the MNIST files, as python -m perfmlp.fetch writes them",
    "n_heldout": "held-out samples for the accuracy",
    "backend": "array library: auto (cupy when a GPU is usable), numpy or cupy",
    "comm": "gradient all-reduce: auto (mpi-staged on the GPU, mpi on NumPy), mpi (host buffers), "
            "mpi-staged (GPU buffers through the host) or nccl; or a parameter server (reduce to rank 0, "
            "update there, broadcast): ps (host MPI) or ps-nccl; or the asynchronous one: ps-async (rank 0 "
            "applies each worker's gradient as it arrives, within --staleness; host MPI, staged through the "
            "host on the GPU; ps-async-nccl is refused: NCCL cannot receive from whichever rank sends first)",
    "batch_transfer": "how each batch reaches the GPU: pageable or pinned copies, or resident; prefetch (from "
                      "pinned memory) or prefetch-pageable (staged into pinned buffers by host threads): the "
                      "next batches copied on copy streams while this one computes",
    "gemm": "GEMM implementation on the GPU",
    "exec": "how the GPU step is issued: auto (graph on the cupy backend where the step can be captured: "
            "partitioned strategies need --comm nccl or ps-nccl; else eager), eager (kernel by kernel from "
            "Python) or graph (captured once per piece size as a CUDA graph and replayed)",
    "overlap": "reduce each layer's gradient as soon as the backward pass has written it (nccl on the GPU, "
               "mpi on numpy), overlapping communication with the rest of the backward pass",
    "bucket_bytes": "with --overlap, the largest piece of a weight gradient reduced as one collective",
    "trace": "write a trace folder for the report",
    "trace_level": ("what the trace records: auto (depends on --exec: "
                    + ", ".join(f"{m} -> {lv}" for m, lv in N.DEFAULT_TRACE_LEVEL.items())
                    + f", the richest level measured under {100 * OVERHEAD_TARGET:.0f}% overhead), or, cheapest first, "
                    + "; ".join(f"{k}: {v}" for k, v in N.TRACE_LEVELS.items())),
    "trace_dir": "folder the trace folders go under",
    "run_id": "name of the trace folder: letters, digits, '-', '_', '.'",
    "save_params": "folder to save initial.npz and final.npz in",
    "resume": "start from the parameters in this .npz file",
    "cprofile": "profile each rank with cProfile, into rank-<r>.prof in the trace folder",
    "quiet": "print nothing but errors",
    "stall_limit": "seconds a rank may go without progress before the whole job is ended with one line naming "
                   "the rank and where it stopped; watched from MPI's start (at least 10 s before the first "
                   "batch) to the process's exit; 0: wait forever",
    "parallel": "partitioning over the ranks: data (the batch split), model (each rank a shard of every layer, "
                "the whole batch), hybrid (a p_data x p_model grid)",
    "model_procs": "ranks per model group with --parallel hybrid (must divide the ranks)",
    "staleness": "with --comm ps-async, S: a piece of batch k is handed out once every batch before k - S is "
                 "applied (0: synchronous SGD)",
    "straggler_delay_ms": "an injected straggler: --straggler-rank sleeps this long in every batch it computes",
    "straggler_rank": "the rank --straggler-delay-ms slows (a worker, not rank 0, with --comm ps-async)",
    "grad_precision": "the width the gradients are all-reduced at: float32 (the master type, float64 with "
                      "--precision float64), or bf16 or fp16 (each rank's gradients rounded to 16 bits, summed in "
                      "16 bits hop by hop, the update in the master type; on the GPU with --comm nccl); float32 in "
                      "every --precision, as PyTorch's DDP reduces (its bf16 and fp16 compression hooks are opt-in)",
    "slices": "the first layer's weight gradient computed and all-reduced in K slices of hidden units, each "
              "updated as its reduction lands and the next batch's first-layer forward started slice by slice "
              "(data parallelism: mpi on numpy, nccl on the GPU); auto: the K the model prices fastest; 1: one "
              "piece, as before",
}
METAVAR = {"input_size": "D", "num_classes": "C", "reg": "LAMBDA", "learning_rate": "LR", "n_train": "N",
           "epochs": "E", "batch_size": "B", "seed": "SEED", "data_dir": "DIR", "n_heldout": "N",
           "trace_dir": "DIR", "run_id": "ID", "save_params": "DIR", "resume": "FILE.npz",
           "bucket_bytes": "BYTES", "model_procs": "M", "staleness": "S",
           "straggler_delay_ms": "MS", "straggler_rank": "R", "stall_limit": "SECONDS", "slices": "K|auto"}
_DEFAULT_TEXT = {"run_id": "a new timestamped id", "save_params": "not saved", "resume": "the seed's weights",
                 "model_procs": "none; hybrid needs it"}
_FIELDS = {f.name: f for f in fields(Config)}
_POSITIVE = {"input_size", "num_classes", "n_train", "epochs", "batch_size", "learning_rate", "bucket_bytes"}
_NON_NEGATIVE = {"reg", "seed", "n_heldout", "model_procs", "staleness", "straggler_delay_ms", "straggler_rank",
                 "stall_limit"}
_SIZES = {"input_size", "num_classes", "n_train", "batch_size", "n_heldout"}
MAX_SIZE = 2 ** 31 - 1   # an array dimension: larger sizes are refused as input, not met as allocation errors
# Keys that say where a run's output goes or how it is watched, not what it computes.
NOT_COMPUTED = ("trace_dir", "run_id", "quiet", "save_params", "stall_limit")


def _convert(name: str, value: Any, label: str) -> Any:
    """`value` converted to field `name`'s type and range-checked; `label`: the key or flag a message names."""
    default = _FIELDS[name].default
    if name == "hidden_sizes":
        if not isinstance(value, (list, tuple)):
            value = [value]
        # "256,128", "256 128" and [256, 128] alike: text is split at commas and spaces
        value = [t for v in value for t in (v.replace(",", " ").split() if isinstance(v, str) else [v])]
        if not value or any(isinstance(v, (list, dict)) for v in value):
            raise checks.CheckError(f"{label} must be a non-empty list of integers, got {prefix(value)}")
        sizes = tuple(checks.integer(label, v) for v in value)
        if any(v <= 0 for v in sizes):
            raise checks.CheckError(f"{label} must all be positive, got {prefix(list(sizes))}")
        if any(v > MAX_SIZE for v in sizes):
            raise checks.CheckError(f"{label} must each be at most {MAX_SIZE}, got {prefix(list(sizes))}")
        return sizes
    if name == "slices":
        return slice_count(label, value)
    if isinstance(value, (list, dict)):
        raise checks.CheckError(f"{label} must be a single value, got {prefix(value)}")
    if isinstance(default, bool):
        value = checks.boolean(label, value)
    elif isinstance(default, int):
        value = checks.integer(label, value)
    elif isinstance(default, float):
        value = checks.number(label, value)
    else:
        value = checks.string(label, value)
        if name in CHOICES:
            value = checks.choice(label, value, CHOICES[name])
    if name in _POSITIVE:
        checks.positive(label, value)
    if name in _SIZES and value > MAX_SIZE:
        raise checks.CheckError(f"{label} must be at most {MAX_SIZE}, got {prefix(value)}")
    if name in _NON_NEGATIVE:
        checks.non_negative(label, value)
    if name == "run_id" and value and not all(c.isalnum() or c in "-_." for c in value):
        raise checks.CheckError(f"{label} may hold only letters, digits, '-', '_' and '.', got {value!r}")
    return value


def slice_count(label: str, value: Any) -> str:
    """--slices as written in a configuration: a positive integer's digits, or auto."""
    if str(value).strip().lower() == N.AUTO:
        return N.AUTO
    k = checks.integer(label, value)
    checks.positive(label, k)
    return str(k)


def from_mapping(values: dict[str, Any], where: str = "", base: Config | None = None,
                 check: bool = True) -> Config:
    """A Config from `base` (default: the defaults) with `values` applied, all checked."""
    unknown = [key(k) for k in values if k not in _FIELDS]
    if unknown:
        raise PerfmlpError(f"{where}unknown configuration key{'s' if len(unknown) > 1 else ''}: "
                           f"{', '.join(sorted(unknown)[:10])}")
    try:
        converted = {k: _convert(k, v, k) for k, v in values.items()}
    except checks.CheckError as e:
        raise PerfmlpError(f"{where}{e}") from None
    cfg = dataclasses.replace(base or Config(), **converted)
    if check:
        check_consistent(cfg)
    return cfg


def load_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML configuration file (safe loading only)."""
    p = Path(path)
    try:
        data = checks.read_yaml(p, "configuration file")
    except checks.CheckError as e:
        raise PerfmlpError(str(e)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PerfmlpError(f"{p}: expected a mapping of configuration keys, got {type(data).__name__}")
    return data


def check_consistent(cfg: Config) -> None:
    """Checks that involve more than one value (the process count comes later)."""
    if cfg.batch_size > cfg.n_train:
        raise PerfmlpError(f"batch_size ({cfg.batch_size}) is larger than n_train ({cfg.n_train})")
    if cfg.model_procs and cfg.parallel != N.HYBRID:
        raise PerfmlpError(f"model_procs ({cfg.model_procs}) is for parallel hybrid, not parallel {cfg.parallel}")
    if cfg.staleness and cfg.comm != N.PS_ASYNC:
        raise PerfmlpError(f"staleness ({cfg.staleness}) is for comm ps-async, not comm {cfg.comm}")
    if cfg.cprofile and not cfg.trace:
        raise PerfmlpError("--cprofile writes rank-<r>.prof into the run's trace folder: it needs the trace "
                           "(drop --no-trace)")
    if cfg.comm in (*N.PS_COMMS, N.PS_ASYNC) and cfg.parallel != N.DATA:
        raise PerfmlpError(f"comm {cfg.comm} (the parameter server) is data parallelism's exchange, "
                           f"not parallel {cfg.parallel}'s")


def first_difference(a: dict, b: dict) -> str:
    """The first key, sorted, whose value differs between two configuration mappings, or ""."""
    return next((k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)), "")


def check_procs(cfg: Config, nprocs: int) -> None:
    """Every rank must get at least one sample of every batch, the short last one too."""
    smallest = cfg.n_train % cfg.batch_size or cfg.batch_size
    if nprocs > smallest:
        what = "the last batch" if smallest != cfg.batch_size else "a batch"
        raise PerfmlpError(f"{nprocs} ranks but {what} holds only {smallest} samples: "
                           "use fewer ranks or larger batches")


def data_procs(cfg: Config, nprocs: int) -> int:
    """The ranks a batch is split over: all for data parallelism, every rank but the server for
    ps-async, else one per model group (the model's grid rule)."""
    if cfg.comm == N.PS_ASYNC:
        return max(1, nprocs - 1)
    from .model.strategies import StrategyError, grid
    try:
        return grid(nprocs, cfg.parallel, cfg.model_procs)[0]
    except StrategyError as e:
        raise PerfmlpError(str(e)) from None


def check_strategy(cfg: Config, nprocs: int) -> tuple[int, int]:
    """The strategy's (data, model) ranks on `nprocs` ranks, or what it refuses there: model_procs not dividing
    them, a model group with more ranks than a split layer has units."""
    from .model.strategies import StrategyError, check_shard, grid
    try:
        p_data, p_model = grid(nprocs, cfg.parallel, cfg.model_procs)
        check_shard(cfg.layer_sizes, p_model)
    except StrategyError as e:
        raise PerfmlpError(str(e)) from None
    return p_data, p_model
