"""The manifest of a run (trace/format.py: MANIFEST): what ran, on what,
from which code, and how it ended. Written by rank 0 at the start, completed
once the backend is built (`record_machine`, a collective) and at the end
(`finish_manifest`); each write replaces the file whole."""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket
import sys
from pathlib import Path

from .. import __version__
from .format import MANIFEST


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _git_commit() -> str | None:
    """The commit of the code that runs: PERFMLP_GIT_COMMIT where the copy has
    no .git (the GPU machine's), else git's answer."""
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
    v = {"perfmlp": __version__, "perfmlp_git": _git_commit(), "python": platform.python_version()}
    import numpy
    v["numpy"] = numpy.__version__
    for mod in ("cupy", "mpi4py", "nvtx"):
        m = sys.modules.get(mod)
        if m is not None:
            v[mod] = getattr(m, "__version__", "?")
    if "cupy" in sys.modules:
        try:
            import cupy
            v["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
            v["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
        except Exception:  # pragma: no cover - no device
            pass
    return v


def machine_seen(world, backend: str) -> dict:
    """Host, GPU name and count per node, gathered from every rank."""
    me = {"host": socket.gethostname(), "gpu": None, "gpus_on_node": 0, "device": None}
    if backend == "cupy":
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
    return {"nodes": nodes, "rank_devices": [m["device"] for m in ranks], "cpu": platform.processor() or platform.machine()}



def record_machine(run_dir: Path, world, backend) -> None:
    """Add what the run saw (GPUs per node, library versions) and what ran
    (the backend, the gradient reducer) to the manifest (a collective: every
    rank calls it)."""
    seen = machine_seen(world, backend.name)
    if world.rank == 0:
        path = run_dir / MANIFEST
        m = json.loads(path.read_text())
        m["machine"] = seen
        m["backend"] = backend.name
        m["comm"] = backend.reducer.name if backend.reducer is not None else None
        m["exec"] = getattr(backend, "exec", None)
        if m["exec"] == "graph":
            m["phase_timing"] = ("graph mode: one CUDA-event span per graph replay (phase 'graph'), not per "
                                 "kernel phase; operations and bytes are counted per batch as in eager mode")
        m["versions"] = versions()
        m["mpi_library"] = world.library
        write_json(path, m)


def write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    tmp.replace(path)


def finish_manifest(run_dir: Path, status: str) -> None:
    path = run_dir / MANIFEST
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    m["status"], m["end"] = status, now_iso()
    write_json(path, m)
