"""`python -m perfmlp.whatif traces/<run> --set comm=nccl --set exec=graph --procs 4`:
the time per batch a measured run would take with some of its configuration
changed.

What the change does not touch stays measured (the slowest rank's median
time of each phase group, and the time between phases); what it touches is
the model's (perfmlp/model/whatif.py says how). Each `--set` value is read
as a value in a configuration file is (YAML: `overlap=true`, `bucket_bytes=
1048576`; hidden_sizes comma separated) and checked as the configuration
checks it; a change the trainer would refuse on a GPU is refused in the
trainer's words.
"""
from __future__ import annotations

import argparse
import json
import sys

import yaml

from .cli import Parser, add_machine
from .config import Config, from_mapping
from .errors import PerfmlpError
from .model.interval import Interval, interval, interval_json, interval_words
from .model.machine import MachineError, load_machine
from .model.predict import GROUPS, TERM_GROUP
from .model.whatif import KEYS, Setting, WhatIf, WhatIfError, changed_setting, what_if
from .model.machine.choose import pick_machines
from .report.whatif import measured_groups_ms, setting_of
from .trace.reader import TraceError, read_run


def set_values(sets: dict) -> dict:
    """The --set values converted and checked as the configuration's (a key
    a what-if cannot change is refused first)."""
    unknown = sorted(set(sets) - set(KEYS))
    if unknown:
        raise PerfmlpError(f"--set {unknown[0]}: not a key a what-if can change (one of {', '.join(KEYS)})")
    cfg = from_mapping(sets, where="--set: ", base=Config(), check=False)
    return {k: getattr(cfg, k) for k in sets}


def refuse_as_the_trainer(s: Setting) -> None:
    """The trainer's one-line refusal of this configuration on a GPU, if any."""
    from .backend import check_options
    check_options(Config(input_size=s.layer_sizes[0], hidden_sizes=tuple(s.layer_sizes[1:-1]),
                         num_classes=s.layer_sizes[-1], batch_size=s.batch, precision=s.precision, backend="cupy",
                         comm=s.comm, batch_transfer=s.batch_transfer, gemm=s.gemm, exec=s.exec_mode,
                         overlap=s.overlap, bucket_bytes=s.bucket_bytes))


def format_table(w: WhatIf) -> str:
    diff = [f"{k} {getattr(w.before, k)} -> {getattr(w.after, k)}" for k in Setting.__dataclass_fields__
            if getattr(w.before, k) != getattr(w.after, k)]
    lines = [f"run {w.run_id}, machine {w.machine}",
             "change: " + ("; ".join(diff) if diff else "none"),
             "",
             f"{'group (us per batch)':<22}{'measured':>10}{'model now':>11}{'model new':>11}{'used':>10}  changed"]
    g0, g1 = w.predicted_before.groups(), w.predicted_after.groups()
    for g in GROUPS:
        lines.append(f"{g:<22}{w.measured_groups_ms[g] * 1e3:>10.1f}{g0[g] * 1e6:>11.1f}{g1[g] * 1e6:>11.1f}"
                     f"{w.groups_ms[g] * 1e3:>10.1f}  {'yes' if g in w.changed else ''}")
    lines.append(f"{'other (measured)':<22}{w.measured_groups_ms['other'] * 1e3:>10.1f}{'':>22}"
                 f"{w.groups_ms['other'] * 1e3:>10.1f}  {'yes' if 'other' in w.changed else ''}")
    lines.append(f"{'time per batch':<22}{w.measured_ms * 1e3:>10.1f}{w.predicted_before.total_s * 1e6:>11.1f}"
                 f"{w.predicted_after.total_s * 1e6:>11.1f}{w.total_ms * 1e3:>10.1f}")
    lines.append("")
    lines.append(f"predicted time per batch: {w.total_ms * 1e3:.1f} us ({w.measured_ms / w.total_ms:.2f}x the "
                 f"measured {w.measured_ms * 1e3:.1f} us)")
    if "other" in w.changed:
        lines.append("  other: the eager run's time between phases, none in one graph replay")
    for g in (g for g in w.changed if g != "other"):
        parts = [f"{t} {w.predicted_before.terms[t] * 1e6:.1f} -> {w.predicted_after.terms[t] * 1e6:.1f}"
                 for t in w.changed_terms if TERM_GROUP[t] == g]
        lines.append(f"  {g}: " + ", ".join(parts) + " (us, model)")
    return "\n".join(lines)


def _parse_set(text: str) -> tuple[str, object]:
    """KEY=VALUE, the value read as YAML reads a configuration file's."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    k, v = text.split("=", 1)
    k = k.strip().replace("-", "_")
    try:
        value = [yaml.safe_load(t) for t in v.split(",")] if k == "hidden_sizes" else yaml.safe_load(v)
    except yaml.YAMLError:
        raise argparse.ArgumentTypeError(f"{k}: {v!r} is not a value a configuration file could hold") from None
    return k, value


def _parser() -> argparse.ArgumentParser:
    ap = Parser(prog="python -m perfmlp.whatif", description=__doc__,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", metavar="traces/RUN", help="a run's trace folder (manifest.json and rank-<r>.jsonl)")
    ap.add_argument("--set", dest="sets", action="append", type=_parse_set, default=[], metavar="KEY=VALUE",
                    help=f"a configuration change, repeatable; KEY one of {', '.join(KEYS)} (default: none)")
    ap.add_argument("--procs", type=int, default=None, metavar="P",
                    help="processes, one GPU each; the batch stays the same unless batch_size is set "
                         "(default: the run's)")
    add_machine(ap, "the calibrated file for the run's GPU, else its datasheet")
    ap.add_argument("--json", action="store_true", help="print JSON (default: a table)")
    return ap


def what_if_interval(machine, w: WhatIf) -> Interval | None:
    """The what-if's 90% interval (perfmlp/model/interval.py): the same
    what-if under each draw of the machine file's measured spread, the
    measured groups as measured; None for a file that records no spread."""
    from types import SimpleNamespace
    return interval(machine, lambda m: SimpleNamespace(
        total_s=what_if(m, w.before, w.after, w.measured_ms, w.measured_groups_ms).total_ms * 1e-3,
        terms=w.predicted_after.terms, detail=getattr(w.predicted_after, "detail", {})))


def _what_if(a: argparse.Namespace) -> tuple[WhatIf, object]:
    if a.procs is not None and a.procs <= 0:
        raise PerfmlpError(f"--procs must be a positive integer, got {a.procs}")
    values = set_values(dict(a.sets))
    run = read_run(a.run)
    if not run.steady_batches():
        raise PerfmlpError(f"{a.run}: no finished batch past the warm-up")
    if not run.on_gpu:
        raise PerfmlpError(f"{a.run}: ran on the {run.backend} backend; the model "
                           "describes a GPU")
    machine = load_machine(a.machine) if a.machine else pick_machines([run], None).primary
    before = setting_of(run)
    after = changed_setting(before, values, a.procs)
    refuse_as_the_trainer(after)
    t, groups = measured_groups_ms(run)
    return what_if(machine, before, after, t, groups, run.run_id), machine


def main(argv=None) -> int:
    a = _parser().parse_args(argv)
    try:
        w, machine = _what_if(a)
        iv = what_if_interval(machine, w)
    except (PerfmlpError, TraceError, MachineError, WhatIfError) as e:
        print(f"perfmlp.whatif: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({**w.to_json(), **interval_json(iv)}, indent=1) if a.json
          else format_table(w) + "\n" + interval_words(iv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
