"""A machine file's values checked one by one: scalars (rates positive,
times not negative) and each table's entries (exactly their keys, each of
its type and range). Errors are checks.CheckError naming the key."""
from __future__ import annotations

from dataclasses import fields, replace

from ... import checks
from ..costs import OWN_KERNELS
from ..precision import NAMES as PRECISION_NAMES
from .description import Machine
from .fields import OPTIONAL, OPTIONAL_NUMBERS, TABLES
from .points import (SPREAD_SOURCES, CollectivePoint, CopyPoint, DispatchPoint, GemmRate,
                     HostCopyPoint, KernelTime, LaunchFactor, PrefetchPoint, SharedCopyPoint, SpreadPoint, WaitPoint)
from ... import names as N

# Keys older machine files hold and the model no longer reads (withdrawn terms, docs/model.md):
# accepted, and left unused.
RETIRED = frozenset({"host_cache_bytes", "engine_switch_s", "pinned_launch_factor",
                     "queued_gap_s", "graph_node_extra_s"})
_NUMERIC = [f.name for f in fields(Machine) if f.name not in OPTIONAL and f.name not in ("name", "source")]


def _rate_or_time(key: str, value) -> float:
    """A rate (`..._per_s...`) must be positive (an optional one may be 0:
    not measured), a time must not be negative."""
    v = checks.number(key, value)
    if "_per_s" in key and not (key in OPTIONAL_NUMBERS and v == 0):
        return checks.positive(key, v)
    return checks.non_negative(key, v)


def _entry(entry, required: tuple, optional: tuple = ()) -> dict:
    if not isinstance(entry, dict) or not set(required) <= set(entry) <= set(required) | set(optional):
        extra = f" (optional: {', '.join(optional)})" if optional else ""
        raise checks.CheckError(f"needs exactly {', '.join(required)}{extra}")
    return entry


def _gemm_rate(entry) -> GemmRate:
    entry = _entry(entry, ("m", "n", "k", "precision", "flops_per_s"), ("kernel",))
    m, n, k = (checks.positive(key, checks.integer(key, entry[key])) for key in ("m", "n", "k"))
    precision = checks.choice("precision", entry["precision"], PRECISION_NAMES)
    kernel = checks.choice("kernel", entry.get("kernel", N.CUBLAS), N.GEMM_KERNELS)
    return GemmRate(m, n, k, precision, _rate_or_time("flops_per_s", entry["flops_per_s"]), kernel)


def _collective_point(entry) -> CollectivePoint:
    entry = _entry(entry, ("comm", "procs", "bytes", "s"), ("memory",))
    return CollectivePoint(checks.choice("comm", entry["comm"], N.COLLECTIVE_LIBS),
                           checks.positive("procs", checks.integer("procs", entry["procs"])),
                           checks.positive("bytes", checks.integer("bytes", entry["bytes"])),
                           checks.positive("s", checks.number("s", entry["s"])),
                           checks.choice("memory", entry.get("memory", N.PINNED), (N.PINNED, N.PAGEABLE)))


def _dispatch_point(entry) -> DispatchPoint:
    entry = _entry(entry, ("procs", "launch_s", "trace_phase_s"))
    return DispatchPoint(checks.positive("procs", checks.integer("procs", entry["procs"])),
                         checks.positive("launch_s", checks.number("launch_s", entry["launch_s"])),
                         checks.non_negative("trace_phase_s", checks.number("trace_phase_s", entry["trace_phase_s"])))


def _shared_copy_point(entry) -> SharedCopyPoint:
    entry = _entry(entry, ("procs", "direction", "memory", "bytes_per_s"))
    return SharedCopyPoint(checks.positive("procs", checks.integer("procs", entry["procs"])),
                           checks.choice("direction", entry["direction"], ("h2d", "d2h")),
                           checks.choice("memory", entry["memory"], (N.PAGEABLE, N.PINNED)),
                           checks.positive("bytes_per_s", checks.number("bytes_per_s", entry["bytes_per_s"])))


