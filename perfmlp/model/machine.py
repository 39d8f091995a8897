"""Machine descriptions: `models/*.yaml` loaded into a frozen dataclass.

Every number carries its unit in its key. A file must say where its
numbers come from (`source:`). Unknown keys, missing required keys, and
negative or non-numeric values are one-line errors naming the file and key.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

import yaml

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"
DEFAULT_MACHINE = "quadro-rtx-6000"


class MachineError(ValueError):
    """A machine file that cannot be used (message: one line, file and key)."""


@dataclass(frozen=True)
class GemmRate:
    m: int
    n: int
    k: int
    precision: str
    flops_per_s: float


@dataclass(frozen=True)
class Machine:
    name: str
    source: str
    peak_flops_per_s_float32: float
    peak_flops_per_s_float64: float
    mem_bw_bytes_per_s: float
    h2d_pageable_bytes_per_s: float
    h2d_pinned_bytes_per_s: float
    d2h_pageable_bytes_per_s: float
    d2h_pinned_bytes_per_s: float
    copy_latency_s: float
    launch_overhead_s: float
    mpi_alpha_s: float
    mpi_bw_bytes_per_s: float
    nccl_alpha_s: float
    nccl_bw_bytes_per_s: float
    gemm_flops_per_s: tuple[GemmRate, ...] = ()
    traced_launch_overhead_s: float = 0.0   # host time per operation with perfmlp's tracer on (0: as untraced)
    trace_event_s: float = 0.0              # GPU time one CUDA event recorded between kernels adds
    h2d_pageable_latency_s: float = 0.0     # per-kind copy latency (0: copy_latency_s)
    h2d_pinned_latency_s: float = 0.0
    d2h_pageable_latency_s: float = 0.0
    d2h_pinned_latency_s: float = 0.0
    gpus: int = 1
    date: str = ""
    path: str = ""

    def peak_flops_per_s(self, precision: str) -> float:
        return self.peak_flops_per_s_float64 if precision == "float64" else self.peak_flops_per_s_float32

    def copy_bw(self, direction: str, memory: str) -> float:
        return getattr(self, f"{direction}_{memory}_bytes_per_s")

    def copy_s(self, direction: str, memory: str, nbytes: int) -> float:
        """One cudaMemcpy of nbytes: latency (its kind's, else copy_latency_s) + bytes / bandwidth."""
        lat = getattr(self, f"{direction}_{memory}_latency_s") or self.copy_latency_s
        return lat + nbytes / self.copy_bw(direction, memory)

    @property
    def calibrated(self) -> bool:
        return bool(self.gemm_flops_per_s)

    def gemm_rate(self, m: int, n: int, k: int, precision: str) -> float:
        """FLOP/s of an m x n x k GEMM: the calibrated entry nearest in
        log-shape space when the file has some, else the peak rate."""
        rates = [g for g in self.gemm_flops_per_s if g.precision == precision]
        if not rates:
            return self.peak_flops_per_s(precision)

        def dist(g):
            return sum(math.log(a / b) ** 2 for a, b in ((g.m, m), (g.n, n), (g.k, k)))
        return min(rates, key=dist).flops_per_s


_OPTIONAL_NUMBERS = ("traced_launch_overhead_s", "trace_event_s", "h2d_pageable_latency_s", "h2d_pinned_latency_s",
                     "d2h_pageable_latency_s", "d2h_pinned_latency_s")
_OPTIONAL = {"gemm_flops_per_s", "gpus", "date", "path", *_OPTIONAL_NUMBERS}
_NUMERIC = [f.name for f in fields(Machine) if f.name not in _OPTIONAL and f.name not in ("name", "source")]


def machine_from_mapping(data, where: str) -> Machine:
    if not isinstance(data, dict):
        raise MachineError(f"{where}: expected a mapping of keys, got {type(data).__name__}")
    known = {f.name for f in fields(Machine)} - {"path"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise MachineError(f"{where}: unknown key {unknown[0]}")
    for key in ("name", "source", *_NUMERIC):
        if key not in data or data[key] is None:
            raise MachineError(f"{where}: missing key {key}")
    for key in ("name", "source"):
        if not isinstance(data[key], str) or not data[key].strip():
            raise MachineError(f"{where}: {key} must be a non-empty string")
    values = {"name": data["name"], "source": data["source"], "path": where}
    for key in _NUMERIC:
        v = data[key]
        if isinstance(v, str):
            try:
                v = float(v)
            except ValueError:
                raise MachineError(f"{where}: {key} must be a number, got {data[key]!r}") from None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise MachineError(f"{where}: {key} must be a number, got {data[key]!r}")
        if v < 0:
            raise MachineError(f"{where}: {key} must not be negative, got {v}")
        if v == 0 and key.endswith("_per_s"):
            raise MachineError(f"{where}: {key} must be positive")
        values[key] = float(v)
    rates = []
    for i, g in enumerate(data.get("gemm_flops_per_s") or []):
        try:
            rate = GemmRate(int(g["m"]), int(g["n"]), int(g["k"]), str(g["precision"]), float(g["flops_per_s"]))
        except (KeyError, TypeError, ValueError):
            raise MachineError(f"{where}: gemm_flops_per_s[{i}] needs m, n, k, precision, flops_per_s") from None
        if min(rate.m, rate.n, rate.k) <= 0 or rate.flops_per_s <= 0:
            raise MachineError(f"{where}: gemm_flops_per_s[{i}] must be positive")
        rates.append(rate)
    values["gemm_flops_per_s"] = tuple(rates)
    if "gpus" in data:
        if not isinstance(data["gpus"], int) or data["gpus"] <= 0:
            raise MachineError(f"{where}: gpus must be a positive integer")
        values["gpus"] = data["gpus"]
    values["date"] = str(data.get("date", ""))
    for key in _OPTIONAL_NUMBERS:
        t = data.get(key, 0.0)
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise MachineError(f"{where}: {key} must be a non-negative number, got {t!r}")
        values[key] = float(t)
    return Machine(**values)


def resolve_machine_path(name_or_path: str | Path | None) -> Path:
    """A path as given, or `models/<name>.yaml` for a bare name."""
    if name_or_path is None:
        name_or_path = DEFAULT_MACHINE
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    return MODELS_DIR / f"{name_or_path}.yaml"


def load_machine(name_or_path: str | Path | None = None) -> Machine:
    path = resolve_machine_path(name_or_path)
    try:
        text = path.read_text()
    except OSError as e:
        raise MachineError(f"{path}: cannot read machine file ({e.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        raise MachineError(f"{path}: not valid YAML") from None
    return machine_from_mapping(data, str(path))


def machine_to_yaml(values: dict) -> str:
    """YAML text for a mapping of machine keys (used by the calibration)."""
    return yaml.safe_dump(values, sort_keys=False, default_flow_style=None, width=120)
