"""The run's watchdog: a stalled rank or a signal that cannot be handled ends the whole job with one line.

Progress: the training loop marks its batch, phase or state (stores into a small memoryview shared
by the node's ranks through an MPI shared-memory window; `--stall-limit 0`: no marks). A daemon thread
ends the job once no rank of the node has changed its marks for `limit_s`, naming the rank behind, its
phase and whether its process is stopped. One rank prints (the stalled one if alive, else the lowest
other of its node); the abort ends the others. Signals: a rank blocked inside MPI never runs a Python
handler, so the signal numbers also reach a socket (set_wakeup_fd); one the main thread has not
handled within GRACE_S ends the job with 128 + N.
"""
from __future__ import annotations

import contextlib
import os
import select
from array import array
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np

from . import names as N
from .faults import launcher_rank
from .safeio import write_line
from .startup import SIGNALS

DEFAULT_LIMIT_S = 300.0
STARTUP_MIN_S = 10.0    # before the first batch the limit is at least this (data, backend, MPI start-up)
GRACE_S = 2.0           # a signal's Python handler has this long to run before the thread acts
# Where a rank can be: these states (in describe()'s words), then every phase of a batch.
STATES = ("before its first batch", "at the start of {at}", "at the end of epoch {epoch}", "after its last batch",
          "serving the workers (the asynchronous parameter server)", "at its exit")
STARTING, BATCH_START, EPOCH_END, FINISHING, SERVING, EXITING = range(len(STATES))


class _Codes(dict):
    """Phase name -> code: the trace format's phases by number, any other as its first 8 ASCII
    bytes, which every rank reads back without a shared table."""

    def __missing__(self, name: str) -> int:
        packed = int.from_bytes(name.encode("ascii", "replace")[:8], "little")
        code = self[name] = packed if packed >= PACKED else UNKNOWN
        return code


# a state's slot is never read as a name: describe() words the states itself
NAMES = (*STATES, *(p.value for p in N.PHASES), "a phase")
UNKNOWN = len(NAMES) - 1
PACKED = 256   # codes from here on are packed names
REPORTING = PACKED - 1   # the rank that reports a stall, once it does
STALL_CLAIM = ".stall-said"   # made in the run's folder by the one rank that says a stall
PHASE_CODES = _Codes({p.value: len(STATES) + i for i, p in enumerate(N.PHASES)})
# Where a rank waits for others: their collectives, a CUDA graph that may hold one, the server's loop,
# the exit (MPI_Finalize waits for every rank).
WAITING = {PHASE_CODES[p.value] for p in N.EXCHANGE_PHASES} | {PHASE_CODES[N.Phase.GRAPH.value], SERVING, EXITING}
CODE, EPOCH, BATCH, RANK, PID = range(5)   # a rank's row: int64 each
ROW_BYTES = 5 * 8


def _row(buffer) -> memoryview:
    """Five int64 over `buffer` (a memoryview: cheaper stores than a NumPy array's)."""
    return memoryview(buffer).cast("B")[:ROW_BYTES].cast("q")


