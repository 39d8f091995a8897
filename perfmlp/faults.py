"""Fault injection for the tests: how the whole job ends when one rank fails.

PERFMLP_FAULT=RANK:WHEN[:KIND[:PHASE]] makes rank RANK fail at WHEN: a batch number (as that batch
starts, or as it enters PHASE), `start` (before MPI starts), `end` (after the last batch) or `exit` (as
the process exits, before MPI's teardown). KIND is `raise` (an exception, the default), `disk` (the
rank's trace writes go to /dev/full: ENOSPC), `kill` (SIGKILL), `term`, `int`, `hup` (SIGTERM, SIGINT,
SIGHUP), `stop` (SIGSTOP), `hang` (the rank sleeps for ever, holding no lock) or `hold` (it sleeps
holding Python's lock, as a teardown inside a C library does: no Python thread runs)."""
from __future__ import annotations

import os
import signal
import time

SPEC = os.environ.get("PERFMLP_FAULT")
START = "start"   # before MPI starts
END = "end"       # after the last batch
EXIT = "exit"     # as the process exits
_SIGNALS = {"kill": signal.SIGKILL, "term": signal.SIGTERM, "int": signal.SIGINT, "hup": signal.SIGHUP,
            "stop": signal.SIGSTOP}


def _parsed():
    r, when, *rest = SPEC.split(":")
    return int(r), when, (rest[0] if rest else "raise"), (rest[1] if len(rest) > 1 else None)


def launcher_rank() -> int:
    """This process's rank as the MPI launcher says it, before MPI starts."""
    rank = next((os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK") if v in os.environ), "0")
    return int(rank) if rank.isdigit() else 0


def hook(rank: int, when, tracer=None, phase: str | None = None) -> None:
    """Fail here if PERFMLP_FAULT names this rank, this point and this phase."""
    if not SPEC:
        return
    r, at, kind, where = _parsed()
    if r != rank or at != str(when) or where != phase:
        return
    if kind == "raise":
        raise RuntimeError(f"injected fault at batch {when}")
    if kind == "disk":
        tracer.redirect_writes("/dev/full")
    elif kind == "hang":
        while True:
            time.sleep(1)
    elif kind == "hold":
        import ctypes
        ctypes.PyDLL(None).sleep(1 << 20)   # a C call made with the GIL held
    else:
        os.kill(os.getpid(), _SIGNALS[kind])


def per_phase(phase, rank: int, tracer, where: list):
    """`phase` calling the hook as each phase starts, where PERFMLP_FAULT names one; where[0]: the batch."""
    if not SPEC or len(SPEC.split(":")) < 4:
        return phase

    def faulty(name):
        entered = phase(name)  # the phase is marked as entered before the fault
        hook(rank, where[0], tracer, name)
        return entered
    return faulty
