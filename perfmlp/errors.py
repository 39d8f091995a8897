"""The one exception type a user sees (its message is the one-line error), and what every command-line
tool shares: how it ends, how it writes, its argument parser (errors in one line) and `--machine`.

The promise: bad input or a fault ends a tool with one line naming the file or value and a non-zero
status (2: bad input, 1: failed, 130: Ctrl-C, 128 + N: signal N), never a traceback; an output file is
written to a temporary name beside it and renamed, so it is whole or absent; printing never fails a
finished run (characters the terminal's encoding lacks are escaped)."""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import threading
from pathlib import Path


class PerfmlpError(Exception):
    """A problem with the user's input or environment, in one line; `exit_code` 2 (bad input) or 1 (failed)."""

    exit_code = 2


class RunFailure(PerfmlpError):
    """The run itself failed (non-finite loss, a rank died, a full disk)."""

    exit_code = 1


def safe_stdio() -> None:
    """Escape, never fail on, a character the output's encoding lacks (LC_ALL=C, PYTHONIOENCODING=ascii)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):  # replaced by a non-text stream, or closed
            stream.reconfigure(errors="backslashreplace")


def say(*args, file=None) -> None:
    """print() in one write (two ranks' lines are never glued); a closed or broken output is no error."""
    out = file or sys.stdout
    with contextlib.suppress(OSError, ValueError):
        out.write(" ".join(map(str, args)) + "\n")
        out.flush()


def cli(prog: str, main, argv=None) -> int:
    """A tool's `main(argv)` status; one line and 130 on Ctrl-C, one line for a PerfmlpError."""
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
    """Drop what an unwritable stdout (a full device, a closed pipe) holds: a finished command must not fail."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")


def write_atomic(path: str | Path, data) -> None:
    """`write_whole`, an OSError as a RunFailure naming `path`."""
    try:
        write_whole(Path(path), data)
    except OSError as e:
        raise RunFailure(f"cannot write {path}: {e.strerror or e}") from None


def write_whole(path: Path, data) -> None:
    """Write `path` whole: `data` (bytes, str as UTF-8, or a function given the open binary file) to a
    temporary name beside it, renamed over `path`; on failure `path` is as it was. The temporary name is
    this call's own: ranks, or a rank's watchdog and main thread, may each write at once."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class Parser(argparse.ArgumentParser):
    """The commands' argument parser: an error is `<tool>: error: <message>` on stderr and status 2."""

    def error(self, message):
        tool = self.prog.removeprefix("python -m ")
        print(f"{tool}: error: {' '.join(str(message).split())}", file=sys.stderr, flush=True)
        sys.exit(2)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose error is a one-line PerfmlpError, for a command that says its errors
    itself (the run, once every rank has started); `Parser` prints them instead."""

    def error(self, message):
        raise PerfmlpError(" ".join(str(message).split()))


MACHINE_HELP = "machine file: a .yaml path or the name of a shipped one (models/*.yaml)"


def add_machine(parser: argparse.ArgumentParser, default: str, *, shipped: tuple[str, ...] = ()) -> None:
    """--machine NAME|FILE.yaml, the one every command takes (the configuration's flags: perfmlp/flags.py);
    `default`: what the command takes without it; `shipped`: files to list."""
    names = f" ({', '.join(shipped)})" if shipped else ""
    parser.add_argument("--machine", default=None, metavar="NAME|FILE.yaml",
                        help=f"{MACHINE_HELP}{names} (default: {default})")


def positive_int_arg(message: str, cast=int):
    """An argparse `type`: `cast(text)` if finite and above 0, else `message` (formatted with the text's repr) as
    the error."""
    def convert(text: str):
        try:
            v = cast(text)
        except ValueError:
            v = 0
        if not (math.isfinite(v) and v > 0):
            raise argparse.ArgumentTypeError(message.format(repr(text)))
        return v
    return convert


seconds_arg = positive_int_arg("must be a positive number of seconds, got {}", float)   # a command-line duration


def parent_death_signal() -> None:  # pragma: no cover - runs in the child between fork and exec
    """A child's preexec_fn (Linux): SIGTERM to it when its parent dies (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes
        import signal
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
