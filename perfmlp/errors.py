"""The one exception type a user sees (its message is the one-line error),
and what every command-line tool shares: how it ends and how it writes.

The promise: bad input or a fault ends a tool with one line naming the file
or value and a non-zero status (2: bad input, 1: failed, 130: Ctrl-C, 128 + N:
signal N), never a traceback; an output file is written to a temporary name
beside it and renamed, so it is whole or absent; printing never fails a
finished run (characters the terminal's encoding lacks are escaped).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path


class PerfmlpError(Exception):
    """A problem with the user's input or environment, reported in one line;
    `exit_code`: 2 for bad input (configuration, data, traces), 1 for a run that failed."""

    exit_code = 2


class RunFailure(PerfmlpError):
    """The run itself failed (non-finite loss, a rank died, a full disk)."""

    exit_code = 1


def safe_stdio() -> None:
    """Never fail on printing a character the output's encoding lacks
    (LC_ALL=C, PYTHONIOENCODING=ascii): escape it instead."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError):  # replaced by a non-text stream, or closed
            pass


def say(*args, file=None) -> None:
    """print(), except that a closed or broken output is not an error; the
    line goes out in one write, so two ranks' lines are never glued."""
    out = file or sys.stdout
    try:
        out.write(" ".join(map(str, args)) + "\n")
        out.flush()
    except (OSError, ValueError):
        pass


def cli(prog: str, main, argv=None) -> int:
    """Run a tool's `main(argv)`: its status, or 130 and one line on
    Ctrl-C, or one line for a PerfmlpError that escaped it."""
    safe_stdio()
    try:
        return main(argv)
    except KeyboardInterrupt:
        say(f"{prog}: interrupted (SIGINT)", file=sys.stderr)
        return 130
    except PerfmlpError as e:
        say(f"{prog}: error: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:  # `... | head`: the reader has gone
        quiet_stdout()
        return 1


def quiet_stdout() -> None:
    """A stdout that cannot be written (a full device, a closed pipe) must
    not fail a finished command at exit: what it holds is dropped."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass


def write_atomic(path: str | Path, data) -> None:
    """Write `path` whole: `data` (bytes, str as UTF-8, or a function given the open binary file) to a
    temporary name beside it, renamed over `path`; on failure `path` is as it was (an OSError: a RunFailure)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        if isinstance(e, OSError):
            raise RunFailure(f"cannot write {path}: {e.strerror or e}") from None
        raise


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (a PerfmlpError), not
    usage + message: for a command that says its errors itself (the run, once
    every rank has started). perfmlp/cli.py's Parser prints them instead."""

    def error(self, message):
        raise PerfmlpError(" ".join(str(message).split()))


def seconds_arg(text: str) -> float:
    """A command-line duration: a finite number of seconds above 0."""
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return v


def parent_death_signal() -> None:  # pragma: no cover - runs in the child between fork and exec
    """A child process's preexec_fn (Linux): SIGTERM to the child when its
    parent dies (PR_SET_PDEATHSIG), so a killed tool leaves no process behind."""
    try:
        import ctypes
        import signal
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
