"""Reading machine files: shipped ones by name, any by path, each value
checked (rates positive, times not negative, each table's entries exactly
their keys, of their type and range) into a Machine, or a CpuMachine for a
CPU file (`backend: numpy`, fields.py's CPU class); a one-line MachineError
naming the file and key otherwise; and the YAML text the calibration writes."""
from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

import yaml

from ... import checks
from ... import names as N
from ..costs import OWN_KERNELS
from ..precision import NAMES as PRECISION_NAMES
from .fields import CPU_KEYS, CPU_REQUIRED, FIELDS, GPU_KEYS, OPTIONAL, TABLES
from .description import SPREAD_SOURCES, Machine, MachineError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

MACHINES_PACKAGE = "perfmlp.machines"
DEFAULT_MACHINE = "quadro-rtx-6000"
# Keys older machine files hold and the model no longer reads (withdrawn terms, docs/model.md): accepted.
RETIRED = frozenset({"host_cache_bytes", "engine_switch_s", "pinned_launch_factor",
                     "queued_gap_s", "graph_node_extra_s"})


def _scalar(key: str, value):
    """A figure checked by its FIELDS kind: a rate positive (an optional one may be 0), a time not negative."""
    check = FIELDS[key].check
    if check == "word":
        return checks.string(key, value, non_empty=True) if key != "date" else str(value)
    if check == "count":
        return _count(key, value)
    v = checks.number(key, value)
    return checks.non_negative(key, v) if check == "time" or (check == "optional-rate" and v == 0) \
        else checks.positive(key, v)


def _entry(entry, required: tuple, optional: tuple = ()) -> dict:
    if not isinstance(entry, dict) or not set(required) <= set(entry) <= set(required) | set(optional):
        extra = f" (optional: {', '.join(optional)})" if optional else ""
        raise checks.CheckError(f"needs exactly {', '.join(required)}{extra}")
    return entry


def _count(key, v):
    return checks.positive(key, checks.integer(key, v))


def _positive(key, v):
    return checks.positive(key, checks.number(key, v))


def _non_negative(key, v):
    return checks.non_negative(key, checks.number(key, v))


def _one_of(*options, none: bool = False):
    return lambda key, v: None if none and v is None else checks.choice(key, v, options)


_MEMORY = _one_of(N.PAGEABLE, N.PINNED)
_DIRECTION = _one_of("h2d", "d2h")


def _point(entry, cls, spec: dict, optional: dict):
    """A table's point of type `cls`: exactly spec's keys (some optional), each checked in spec's order."""
    entry = _entry(entry, tuple(k for k in spec if k not in optional), tuple(optional))
    return cls(**{k: check(k, entry.get(k, optional[k]) if k in optional else entry[k]) for k, check in spec.items()})


def _as_is(key, v):
    return v


def _shape(key, v):
    if not isinstance(v, list) or not v:
        raise checks.CheckError(f"{key} must be a non-empty list of sizes, got {v!r}")
    return tuple(_count(f"{key}[{i}]", n) for i, n in enumerate(v))


def _ratios(key, v):
    if not isinstance(v, list) or len(v) < 2:
        raise checks.CheckError(f"{key} must be a list of at least 2 numbers, got {v!r}")
    return tuple(sorted(_positive(f"{key}[{i}]", r) for i, r in enumerate(v)))


def _point_class(name: str, spec: dict, optional: dict | None = None) -> tuple:
    """(a frozen dataclass of spec's keys, the required ones first; spec; optional keys' defaults)."""
    optional = optional or {}
    keys = [(k, object) for k in spec if k not in optional] + [(k, object, v) for k, v in optional.items()]
    return make_dataclass(name, keys, frozen=True, namespace={"__module__": __name__}), spec, optional