class Watchdog:
    """One per rank: `start()` installs the signal handlers and starts the thread, `attach(world)`
    (a collective) shares the marks within the node, `close()` at the main thread's exit."""

    def __init__(self, limit_s: float = DEFAULT_LIMIT_S, prog: str = "perfmlp.run"):
        self.limit_s = limit_s
        self.prog = prog
        self.world = None
        self.run_dir = None     # where the manifest is, once the trace folder exists
        self.handled = False    # the main thread ran a signal's handler
        self.ending = threading.Event()   # the thread has begun to end the job
        self.lock = threading.Lock()      # the thread's line and status, or the main thread's end: not both
        self.closed = False               # the main thread is exiting: its exit is the exit watcher's to watch
        self.row = _row(bytearray(ROW_BYTES))
        self.row[:] = array("q", (STARTING, -1, -1, launcher_rank(), os.getpid()))
        self.rows = [self.row]   # every rank of this node (this one alone until attach)
        self._stop = threading.Event()

    # -- the main thread's side ---------------------------------------------------
    def start(self, on_signal) -> None:
        """Install `on_signal` for SIGNALS (again after MPI's start: its transport may take SIGHUP) and watch."""
        self.handle_signals(on_signal)
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)
        signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        threading.Thread(target=self._run, name="perfmlp-watchdog", daemon=True).start()

    @staticmethod
    def handle_signals(on_signal) -> None:
        for s in SIGNALS:
            signal.signal(s, on_signal)

    def attach(self, world) -> None:
        """Share this rank's row with the other ranks of its node (a collective)."""
        self.world = world
        self.row[RANK] = world.rank
        comm = getattr(world, "comm", None)
        if comm is None or world.size == 1:
            return
        MPI = world.MPI
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        self._win = MPI.Win.Allocate_shared(ROW_BYTES, 8, comm=node)
        rows = [_row(self._win.Shared_query(i)[0]) for i in range(node.Get_size())]
        mine = rows[node.Get_rank()]
        mine[:] = self.row
        self.row = mine
        node.Barrier()  # every row written before any is read
        self._node_comm, self.rows = node, rows

    def mark(self, state: int) -> None:
        self.row[CODE] = state

    def batch(self, epoch: int, batch: int) -> None:
        self.hold_if_ending()   # the thread has said the job is ended: train no further
        row = self.row
        row[EPOCH] = epoch
        row[BATCH] = batch
        row[CODE] = BATCH_START

    def watch(self, phase):
        """The tracer's `phase` function, marking each phase it enters."""
        def watched(name, row=self.row, codes=PHASE_CODES):
            row[CODE] = codes[name]
            return phase(name)
        return watched

    def hold_if_ending(self) -> None:
        """The main thread, about to end well or exit: once the thread has said the job is ended, it
        must not end well (the thread ends this process, else this does)."""
        if self.ending.is_set():
            time.sleep(2 * GRACE_S)
            os.kill(os.getpid(), signal.SIGKILL)

    def close(self) -> None:
        """The main thread, exiting: hold if the thread is ending the job, else silence the thread."""
        with self.lock:
            self.hold_if_ending()
            self.closed = True

    # -- the thread ---------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._watch()
        except Exception as e:  # a bug here must not end a run that is going well
            with contextlib.suppress(OSError, ValueError):
                print(f"{self.prog}: warning: the watchdog stopped ({type(e).__name__}: {e})", file=sys.stderr,
                      flush=True)

    def _watch(self) -> None:
        """Progress is any rank of the node moving on (the asynchronous server marks nothing)."""
        step = min(1.0, self.limit_s / 4) if self.limit_s > 0 else 1.0
        last, since = self._node(), time.monotonic()
        signalled = {}
        while not self._stop.is_set():
            select.select([self._wake_r], [], [], step)
            now = time.monotonic()
            for s in self._signals_read():
                signalled.setdefault(s, now)
            for s, t in signalled.items():
                if not self.handled and now - t >= GRACE_S:
                    self._end_for_signal(s)
            where = self._node()
            if where != last:
                last, since = where, now
            elif self.limit_s > 0 and now - since >= self._limit() and not self._stop.is_set():
                self._end_for_stall(now - since)
                since = float("inf")   # ended, or waiting for the rank that reports

    def _limit(self) -> float:
        """The stall limit; before this node's first batch at least STARTUP_MIN_S."""
        starting = any(int(r[CODE]) == STARTING for r in self.rows)
        return max(self.limit_s, STARTUP_MIN_S) if starting else self.limit_s

    def _node(self) -> tuple:
        return tuple(tuple(r[:PID]) for r in self.rows)

    def _signals_read(self) -> list[int]:
        try:
            data = self._wake_r.recv(64)
        except (BlockingIOError, InterruptedError):
            return []
        return [s for s in data if s in SIGNALS]

    def _end_for_signal(self, signum: int) -> None:
        what, status = SIGNALS[signum]
        w = self.world
        who = f"rank {w.rank}: " if w is not None and w.size > 1 else ""
        self._end(f"{who}error: {what} {describe(*self.row[:BATCH + 1])}, where the signal's handler "
                  "could not run (blocked outside Python); the job is ended", status, 128 + signum)

    def _end_for_stall(self, waited_s: float) -> None:
        rows = np.array([r.tolist() for r in self.rows], dtype=np.int64)
        me = int(self.row[RANK])
        stalled = behind(rows)
        limit = f"no progress for {waited_s:.{1 if waited_s >= 1 else 3}f} s (--stall-limit {self.limit_s:g})"
        self._stop.set()   # this thread reports once, whatever follows
        if stalled is None:   # every rank of this node is waiting: at the exit, or for a rank elsewhere
            where = describe(*self.row[:BATCH + 1])
            whole = self.world is not None and len(rows) == self.world.size   # the job is this node
            line = f"every rank of this node stalled at its exit (MPI, NCCL or CUDA teardown): {limit}" \
                if all(int(c) == EXITING for c in rows[:, CODE]) else \
                f"every rank waited {where} for the others: {limit}" if whole else \
                f"rank {me} waited {where} for a rank on another node: {limit}"
            reporter = int(rows[:, RANK].min())
        else:
            r = int(stalled[RANK])
            stopped = process_stopped(int(stalled[PID]))
            line = f"rank {r} stalled {describe(*map(int, stalled[:3]))}" \
                   f"{' (its process is stopped)' if stopped else ''}: {limit}"
            others = [int(x) for x in rows[:, RANK] if int(x) != r]
            # a stalled rank that is alive speaks (the others may be held inside MPI, their threads not run)
            reporter = min(others, default=me) if stopped else r
        if me != reporter:
            time.sleep(2 * GRACE_S)   # the reporter's abort ends this rank first
        # ranks that read the rows at other moments may each think they report: the claim lets one speak
        if (me == reporter or not any(int(row[CODE]) == REPORTING for row in self.rows)) and self._claimed():
            self.row[CODE] = REPORTING
            self._end(f"error: {line}; the job is ended", "stalled", 1)
        time.sleep(4 * GRACE_S)   # another rank has spoken: this one only ends, silently
        self._end(None, "stalled", 1)

    def _claimed(self) -> bool:
        """The right to say the stall: the first rank to make the run's claim file (two ranks may each
        think they report); without a run folder, every reporter."""
        if self.run_dir is None:
            return True
        try:
            os.close(os.open(os.path.join(self.run_dir, STALL_CLAIM), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return False
        except OSError:   # a full or read-only disk: better two lines than none
            pass
        return True

    def _end(self, line: str | None, status: str, code: int) -> None:
        """One line (unless None), the manifest's status (best effort), then the whole job ends."""
        with self.lock:
            if self.closed:
                return
            self.ending.set()
            if line is not None:
                write_line(f"{self.prog}: {line}")   # one write: never glued to another rank's line
            mark_manifest(self.run_dir, status)
        w = self.world
        MPI = getattr(w, "MPI", None)
        if w is not None and w.size > 1 and MPI is not None and MPI.Query_thread() >= MPI.THREAD_MULTIPLE:
            # MPI_Abort from this thread can wait for ever while the main thread calls MPI: then this rank
            # is killed, which ends the job too (not a daemon thread: an exiting interpreter waits for it)
            threading.Timer(GRACE_S, os.kill, (os.getpid(), signal.SIGKILL)).start()
            w.abort(code)
        with contextlib.suppress(OSError, ValueError):   # a full or closed stdout must not keep the job alive
            sys.stdout.flush()
        os._exit(code)


def mark_manifest(run_dir, status: str) -> None:
    """The manifest's status, best effort (the job must end even on a full disk)."""
    if run_dir is None:
        return
    with contextlib.suppress(Exception):
        from .trace.manifest import finish_manifest
        finish_manifest(Path(run_dir), status)


def describe(code: int, epoch: int, batch: int) -> str:
    """Where a rank is, in words: "in phase allreduce of epoch 1, batch 7"."""
    at = f"epoch {epoch + 1}, batch {batch}"
    if 0 <= code < len(STATES):
        return STATES[code].format(at=at, epoch=epoch + 1)
    if code >= PACKED:
        name = code.to_bytes(8, "little").rstrip(b"\0").decode("ascii", "replace")
    else:
        name = NAMES[code] if 0 <= code < len(NAMES) else NAMES[UNKNOWN]
    return f"in phase {name} of {at}"


def behind(rows: np.ndarray):
    """The row of the rank the others wait for: a stopped one, else the earliest (epoch, batch) of those
    not waiting, else the earliest; None if all wait at the same batch (for a rank on another node)."""
    for r in rows:
        if process_stopped(int(r[PID])):
            return r
    active = [r for r in rows if int(r[CODE]) not in WAITING]
    first = min(active or list(rows), key=lambda r: (int(r[EPOCH]), int(r[BATCH])))
    if not active and len(rows) > 1 and all((r[EPOCH], r[BATCH]) == (first[EPOCH], first[BATCH]) for r in rows):
        return None
    return first


def process_stopped(pid: int) -> bool:
    """Whether the process is stopped by a signal (Linux /proc; False elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


class Watched:
    """The tracer, the watchdog marking each batch and phase it begins; `at[0]`: the batch begun last."""

    def __init__(self, tracer, watchdog):
        self._tracer, self._watchdog = tracer, watchdog
        self.at = [0]
        self.phase = watchdog.watch(tracer.phase)

    def begin_batch(self, epoch: int, batch: int, samples: int, local: int) -> None:
        self._watchdog.batch(epoch, batch)
        self.at[0] = batch
        self._tracer.begin_batch(epoch, batch, samples, local)

    def __getattr__(self, name):
        return getattr(self._tracer, name)


class NoWatchdog:
    """What the loop calls when nothing watches it: the phase function unwatched, no marks."""

    watch = staticmethod(lambda phase: phase)
    batch = mark = staticmethod(lambda *where: None)
