"""A study: the reference question a report answers (sizes, the reference's
published times and utilisations, the process counts and hidden sizes to
tabulate), read from YAML: a shipped one (studies/) by name or `--study PATH`.
Every value is checked; a bad one is a one-line error naming file and key.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .. import checks
from ..errors import PerfmlpError
from .. import names as N

DEFAULT_STUDY = "cme213"


@dataclass(frozen=True)
class Targets:
    model_median_error_pct: float
    model_worst_error_pct: float
    weak_efficiency_pct: float
    strong_speedup: float


@dataclass(frozen=True)
class Network:
    """A network that may join a cluster's nodes: assumed typical figures."""
    name: str
    mpi_alpha_s: float
    mpi_bw_bytes_per_s: float


REFERENCE_SCHEME_CHOICES = {"gemm": (N.CUBLAS, N.NAIVE, N.TILED, N.REGBLOCK),
                            "batch_transfer": (N.PAGEABLE, N.PINNED, N.RESIDENT),
                            "comm": (N.MPI_STAGED, N.NCCL), "exec": (N.EAGER, "graph")}


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
    # optional: how the published times were made (the report's section on them, report/sections/published.py)
    reference_machine: str = ""                          # a machine file name or path
    reference_scheme: tuple[tuple[str, str], ...] = ()   # (key, value) of REFERENCE_SCHEME_CHOICES
    networks: tuple[Network, ...] = ()                   # assumed, for comparison with the implied network

    @property
    def scheme(self) -> dict[str, str]:
        return dict(self.reference_scheme)

    @property
    def layer_sizes(self) -> tuple[int, int, int]:
        return (self.input_size, self.hidden_size, self.num_classes)


def _per_procs(key: str, value, procs) -> dict[int, float]:
    if not isinstance(value, dict) or set(value) != set(procs):
        raise checks.CheckError(f"{key} must give a value for each of procs {list(procs)}")
    return {p: checks.positive(f"{key}[{p}]", checks.number(f"{key}[{p}]", value[p])) for p in procs}


def study_from_mapping(data, where: str) -> Study:
    """The study a YAML mapping describes; a bad value is a one-line PerfmlpError naming `where` and the key."""
    try:
        return Study(**_values(data), **_published(data), path=where)
    except checks.CheckError as e:
        raise PerfmlpError(f"{where}: {e}") from None


def _values(data) -> dict:
    if not isinstance(data, dict):
        raise checks.CheckError("expected a mapping of keys")
    ints = ("input_size", "hidden_size", "num_classes", "batch_size")
    strings = ("name", "title", "precision", "reference_gpu")
    lists = ("procs", "q2_2_hidden_sizes")
    known = {*ints, *strings, *lists, "reference_utilisation", "reference_ms_per_batch", "target_factor", "targets"}
    optional = {"reference_machine", "reference_scheme", "networks"}
    wrong = sorted((set(data) - optional) ^ known)
    if wrong:
        raise checks.CheckError(f"{'unknown' if wrong[0] in data else 'missing'} key {wrong[0]}")
    values = {k: checks.positive(k, checks.integer(k, data[k])) for k in ints}
    values.update({k: checks.string(k, data[k], non_empty=True) for k in strings})
    checks.choice("precision", data["precision"], ("float32", "float64"))
    for k in lists:
        items = data[k] if isinstance(data[k], list) and data[k] else [None]
        values[k] = tuple(checks.positive(k, checks.integer(k, v)) for v in items)
    values["target_factor"] = checks.positive("target_factor", checks.number("target_factor", data["target_factor"]))
    t = data["targets"] if isinstance(data["targets"], dict) else {}
    values["targets"] = Targets(**{f: checks.number(f"targets.{f}", t.get(f)) for f in Targets.__dataclass_fields__})
    for key in ("reference_utilisation", "reference_ms_per_batch"):
        values[key] = _per_procs(key, data[key], values["procs"])
    return values


def _published(data: dict) -> dict:
    """The optional keys that say how the published times were made."""
    if not {"reference_machine", "reference_scheme", "networks"} & set(data):
        return {}
    machine = checks.string("reference_machine", data.get("reference_machine"), non_empty=True)
    scheme = data.get("reference_scheme")
    if not isinstance(scheme, dict) or set(scheme) != set(REFERENCE_SCHEME_CHOICES):
        raise checks.CheckError(f"reference_scheme must give exactly {', '.join(REFERENCE_SCHEME_CHOICES)}")
    pairs = tuple((k, checks.choice(f"reference_scheme.{k}", scheme[k], opts))
                  for k, opts in REFERENCE_SCHEME_CHOICES.items())
    nets = data.get("networks") or []
    if not isinstance(nets, list):
        raise checks.CheckError("networks must be a list")
    networks = []
    for i, n in enumerate(nets):
        if not isinstance(n, dict) or set(n) != {"name", "mpi_alpha_s", "mpi_bw_bytes_per_s"}:
            raise checks.CheckError(f"networks[{i}] needs exactly name, mpi_alpha_s, mpi_bw_bytes_per_s")
        k = f"networks[{i}]"
        networks.append(Network(
            checks.string(f"{k}.name", n["name"], non_empty=True),
            checks.non_negative(f"{k}.mpi_alpha_s", checks.number(f"{k}.mpi_alpha_s", n["mpi_alpha_s"])),
            checks.positive(f"{k}.mpi_bw_bytes_per_s",
                            checks.number(f"{k}.mpi_bw_bytes_per_s", n["mpi_bw_bytes_per_s"]))))
    return {"reference_machine": machine, "reference_scheme": pairs, "networks": tuple(networks)}


def load_study(name_or_path: str | Path | None = None) -> Study:
    """A study file by path, or a shipped one (studies/<name>.yaml) by name."""
    name_or_path = name_or_path or DEFAULT_STUDY
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        source = p
    else:
        folder = resources.files(__package__) / "studies"   # the studies shipped with the package, by name
        shipped = {f.name[:-len(".yaml")]: f for f in sorted(folder.iterdir(), key=lambda f: f.name)
                   if f.name.endswith(".yaml")}
        if str(name_or_path) not in shipped:
            raise PerfmlpError(f"no study named {str(name_or_path)!r} (shipped: {', '.join(shipped)}; "
                               "or give a .yaml file)")
        source = shipped[str(name_or_path)]
    try:
        data = checks.read_yaml(source, "study file")
    except checks.CheckError as e:
        raise PerfmlpError(str(e)) from None
    return study_from_mapping(data, str(source))
