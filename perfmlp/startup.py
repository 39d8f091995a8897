"""MPI's start-up and the process's exit, watched: a signal or a stall inside MPI_Init, or an exit (MPI,
NCCL or CUDA teardown) that stalls where the watchdog thread cannot run, ends the whole job with one line.

mpi4py's MPI_Init holds Python's lock until every rank has arrived, so a small process forked before it
watches instead: on SIGINT, SIGTERM or SIGHUP it prints the line and the rank dies of the signal itself
(which makes the launcher end the other ranks); past the start-up limit it kills the rank. It never
outlives the rank."""
from __future__ import annotations

import contextlib
import faulthandler
import os
import select
import signal
import sys
import time

LAUNCHER_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE")
STARTED = b"started"
# the signals that end a job in one line: their words and the manifest's status
SIGNALS = {signal.SIGINT: ("interrupted (SIGINT)", "interrupted"),
           signal.SIGTERM: ("terminated (SIGTERM)", "terminated"),
           signal.SIGHUP: ("hung up (SIGHUP)", "terminated")}


def launched_size() -> int:
    """How many ranks the launcher started (1 outside a launcher)."""
    sizes = [os.environ.get(v, "") for v in LAUNCHER_SIZE_VARS]
    return max([int(s) for s in sizes if s.isdigit()] or [1])


def handle_signals_while_importing(prog: str) -> None:
    """Until the program's own handlers: a signal is one line, then the rank dies of it (the launcher ends the job)."""
    def ended(signum, _frame):
        from .faults import launcher_rank
        who = f"rank {launcher_rank()}: " if launched_size() > 1 else ""
        _say(f"{prog}: {who}error: {SIGNALS[signum][0]} while starting; the job is ended")
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    for s in SIGNALS:
        signal.signal(s, ended)


def start_watched(make_world, signals: dict, limit_s: float, prog: str, rank: int):
    """make_world() (which starts MPI), watched by a forked process when several ranks must meet;
    `signals`: number -> (words, status); `limit_s`: the longest start-up (0: none)."""
    if launched_size() <= 1:
        return make_world()
    control_r, control_w = os.pipe()
    pipes = {s: os.pipe() for s in signals}
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the watcher; it never returns
        os.close(control_w)
        for r, w in pipes.values():
            os.close(w)
        _watcher(control_r, {r: s for s, (r, w) in pipes.items()}, signals, limit_s, prog, rank)
    os.close(control_r)
    previous = {s: signal.getsignal(s) for s in signals}
    for s, (r, w) in pipes.items():
        os.close(r)
        signal.signal(s, signal.SIG_DFL)   # the rank dies of it, after the handler below writes its number
        faulthandler.register(s, file=w, all_threads=False, chain=True)
    try:
        return make_world()
    finally:
        for s in pipes:
            faulthandler.unregister(s)
            signal.signal(s, previous[s])
        try:
            os.write(control_w, STARTED)
        finally:
            os.close(control_w)
            os.waitpid(pid, 0)
            for r, w in pipes.values():
                os.close(w)


def _watcher(control: int, pipes: dict, signals: dict, limit_s: float, prog: str, rank: int):  # pragma: no cover
    """The forked process: wait for MPI's start, the rank's end, a signal or the limit."""
    for s in signals:
        signal.signal(s, signal.SIG_IGN)   # a Ctrl-C to the process group is the rank's to handle
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)
    deadline = time.monotonic() + limit_s if limit_s > 0 else None
    said = False
    while True:
        wait = None if deadline is None or said else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([control, *pipes], [], [], wait)
        if not ready:
            _say(f"{prog}: rank {rank}: error: MPI did not start within {limit_s:g} s (a rank is missing, "
                 "stopped or slow to start); the job is ended")
            os.kill(os.getppid(), signal.SIGKILL)
            os._exit(0)
        for fd in sorted(ready, key=lambda fd: fd == control):   # a signal's number before the rank's end
            if fd == control:
                os._exit(0)   # MPI started, or the rank has gone
            if not os.read(fd, 1 << 16):
                os._exit(0)   # the rank has gone
            if not said:
                said = True
                _say(f"{prog}: rank {rank}: error: {signals[pipes[fd]][0]} while MPI was starting; "
                     "the job is ended")


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        os.write(sys.stderr.fileno(), (line + "\n").encode("utf-8", "backslashreplace"))


_EXIT_WATCHER = """
import os, select, signal, sys, time
fd, limit, parent, line, claim = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
signal.signal(signal.SIGINT, signal.SIG_IGN)
if not select.select([fd], [], [], limit)[0]:
    try:   # the node's ranks share a launcher: the first watcher to claim it speaks, the others only end theirs
        os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        os.write(2, (line + "\\n").encode("utf-8", "backslashreplace"))
        said = True
    except OSError:
        said = False
    os.kill(parent, signal.SIGKILL)
    if said:
        time.sleep(5)
        os.unlink(claim)
"""


def watch_exit(limit_s: float, stall_limit_s: float, prog: str, rank: int, where: str) -> None:
    """At most `limit_s` from here to the process's end: past it, a process started now (not forked:
    MPI and CUDA are live) says so in one line, naming `stall_limit_s`, and kills this one (the
    launcher ends the others); it ends with this process (its pipe closes)."""
    if limit_s <= 0:
        return
    import subprocess
    import tempfile
    r, w = os.pipe()
    line = (f"{prog}: error: rank {rank} stalled {where}: no progress for {limit_s:g} s (--stall-limit "
            f"{stall_limit_s:g}; MPI, NCCL or CUDA teardown, where the watchdog thread could not run); "
            "the job is ended")
    try:
        claim = os.path.join(tempfile.gettempdir(), f"perfmlp-exit-{os.getuid()}-{os.getppid()}")
        subprocess.Popen([sys.executable, "-c", _EXIT_WATCHER, str(r), str(limit_s), str(os.getpid()), line, claim],
                         pass_fds=(r,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    except OSError:
        os.close(w)   # no watcher: the exit goes on unwatched
    finally:
        os.close(r)
    _exit_pipe.append(w)   # held open until the process ends


_exit_pipe: list = []
