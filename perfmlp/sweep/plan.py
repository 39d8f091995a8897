"""A sweep file read and expanded into its runs, each configuration checked
before anything runs (the file's format: perfmlp/sweep/__init__.py)."""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

from .. import checks
from .. import names as N
from ..config import NOT_COMPUTED, Config, from_mapping, load_yaml
from ..errors import PerfmlpError
from ..safeio import key, prefix
from ..trace.format import WARMUP_BATCHES

SWEEP_KEYS = {"name", "config", "base", "matrix", "runs", "batch_per_proc", "repeats", "min_steady_batches",
              "min_steady_seconds", "predict"}
MAX_RUNS = 10_000   # more is a typo (`repeats: 1000000000`), not a sweep


@dataclass(frozen=True)
class SweepRun:
    run_id: str
    procs: int
    values: dict      # the configuration keys handed to perfmlp.run
    config: Config    # what they resolve to
    repeat: int = 0   # 1, 2, ... with `repeats`; 0 without


def run_identity(cfg: Config, procs: int) -> dict:
    """What a run computes and measures: its configuration less NOT_COMPUTED's keys, and its process count."""
    return {k: v for k, v in cfg.to_dict().items() if k not in NOT_COMPUTED} | {"procs": procs}


def sweep_run_id(name: str, cfg: Config, procs: int, repeat: int = 0) -> str:
    """The id of a sweep's run: readable fields, then a stable hash of the whole identity (so epochs, n_train, learning
    rate, data, seed... count) and of the repeat."""
    ident = run_identity(cfg, procs)
    if repeat:
        ident["repeat"] = repeat
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:8]
    hs = "x".join(str(h) for h in cfg.hidden_sizes)
    par = "" if cfg.parallel == N.DATA else f"-{cfg.parallel}{cfg.model_procs or ''}"
    extra = (f"-{cfg.exec}" if cfg.exec != N.AUTO else "") + ("-overlap" if cfg.overlap else "") + \
        (f"-r{repeat}" if repeat else "")
    return (f"{name}-h{hs}-b{cfg.batch_size}-p{procs}{par}-{cfg.precision}-{cfg.batch_transfer}-{cfg.comm}-"
            f"{cfg.gemm}{extra}-{digest}")


def _count(spec: dict, key: str, where: str) -> int:
    """A positive whole number (0 where the key is absent)."""
    v = spec.get(key)
    if v is None:
        return 0
    try:
        n = checks.integer(key, v)
    except checks.CheckError:
        n = 0
    if n <= 0:
        raise PerfmlpError(f"{where}: {key} must be a positive integer, got {prefix(v)}")
    return n


def sweep_name(spec: dict, where: str) -> str:
    name = str(spec.get("name") or Path(where).stem)
    if not all(c.isalnum() or c in "-_." for c in name):
        raise PerfmlpError(f"{where}: name may hold only letters, digits, '-', '_' and '.', got {name!r}")
    return name


def _entries(spec: dict, where: str) -> tuple[dict, list[dict]]:
    """(the configuration every run starts from, each run's own keys)."""
    start = {}
    if spec.get("config") is not None:
        if not isinstance(spec["config"], str):
            raise PerfmlpError(f"{where}: config must be the path of a configuration file")
        cfile = Path(where).parent / spec["config"]
        start = load_yaml(cfile)
        from_mapping(start, where=f"{cfile}: ", check=False)  # its own errors name it
    base = spec.get("base") or {}
    matrix = spec.get("matrix") or {}
    if not isinstance(base, dict) or not isinstance(matrix, dict):
        raise PerfmlpError(f"{where}: base and matrix must be mappings")
    for k, v in matrix.items():
        if not isinstance(v, list) or not v:
            raise PerfmlpError(f"{where}: matrix.{key(k)} must be a non-empty list")
    extra = spec.get("runs") or []
    if not isinstance(extra, list) or not all(isinstance(r, dict) for r in extra):
        raise PerfmlpError(f"{where}: runs must be a list of mappings")
    if not matrix and not extra:
        raise PerfmlpError(f"{where}: no runs (give a matrix or runs; base is what every run starts from)")
    configurations = (math.prod(len(v) for v in matrix.values()) if matrix else 0) + len(extra)
    repeats = max(_count(spec, "repeats", where), 1)
    if configurations * repeats > MAX_RUNS:   # counted before anything is expanded
        raise PerfmlpError(f"{where}: {configurations} configurations x {repeats} repeats would be "
                           f"{configurations * repeats:,} runs (at most {MAX_RUNS:,})")
    from_mapping({k: v for k, v in {**start, **base}.items() if k != "procs"}, where=f"{where}: base: ",
                 check=False)   # the base's own errors name it
    combos = [dict(zip(matrix, vals)) for vals in itertools.product(*matrix.values())] if matrix else []
    return {**start, **base}, combos + extra


