"""The manifest of a run (records.Manifest): what ran, on what, from which code, and how it ended.
Rank 0 writes it at the start, once the backend is built (`what_ran`, `machine_seen`:
collectives) and at the end, each time to a temporary name renamed over the last."""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import socket
import sys
from pathlib import Path

import numpy

from .. import names as N
from .. import __version__
from ..errors import write_whole
from .format import MANIFEST
from .lines import as_json
from .records import SCHEMA, Manifest, Ran
from .store import named


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def git_commit() -> str | None:
    """The commit that runs: PERFMLP_GIT_COMMIT where the copy has no .git, else git's answer."""
    if os.environ.get("PERFMLP_GIT_COMMIT"):
        return os.environ["PERFMLP_GIT_COMMIT"]
    import subprocess
    try:
        r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                           cwd=Path(__file__).resolve().parent)
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def versions() -> dict:
    v = {"perfmlp": __version__, "perfmlp_git": git_commit(), "python": platform.python_version(),
         "numpy": numpy.__version__}
    v.update({mod: getattr(sys.modules[mod], "__version__", "?") for mod in ("cupy", "mpi4py", "nvtx")
              if mod in sys.modules})
    if N.CUPY in sys.modules:
        with contextlib.suppress(Exception):  # pragma: no cover - no device
            import cupy
            v["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
            v["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
    return v


def machine_seen(world, backend: str) -> dict:
    """Host, GPU name and count per node, gathered from every rank (a collective)."""
    me = {"host": socket.gethostname(), "gpu": None, "gpus_on_node": 0, "device": None}
    if backend == N.CUPY:
        import cupy
        dev = cupy.cuda.Device()
        me["device"] = dev.id
        me["gpus_on_node"] = cupy.cuda.runtime.getDeviceCount()
        me["gpu"] = cupy.cuda.runtime.getDeviceProperties(dev.id)["name"].decode()
    ranks = world.allgather(me)
    nodes: dict = {}
    for r, m in enumerate(ranks):
        n = nodes.setdefault(m["host"], {"gpu": m["gpu"], "gpu_count": m["gpus_on_node"], "ranks": []})
        n["ranks"].append(r)
    return {"nodes": nodes, "rank_devices": [m["device"] for m in ranks],
            "cpu": platform.processor() or platform.machine()}


def blas_seen() -> tuple[str | None, int | None]:
    """This process's BLAS library (name and file) and its thread count; (None, None) where none."""
    from ..blas import find_blas
    blas = find_blas()
    if blas is None:
        return None, None
    return f"{blas.library} ({os.path.basename(blas.path)})", blas.threads()


def what_ran(cfg, backend, machine: dict, levels: dict, blas: list | None = None) -> Ran:
    """What ran, from the built backend (its reducer names the exchange, its network the launch
    shapes), the ranks' trace levels (`levels`: Ran's trace_level* fields) and each rank's blas_seen()."""
    from ..model import costs
    net = backend.net
    gpus = sorted({n["gpu"] for n in machine["nodes"].values() if n.get("gpu")})
    return Ran(backend=backend.name, comm=backend.reducer.name, exec=getattr(backend, "exec", N.EAGER),
               parallel=cfg.parallel, model_procs=cfg.model_procs, batch_transfer=cfg.batch_transfer,
               overlap=cfg.overlap, bucket_bytes=cfg.bucket_bytes, gemm=cfg.gemm, grad_precision=cfg.grad_precision,
               output_grad_cols=costs.OUTPUT_GRAD_COLS, fuse_output=bool(getattr(net, "fuse_output", True)),
               gpu=gpus[0] if gpus else None,
               slices=len(backend.reducer.rows) if getattr(backend.reducer, "sliced", False) else 1,
               blas=next((lib for lib, _ in blas or () if lib), None),
               blas_threads=tuple(n for _, n in blas) if blas else None, **levels)


def new_manifest(run_id: str, cfg, world, profiler_attached: bool) -> Manifest:
    return Manifest(schema=SCHEMA, run_id=run_id, config=cfg.to_dict(), procs=world.size,
                    status="running", start=now_iso(), end=None, versions=versions(), argv=tuple(sys.argv),
                    mpi_library=world.library, machine=None, profiler_attached=profiler_attached, ran=None)


def write_manifest(run_dir: Path, m: Manifest) -> None:
    write_json(run_dir / MANIFEST, as_json(m))


def finish_manifest(run_dir: Path, status: str) -> None:
    """The manifest on disk with its status and end (for a process holding no Manifest: the watchdog)."""
    path = run_dir / MANIFEST
    m = json.loads(path.read_text(encoding="utf-8"))
    m["status"], m["end"] = status, now_iso()
    write_json(path, m)


def write_json(path: Path, obj) -> None:
    """`obj` as JSON at `path`, whole or not at all (errors.write_whole; an error names `path`)."""
    try:
        write_whole(path, json.dumps(obj, indent=1))
    except OSError as e:
        raise named(e, path) from None
