"""`python -m perfmlp.run`: train the MLP, data-parallel under `mpirun -n P`.

Only rank 0 prints: which data it uses, a line per epoch, a summary. Any error ends the whole job with
one line and a non-zero exit: a rank that fails on its own aborts the MPI job rather than leaving the
others waiting in a collective, and an error while cleaning up (a full disk, say) still ends it.
SIGTERM is handled as SIGINT."""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import sys

from . import faults
from .faults import launcher_rank
from .startup import LAUNCHER_SIZE_VARS, SIGNALS, handle_signals_while_importing, launched_size, start_watched, \
    watch_exit

# Nothing outside the standard library is imported above this check.
_DEPENDENCIES = ("numpy", "yaml")


def other_interpreter(missing: list[str]) -> str | None:
    """Another python on PATH that has the `missing` modules, or None (mpirun started by its full
    path, as under `nsys profile`, puts its own folder first on the ranks' PATH)."""
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
    """Re-execute under another interpreter (other_interpreter) when this one lacks the dependencies."""
    if os.environ.get("PERFMLP_REEXEC"):
        return  # once only
    mpi = any(int(os.environ.get(v, "0") or 0) >= 1 for v in LAUNCHER_SIZE_VARS)
    missing = [m for m in _DEPENDENCIES + (("mpi4py",) if mpi else ()) if importlib.util.find_spec(m) is None]
    if not missing:
        return
    exe = other_interpreter(missing)
    if exe is None:
        print(f"perfmlp.run: error: {sys.executable} cannot import {', '.join(missing)} "
              f"(pip install -e . in the environment you run, or name its python by full path)", file=sys.stderr)
        sys.exit(2)
    if launcher_rank() == 0:
        print(f"perfmlp.run: {sys.executable} lacks {', '.join(missing)} (mpirun's --prefix put its folder first "
              f"on PATH); running under {exe} instead", file=sys.stderr)
    sys.stderr.flush()
    os.environ["PERFMLP_REEXEC"] = "1"
    os.execv(exe, [exe, "-m", "perfmlp.run", *sys.argv[1:]])


