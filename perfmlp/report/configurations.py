"""Runs grouped into configurations, and the short labels tables name them by.

Runs that share every setting (SETTINGS) are repeats, merged: the
configuration's time per batch is the median of the repeats', and the
median repeat stands for it where one run's phases are needed; every repeat
is listed in configurations.csv. Settings that mean nothing on the NumPy
backend are None there, so no table shows a GPU's value for a CPU run.
"""
from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

from .analysis import Analysis, RunSummary
from .thresholds import REPEATS_AGREE
from .. import names as N

# The settings, in the order labels and tables name them; SHAPE names the problem, the rest how it ran.
SHAPE = ("hidden", "batch", "procs")
HOW = ("backend", "precision", "strategy", "transfer", "comm", "gemm", "exec", "overlap", "trace_level", "profiler")
SETTINGS = SHAPE + HOW
# Settings named in a label only where they differ from the set's usual value (the shape and the modes always).
QUIET_SETTINGS = ("backend", "precision", "strategy", "gemm", "overlap", "trace_level", "profiler")
FORMATS = {"hidden": "H{}", "batch": "B{}", "procs": "p{}", "trace_level": "trace {}"}   # a label's words
SHORT = {N.MPI_STAGED: "staged", "float32": "fp32", "float64": "fp64", "cupy": "GPU", "numpy": "NumPy"}
ORDER = {"transfer": (N.PAGEABLE, N.PREFETCH_PAGEABLE, N.PINNED, N.PREFETCH, N.RESIDENT),
         "comm": ("mpi", N.MPI_STAGED, "ps", N.NCCL, N.PS_NCCL), "exec": (N.EAGER, "graph"),
         "trace_level": (N.COUNTERS, "phases", "timeline", "kernels")}


def overlap_words(bucket_bytes: int) -> str:
    """An overlapped run's setting, as the tables name it."""
    return f"overlap {bucket_bytes >> 10} KiB"


def settings_of(r: RunSummary) -> dict:
    """A run's settings (SETTINGS), None where one means nothing for its backend."""
    gpu = r.gpu
    return {"hidden": r.hidden_label, "batch": r.batch, "procs": r.procs, "backend": r.backend,
            "precision": r.precision, "strategy": r.strategy, "transfer": r.transfer if gpu else None,
            "comm": r.comm, "gemm": r.gemm if gpu else None, "exec": r.exec if gpu else None,
            "overlap": (overlap_words(r.bucket_bytes) if r.overlap else "no overlap") if gpu else None,
            "trace_level": r.trace_level, "profiler": "nsys" if r.profiled else ("cProfile" if r.cprofile else None)}


def sort_key(settings: dict) -> tuple:
    def rank(k):
        v = settings[k]
        order = ORDER.get(k, ())
        return (order.index(v) if v in order else len(order), str(v) if v is not None else "")
    hidden = tuple(int(h) for h in str(settings["hidden"]).split("x"))
    return (hidden, settings["procs"], settings["batch"], *(rank(k) for k in HOW))


