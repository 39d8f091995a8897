"""The history of the model's blind tests, a CSV file given to the report as
`--blind-tests FILE` (never looked for, so a report says which it read): one
row per (sweep, configuration), its columns BlindTest's fields. A test's
error is predicted / measured - 1 (%, positive: the model too slow), within
noise where |error| <= spread / 2 (spread: max / min - 1 of its repeats).
Per machine kind: the figures of model_error.py over its tests, and the
WORST_PER_MACHINE configurations by |error|.
"""
from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass, fields
from pathlib import Path

from ..errors import PerfmlpError
from .model_error import ErrorStats, error_stats, resolution
from .. import names as N

INTS = ("batch_size", "procs", "repeats")
FLOATS = ("predicted_s", "measured_s", "measured_min_s", "measured_max_s", "spread")
WORST_PER_MACHINE = 3


@dataclass(frozen=True)
class BlindTest:
    """One configuration of one sweep: the blind prediction and the measurement."""
    machine: str
    commit: str
    date: str
    sweep: str
    run: str
    hidden_sizes: str
    batch_size: int
    procs: int
    batch_transfer: str
    comm: str
    exec: str
    parallel: str
    precision: str
    repeats: int
    predicted_s: float
    measured_s: float           # the median of the repeats
    measured_min_s: float
    measured_max_s: float
    spread: float               # max / min - 1

    @property
    def error_pct(self) -> float:
        return 100 * (self.predicted_s / self.measured_s - 1)

    @property
    def within_noise(self) -> bool:
        return abs(self.error_pct) <= 100 * self.spread / 2

    @property
    def label(self) -> str:
        """The configuration in the report's words."""
        return (f"H={self.hidden_sizes} B={self.batch_size} p={self.procs} {self.precision} "
                f"{self.batch_transfer}/{self.comm} {self.exec}" + ("" if self.parallel == N.DATA else
                                                                     f" {self.parallel}"))


COLUMNS = tuple(f.name for f in fields(BlindTest))   # the history's, in its order


def _test(path: Path, line: int, row: dict) -> BlindTest:
    values = {}
    for k in COLUMNS:
        v = (row.get(k) or "").strip()
        try:
            values[k] = int(v) if k in INTS else float(v) if k in FLOATS else v
        except ValueError:
            raise PerfmlpError(f"{path}:{line}: {k} {v!r} is not a number") from None
        if k in INTS + ("predicted_s", "measured_s") and values[k] <= 0:
            raise PerfmlpError(f"{path}:{line}: {k} {v!r} must be positive")
        if not v and k in ("machine", "sweep", "run"):
            raise PerfmlpError(f"{path}:{line}: no {k}")
    if not values["measured_min_s"] <= values["measured_s"] <= values["measured_max_s"]:
        raise PerfmlpError(f"{path}:{line}: measured_s {values['measured_s']:g} is not between measured_min_s and "
                           "measured_max_s")
    return BlindTest(**values)


@dataclass(frozen=True)
class History:
    path: str
    tests: tuple

    def __len__(self) -> int:
        return len(self.tests)


def read_blind_tests(path: str | Path) -> History:
    """The history's rows; PerfmlpError naming the file, line and column where it cannot be read."""
    path = Path(path)
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            missing = [k for k in COLUMNS if k not in (reader.fieldnames or [])]
            if missing:
                raise PerfmlpError(f"{path}: not a blind-test history (no column {missing[0]})")
            return History(str(path), tuple(_test(path, i, row) for i, row in enumerate(reader, 2)))
    except FileNotFoundError:
        raise PerfmlpError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise PerfmlpError(f"{path}: unreadable ({e.__class__.__name__})") from None


@dataclass(frozen=True)
class MachineHistory:
    """The blind tests on one machine kind ("all": every machine)."""
    machine: str
    configurations: int
    sweeps: int
    commits: tuple
    first_date: str
    last_date: str
    errors: ErrorStats
    median_spread_pct: float
    resolution: str


def _history(name: str, tests: list[BlindTest]) -> MachineHistory:
    spread = statistics.median(100 * t.spread for t in tests)
    errors = error_stats([t.error_pct for t in tests], sum(t.within_noise for t in tests))
    dates = sorted(t.date for t in tests)
    return MachineHistory(name, len(tests), len({t.sweep for t in tests}), tuple(sorted({t.commit for t in tests})),
                          dates[0], dates[-1], errors, spread, resolution(errors.median_abs_pct, spread))


def history_by_machine(tests: list[BlindTest]) -> list[MachineHistory]:
    """Per machine kind, by name, then every machine together (where more than one)."""
    machines = sorted({t.machine for t in tests})
    out = [_history(m, [t for t in tests if t.machine == m]) for m in machines]
    return out + [_history("all", tests)] if len(machines) > 1 else out


def worst_configurations(tests: list[BlindTest], per_machine: int = WORST_PER_MACHINE) -> list[BlindTest]:
    """The `per_machine` tests of each machine with the largest |error|, worst first."""
    return [t for m in sorted({t.machine for t in tests})
            for t in sorted((t for t in tests if t.machine == m), key=lambda t: -abs(t.error_pct))[:per_machine]]
