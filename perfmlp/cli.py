"""What perfmlp's commands share on their command lines, defined once: an
argument parser whose errors are one line, and the `--machine` option. The
configuration's keys as flags, built from Config's fields, are
perfmlp/flags.py's add_fields. This module imports nothing of perfmlp, so
that every command (the trace's too) can take it.
"""
from __future__ import annotations

import argparse
import sys

MACHINE_HELP = "machine file: a .yaml path or the name of a shipped one (models/*.yaml)"


class Parser(argparse.ArgumentParser):
    """The commands' argument parser: an error is one line on stderr,
    `<tool>: error: <message>` (no usage block), and exit status 2 (bad input)."""

    def error(self, message):
        tool = self.prog.removeprefix("python -m ")
        print(f"{tool}: error: {' '.join(str(message).split())}", file=sys.stderr, flush=True)
        sys.exit(2)


def add_machine(parser: argparse.ArgumentParser, default: str, *, required: bool = False,
                shipped: tuple[str, ...] = ()) -> None:
    """--machine NAME|FILE.yaml; `default` says what a command takes without
    it, `shipped` names the shipped files where the command lists them."""
    names = f" ({', '.join(shipped)})" if shipped else ""
    parser.add_argument("--machine", default=None, required=required, metavar="NAME|FILE.yaml",
                        help=f"{MACHINE_HELP}{names} (default: {default})")