@dataclass(frozen=True)
class Configuration:
    settings: tuple          # (name, value) for each of SETTINGS
    runs: tuple              # RunSummary of each repeat, by run id
    label: str = ""          # short, unique in the set (labels())

    @property
    def s(self) -> dict:
        return dict(self.settings)

    @property
    def t_ms(self) -> float:
        """Time per batch: the median over the repeats."""
        return statistics.median(r.t_ms for r in self.runs)

    @property
    def representative(self) -> RunSummary:
        """The repeat whose time is the median (the faster middle one of an even count)."""
        ordered = sorted(self.runs, key=lambda r: (r.t_ms, r.run_id))
        return ordered[(len(ordered) - 1) // 2]

    @property
    def gpu(self) -> bool:
        return self.representative.gpu

    @property
    def disagree(self) -> str | None:
        """The repeats' range in words where it is wider than REPEATS_AGREE, else None."""
        lo, hi = min(r.t_ms for r in self.runs), max(r.t_ms for r in self.runs)
        if hi <= lo * (1 + REPEATS_AGREE.value):
            return None
        return f"{lo:.3f} to {hi:.3f} ms, the slowest {100 * (hi / lo - 1):+.0f}%"

    @property
    def blas_threads(self) -> str | None:
        """The BLAS threads each rank ran, per repeat where they differ ("2, 2"); None on a GPU or unknown."""
        if self.gpu:
            return None
        seen = dict.fromkeys(", ".join("?" if t is None else str(t) for t in r.blas_threads)
                             for r in self.runs if r.blas_threads)
        return "; ".join(seen) or None

    @property
    def util(self) -> float | None:
        """The job's FLOPs per second over p x the datasheet peak, at the median time."""
        r = self.representative
        return r.util_datasheet * r.t_ms / self.t_ms if r.util_datasheet is not None else None

    @property
    def predicted_ms(self) -> float | None:
        return self.representative.predicted_ms

    @property
    def judged(self) -> bool:
        """Complete, not under a profiler, its batch times the GPU's (not the host's enqueue)."""
        return all(r.complete and not r.profiled and not r.cprofile and not r.host_enqueue for r in self.runs)

    def which(self) -> str:
        """Which run stands for the configuration, and why, in words."""
        r = self.representative
        mode = f"{r.exec}, " if r.gpu else ""
        if len(self.runs) == 1:
            return f"{r.run_id} ({mode}trace level {r.trace_level}; the only run)"
        return (f"{r.run_id} ({mode}trace level {r.trace_level}; repeat {self.runs.index(r) + 1} of {len(self.runs)}, "
                f"the median of the repeats' times)")


def configurations(a: Analysis) -> list[Configuration]:
    """The runs as configurations (repeats merged), labelled, in the report's order."""
    by: dict[tuple, list] = {}
    for r in a.runs:
        by.setdefault(tuple(settings_of(r).items()), []).append(r)
    configs = [Configuration(k, tuple(sorted(v, key=lambda r: r.run_id))) for k, v in by.items()]
    configs.sort(key=lambda c: sort_key(c.s))
    names = labels([c.s for c in configs])
    return [Configuration(c.settings, c.runs, n) for c, n in zip(configs, names)]


def usual(settings: list[dict]) -> dict:
    """Each setting's most common value in the set (ties: the first in report order)."""
    return {k: Counter(s[k] for s in settings).most_common(1)[0][0] for k in SETTINGS} if settings else {}


def value_text(key: str, value) -> str:
    if value is None:
        return ""
    if key in FORMATS:
        return FORMATS[key].format(value)
    return "data parallel" if key == "strategy" and value == N.DATA else SHORT.get(value, str(value))


def label_of(s: dict, shown: list[str], usual_values: dict) -> str:
    parts = [value_text(k, s[k]) for k in shown
             if k not in QUIET_SETTINGS or s[k] != usual_values.get(k)]
    # each word once: a parameter server's strategy and its comm are both "ps"
    return " ".join(dict.fromkeys(w for p in parts for w in p.split()))


def shown_settings(settings: list[dict]) -> list[str]:
    """The settings a label names: those that vary in the set (the shape when nothing does)."""
    return [k for k in SETTINGS if len({s[k] for s in settings}) > 1] or list(SHAPE)


def labels(settings: list[dict]) -> list[str]:
    """A short label per configuration: the settings that vary, QUIET_SETTINGS only where not the usual."""
    shown, u = shown_settings(settings), usual(settings)
    return [label_of(s, shown, u) or "the one configuration" for s in settings]


def split_label(s: dict, shown: list[str], usual_values: dict) -> tuple[str, str]:
    """(shape part, how part) of a label: the verdict map's column and row."""
    shape = " ".join(value_text(k, s[k]) for k in SHAPE if k in shown) or "all"
    how = label_of(s, [k for k in shown if k in HOW], usual_values) or "as run"
    return shape, how


def legend(settings: list[dict]) -> str:
    """What the labels leave out: the usual value of each quiet setting, and the settings that never vary."""
    if not settings:
        return ""
    shown, u = shown_settings(settings), usual(settings)
    fixed = [value_text(k, u[k]) for k in SETTINGS if k not in shown and u[k] is not None]
    quiet = [value_text(k, u[k]) for k in QUIET_SETTINGS if k in shown and u[k] is not None]
    return "; ".join(words + ", ".join(values) for words, values in
                     (("every configuration: ", fixed), ("unless a label says otherwise: ", quiet)) if values)


def run_labels(configs: list[Configuration]) -> dict[str, str]:
    """run id -> a short label: its configuration's, with #k for the k-th of several repeats."""
    return {r.run_id: c.label + (f" #{i}" if len(c.runs) > 1 else "") for c in configs
            for i, r in enumerate(c.runs, 1)}