_LAUNCH_FACTOR = _point_class("LaunchFactor", {"hidden": _count, "batch": _count, "factor": _positive})
# each table's point: its type, its keys' checks (in the order they run) and its optional keys' defaults
_POINTS = {
    # a GEMM's rate at one shape, by kernel
    "gemm_flops_per_s": _point_class("GemmRate", {"m": _count, "n": _count, "k": _count,
                                                  "precision": _one_of(*PRECISION_NAMES),
                                                  "kernel": _one_of(*N.GEMM_KERNELS), "flops_per_s": _positive},
                                     {"kernel": N.CUBLAS}),
    # one measured allreduce (the slowest rank's median, buffer cold); host MPI's through `memory`
    "allreduce_s": _point_class("CollectivePoint", {"comm": _one_of(*N.COLLECTIVE_LIBS), "procs": _count,
                                                    "bytes": _count, "s": _positive,
                                                    "memory": _one_of(N.PINNED, N.PAGEABLE)}, {"memory": N.PINNED}),
    # seconds lost per collective to the slowest of `procs` ranks (`memory`: the staged exchange's)
    "collective_wait_s": _point_class("WaitPoint", {"procs": _count, "s": _non_negative,
                                                    "memory": _one_of(N.PAGEABLE, N.PINNED, none=True)},
                                      {"memory": None}),
    # host seconds per launched operation and per traced phase, `procs` ranks at once (the slowest's)
    "host_dispatch_s": _point_class("DispatchPoint", {"procs": _count, "launch_s": _positive,
                                                      "trace_phase_s": _non_negative}),
    # the node's aggregate bandwidth while `procs` ranks (a GPU each) copy at once, bytes/s
    "copy_aggregate_bytes_per_s": _point_class("SharedCopyPoint", {"procs": _count, "direction": _DIRECTION,
                                                                   "memory": _MEMORY, "bytes_per_s": _positive}),
    # one device-to-device copy (into a graph's static inputs), GPU seconds per call
    "d2d_copy_s": _point_class("CopyPoint", {"bytes": _count, "s": _positive}),
    # one host <-> device copy as the trainer makes it, `procs` ranks at once (the slowest's median);
    # `buffer` "rotating" (a new slice each copy) or "reduced" (an MPI_Allreduce's). Pageable H2D behind
    # queued GPU work w: `ahead_s` host time before it needs the stream, `blocks` the call waits for the
    # copy, and one that blocks hides min(ahead_s, max(0, w - ahead_delay_s)); checked by _host_copy_staging
    "host_copy_s": _point_class("HostCopyPoint", {"procs": _count, "direction": _DIRECTION, "memory": _MEMORY,
                                                  "bytes": _count, "s": _positive,
                                                  "buffer": _one_of("rotating", "reduced", "cached"),
                                                  "ahead_s": _as_is, "blocks": _as_is, "ahead_delay_s": _as_is},
                                {"buffer": "rotating", "ahead_s": None, "blocks": True, "ahead_delay_s": None}),
    # a ratio of the eager step's host time at 784-`hidden`-10, pieces of `batch`
    "launch_size_factor": _LAUNCH_FACTOR,
    "pageable_launch_factor": _LAUNCH_FACTOR,
    # the tiny step's seconds per batch prefetched from `source`, and with the batch resident
    "prefetch_s": _point_class("PrefetchPoint", {"exec": _one_of(N.EAGER, "graph"),
                                                 "source": _one_of(N.PREFETCH, N.PREFETCH_PAGEABLE),
                                                 "bytes": _count, "s": _positive, "loop_s": _positive}),
    # GPU seconds per call of an own kernel (costs.OWN_KERNELS) at `shape` (costs.kernel_shape)
    "kernel_s": _point_class("KernelTime", {"kernel": _one_of(*OWN_KERNELS.values()), "shape": _shape,
                                            "precision": _one_of(*PRECISION_NAMES), "s": _positive}),
    # one spread source's repeats over their median, pooled and sorted (interval.py draws from them)
    "spread": _point_class("SpreadPoint", {"source": _one_of(*SPREAD_SOURCES), "ratios": _ratios}),
}
GemmRate, KernelTime = _POINTS["gemm_flops_per_s"][0], _POINTS["kernel_s"][0]


def _host_copy_staging(point):
    ahead, blocks, delay = point.ahead_s, point.blocks, point.ahead_delay_s
    if ahead is None and blocks is True and delay is None:   # as dataclasses.asdict writes a point without them
        return point
    if (point.direction, point.memory) != (N.HOST_TO_DEVICE, N.PAGEABLE):
        raise checks.CheckError(f"ahead_s and blocks are for pageable h2d copies, not {point.memory} {point.direction}")
    if not isinstance(blocks, bool):
        raise checks.CheckError(f"blocks must be true or false, got {blocks!r}")
    ahead = None if ahead is None else _non_negative("ahead_s", ahead)
    if delay is not None:
        if ahead is None or not blocks:
            raise checks.CheckError("ahead_delay_s is for a copy that blocks, with its ahead_s")
        delay = _non_negative("ahead_delay_s", delay)
    return replace(point, ahead_s=ahead, blocks=blocks, ahead_delay_s=delay)


