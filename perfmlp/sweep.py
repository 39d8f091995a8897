"""`python -m perfmlp.sweep FILE.yaml`: run a set of configurations (each
with its own process count, through mpirun), then the report.

The file:

    name: q2_2                      # prefix of every run id
    base: {data: synthetic, epochs: 2}       # configuration keys for every run
    matrix:                          # the cartesian product of these lists
      hidden_sizes: [[512], [1024], [2048]]
      procs: [1, 2, 4]
    batch_per_proc: 3200             # optional: batch_size = batch_per_proc * procs
    runs: [{procs: 1, batch_transfer: pinned}]   # optional: more runs, each over base

The launcher is `mpiexec -n P` unless PERFMLP_MPIRUN names another
(e.g. "mpirun --allow-run-as-root --noprefix"). A run that fails is reported
in one line and the sweep goes on.
"""
from __future__ import annotations

import argparse
import itertools
import os
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from .config import from_mapping, load_yaml
from .errors import PerfmlpError

SWEEP_KEYS = {"name", "base", "matrix", "runs", "batch_per_proc"}


def expand(spec: dict, where: str) -> list[tuple[str, int, dict]]:
    """(run id, procs, configuration mapping) for every run of a sweep file."""
    unknown = sorted(set(spec) - SWEEP_KEYS)
    if unknown:
        raise PerfmlpError(f"{where}: unknown sweep key {unknown[0]} (known: {', '.join(sorted(SWEEP_KEYS))})")
    name = str(spec.get("name") or Path(where).stem)
    base = spec.get("base") or {}
    matrix = spec.get("matrix") or {}
    if not isinstance(base, dict) or not isinstance(matrix, dict):
        raise PerfmlpError(f"{where}: base and matrix must be mappings")
    for k, v in matrix.items():
        if not isinstance(v, list) or not v:
            raise PerfmlpError(f"{where}: matrix.{k} must be a non-empty list")
    combos = [dict(zip(matrix, vals)) for vals in itertools.product(*matrix.values())] if matrix else []
    extra = spec.get("runs") or []
    if not isinstance(extra, list) or not all(isinstance(r, dict) for r in extra):
        raise PerfmlpError(f"{where}: runs must be a list of mappings")
    runs = []
    for combo in combos + extra:
        values = {**base, **combo}
        procs = values.pop("procs", 1)
        if not isinstance(procs, int) or procs <= 0:
            raise PerfmlpError(f"{where}: procs must be a positive integer, got {procs!r}")
        if spec.get("batch_per_proc") and "batch_size" not in combo:
            values["batch_size"] = int(spec["batch_per_proc"]) * procs
        cfg = from_mapping(values, where=f"{where}: ")  # checked before anything runs
        hs = "x".join(str(h) for h in cfg.hidden_sizes)
        comm = cfg.comm if cfg.comm != "auto" else "staged"
        rid = f"{name}-h{hs}-b{cfg.batch_size}-p{procs}-{cfg.precision}-{cfg.batch_transfer}-{comm}-{cfg.gemm}"
        runs.append((rid, procs, values))
    ids = [r[0] for r in runs]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise PerfmlpError(f"{where}: two runs would share the id {dup[0]}")
    return runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfmlp.sweep", description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--trace-dir", default="traces")
    ap.add_argument("--no-report", action="store_true")
    ap.add_argument("--report-out", default=None)
    ap.add_argument("--machine", default=None, help="machine file for the report")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run")
    ap.add_argument("--max-procs", type=int, default=None, help="skip runs that need more processes")
    a = ap.parse_args(argv)
    try:
        runs = expand(load_yaml(a.file), a.file)
    except PerfmlpError as e:
        print(f"perfmlp.sweep: error: {e}", file=sys.stderr)
        return 2
    launcher = shlex.split(os.environ.get("PERFMLP_MPIRUN", "mpiexec"))
    cfg_dir = Path(a.trace_dir) / ".sweep-configs"
    cfg_dir.mkdir(parents=True, exist_ok=True)
    failed = 0
    for i, (rid, procs, values) in enumerate(runs, 1):
        if a.max_procs and procs > a.max_procs:
            print(f"[{i}/{len(runs)}] {rid}: needs {procs} processes (--max-procs {a.max_procs}), skipped", flush=True)
            continue
        if (Path(a.trace_dir) / rid / "manifest.json").exists():
            print(f"[{i}/{len(runs)}] {rid}: already traced, skipped", flush=True)
            continue
        cfile = cfg_dir / f"{rid}.yaml"
        cfile.write_text(yaml.safe_dump({**values, "trace_dir": a.trace_dir, "run_id": rid, "quiet": True}))
        cmd = [*launcher, "-n", str(procs), sys.executable, "-m", "perfmlp.run", "--config", str(cfile)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
            ok, why = r.returncode == 0, (r.stderr.strip().splitlines() or ["?"])[-1]
        except subprocess.TimeoutExpired:
            ok, why = False, f"timed out after {a.timeout:.0f} s"
        except OSError as e:
            ok, why = False, f"cannot start {launcher[0]}: {e.strerror}"
        print(f"[{i}/{len(runs)}] {rid}: {'ok' if ok else 'FAILED: ' + why}", flush=True)
        failed += not ok
    if not a.no_report:
        from .report.__main__ import main as report_main
        rargs = [a.trace_dir] + (["--out", a.report_out] if a.report_out else []) + \
                (["--machine", a.machine] if a.machine else [])
        report_main(rargs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
