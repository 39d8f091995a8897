"""Format 1 (`perfmlp.trace/1`) read as format 2's records: the one place where what a format-1 run
ran is worked out from what it wrote, every field checked as format 2's are.

- the exchange: the manifest's `comm`, else the configuration's, else the trainer's old rule
  (`mpi-staged` on the GPU, `mpi` on NumPy); the execution mode: `exec`, else the configuration's
  as resolved (eager where none); the trace level: `trace_level`, else `phases`;
- the launch shapes: a fused output backward, from the operations the first batch counted; its
  column block by the commit that ran (`COLS_BY_COMMIT`, else 256);
- each batch line's counts become a `Shape` (one per distinct set), its times a `Batch`."""
from __future__ import annotations

import dataclasses
import json
from types import MappingProxyType

from .. import names as N
from ..safeio import read_json
from . import fields as F
from .fields import TraceError
from ..model.predict import resolve_exec
from .format import BYTE_COUNTS, resolve_trace_level
from .lines import parse
from ..names import Phase
from .records import Batch, Clock, Header, Manifest, Ran, Shape, Span, _count, _phase_counts, phase

SCHEMA_V1 = "perfmlp.trace/1"
# the fused output backward's column block where it was not 256 (perfmlp/model/costs.py: OUTPUT_GRAD_COLS)
COLS_BY_COMMIT = {**dict.fromkeys("7e49c2e 4bd1a76 59e92a7 4251416 e0f3d07 6412022 22ec83a 71f960f".split(), 512),
                  **dict.fromkeys("dde65af 72a401e f8768e6 5f89014 2304ad6 039394d 1e18ed7 6cb6b78 424130c 9e65b6a "
                                  "cff1eab da8246c 7160c1a 42efcd5 3c20fa3 e4e23b6 e652cc3 dd40da3 17f4500 b6c9a8e "
                                  "cba38bf 8fdc90f fb5a059 05bac0a".split(), 1024)}
DEFAULT_COLS = 256


def manifest(obj: dict) -> Manifest:
    """A format-1 manifest as a Manifest (F.Bad names the field)."""
    # `start`: metadata no reader computes with, absent in hand-made format-1 runs
    m = F.fields_of(Manifest, {**obj, "start": obj.get("start", "")}, skip=("schema", "ran"))
    c = m["config"]
    backend = obj.get("backend") or c.get("backend")
    if backend not in N.BACKENDS:
        raise F.Bad(f"{F.shown(backend if backend is not None else F.MISSING)}, not numpy or cupy", "backend")
    comm = obj.get("comm") or (c.get("comm") if c.get("comm") not in (None, N.AUTO, "mpi-host") else
                               N.MPI_STAGED if backend == N.CUPY else N.MPI)
    # no record of the mode: the configuration's as the trainer resolved it (none: made before graph mode)
    exec_mode = obj.get("exec") or resolve_exec(c.get("exec", N.EAGER), backend, c.get("parallel", N.DATA), comm)
    nodes = (m["machine"] or {}).get("nodes") or {}
    gpus = sorted({n.get("gpu") for n in nodes.values() if isinstance(n, dict) and n.get("gpu")})
    commit = str((m["versions"] or {}).get("perfmlp_git") or "")[:7]
    ran = {"backend": backend, "comm": comm, "exec": exec_mode, "parallel": c.get("parallel", N.DATA),
           "model_procs": c.get("model_procs", 0), "batch_transfer": c["batch_transfer"],
           "overlap": c.get("overlap", False), "bucket_bytes": c.get("bucket_bytes", 25 << 20),
           "gemm": c.get("gemm", N.CUBLAS), "output_grad_cols": COLS_BY_COMMIT.get(commit, DEFAULT_COLS),
           "fuse_output": True, "trace_level": resolve_trace_level(obj.get("trace_level"), exec_mode),
           "trace_level_asked": obj.get("trace_level_asked") or c.get("trace_level") or N.PHASES_LEVEL,
           "trace_level_why": obj.get("trace_level_why"), "trace_level_note": obj.get("trace_level_note"),
           "trace_levels": obj.get("trace_levels"), "gpu": gpus[0] if gpus else None}
    try:
        m["ran"] = Ran(**F.fields_of(Ran, ran))
    except F.Bad as e:
        raise e.at("ran") from None
    m["schema"] = SCHEMA_V1
    return Manifest(**m)


def with_mem_bytes(shape: Shape, m: Manifest) -> Shape:
    """A Shape written before `mem_bytes` with it, from the run's layer sizes and precision: on
    the launched shapes where it holds them, else (format 1) on the step's (model.costs.batch_counts)."""
    if shape.mem_bytes is not None or m.ran is None:
        return shape
    from ..model.costs import batch_counts, weight_grad_elements, widths
    from .shapes import mem_bytes
    ran, sizes, w = m.ran, m.layer_sizes, widths(m.config["precision"])
    if shape.launches is not None:
        mem = mem_bytes(shape.launches, w, weight_grad_elements(sizes, ran.fuse_output))
    else:
        counts = batch_counts(sizes, shape.local_samples, w, ran.comm, ran.batch_transfer,
                              ran.bucket_bytes if ran.overlap else None, ran.exec, ran.fuse_output).mem_bytes
        mem = ({Phase.GRAPH: sum(counts.values())} if Phase.GRAPH in shape.phases else
               {phase(k): v for k, v in counts.items() if phase(k) in shape.phases})
    return dataclasses.replace(shape, mem_bytes=MappingProxyType(mem))


