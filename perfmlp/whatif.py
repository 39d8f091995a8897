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
import dataclasses
import json
import sys

from .checks import CheckError, load_yaml_text
from .config import Config, from_mapping
from .errors import Parser, PerfmlpError, add_machine
from .safeio import prefix
from .model.interval import Interval, interval, interval_json, interval_words
from .model.machine import CpuMachine, MachineError, load_machine
from .model.predict import TERM_GROUP
from .names import GROUPS
from .model.whatif import KEYS, Setting, WhatIf, WhatIfError, change_words, changed_setting, what_if
from .model.machine.choose import pick_machines
from .model.whatif import changed_cpu_setting, cpu_options, gpu_changes, what_if_cpu, what_if_on_gpu
from .report.whatif import cpu_setting_of, measured_groups_ms, setting_of
from .trace.reader import TraceError, read_run


def set_values(sets: dict) -> dict:
    """The --set values checked as the configuration's (a key a what-if cannot change refused first);
    threads, BLAS threads per rank of a NumPy run, a positive integer."""
    keys = (*KEYS, "threads")
    unknown = sorted(set(sets) - set(keys))
    if unknown:
        raise PerfmlpError(f"--set {unknown[0]}: not a key a what-if can change (one of {', '.join(keys)})")
    sets = dict(sets)
    threads = sets.pop("threads", None)
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise PerfmlpError(f"--set threads={threads}: give a positive integer (BLAS threads per rank)")
    cfg = from_mapping(sets, where="--set: ", base=Config(), check=False)
    return {**{k: getattr(cfg, k) for k in sets}, **({"threads": threads} if threads else {})}


def refuse_as_the_trainer(s: Setting) -> None:
    """The trainer's one-line refusal of this configuration on a GPU, if any."""
    from .backend import check_options
    check_options(Config(input_size=s.layer_sizes[0], hidden_sizes=tuple(s.layer_sizes[1:-1]),
                         num_classes=s.layer_sizes[-1], batch_size=s.batch, precision=s.precision, backend="cupy",
                         comm=s.comm, batch_transfer=s.batch_transfer, gemm=s.gemm, exec=s.exec_mode,
                         overlap=s.overlap, bucket_bytes=s.bucket_bytes, slices=str(s.slices)))


def _change(w: WhatIf) -> str:
    if type(w.before) is not type(w.after):   # a NumPy run priced on a GPU
        a = w.after
        return (f"on a GPU ({w.machine}): {a.procs} GPU(s), batch {a.batch}, {a.precision}, comm {a.comm}, "
                f"exec {a.exec_mode}, batch {a.batch_transfer}")
    diff = [f"{f.name} {getattr(w.before, f.name)} -> {getattr(w.after, f.name)}" for f in dataclasses.fields(w.before)
            if getattr(w.before, f.name) != getattr(w.after, f.name)]
    return "; ".join(diff) if diff else "none"