def share_cores_among_local_ranks() -> None:
    """Under MPI, each rank's BLAS gets its share of the node's cores unless the user chose (P ranks of
    one thread per core each oversubscribe the node); before NumPy is imported."""
    local = next((int(os.environ[v]) for v in ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")
                  if os.environ.get(v, "").isdigit()), 1)
    if local > 1:
        threads = str(max(1, (os.cpu_count() or 1) // local))
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, threads)


if __name__ == "__main__":
    handle_signals_while_importing("perfmlp.run")   # until _start installs the trainer's handlers
    reexec_if_shadowed()
    share_cores_among_local_ranks()

import statistics  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

from . import config as config_mod  # noqa: E402
from . import flags  # noqa: E402
from . import params as params_mod  # noqa: E402
from .errors import OneLineParser, PerfmlpError, cli, quiet_stdout, safe_stdio, say  # noqa: E402
from .safeio import write_line  # noqa: E402


ONE_LINE_S = 1.0   # a rank other than 0 waits this long before saying an error that rank 0 may say too


def parse(argv):
    ap = OneLineParser(prog="python -m perfmlp.run", description=__doc__.split("\n\n")[0].replace("\n", " "))
    flags.add_arguments(ap)
    return flags.from_args(ap.parse_args(argv))


def check_before_writing(cfg, procs: int = 1) -> None:
    """What the run refuses, once its flags parse, before it writes anything: a save folder it cannot write,
    options its backend does not have, a strategy its `procs` ranks cannot form (a PerfmlpError). Every rank
    finds the same, so the job says it once, on any MPI."""
    from .backend import check_options
    params_mod.check_folder(cfg.save_params)
    check_options(cfg)
    config_mod.check_strategy(cfg, procs)


class Signalled(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP, raised where the run is."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class EveryRank(PerfmlpError):
    """An error every rank agreed on: rank 0 says it, every rank exits, no abort."""

    def __init__(self, message: str, exit_code: int, rank: int | None = None):
        super().__init__(message)
        self.exit_code, self.rank = exit_code, rank   # rank: the one that has it, None: every rank


def agree(world, error: PerfmlpError | None) -> None:
    """A collective: if any rank has an error, every rank raises EveryRank with the first one."""
    errors = world.allgather(None if error is None else (str(error), error.exit_code))
    bad = [(r, e) for r, e in enumerate(errors) if e is not None]
    if bad:
        r, (msg, code) = bad[0]
        same = len(bad) == world.size and all(e == bad[0][1] for _, e in bad)
        raise EveryRank(msg, code, None if same else r)


def check_same_config(world, cfg) -> None:
    """A collective: the ranks' configurations must be one (else their collectives would differ)."""
    configs = world.allgather(cfg.to_dict())
    r = next((i for i, c in enumerate(configs) if c != configs[0]), None)
    if r is None:
        return
    key = config_mod.first_difference(configs[0], configs[r])
    raise EveryRank(f"the ranks were started with different configurations: {key} is "
                    f"{configs[0].get(key)!r} on rank 0, {configs[r].get(key)!r} on rank {r} "
                    "(start every rank with the same options)", 2)


def _cleanup(tracer, status: str) -> str | None:
    """Close the trace; return a one-line reason if that failed (never raise)."""
    try:
        if tracer is not None:
            tracer.close(status)
    except BaseException as e:  # a full disk, a dead device: the job must still end
        return f"closing the trace failed ({type(e).__name__}: {e})"
    return None


class _Job:
    """What the error path needs to end the job: the world, the trace, the watchdog."""

    world = None
    rank = 0
    tracer = None
    watchdog = None

    def on_signal(self, signum, frame):
        if self.watchdog is not None:
            self.watchdog.handled = True
        raise Signalled(signum)


def main(argv: list[str] | None = None) -> int:
    safe_stdio()
    job = _Job()
    try:
        return _main(argv, job)
    except BaseException as e:  # one line, then end the whole job
        return _fail(e, job)
    finally:
        if job.watchdog is not None:   # watched to the process's exit: MPI_Finalize waits for every rank
            job.watchdog.close()
            _watch_exit(job)
        quiet_stdout()


def _watch_exit(job: _Job) -> None:
    """The watchdog thread, and a process in case teardown holds Python's lock, watch the exit."""
    from .watchdog import EXITING, GRACE_S
    job.watchdog.mark(EXITING)
    if job.world is not None and job.watchdog.limit_s > 0:
        limit = job.watchdog.limit_s
        watch_exit(limit + GRACE_S, limit, "perfmlp.run", job.rank, "at its exit")   # the thread speaks first
    faults.hook(job.rank, faults.EXIT)


def _start(argv, job: _Job):
    """Parse, start MPI under the watchdog, agree on the configuration and its checks; return it."""
    from .watchdog import DEFAULT_LIMIT_S, STARTUP_MIN_S, Watchdog
    try:
        cfg, error = parse(argv), None
    except PerfmlpError as e:  # said once MPI has started, so that every rank ends
        cfg, error = None, e
    limit = cfg.stall_limit if cfg else DEFAULT_LIMIT_S
    job.watchdog = Watchdog(limit)
    Watchdog.handle_signals(job.on_signal)   # a signal before MPI starts: one line too (see _fail)
    faults.hook(launcher_rank(), faults.START)
    from .comm import make_world
    job.world = start_watched(make_world, SIGNALS, limit and max(limit, STARTUP_MIN_S), "perfmlp.run",
                              launcher_rank())
    job.rank = job.world.rank
    job.watchdog.start(job.on_signal)   # after MPI's start: its transport may have taken SIGHUP
    job.watchdog.attach(job.world)
    agree(job.world, error)
    check_same_config(job.world, cfg)
    try:
        check_before_writing(cfg, job.world.size)
        if job.rank == 0:
            params_mod.claim_folder(cfg.save_params)
        error = None
    except PerfmlpError as e:
        error = e
    agree(job.world, error)
    return cfg


def _main(argv, job: _Job) -> int:
    cfg = _start(argv, job)
    world, rank = job.world, job.rank
    from . import train as train_mod
    from .trace.format import per_batch_words, warmup_batches
    from .trace.writer import make_tracer
    job.tracer = tracer = make_tracer(cfg, world)
    job.watchdog.run_dir = tracer.run_dir
    try:
        res = _train(train_mod, cfg, world, tracer, job.watchdog)
    except train_mod.NonFiniteLoss as e:
        return _non_finite(e, cfg, world, tracer)
    from .comm import close_communicators
    close_communicators()   # on every rank, before MPI ends: none waits in a peer's teardown
    with job.watchdog.lock:   # a stall said by the watchdog's thread is not a complete run
        job.watchdog.hold_if_ending()
        problem = _cleanup(tracer, "complete")
    if problem:
        raise PerfmlpError(problem)
    if rank == 0 and not cfg.quiet:
        ms = statistics.median(e.ms_per_batch for e in res.epochs)
        last = res.epochs[-1] if res.epochs else None
        acc = f", final held-out accuracy {last.accuracy:.4f}" if last else ""
        trace = f", trace {tracer.run_dir}" if tracer.run_dir else ""
        say(f"done: {res.batches} batches on {world.size} rank{'s' if world.size > 1 else ''} "
            f"({res.backend}), {ms:.4g} ms/batch ({per_batch_words(warmup_batches(res.epochs[0].batches))}, "
            f"rank 0, median over epochs){acc}{trace}")
    return 0


def _train(train_mod, cfg, world, tracer, watchdog):
    watchdog = watchdog if cfg.stall_limit > 0 else None  # no marks to watch
    if not cfg.cprofile:
        return train_mod.train(cfg, world, tracer, log=say, watchdog=watchdog)
    import cProfile
    prof = cProfile.Profile()
    res = prof.runcall(train_mod.train, cfg, world, tracer, log=say, watchdog=watchdog)
    prof.dump_stats(Path(tracer.run_dir) / f"rank-{world.rank}.prof")  # --cprofile needs the trace folder
    return res


def _non_finite(e, cfg, world, tracer) -> int:
    where = None
    if world.rank == 0 and e.params is not None:
        folder = Path(cfg.save_params or tracer.run_dir or ".").resolve()
        where = folder / params_mod.AT_FAILURE
        params_mod.save(where, e.params)
    problem = _cleanup(tracer, "failed")
    if world.size > 1:
        world.barrier()  # every rank saw the same reduced loss: a clean collective stop
    if world.rank == 0:
        saved = f" (parameters {e.where} saved to {where})" if where else ""
        write_line(f"perfmlp.run: error: {e}{saved}" + (f"; {problem}" if problem else ""))
    return e.exit_code


def _fail(e: BaseException, job: _Job) -> int:
    """One line, the trace closed with how the run ended, then the whole job ends."""
    if isinstance(e, SystemExit):
        raise e
    for s in SIGNALS:  # the cleanup below is not interrupted again
        signal.signal(s, signal.SIG_IGN)
    if isinstance(e, KeyboardInterrupt) and job.world is None:
        _signalled_before_mpi(e)
    if isinstance(e, PerfmlpError):
        msg, code, status = str(e), e.exit_code, "failed"
    elif isinstance(e, KeyboardInterrupt):
        signum = e.signum if isinstance(e, Signalled) else signal.SIGINT
        (msg, status), code = SIGNALS[signum], 128 + signum
    else:
        msg, code, status = f"{type(e).__name__}: {e}", 1, "failed"
        if os.environ.get("PERFMLP_DEBUG"):
            traceback.print_exc()
    problem = _cleanup(job.tracer, status)
    world = job.world
    several = world is not None and world.size > 1
    if isinstance(e, EveryRank):
        if job.rank == 0:
            who = "" if e.rank is None else f"rank {e.rank}: "
            write_line(f"perfmlp.run: {who}error: {msg}")
        return code
    if several and job.rank != 0:
        from .watchdog import mark_manifest   # rank 0 may be waiting in a collective, ended by the abort below
        mark_manifest(getattr(job.tracer, "run_dir", None), status)
        if isinstance(e, PerfmlpError):
            time.sleep(ONE_LINE_S)   # bad input every rank meets: rank 0's line and abort come first
    who = f"rank {job.rank}: " if several else ""
    write_line(f"perfmlp.run: {who}error: {msg}" + (f"; {problem}" if problem else ""))
    if several:
        world.abort(code)  # the other ranks may be waiting in a collective
    return code


def _signalled_before_mpi(e: KeyboardInterrupt) -> None:
    """Under a launcher of several ranks: one line, then the rank dies of the signal itself (a launcher
    ends the other ranks, waiting in MPI_Init, only for a rank a signal ended)."""
    if launched_size() <= 1:
        return
    signum = e.signum if isinstance(e, Signalled) else signal.SIGINT
    write_line(f"perfmlp.run: rank {launcher_rank()}: error: {SIGNALS[signum][0]} while MPI was starting; "
               "the job is ended")
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    time.sleep(5)   # the signal is delivered at once; this is never reached in practice
    os._exit(128 + signum)


if __name__ == "__main__":
    sys.exit(cli("perfmlp.run", main))