def _host_copy_point(entry) -> HostCopyPoint:
    entry = _entry(entry, ("procs", "direction", "memory", "bytes", "s"),
                   ("buffer", "ahead_s", "blocks", "ahead_delay_s"))
    point = HostCopyPoint(checks.positive("procs", checks.integer("procs", entry["procs"])),
                          checks.choice("direction", entry["direction"], ("h2d", "d2h")),
                          checks.choice("memory", entry["memory"], (N.PAGEABLE, N.PINNED)),
                          checks.positive("bytes", checks.integer("bytes", entry["bytes"])),
                          checks.positive("s", checks.number("s", entry["s"])),
                          checks.choice("buffer", entry.get("buffer", "rotating"), ("rotating", "reduced", "cached")))
    ahead, blocks, delay = entry.get("ahead_s"), entry.get("blocks", True), entry.get("ahead_delay_s")
    if ahead is None and blocks is True and delay is None:   # as dataclasses.asdict writes a point without them
        return point
    if (point.direction, point.memory) != (N.HOST_TO_DEVICE, N.PAGEABLE):
        raise checks.CheckError(f"ahead_s and blocks are for pageable h2d copies, not {point.memory} {point.direction}")
    if not isinstance(blocks, bool):
        raise checks.CheckError(f"blocks must be true or false, got {blocks!r}")
    ahead = None if ahead is None else checks.non_negative("ahead_s", checks.number("ahead_s", ahead))
    if delay is not None:
        if ahead is None or not blocks:
            raise checks.CheckError("ahead_delay_s is for a copy that blocks, with its ahead_s")
        delay = checks.non_negative("ahead_delay_s", checks.number("ahead_delay_s", delay))
    return replace(point, ahead_s=ahead, blocks=blocks, ahead_delay_s=delay)


def _copy_point(entry) -> CopyPoint:
    entry = _entry(entry, ("bytes", "s"))
    return CopyPoint(checks.positive("bytes", checks.integer("bytes", entry["bytes"])),
                     checks.positive("s", checks.number("s", entry["s"])))


def _wait_point(entry) -> WaitPoint:
    entry = _entry(entry, ("procs", "s"), ("memory",))
    memory = entry.get("memory")
    return WaitPoint(checks.positive("procs", checks.integer("procs", entry["procs"])),
                     checks.non_negative("s", checks.number("s", entry["s"])),
                     None if memory is None else checks.choice("memory", memory, (N.PAGEABLE, N.PINNED)))


def _launch_factor(entry) -> LaunchFactor:
    entry = _entry(entry, ("hidden", "batch", "factor"))
    return LaunchFactor(checks.positive("hidden", checks.integer("hidden", entry["hidden"])),
                        checks.positive("batch", checks.integer("batch", entry["batch"])),
                        checks.positive("factor", checks.number("factor", entry["factor"])))


def _prefetch_point(entry) -> PrefetchPoint:
    entry = _entry(entry, ("exec", "source", "bytes", "s", "loop_s"))
    return PrefetchPoint(checks.choice("exec", entry["exec"], (N.EAGER, "graph")),
                         checks.choice("source", entry["source"], (N.PREFETCH, N.PREFETCH_PAGEABLE)),
                         checks.positive("bytes", checks.integer("bytes", entry["bytes"])),
                         checks.positive("s", checks.number("s", entry["s"])),
                         checks.positive("loop_s", checks.number("loop_s", entry["loop_s"])))


def _spread_point(entry) -> SpreadPoint:
    entry = _entry(entry, ("source", "ratios"))
    ratios = entry["ratios"]
    if not isinstance(ratios, list) or len(ratios) < 2:
        raise checks.CheckError(f"ratios must be a list of at least 2 numbers, got {ratios!r}")
    return SpreadPoint(checks.choice("source", entry["source"], SPREAD_SOURCES),
                       tuple(sorted(checks.positive(f"ratios[{i}]", checks.number(f"ratios[{i}]", r))
                                    for i, r in enumerate(ratios))))