def _table_entry(key: str, entry):
    point = _point(entry, *_POINTS[key])
    return _host_copy_staging(point) if key == "host_copy_s" else point


def check_scalars(data) -> dict:
    """Every key known, the required ones present, every value but the tables checked."""
    if not isinstance(data, dict):
        raise checks.CheckError(f"expected a mapping of keys, got {type(data).__name__}")
    unknown = sorted(set(data) - (set(GPU_KEYS) - {"path"}) - RETIRED)
    if unknown:
        raise checks.CheckError(f"unknown key {unknown[0]}")
    missing = [k for k in GPU_KEYS if k not in OPTIONAL and data.get(k) is None]
    if missing:
        raise checks.CheckError(f"missing key {missing[0]}")
    values = {k: _scalar(k, data[k]) for k in GPU_KEYS
              if k in data and FIELDS[k].check != "table" and k != "device_names"}
    for key in ("device_names", *TABLES):
        if not isinstance(data.get(key) or [], list):
            raise checks.CheckError(f"{key} must be a list")
    values["device_names"] = tuple(checks.string(f"device_names[{i}]", n, non_empty=True)
                                   for i, n in enumerate(data.get("device_names") or []))
    return values


# one time per point: interpolation needs distinct sizes
_POINT_KEY = {"kernel_s": lambda k: (k.kernel, k.shape, k.precision), "spread": lambda s: (s.source,),
              "host_copy_s": lambda c: (c.procs, c.direction, c.memory, c.buffer, c.bytes),
              "prefetch_s": lambda q: (q.exec, q.source, q.bytes)}


def _rows(key: str, entries, point) -> tuple:
    """A table's entries, each point(entry); a bad one's error names it, `key[i]`."""
    rows = []
    for i, entry in enumerate(entries):
        try:
            rows.append(point(entry))
        except checks.CheckError as e:
            raise checks.CheckError(f"{key}[{i}] {e}") from None
    return tuple(rows)


def check_tables(data: dict) -> dict:
    """Every table's entries checked, none repeating another's point where interpolation needs distinct ones."""
    values = {key: _rows(key, data.get(key) or [], lambda e, key=key: _table_entry(key, e)) for key in TABLES}
    for key, point in _POINT_KEY.items():
        seen = {}
        for i, row in enumerate(values[key]):
            first = seen.setdefault(point(row), i)
            if first != i:
                what = " ".join(str(list(x)) if isinstance(x, tuple) else str(x) for x in point(row))
                raise checks.CheckError(f"{key}[{i}] repeats {key}[{first}] ({what})")
    return values


# ---- a CPU file ---------------------------------------------------------------------------------

def _cpu_ratios(key, v):
    if not isinstance(v, list) or len(v) < 2:
        raise checks.CheckError(f"{key} must be a list of at least 2 numbers")
    return [_positive(key, r) for r in v]


_CPU_PRECISION = _one_of(N.FLOAT32, N.FLOAT64)
# each table's entries: their keys' checks, in the order a file lists them
_CPU_POINTS = {
    "gemm_flops_per_s": {"m": _count, "n": _count, "k": _count, "precision": _CPU_PRECISION, "threads": _count,
                         "ranks": _count, "flops_per_s": _positive},
    "pass_bytes_per_s": {"kernel": _as_is, "shape": _as_is, "precision": _CPU_PRECISION, "threads": _count,
                         "ranks": _count, "bytes": _count, "bytes_per_s": _positive},
    "allreduce_s": {"procs": _count, "bytes": _count, "s": _positive},
    "spread": {"source": _as_is, "ratios": _cpu_ratios},
}


@dataclass(frozen=True)
class CpuMachine:
    """A CPU file's checked values, read as `machine[key]` and `machine.get(key)`."""
    name: str
    source: str
    path: str
    values: MappingProxyType = field(repr=False)

    backend = N.NUMPY
    calibrated = True    # every figure of a CPU file is measured
    gpus = 0

    def __getitem__(self, key):
        return self.values[key]

    def get(self, key, default=None):
        return self.values.get(key, default)

    def describes(self, device_name) -> bool:
        return False     # a CPU file describes no GPU