def with_launch(m: Manifest, first: Batch | None) -> Manifest:
    """The manifest with `fuse_output` as the first batch's operation count shows it."""
    if first is None or m.ran is None or m.ran.parallel != N.DATA or m.ran.comm in N.PS_COMMS:
        return m
    from ..model.costs import batch_counts
    split = m.ran.bucket_bytes if m.ran.overlap else None
    got = sum(first.ops.values())
    for fused in (True, False):
        if sum(batch_counts(m.layer_sizes, first.local_samples, 4, bucket_bytes=split, fuse_output=fused)
               .operations.values()) == got:
            return dataclasses.replace(m, ran=dataclasses.replace(m.ran, fuse_output=fused))
    return m


BATCH_V1 = {
    "epoch": _count, "batch": _count, "samples": F.integer(1), "local_samples": F.integer(1),
    "t0_s": F.number(), "loss": F.optional(F.number()), "flops": _phase_counts,
    "ops": F.optional(_phase_counts, {}), "kernels": F.optional(_phase_counts), "gemms": F.optional(_phase_counts),
    "bytes_h2d": _count, "bytes_d2h": _count, "bytes_d2d": F.optional(_count, 0, null=False), "bytes_mpi": _count,
    "bytes_nccl": _count,
    "collectives": F.optional(F.list_of(F.pair(F.string, _count, "[name, element count]")), (), null=False),
    "wall_ms": F.number(0),
    "t_ms": F.keyed(phase, F.pair(F.number(), F.number(0), "[offset ms, duration ms]")),
    "t_ms_total": F.optional(F.number(0)), "clock": F.optional(F.choice(*N.CLOCKS), N.HOST_CLOCK),
}
SHAPE_KEYS = ("samples", "local_samples", "flops", "ops", "kernels", "gemms", *BYTE_COUNTS, "collectives")


def _frozen(v):
    return tuple(sorted(v.items())) if hasattr(v, "items") else v


def rank_records(lines: list[tuple[int, str]], path: str) -> list:
    """A format-1 rank file's lines as format-2 records, each with where it came from."""
    out, shapes = [], {}
    header = None
    for i, text in lines:
        where = f"{path}:{i}"
        try:
            obj = read_json(text)   # deep nesting: an InputError, a ValueError
        except ValueError as e:
            raise TraceError(f"{where}: not JSON ({e})") from None
        kind = obj.get("kind") if isinstance(obj, dict) else None
        try:
            if kind == "header":
                if obj.get("schema") != SCHEMA_V1:
                    raise F.Bad(f"{F.shown(obj.get('schema', F.MISSING))}, not {SCHEMA_V1} (the manifest's)", "schema")
                header = (F.fields_of(Header, {"start": "", "pid": 0, "size": 1, **obj},  # the rest: set below
                                      skip=("schema", "clock", "host_start_ns")), where)
            elif kind == "batch":
                v = F.checked(BATCH_V1, obj)
                key = tuple(_frozen(v[k]) for k in SHAPE_KEYS) + (tuple(v["t_ms"]),)
                shape = shapes.get(key)
                if shape is None:
                    shape = shapes[key] = Shape(id=len(shapes) + 1, phases=tuple(v["t_ms"]), launches=None,
                                                **{k: v[k] for k in SHAPE_KEYS})
                    out.append((shape, where))
                out.append((Batch(epoch=v["epoch"], batch=v["batch"], shape=shape, t0_s=v["t0_s"],
                                  wall_ms=v["wall_ms"], loss=v["loss"], clock=v["clock"],
                                  t_ms=MappingProxyType({p: Span(*s) for p, s in v["t_ms"].items()}),
                                  t_ms_total=v["t_ms_total"]), where))
            else:
                out.append((parse(json.dumps({"end": "", **obj}) if kind == "end" else text), where))
        except F.Bad as e:
            raise TraceError(f"{where}: {e}") from None
    if header is None:
        raise TraceError(f"{path}:1: kind: no header line")
    h, where = header
    clock = next((r.clock for r, _ in out if isinstance(r, Batch)), N.HOST_CLOCK)
    start = next((r.host_start_ns for r, _ in reversed(out) if isinstance(r, Clock) and r.at == "start"), 0)
    h.update(schema=SCHEMA_V1, clock=N.CUDA_EVENTS if clock == N.CUDA_EVENTS else N.HOST_CLOCK, host_start_ns=start)
    return [(Header(**h), where)] + out


def format1(manifest_obj: dict, ranks: dict) -> tuple:
    """Format-1 objects in memory (a manifest, rank -> its lines as dicts) as Run.from_records takes
    them, read as from disk (a rank without a header line gets one)."""
    m = manifest(manifest_obj)
    out = {}
    for r, objs in ranks.items():
        objs = list(objs)
        if not objs or objs[0].get("kind") != "header":
            objs.insert(0, {"kind": "header", "schema": SCHEMA_V1, "rank": r, "size": m.procs})
        recs = rank_records([(i, json.dumps(o)) for i, o in enumerate(objs, 1)], f"rank {r}")
        out[r] = [rec for rec, _ in recs]
    first = next((rec for r in sorted(out) for rec in out[r] if isinstance(rec, Batch)), None)
    return with_launch(m, first), out