def format_table(w: WhatIf) -> str:
    lines = [f"run {w.run_id}, machine {w.machine}",
             "change: " + _change(w),
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
    lines += ["", f"predicted time per batch: {w.total_ms:.3f} ms ({change_words(w.measured_ms, w.total_ms)})"]
    lines += [f"note: {n}" for n in w.notes]
    if "other" in w.changed:
        lines.append("  other: the eager run's time between phases, none in one graph replay")
    for g in (g for g in w.changed if g != "other"):
        parts = [f"{t} {w.predicted_before.terms.get(t, 0.0) * 1e6:.1f} -> {w.predicted_after.terms[t] * 1e6:.1f}"
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
        value = [load_yaml_text(t, "") for t in v.split(",")] if k == "hidden_sizes" else load_yaml_text(v, "")
    except CheckError:   # not YAML, or nested or aliased past the bounds of a configuration file
        raise argparse.ArgumentTypeError(f"{k}: {prefix(v)} is not a value a configuration file could hold") \
            from None
    return k, value


def _parser() -> argparse.ArgumentParser:
    ap = Parser(prog="python -m perfmlp.whatif", description=__doc__,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", metavar="traces/RUN", help="a run's trace folder (manifest.json and rank-<r>.jsonl)")
    ap.add_argument("--set", dest="sets", action="append", type=_parse_set, default=[], metavar="KEY=VALUE",
                    help=f"a configuration change, repeatable; KEY one of {', '.join(KEYS)} (default: none)")
    ap.add_argument("--procs", type=int, default=None, metavar="P",
                    help="processes, one GPU each (on a NumPy run: ranks on its CPU); the batch stays the "
                         "same unless batch_size is set (default: the run's)")
    add_machine(ap, "the calibrated file for the run's GPU, else its datasheet")
    ap.add_argument("--json", action="store_true", help="print JSON (default: a table)")
    return ap


def what_if_interval(machine, w: WhatIf) -> Interval | None:
    """The what-if's 90% interval under the machine file's measured spread (None without one)."""
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
        if "slices" in values:
            raise PerfmlpError(f"--set slices: {a.run} ran on the NumPy backend; the what-if prices the sliced "
                               "schedule on GPU runs (NCCL)")
        return _what_if_numpy(a, run, values)
    machine = load_machine(a.machine) if a.machine else pick_machines([run], None).primary
    if isinstance(machine, CpuMachine):
        raise PerfmlpError(f"--machine {a.machine}: a CPU file, and {a.run} ran on a GPU")
    before = setting_of(run)
    after = changed_setting(before, values, a.procs)
    refuse_as_the_trainer(after)
    t, groups = measured_groups_ms(run)
    return what_if(machine, before, after, t, groups, run.run_id), machine, None


def _what_if_numpy(a: argparse.Namespace, run, values: dict) -> tuple[WhatIf, object, list]:
    """A NumPy run priced on its CPU file, or on a GPU file for a GPU-only change or a GPU --machine;
    with the CPU's single changes beside it (model/whatif.py)."""
    machines = pick_machines([run], a.machine)
    cpu = machines.cpu
    if cpu is None:
        raise PerfmlpError(f"{a.run} ran on the NumPy backend and no CPU machine file ships: make one with "
                           "`mpiexec -n 2 python -m perfmlp.calibrate --out models/mycpu.yaml` and give --machine")
    before = cpu_setting_of(run)
    t, groups = measured_groups_ms(run)
    named_gpu = a.machine and not isinstance(load_machine(a.machine), CpuMachine)
    if gpu_changes(values) or named_gpu:
        w = what_if_on_gpu(cpu, machines.primary, before, values, a.procs, t, groups, run.run_id)
        return w, machines.primary, cpu_options(cpu, before)
    w = what_if_cpu(cpu, before, changed_cpu_setting(before, values, a.procs), t, groups, run.run_id)
    return w, cpu, cpu_options(cpu, before)


def cpu_interval(w: WhatIf) -> tuple[float, float] | None:
    """A CPU what-if's 90% interval (ms): its total scaled as the changed prediction's interval is."""
    iv = w.predicted_after.detail.get("interval_s")
    if not iv:
        return None
    return tuple(w.total_ms * x / w.predicted_after.total_s for x in iv)


def options_words(options, w: WhatIf) -> str:
    """The CPU's single changes, fastest per sample first (the first few)."""
    base = next((o for o in options if not o.change), None)
    if base is None:
        return ""
    lines = [f"on this CPU instead (model, per sample against the run as it is, {base.prediction.machine}):"]
    for o in [o for o in options if o.change][:6]:
        what = ", ".join(f"{k} {v}" for k, v in o.change.items())
        lines.append(f"  {what:<22}{o.prediction.total_s * 1e3:>9.3f} ms per batch of {o.batch}  "
                     f"{100 * (o.s_per_sample / base.s_per_sample - 1):+.0f}% per sample")
    return "\n".join(lines)


def main(argv=None) -> int:
    a = _parser().parse_args(argv)
    try:
        w, machine, options = _what_if(a)
        if isinstance(machine, CpuMachine):
            iv = cpu_interval(w)
            words = (f"90% interval: {iv[0]:.3f} to {iv[1]:.3f} ms (the CPU file's measured spread)" if iv
                     else "90% interval: unknown (the CPU file records no spread)")
            extra = {"interval_ms": iv, "interval_note": words}
        else:
            iv = what_if_interval(machine, w) if options is None else gpu_interval(machine, w)
            words, extra = interval_words(iv), interval_json(iv)
    except (PerfmlpError, TraceError, MachineError, WhatIfError, ValueError) as e:
        print(f"perfmlp.whatif: error: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps({**w.to_json(), **extra}, indent=1, default=str))
    else:
        print(format_table(w) + "\n" + words + ("\n\n" + options_words(options, w) if options else ""))
    return 0


def gpu_interval(machine, w: WhatIf) -> Interval | None:
    """The 90% interval of a NumPy run priced on a GPU, under the GPU file's measured spread."""
    a = w.after
    from .model.predict import predict_batch
    return interval(machine, lambda m: predict_batch(
        m, a.layer_sizes, a.batch, a.procs, a.precision, a.comm, a.batch_transfer, a.trace_level or None,
        exec_mode=a.exec_mode, overlap=a.overlap, bucket_bytes=a.bucket_bytes, gemm=a.gemm))


if __name__ == "__main__":
    sys.exit(main())
