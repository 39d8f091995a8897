"""The model's own error, from its blind tests, into a machine file:

    python -m perfmlp.report.blind_spread reports/blind-tests.csv --machine-kind h100 \\
        --into calibrated.yaml

For each execution mode (eager, graph), the measured over predicted times
per batch of every blind test of that machine kind (blind_tests.py: the
median of a configuration's repeats over the prediction made before its
first run) become the file's `spread` entries: `model_eager_pageable` or
`model_graph_pageable` those whose batch was staged through pageable
memory (pageable, prefetch-pageable), `model_eager` or `model_graph` the
others (model/interval.py draws the whole predicted total's factor from
the one of its prediction, the calibration's own sources drawn as
before); a group with fewer than MIN_TESTS tests records none, and its
steps draw from their execution mode's other entry. So an interval covers
what the calibration's repeats cannot show: a host's speed from one
process to the next, and the model's known biases, in the proportion the
blind tests met them. The entries replace any the file held; the rest of the file is kept.
The tests are pooled over the sweeps and commits the history holds (each
one's error is of the model of its own commit).
"""
from __future__ import annotations

import sys
from pathlib import Path


from ..checks import CheckError, read_yaml
from ..errors import OneLineParser, PerfmlpError, cli, say, write_atomic
from ..model.machine import (MODEL_ERROR_SOURCES, MODEL_SOURCES, PAGEABLE_MODEL_ERROR_SOURCES, PAGEABLE_TRANSFERS,
                             MachineError, machine_from_mapping, machine_to_yaml)
from .blind_tests import read_blind_tests
from .thresholds import MIN_TESTS



def model_error_ratios(tests, machine_kind: str) -> dict[str, tuple[float, ...]]:
    """spread source -> the sorted measured / predicted ratios of the
    machine kind's blind tests in that execution mode, staged through
    pageable memory or not (groups with fewer than MIN_TESTS left out)."""
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


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m perfmlp.report.blind_spread", description=__doc__.split("\n\n")[0])
    ap.add_argument("history", metavar="BLIND-TESTS.csv")
    ap.add_argument("--machine-kind", required=True, help="the history's machine column to take (h100, h200-x2, ...)")
    ap.add_argument("--into", required=True, metavar="FILE.yaml", help="the machine file to write the entries into")
    a = ap.parse_args(argv)
    tests = read_blind_tests(a.history).tests
    ratios = model_error_ratios(tests, a.machine_kind)
    if not ratios:
        kinds = sorted({t.machine for t in tests})
        raise PerfmlpError(f"{a.history}: fewer than {MIN_TESTS.value} blind tests of machine kind "
                           f"{a.machine_kind!r} in "
                           f"either execution mode (kinds: {', '.join(kinds)})")
    try:
        values = read_yaml(Path(a.into), "machine file")
    except CheckError as e:
        raise PerfmlpError(str(e)) from None
    if not isinstance(values, dict):
        raise PerfmlpError(f"{a.into}: not a machine file (a YAML mapping of machine keys)")
    new = with_model_error(values, ratios)
    try:
        machine_from_mapping(new, a.into)   # the file still reads
    except MachineError as e:
        raise PerfmlpError(str(e)) from None
    write_atomic(a.into, machine_to_yaml(new))
    say("; ".join(f"{s}: {len(r)} blind tests, ratios {r[0]:.3f} to {r[-1]:.3f}" for s, r in ratios.items())
        + f" -> {a.into}")
    return 0


if __name__ == "__main__":
    sys.exit(cli("perfmlp.report.blind_spread", main))
