"""A CPU machine file (`backend: numpy`, fields.py's CPU class) checked into a
CpuMachine, the read-only mapping model/predict/cpu.py prices with."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

from ... import checks
from ... import names as N
from .fields import CPU_KEYS, CPU_REQUIRED, FIELDS

# each table's entries: their keys, the integer ones and the positive numbers among them
_TABLE_KEYS = {
    "gemm_flops_per_s": (("m", "n", "k", "precision", "threads", "ranks", "flops_per_s"),
                         ("m", "n", "k", "threads", "ranks"), ("flops_per_s",)),
    "pass_bytes_per_s": (("kernel", "shape", "precision", "threads", "ranks", "bytes", "bytes_per_s"),
                         ("threads", "ranks", "bytes"), ("bytes_per_s",)),
    "allreduce_s": (("procs", "bytes", "s"), ("procs", "bytes"), ("s",)),
    "spread": (("source", "ratios"), (), ()),
}
PRECISIONS = (N.FLOAT32, N.FLOAT64)


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


def is_cpu_file(data) -> bool:
    return isinstance(data, dict) and data.get("backend") == N.NUMPY


def _entry(key: str, i: int, entry) -> dict:
    keys, ints, rates = _TABLE_KEYS[key]
    where = f"{key}[{i}]"
    if not isinstance(entry, dict) or set(entry) != set(keys):
        raise checks.CheckError(f"{where} needs exactly {', '.join(keys)}")
    out = dict(entry)
    for k in ints:
        out[k] = checks.positive(f"{where} {k}", checks.integer(f"{where} {k}", entry[k]))
    for k in rates:
        out[k] = checks.positive(f"{where} {k}", checks.number(f"{where} {k}", entry[k]))
    if "precision" in entry:
        checks.choice(f"{where} precision", entry["precision"], PRECISIONS)
    if key == "spread":
        r = entry["ratios"]
        if not isinstance(r, list) or len(r) < 2:
            raise checks.CheckError(f"{where} ratios must be a list of at least 2 numbers")
        out["ratios"] = [checks.positive(f"{where} ratios", checks.number(f"{where} ratios", v)) for v in r]
    return out


def _scalar(key: str, value):
    f = FIELDS[key]
    if f.check == "word":
        return checks.string(key, value, non_empty=True) if key != "date" else str(value)
    if f.check == "count":
        return checks.positive(key, checks.integer(key, value))
    v = checks.number(key, value)
    return checks.positive(key, v) if f.check == "rate" else checks.non_negative(key, v)


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
            values[k] = tuple(_entry(k, i, e) for i, e in enumerate(v))
        else:
            values[k] = _scalar(k, v)
    return CpuMachine(values["name"], values["source"], where, MappingProxyType(values))
