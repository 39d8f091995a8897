"""A study: the reference question a report answers, read from YAML.

`studies/cme213.yaml` (shipped with the package) holds the course's sizes,
the reference solution's published utilisations and times, which process
counts to tabulate and Question 2.2's hidden sizes; `--study PATH` gives the
report another. Every value is checked; a bad one is a one-line error
naming the file and key.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .. import checks
from ..errors import PerfmlpError

DEFAULT_STUDY = "cme213"


@dataclass(frozen=True)
class Targets:
    model_median_error_pct: float
    model_worst_error_pct: float
    weak_efficiency_pct: float
    strong_speedup: float


@dataclass(frozen=True)
class Study:
    name: str
    title: str
    input_size: int
    hidden_size: int
    num_classes: int
    batch_size: int
    precision: str
    procs: tuple[int, ...]
    reference_gpu: str
    reference_utilisation: dict[int, float]     # p -> fraction of p x fp32 peak
    reference_ms_per_batch: dict[int, float]    # p -> ms
    target_factor: float
    q2_2_hidden_sizes: tuple[int, ...]
    targets: Targets
    path: str = ""

    @property
    def layer_sizes(self) -> tuple[int, int, int]:
        return (self.input_size, self.hidden_size, self.num_classes)


def _per_procs(where: str, key: str, value, procs) -> dict[int, float]:
    if not isinstance(value, dict) or set(value) != set(procs):
        raise PerfmlpError(f"{where}: {key} must give a value for each of procs {list(procs)}")
    try:
        return {p: checks.positive(f"{key}[{p}]", checks.number(f"{key}[{p}]", value[p])) for p in procs}
    except checks.CheckError as e:
        raise PerfmlpError(f"{where}: {e}") from None


def study_from_mapping(data, where: str) -> Study:
    if not isinstance(data, dict):
        raise PerfmlpError(f"{where}: expected a mapping of keys")
    ints = ("input_size", "hidden_size", "num_classes", "batch_size")
    strings = ("name", "title", "precision", "reference_gpu")
    lists = ("procs", "q2_2_hidden_sizes")
    known = {*ints, *strings, *lists, "reference_utilisation", "reference_ms_per_batch", "target_factor", "targets"}
    wrong = sorted(set(data) ^ known)
    if wrong:
        raise PerfmlpError(f"{where}: {'unknown' if wrong[0] in data else 'missing'} key {wrong[0]}")
    try:
        values = {k: checks.positive(k, checks.integer(k, data[k])) for k in ints}
        values.update({k: checks.string(k, data[k], non_empty=True) for k in strings})
        checks.choice("precision", data["precision"], ("float32", "float64"))
        for k in lists:
            items = data[k] if isinstance(data[k], list) and data[k] else [None]
            values[k] = tuple(checks.positive(k, checks.integer(k, v)) for v in items)
        values["target_factor"] = checks.positive("target_factor", checks.number("target_factor", data["target_factor"]))
        t = data["targets"] if isinstance(data["targets"], dict) else {}
        values["targets"] = Targets(**{f: checks.number(f"targets.{f}", t.get(f))
                                       for f in Targets.__dataclass_fields__})
    except checks.CheckError as e:
        raise PerfmlpError(f"{where}: {e}") from None
    for key in ("reference_utilisation", "reference_ms_per_batch"):
        values[key] = _per_procs(where, key, data[key], values["procs"])
    return Study(**values, path=where)


def study_files() -> list:
    """The studies shipped with the package (studies/*.yaml), by name."""
    folder = resources.files(__package__) / "studies"
    return sorted((f for f in folder.iterdir() if f.name.endswith(".yaml")), key=lambda f: f.name)


def load_study(name_or_path: str | Path | None = None) -> Study:
    """A study file by path, or a shipped one (studies/<name>.yaml) by name."""
    name_or_path = name_or_path or DEFAULT_STUDY
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        source = p
    else:
        shipped = {f.name[:-len(".yaml")]: f for f in study_files()}
        if str(name_or_path) not in shipped:
            raise PerfmlpError(f"no study named {str(name_or_path)!r} (shipped: {', '.join(shipped)}; "
                               "or give a .yaml file)")
        source = shipped[str(name_or_path)]
    try:
        data = checks.read_yaml(source, "study file")
    except checks.CheckError as e:
        raise PerfmlpError(str(e)) from None
    return study_from_mapping(data, str(source))
