"""`python -m perfmlp.whatif traces/<run> --set comm=nccl --set exec=graph --procs 4`:
the time per batch a measured run would take with some of its configuration
changed.

It starts from what the run measured: the slowest rank's median time of
each phase group (copies of the batch, compute, gradient copies, allreduce;
perfmlp/trace/format.py PHASE_TERMS) and the rest of its measured time per
batch (the median batch is not the sum of the phases' medians). The model
predicts every term twice, for the configuration that ran and for the
changed one; a term whose prediction changes is affected by the change. In
each group:
- no term affected: the measured time is kept;
- every term of the group affected (or the group gone, as the batch copy
  with resident data): the model's new value replaces the measurement;
- some affected: the measurement with those terms replaced, measured -
  model's old value + model's new value of each affected term (the group's
  other terms, and what the model does not explain of it, stay measured).
The rest of the measured time per batch ("other": in an eager run, the
host's time between phases) is kept, except when the change makes an eager
run a replayed graph, which has no time between phases: then it is 0.
So what the change does not touch is measured and what it touches is
predicted, with the changed terms listed. Both configurations are predicted
at the trace level the run ran at (its manifest's; the tracer's cost per
level: perfmlp/model/predict.py TRACE_COSTS).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from .config import Config, from_mapping
from .errors import PerfmlpError
from .model.costs import DEFAULT_BUCKET_BYTES
from .model.machine import MachineError, load_machine
from .model.predict import GROUPS, TERM_GROUP, Prediction, predict_batch, resolve_exec
from .trace.format import PHASE_TERMS, resolve_trace_level
from .trace.reader import Run, TraceError, read_run

# The configuration keys a what-if may change (the model predicts each).
KEYS = ("comm", "batch_transfer", "exec", "overlap", "bucket_bytes", "gemm", "batch_size", "precision",
        "hidden_sizes")
CHANGED_REL = 1e-6  # a group whose prediction moves by more than this (relative) is affected
PRESENT_S = 1e-12   # a term below this in both predictions is absent (the timeline's float residue)


@dataclass(frozen=True)
class Setting:
    """What the model needs of a configuration."""
    layer_sizes: tuple
    batch: int
    procs: int
    precision: str
    comm: str
    batch_transfer: str
    exec_mode: str
    overlap: bool
    bucket_bytes: int
    gemm: str
    trace_level: str              # the level the run's tracer ran at, kept by every change

    def predict(self, machine) -> Prediction:
        return predict_batch(machine, self.layer_sizes, self.batch, self.procs, self.precision, self.comm,
                             self.batch_transfer, self.trace_level, exec_mode=self.exec_mode, overlap=self.overlap,
                             bucket_bytes=self.bucket_bytes, gemm=self.gemm)


@dataclass(frozen=True)
class WhatIf:
    run_id: str
    machine: str
    before: Setting
    after: Setting
    measured_ms: float                 # the run's time per batch
    measured_groups_ms: dict           # group -> ms (slowest rank's medians), plus "other"
    predicted_before: Prediction
    predicted_after: Prediction
    changed: tuple                     # the groups the change affects
    changed_terms: tuple               # the model's terms it affects
    groups_ms: dict                    # group -> ms used for the new configuration

    @property
    def total_ms(self) -> float:
        return sum(self.groups_ms.values())

    def to_json(self) -> dict:
        return {"run": self.run_id, "machine": self.machine, "before": dataclasses.asdict(self.before),
                "after": dataclasses.asdict(self.after), "measured_ms": self.measured_ms,
                "measured_groups_ms": self.measured_groups_ms,
                "model_before_ms": {g: v * 1e3 for g, v in self.predicted_before.groups().items()},
                "model_after_ms": {g: v * 1e3 for g, v in self.predicted_after.groups().items()},
                "model_after_terms_ms": {t: v * 1e3 for t, v in self.predicted_after.terms.items()},
                "changed": list(self.changed), "changed_terms": list(self.changed_terms), "groups_ms": self.groups_ms, "predicted_ms": self.total_ms}


def setting_of(run: Run) -> Setting:
    """The configuration a run ran with (the manifest's record of what ran
    first, then its configuration)."""
    c, m = run.config, run.manifest  # a trace made before --exec existed (no exec anywhere) ran eagerly
    mode = resolve_exec(m.get("exec") or c.get("exec", "eager"), comm=run.comm)
    return Setting(tuple(run.layer_sizes), int(c["batch_size"]), run.procs, c["precision"], run.comm,
                   c["batch_transfer"], mode,
                   bool(m.get("overlap", c.get("overlap", False))), int(c.get("bucket_bytes", DEFAULT_BUCKET_BYTES)),
                   c.get("gemm", "cublas"), resolve_trace_level(m.get("trace_level"), mode))


def changed_setting(before: Setting, sets: dict, procs: int | None) -> Setting:
    """`before` with the --set values (checked as configuration values) and the process count applied."""
    unknown = sorted(set(sets) - set(KEYS))
    if unknown:
        raise PerfmlpError(f"--set {unknown[0]}: not a key a what-if can change (one of {', '.join(KEYS)})")
    cfg = from_mapping(sets, where="--set: ", base=Config(), check=False)
    v = {k: getattr(cfg, k) for k in sets}
    new = dataclasses.replace(
        before,
        layer_sizes=(before.layer_sizes[0], *v["hidden_sizes"], before.layer_sizes[-1]) if "hidden_sizes" in v
        else before.layer_sizes,
        batch=v.get("batch_size", before.batch), procs=procs or before.procs,
        precision=v.get("precision", before.precision),
        comm=before.comm if v.get("comm", "auto") == "auto" else v["comm"],
        batch_transfer=v.get("batch_transfer", before.batch_transfer),
        exec_mode=resolve_exec(v.get("exec", before.exec_mode), comm=before.comm if v.get("comm", "auto") == "auto"
                               else v["comm"]), overlap=v.get("overlap", before.overlap),
        bucket_bytes=v.get("bucket_bytes", before.bucket_bytes), gemm=v.get("gemm", before.gemm))
    if new.procs > new.batch:
        raise PerfmlpError(f"--procs {new.procs}: more processes than the {new.batch} samples of a batch")
    return new


def measured_groups_ms(run: Run) -> tuple[float, dict]:
    """(time per batch, group -> ms) of the slowest rank; "other" holds the
    time per batch the phases' medians do not add up to."""
    steady = run.steady_batches().values()
    per_rank = {r: sorted(run.batch_time_ms(recs[r]) for recs in steady) for r in run.ranks}
    slowest = max(per_rank, key=lambda r: per_rank[r][len(per_rank[r]) // 2])
    groups = dict.fromkeys(GROUPS, 0.0)
    for phase, ms in run.phase_ms(slowest).items():
        groups[PHASE_TERMS[phase]] += ms
    t = run.median_batch_ms()
    groups["other"] = t - sum(groups.values())
    return t, groups


def what_if(run: Run, machine, sets: dict, procs: int | None = None) -> WhatIf:
    before = setting_of(run)
    after = changed_setting(before, sets, procs)
    t, meas = measured_groups_ms(run)
    p0, p1 = before.predict(machine), after.predict(machine)
    t0, t1 = p0.terms, p1.terms
    terms = tuple(k for k in t0 if abs(t1[k] - t0[k]) > CHANGED_REL * max(t0[k], t1[k], PRESENT_S))
    g1 = p1.groups()
    used = {}
    for g in GROUPS:
        mine = [k for k in t0 if TERM_GROUP[k] == g and max(t0[k], t1[k]) > PRESENT_S]
        hit = [k for k in mine if k in terms]
        if not hit:
            used[g] = meas[g]
        elif g1[g] == 0 or len(hit) == len(mine):
            used[g] = g1[g] * 1e3
        else:
            used[g] = max(0.0, meas[g] + sum(t1[k] - t0[k] for k in hit) * 1e3)
    # "other" is the batch time outside the phases: in an eager run, the host's time between them
    # (launches, synchronisations). A replayed graph has none: the step is one launch, which the
    # model's graph_launch term holds
    to_graph = after.exec_mode == "graph" and before.exec_mode != "graph"
    used["other"] = 0.0 if to_graph else meas["other"]
    changed = tuple(g for g in GROUPS if any(TERM_GROUP[k] == g for k in terms)) + (("other",) if to_graph else ())
    return WhatIf(run.run_id, machine.name, before, after, t, meas, p0, p1, changed, terms, used)


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
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    k, v = text.split("=", 1)
    k = k.strip().replace("-", "_")
    return k, (v.split(",") if k == "hidden_sizes" else v)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"perfmlp.whatif: error: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv=None) -> int:
    ap = _Parser(prog="python -m perfmlp.whatif", description=__doc__,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", metavar="traces/RUN", help="a run's trace folder (manifest.json and rank-<r>.jsonl)")
    ap.add_argument("--set", dest="sets", action="append", type=_parse_set, default=[], metavar="KEY=VALUE",
                    help=f"a configuration change, repeatable; KEY one of {', '.join(KEYS)} (default: none)")
    ap.add_argument("--procs", type=int, default=None, metavar="P",
                    help="processes, one GPU each; the batch stays the same unless batch_size is set "
                         "(default: the run's)")
    ap.add_argument("--machine", default=None, metavar="NAME|FILE.yaml",
                    help="machine file (default: the calibrated file for the run's GPU, else its datasheet)")
    ap.add_argument("--json", action="store_true", help="print JSON (default: a table)")
    a = ap.parse_args(argv)
    try:
        if a.procs is not None and a.procs <= 0:
            raise PerfmlpError(f"--procs must be a positive integer, got {a.procs}")
        run = read_run(a.run)
        if not run.steady_batches():
            raise PerfmlpError(f"{a.run}: no finished batch past the warm-up")
        if run.manifest.get("backend") != "cupy":
            raise PerfmlpError(f"{a.run}: ran on the {run.manifest.get('backend', '?')} backend; the model "
                               "describes a GPU")
        if a.machine:
            machine = load_machine(a.machine)
        else:
            from .report.analysis import pick_machines
            machine = pick_machines([run], None).primary
        w = what_if(run, machine, dict(a.sets), a.procs)
    except (PerfmlpError, TraceError, MachineError) as e:
        print(f"perfmlp.whatif: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(w.to_json(), indent=1) if a.json else format_table(w))
    return 0


if __name__ == "__main__":
    sys.exit(main())