def _kernel_time(entry) -> KernelTime:
    entry = _entry(entry, ("kernel", "shape", "precision", "s"))
    shape = entry["shape"]
    if not isinstance(shape, list) or not shape:
        raise checks.CheckError(f"shape must be a non-empty list of sizes, got {shape!r}")
    return KernelTime(checks.choice("kernel", entry["kernel"], OWN_KERNELS.values()),
                      tuple(checks.positive(f"shape[{i}]", checks.integer(f"shape[{i}]", n))
                            for i, n in enumerate(shape)),
                      checks.choice("precision", entry["precision"], PRECISION_NAMES),
                      checks.positive("s", checks.number("s", entry["s"])))


_TABLE_ENTRY = {"gemm_flops_per_s": _gemm_rate, "allreduce_s": _collective_point, "collective_wait_s": _wait_point,
                "kernel_s": _kernel_time, "host_dispatch_s": _dispatch_point,
                "copy_aggregate_bytes_per_s": _shared_copy_point, "d2d_copy_s": _copy_point,
                "host_copy_s": _host_copy_point, "launch_size_factor": _launch_factor,
                "pageable_launch_factor": _launch_factor,
                "spread": _spread_point, "prefetch_s": _prefetch_point}



def check_scalars(data) -> dict:
    """The file's keys known, the required ones present, and every value
    that is not a table checked: Machine's fields but the tables and path."""
    if not isinstance(data, dict):
        raise checks.CheckError(f"expected a mapping of keys, got {type(data).__name__}")
    known = ({f.name for f in fields(Machine)} - {"path"}) | RETIRED
    unknown = sorted(set(data) - known)
    if unknown:
        raise checks.CheckError(f"unknown key {unknown[0]}")
    for key in ("name", "source", *_NUMERIC):
        if key not in data or data[key] is None:
            raise checks.CheckError(f"missing key {key}")
    values = {key: checks.string(key, data[key], non_empty=True) for key in ("name", "source")}
    for key in _NUMERIC:
        values[key] = _rate_or_time(key, data[key])
    for key in OPTIONAL_NUMBERS:
        values[key] = _rate_or_time(key, data.get(key, 0.0))
    if "gpus" in data:
        values["gpus"] = checks.positive("gpus", checks.integer("gpus", data["gpus"]))
    values["date"] = str(data.get("date", ""))
    names = data.get("device_names") or []
    if not isinstance(names, list):
        raise checks.CheckError("device_names must be a list")
    values["device_names"] = tuple(checks.string(f"device_names[{i}]", n, non_empty=True)
                                   for i, n in enumerate(names))
    for key in TABLES:
        if not isinstance(data.get(key) or [], list):
            raise checks.CheckError(f"{key} must be a list")
    return values


# one time per point: interpolation needs distinct sizes
_POINT_KEY = {"kernel_s": lambda k: (k.kernel, k.shape, k.precision), "spread": lambda s: (s.source,),
              "host_copy_s": lambda c: (c.procs, c.direction, c.memory, c.buffer, c.bytes),
              "prefetch_s": lambda q: (q.exec, q.source, q.bytes)}


def check_tables(data: dict) -> dict:
    """Every table's entries checked (messages name the table and entry),
    none repeating another's point where interpolation needs distinct ones."""
    values = {}
    for key in TABLES:
        rows = []
        for i, entry in enumerate(data.get(key) or []):
            try:
                rows.append(_TABLE_ENTRY[key](entry))
            except checks.CheckError as e:
                raise checks.CheckError(f"{key}[{i}] {e}") from None
        values[key] = tuple(rows)
    for key, point in _POINT_KEY.items():
        seen = {}
        for i, row in enumerate(values[key]):
            first = seen.setdefault(point(row), i)
            if first != i:
                what = " ".join(str(list(x)) if isinstance(x, tuple) else str(x) for x in point(row))
                raise checks.CheckError(f"{key}[{i}] repeats {key}[{first}] ({what})")
    return values
