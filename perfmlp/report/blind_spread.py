"""The model's own error, from its blind tests, into a machine file:

    python -m perfmlp.report.blind_spread reports/blind-tests.csv --machine-kind KIND \\
        --into calibrated.yaml

Per execution mode, and staged through pageable memory or not, the
measured / predicted times of the machine kind's blind tests become the
file's `spread` entries (model/interval.py draws a prediction's factor from
its own); a group with fewer than MIN_TESTS tests records none. The entries
replace any the file held and the rest of its text is kept, comments
included (the spread block is edited as text); a file whose spread is not a
block list and which holds comments is refused rather than rewritten
without them.
"""
from __future__ import annotations

import contextlib
import re
import sys
import textwrap
from pathlib import Path

import yaml

from ..checks import CheckError, read_yaml
from ..errors import OneLineParser, PerfmlpError, cli, say, write_atomic
from ..model.machine import (MODEL_ERROR_SOURCES, MODEL_SOURCES, PAGEABLE_MODEL_ERROR_SOURCES, PAGEABLE_TRANSFERS,
                             MachineError, machine_from_mapping, machine_to_yaml)
from .model_error import read_blind_tests
from .thresholds import MIN_TESTS


def model_error_ratios(tests, machine_kind: str) -> dict[str, tuple[float, ...]]:
    """spread source -> the sorted measured / predicted ratios of its group of blind tests."""
    out = {}
    for sources, pageable in ((MODEL_ERROR_SOURCES, False), (PAGEABLE_MODEL_ERROR_SOURCES, True)):
        for mode, source in sources.items():
            ratios = sorted(round(t.measured_s / t.predicted_s, 4) for t in tests
                            if t.machine == machine_kind and t.exec == mode
                            and (t.batch_transfer in PAGEABLE_TRANSFERS) == pageable)
            if len(ratios) >= MIN_TESTS.value:
                out[source] = tuple(ratios)
    return out


def with_model_error(values: dict, ratios: dict[str, tuple]) -> dict:
    """The machine file's mapping with its model-error spread entries replaced."""
    kept = [e for e in values.get("spread") or [] if e.get("source") not in MODEL_SOURCES]
    return {**values, "spread": kept + [{"source": s, "ratios": list(r)} for s, r in ratios.items()]}


SPREAD = re.compile(r"^spread:\s*(#.*)?$")


def entry_text(source: str, ratios: tuple, indent: str) -> str:
    """One spread entry as YAML text, its ratios on one flow line as machine_to_yaml writes them."""
    return f"{indent}- source: {source}\n{indent}  ratios: [{', '.join(repr(float(r)) for r in ratios)}]\n"


def edited_text(text: str, ratios: dict[str, tuple]) -> str | None:
    """`text` with its spread block's model entries replaced, every other line kept; None: not a block list."""
    lines = text.splitlines(keepends=True)
    at = next((i for i, x in enumerate(lines) if SPREAD.match(x)), None)
    if at is None:
        if any(x.startswith("spread:") for x in lines):
            return None          # a flow list (spread: [...]): not edited as text
        tail = "" if not lines or lines[-1].endswith("\n") else "\n"
        return text + tail + "spread:\n" + "".join(entry_text(s, r, "") for s, r in ratios.items())
    end = next((i for i in range(at + 1, len(lines)) if lines[i][:1] not in (" ", "-", "#", "\n", "")), len(lines))
    chunks, pending = [], []     # an entry's lines, each with the comments above it
    for x in lines[at + 1:end]:
        if x.lstrip().startswith("- "):
            chunks.append([*pending, x])
        elif x.lstrip().startswith("#") or not x.strip() or not chunks:
            pending.append(x)
            continue
        else:
            chunks[-1] += [*pending, x]
        pending = []
    first = next((x for c in chunks for x in c if x.lstrip().startswith("- ")), "")
    indent = first[:len(first) - len(first.lstrip())]
    kept = []
    for c in chunks:
        entry = yaml.safe_load(textwrap.dedent("".join(c)))
        if not (isinstance(entry, list) and len(entry) == 1 and isinstance(entry[0], dict)):
            return None
        if entry[0].get("source") not in MODEL_SOURCES:
            kept.append("".join(c))
    new = "".join(entry_text(s, r, indent) for s, r in ratios.items())
    return "".join(lines[:at + 1] + kept) + new + "".join(pending + lines[end:])


def written(path: str, values: dict, ratios: dict[str, tuple]) -> str:
    """The machine file's new text: edited in place where it can be, else whole if that drops no comment."""
    text = Path(path).read_text(encoding="utf-8")
    new = edited_text(text, ratios)
    want = with_model_error(values, ratios)
    with contextlib.suppress(yaml.YAMLError):   # an edit that does not read back is written whole below
        if new is not None and yaml.safe_load(new) == want:
            return new
    comments = sum(x.lstrip().startswith("#") or " #" in x for x in text.splitlines())
    if comments:
        raise PerfmlpError(f"{path}: its spread is not a block list of entries; writing it again would lose its "
                           f"{comments} comment line(s): give the spread as '- source: ...' lines")
    return machine_to_yaml(want)


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m perfmlp.report.blind_spread", description=__doc__.split("\n\n")[0])
    ap.add_argument("history", metavar="BLIND-TESTS.csv")
    ap.add_argument("--machine-kind", required=True, help="the history's machine column to take (h100, h200-x2, ...)")
    ap.add_argument("--sweeps", default=None, metavar="NAME,...", help="only these sweeps' tests (default: all)")
    ap.add_argument("--into", required=True, metavar="FILE.yaml",
                    help="the machine file to write the entries into (made, holding only them, if missing)")
    a = ap.parse_args(argv)
    tests = read_blind_tests(a.history).tests
    if a.sweeps:
        names = set(a.sweeps.split(","))
        unknown = sorted(names - {t.sweep for t in tests})
        if unknown:
            raise PerfmlpError(f"--sweeps: {a.history} has no sweep {unknown[0]!r}")
        tests = [t for t in tests if t.sweep in names]
    ratios = model_error_ratios(tests, a.machine_kind)
    if not ratios:
        kinds = ", ".join(sorted({t.machine for t in tests}))
        raise PerfmlpError(f"{a.history}: fewer than {MIN_TESTS.value} blind tests of machine kind "
                           f"{a.machine_kind!r} in either execution mode (kinds: {kinds})")
    if not Path(a.into).exists():
        write_atomic(a.into, f"# the model's error from {a.history}, machine kind {a.machine_kind}: the spread "
                     "entries to merge into its machine file\n" + machine_to_yaml(with_model_error({}, ratios)))
    else:
        try:
            values = read_yaml(Path(a.into), "machine file")
            if not isinstance(values, dict):
                raise PerfmlpError(f"{a.into}: not a machine file (a YAML mapping of machine keys)")
            machine_from_mapping(with_model_error(values, ratios), a.into)   # the file still reads
        except (CheckError, MachineError) as e:
            raise PerfmlpError(str(e)) from None
        write_atomic(a.into, written(a.into, values, ratios))
    say("; ".join(f"{s}: {len(r)} blind tests, ratios {r[0]:.3f} to {r[-1]:.3f}" for s, r in ratios.items())
        + f" -> {a.into}")
    return 0


if __name__ == "__main__":
    sys.exit(cli("perfmlp.report.blind_spread", main))
