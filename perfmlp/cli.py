"""What perfmlp's commands share on their command lines: an argument parser
whose errors are one line, and `--machine` (the configuration's flags:
perfmlp/flags.py). It imports nothing of perfmlp, so every command can take it.
"""
from __future__ import annotations

import argparse
import sys

MACHINE_HELP = "machine file: a .yaml path or the name of a shipped one (models/*.yaml)"


class Parser(argparse.ArgumentParser):
    """The commands' argument parser: an error is `<tool>: error: <message>` on stderr and status 2."""

    def error(self, message):
        tool = self.prog.removeprefix("python -m ")
        print(f"{tool}: error: {' '.join(str(message).split())}", file=sys.stderr, flush=True)
        sys.exit(2)


def add_machine(parser: argparse.ArgumentParser, default: str, *, required: bool = False,
                shipped: tuple[str, ...] = ()) -> None:
    """--machine NAME|FILE.yaml; `default`: what the command takes without it; `shipped`: files to list."""
    names = f" ({', '.join(shipped)})" if shipped else ""
    parser.add_argument("--machine", default=None, required=required, metavar="NAME|FILE.yaml",
                        help=f"{MACHINE_HELP}{names} (default: {default})")