def cpu_machine_from_mapping(data: dict, where: str) -> CpuMachine:
    """The CpuMachine a `backend: numpy` mapping describes; CheckError for a bad key or value."""
    unknown = sorted(set(data) - set(CPU_KEYS) - {"path"})
    if unknown:
        raise checks.CheckError(f"unknown key {unknown[0]} for a CPU machine file")
    missing = [k for k in CPU_REQUIRED if data.get(k) is None]
    if missing:
        raise checks.CheckError(f"missing key {missing[0]}")
    values = {}
    for k, v in data.items():
        if k == "path" or v is None:
            continue
        if FIELDS[k].check == "table":
            if not isinstance(v, list):
                raise checks.CheckError(f"{k} must be a list")
            values[k] = _rows(k, v, lambda e, spec=_CPU_POINTS[k]: _point(e, dict, spec, {}))
        else:
            values[k] = _scalar(k, v)
    return CpuMachine(values["name"], values["source"], where, MappingProxyType(values))


def machine_from_mapping(data, where: str) -> Machine | CpuMachine:
    """The Machine (CpuMachine for `backend: numpy`) a mapping describes; `where` names it in errors."""
    try:
        if isinstance(data, dict) and data.get("backend") == N.NUMPY:
            return cpu_machine_from_mapping(data, where)
        return Machine(path=where, **check_scalars(data), **check_tables(data))
    except checks.CheckError as e:
        raise MachineError(f"{where}: {e}") from None


def machine_files(folder: str = "") -> list[Traversable]:
    """The shipped machine files (models/*.yaml; `folder`: models/<folder>/*.yaml) by name; in a source
    checkout, its own models/."""
    root = Path(__file__).resolve().parents[3] / "models"
    if not (root / "__init__.py").is_file():
        try:
            root = resources.files(MACHINES_PACKAGE)
        except ModuleNotFoundError:
            raise MachineError(f"the package {MACHINES_PACKAGE} (the machine files) is not installed: "
                               "run `pip install -e .` again in the project") from None
    root = root.joinpath(folder) if folder else root
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.name.endswith(".yaml")), key=lambda p: p.name)


def find_file(name_or_path, shipped, what: str, error=MachineError) -> Path | Traversable:
    """A file as given (a .yaml/.yml path, an existing one), else the `<name>.yaml` of shipped()."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    files = shipped()
    for f in files:
        if f.name == f"{name_or_path}.yaml":
            return f
    names = ", ".join(f.name.removesuffix(".yaml") for f in files) or "none"
    raise error(f"no {what} named {str(name_or_path)!r} (shipped: {names}; or give a .yaml file)")


def read_file(path, what: str, error=MachineError):
    """The YAML mapping of a file; a one-line `error` if it cannot be read."""
    try:
        return checks.read_yaml(path, what)
    except checks.CheckError as e:
        raise error(str(e)) from None


def resolve_machine_path(name_or_path) -> Path | Traversable:
    """A file as given (a path, or a machine_files() entry), else the shipped `<name>.yaml` (None: DEFAULT_MACHINE)."""
    if not isinstance(name_or_path, (str, Path, type(None))):
        return name_or_path  # a Traversable from machine_files()
    return find_file(DEFAULT_MACHINE if name_or_path is None else name_or_path, machine_files, "machine")


def load_machine(name_or_path=None) -> Machine | CpuMachine:
    """The machine in a file given by path, or shipped under a name (default: DEFAULT_MACHINE)."""
    path = resolve_machine_path(name_or_path)
    try:
        return _machine_from_text(checks.read_text(path, "machine file"), str(path))
    except checks.CheckError as e:   # the file unreadable, or not YAML
        raise MachineError(str(e)) from None


@lru_cache(maxsize=16)
def _machine_from_text(text: str, source: str) -> Machine | CpuMachine:
    # a machine is immutable, so a file read again with the same text is not parsed again: a calibrated
    # file's tables take the YAML reader most of a second
    return machine_from_mapping(checks.load_yaml_text(text, source), source)


def machine_to_yaml(values: dict) -> str:
    """YAML text for a mapping of machine keys (used by the calibration)."""
    return yaml.safe_dump(values, sort_keys=False, default_flow_style=None, width=120)