def expand(spec: dict, where: str) -> list[SweepRun]:
    """Every run of a sweep file, each configuration checked."""
    unknown = sorted(key(k) for k in spec if k not in SWEEP_KEYS)
    if unknown:
        raise PerfmlpError(f"{where}: unknown sweep key {unknown[0]} (known: {', '.join(sorted(SWEEP_KEYS))})")
    name = sweep_name(spec, where)
    start, entries = _entries(spec, where)
    repeats, min_steady = _count(spec, "repeats", where), _count(spec, "min_steady_batches", where)
    per_proc = _count(spec, "batch_per_proc", where)
    runs = []
    for entry in entries:
        values = {**start, **entry}
        procs = values.pop("procs", 1)
        if isinstance(procs, bool) or not isinstance(procs, int) or procs <= 0:
            raise PerfmlpError(f"{where}: procs must be a positive integer, got {prefix(procs)}")
        if per_proc and "batch_size" not in entry:
            values["batch_size"] = per_proc * procs
        if min_steady and "n_train" not in entry:
            values["n_train"] = steady_n_train(from_mapping(values, where=f"{where}: ", check=False), min_steady)
        cfg = from_mapping(values, where=f"{where}: ")  # checked before anything runs
        for r in (range(1, repeats + 1) if repeats else (0,)):
            runs.append(SweepRun(sweep_run_id(name, cfg, procs, r), procs, values, cfg, r))
    runs.sort(key=lambda r: r.repeat)  # every configuration once, then again: drift spreads over all, and a
    seen = set()                       # sweep cut short still covers every configuration
    for r in runs:
        if r.run_id in seen:
            raise PerfmlpError(f"{where}: two runs would share the id {r.run_id}")
        seen.add(r.run_id)
    return runs


def steady_n_train(cfg: Config, min_steady: int) -> int:
    """Samples for at least `min_steady` steady batches over cfg.epochs epochs (each epoch's WARMUP_BATCHES not)."""
    return cfg.batch_size * (WARMUP_BATCHES + -(-min_steady // cfg.epochs))


def min_steady_seconds(spec: dict, where: str, machine_arg: str | None) -> float | None:
    """The sweep's `min_steady_seconds`, checked (it needs a machine file)."""
    seconds = spec.get("min_steady_seconds")
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0 \
            or not math.isfinite(seconds):
        raise PerfmlpError(f"{where}: min_steady_seconds must be a positive number of seconds, got {seconds!r}")
    if not machine_arg:
        raise PerfmlpError(f"{where}: min_steady_seconds needs a machine file to predict with "
                           "(--predict or the sweep's predict)")
    return float(seconds)


def calibration_sizes(runs: list[SweepRun]) -> tuple[list[int], list[int]]:
    """The hidden sizes and the per-rank batches (a data group's piece) the runs use: what `python -m perfmlp.calibrate
    --hidden --local-batch` should time for its GEMM rates and own kernels to cover them."""
    from ..model.costs import pieces
    hidden, local = set(), set()
    for r in runs:
        c = r.config
        hidden.update(c.hidden_sizes)
        groups = {N.DATA: r.procs, N.MODEL: 1}.get(c.parallel, max(r.procs // max(c.model_procs, 1), 1))
        local.add(max(pieces(c.batch_size, groups)))
    return sorted(hidden), sorted(local)


def gpu_need(cfg: Config) -> str | None:
    """Why a configuration cannot run on the NumPy backend (None if it can): the trainer's refusal, word for word."""
    if cfg.backend == N.CUPY:
        return "backend cupy"
    from ..backend import check_options
    try:
        check_options(dataclasses.replace(cfg, backend=N.NUMPY))
    except PerfmlpError as e:
        return str(e).replace(" (this run is on numpy)", "")
    return None


def check_runnable_here(runs: list[SweepRun], where: str) -> None:
    """Refuse, at once, a sweep with runs that need a GPU where CuPy sees none."""
    needs = [(r, why) for r in runs if (why := gpu_need(r.config))]
    if not needs:
        return
    from .. import gpu
    if gpu.available():
        return
    first, why = needs[0]
    raise PerfmlpError(f"{where}: {len(needs)} of {len(runs)} runs need a GPU (the first: {why}) and CuPy sees "
                       "none here; run it on a GPU machine (pip install 'perfmlp[gpu]')")
