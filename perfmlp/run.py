"""`python -m perfmlp.run`: train the MLP, data-parallel under `mpirun -n P`.

Only rank 0 prints: which data it uses, a line per epoch, a summary.
Any error ends the whole job with one line and a non-zero exit: a rank that
fails on its own aborts the MPI job rather than leaving the others waiting
in a collective, and an error while cleaning up (a full disk, say) still
ends it. SIGTERM is handled as SIGINT.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys

# Nothing outside the standard library is imported above this check.
_DEPENDENCIES = ("numpy", "yaml")
_MPI_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE")


def _missing(modules) -> list[str]:
    import importlib.util
    return [m for m in modules if importlib.util.find_spec(m) is None]


def other_interpreter(missing: list[str]) -> str | None:
    """Another python on PATH that has the `missing` modules, or None.

    Under `nsys profile mpirun`, nsys starts mpirun by its full path
    (/usr/bin/mpirun), which Open MPI takes as `--prefix /usr`: it puts
    /usr/bin first on the ranks' PATH, so `python` there is the system's,
    which lacks the user's packages. The user's interpreter is the one
    further down PATH."""
    import subprocess
    seen = {os.path.abspath(sys.executable)}  # not realpath: a venv's python links to the base interpreter
    for d in os.environ.get("PATH", "").split(os.pathsep):
        for name in ("python3", "python"):
            exe = shutil.which(name, path=d)
            if not exe or os.path.abspath(exe) in seen:
                continue
            seen.add(os.path.abspath(exe))
            probe = subprocess.run([exe, "-c", "import " + ", ".join(missing)], capture_output=True, timeout=60)
            if probe.returncode == 0:
                return exe
    return None


def reexec_if_shadowed() -> None:
    """Re-execute under the user's interpreter when this one lacks the
    project's dependencies (see other_interpreter); say so in one line."""
    if os.environ.get("PERFMLP_REEXEC"):
        return  # once only
    mpi = any(int(os.environ.get(v, "0") or 0) >= 1 for v in _MPI_SIZE_VARS)
    missing = _missing(_DEPENDENCIES + (("mpi4py",) if mpi else ()))
    if not missing:
        return
    exe = other_interpreter(missing)
    if exe is None:
        print(f"perfmlp.run: error: {sys.executable} cannot import {', '.join(missing)} "
              f"(pip install -e . in the environment you run, or name its python by full path)", file=sys.stderr)
        sys.exit(2)
    rank = next((os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK") if v in os.environ), "0")
    if rank == "0":
        print(f"perfmlp.run: {sys.executable} lacks {', '.join(missing)} (mpirun's --prefix put its folder first "
              f"on PATH); running under {exe} instead", file=sys.stderr)
    sys.stderr.flush()
    os.environ["PERFMLP_REEXEC"] = "1"
    os.execv(exe, [exe, "-m", "perfmlp.run", *sys.argv[1:]])


def share_cores_among_local_ranks() -> None:
    """Under MPI, give each rank's BLAS its share of the node's cores (unless
    the user chose): P ranks each starting one thread per core oversubscribe
    the node (on 2 cores, 2 ranks ran 10x slower per batch than with one
    thread each). Must run before NumPy is imported."""
    local = next((int(os.environ[v]) for v in ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")
                  if os.environ.get(v, "").isdigit()), 1)
    if local > 1:
        threads = str(max(1, (os.cpu_count() or 1) // local))
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, threads)


if __name__ == "__main__":
    reexec_if_shadowed()
    share_cores_among_local_ranks()

import argparse  # noqa: E402
import statistics  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

from . import config as config_mod  # noqa: E402
from .errors import PerfmlpError  # noqa: E402

PARAM_FILES = ("initial.npz", "final.npz", "at-failure.npz")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + message
        raise PerfmlpError(message)


def parse(argv):
    ap = _Parser(prog="python -m perfmlp.run", description=__doc__.split("\n\n")[0].replace("\n", " "))
    config_mod.add_arguments(ap)
    return config_mod.from_args(ap.parse_args(argv))


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the run is, like SIGINT's KeyboardInterrupt."""


def _on_sigterm(signum, frame):
    raise Terminated()


def check_outputs(cfg) -> None:
    """Before anything is written: --save-params must be a folder we can
    write that holds no parameters of an earlier run."""
    if not cfg.save_params:
        return
    d = Path(cfg.save_params)
    if d.exists() and not d.is_dir():
        raise PerfmlpError(f"--save-params {d}: not a folder")
    old = [n for n in PARAM_FILES if (d / n).exists()]
    if old:
        raise PerfmlpError(f"--save-params {d}: already holds {', '.join(old)} of an earlier run "
                           f"(choose a new folder; nothing is overwritten)")
    probe = d if d.exists() else next((p for p in d.parents if p.exists()), Path("."))
    if not os.access(probe, os.W_OK | os.X_OK):
        raise PerfmlpError(f"--save-params {d}: {probe} is not writable")


def _cleanup(tracer, status: str) -> str | None:
    """Close the trace; return a one-line reason if that failed (never raise)."""
    if tracer is None:
        return None
    try:
        tracer.close(status)
    except BaseException as e:  # a full disk, a dead device: the job must still end
        return f"closing the trace failed ({type(e).__name__}: {e})"
    return None


def main(argv: list[str] | None = None) -> int:
    world = None
    rank = 0
    tracer = None
    cfg = None
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        cfg = parse(argv)
        check_outputs(cfg)
        from .backend import check_options
        check_options(cfg)
        from .comm import make_world
        world = make_world()
        rank = world.rank
        from . import train as train_mod
        from .trace.format import WARMUP_BATCHES
        from .trace.writer import make_tracer
        tracer = make_tracer(cfg, world)
        try:
            if cfg.cprofile:
                import cProfile
                prof = cProfile.Profile()
                res = prof.runcall(train_mod.train, cfg, world, tracer)
                prof.dump_stats(Path(tracer.run_dir or ".") / f"rank-{rank}.prof")
            else:
                res = train_mod.train(cfg, world, tracer)
        except train_mod.NonFiniteLoss as e:
            where = None
            if rank == 0 and e.params is not None:
                folder = Path(cfg.save_params or tracer.run_dir or ".").resolve()
                where = folder / "at-failure.npz"
                train_mod.save_params(where, e.params)
            problem = _cleanup(tracer, "failed")
            if world.size > 1:
                world.barrier()  # every rank saw the same reduced loss: a clean collective stop
            if rank == 0:
                saved = f" (parameters {e.where} saved to {where})" if where else ""
                print(f"perfmlp.run: error: {e}{saved}" + (f"; {problem}" if problem else ""), file=sys.stderr)
            return e.exit_code
        problem = _cleanup(tracer, "complete")
        if problem:
            raise PerfmlpError(problem)
        if rank == 0 and not cfg.quiet:
            ms = statistics.median(e.ms_per_batch for e in res.epochs)
            last = res.epochs[-1] if res.epochs else None
            acc = f", final held-out accuracy {last.accuracy:.4f}" if last else ""
            trace = f", trace {tracer.run_dir}" if tracer.run_dir else ""
            print(f"done: {res.batches} batches on {world.size} rank{'s' if world.size > 1 else ''} "
                  f"({res.backend}), {ms:.4g} ms/batch (synchronised wall time per epoch after its "
                  f"{WARMUP_BATCHES} warm-up batches, median over epochs){acc}{trace}")
        return 0
    except BaseException as e:  # one line, then end the whole job
        if isinstance(e, PerfmlpError):
            msg, code, status = str(e), e.exit_code, "failed"
        elif isinstance(e, Terminated):
            msg, code, status = "terminated (SIGTERM)", 143, "terminated"
        elif isinstance(e, KeyboardInterrupt):
            msg, code, status = "interrupted (SIGINT)", 130, "interrupted"
        elif isinstance(e, SystemExit):
            raise
        else:
            msg, code, status = f"{type(e).__name__}: {e}", 1, "failed"
            if os.environ.get("PERFMLP_DEBUG"):
                traceback.print_exc()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the cleanup below is not interrupted again
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        problem = _cleanup(tracer, status)
        who = f"rank {rank}: " if world is not None and world.size > 1 else ""
        print(f"perfmlp.run: {who}error: {msg}" + (f"; {problem}" if problem else ""), file=sys.stderr)
        if world is not None and world.size > 1:
            world.abort(code)  # the other ranks may be waiting in a collective
        return code


if __name__ == "__main__":
    sys.exit(main())
