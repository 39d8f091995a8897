"""The one configuration object: defaults, then a YAML file, then flags.

Every value is type- and range-checked; unknown keys are rejected by name.
The resolved configuration is written into every trace manifest.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from .errors import PerfmlpError

CHOICES = {
    "precision": ("float32", "float64"),
    "backend": ("auto", "numpy", "cupy"),
    "comm": ("auto", "mpi-staged", "nccl"),
    "batch_transfer": ("pageable", "pinned", "resident"),
    "gemm": ("cublas", "naive", "tiled", "regblock"),
    "data": ("auto", "mnist", "synthetic"),
}


@dataclass(frozen=True)
class Config:
    """Hyperparameters (reference defaults) and run options."""

    input_size: int = 784            # D
    hidden_sizes: tuple[int, ...] = (512,)  # H (one entry per hidden layer)
    num_classes: int = 10            # C
    reg: float = 1e-4                # lambda
    learning_rate: float = 1e-4
    n_train: int = 38400             # N
    epochs: int = 1
    batch_size: int = 3200           # B
    precision: str = "float32"
    seed: int = 0
    shuffle: bool = False
    data: str = "auto"
    data_dir: str = "data/mnist"
    n_heldout: int = 2000
    backend: str = "auto"
    comm: str = "auto"
    batch_transfer: str = "pageable"
    gemm: str = "cublas"
    trace: bool = True
    trace_dir: str = "traces"
    run_id: str = ""
    save_params: str = ""
    resume: str = ""
    cprofile: bool = False
    quiet: bool = False

    @property
    def layer_sizes(self) -> tuple[int, ...]:
        return (self.input_size, *self.hidden_sizes, self.num_classes)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["hidden_sizes"] = list(self.hidden_sizes)
        return d


_FIELDS = {f.name: f for f in fields(Config)}
_POSITIVE = {"input_size", "num_classes", "n_train", "epochs", "batch_size"}
_NON_NEGATIVE = {"reg", "seed", "n_heldout"}


def _check_value(name: str, value: Any, where: str) -> Any:
    """Return `value` converted to the field's type, or raise a one-line error."""
    default = _FIELDS[name].default
    if default is dataclasses.MISSING:
        default = _FIELDS[name].default_factory()  # pragma: no cover
    if name == "hidden_sizes":
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, (list, tuple)) or not value or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise PerfmlpError(f"{where}hidden_sizes must be a non-empty list of integers, got {value!r}")
        if any(v <= 0 for v in value):
            raise PerfmlpError(f"{where}hidden_sizes must all be positive, got {list(value)}")
        return tuple(value)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise PerfmlpError(f"{where}{name} must be true or false, got {value!r}")
    elif isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise PerfmlpError(f"{where}{name} must be an integer, got {value!r}")
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PerfmlpError(f"{where}{name} must be a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise PerfmlpError(f"{where}{name} must be finite, got {value!r}")
    elif isinstance(default, str):
        if not isinstance(value, str):
            raise PerfmlpError(f"{where}{name} must be a string, got {value!r}")
        if name in CHOICES and value not in CHOICES[name]:
            raise PerfmlpError(f"{where}{name} must be one of {', '.join(CHOICES[name])}, got {value!r}")
    if name in _POSITIVE and value <= 0:
        raise PerfmlpError(f"{where}{name} must be positive, got {value!r}")
    if name in _NON_NEGATIVE and value < 0:
        raise PerfmlpError(f"{where}{name} must not be negative, got {value!r}")
    if name == "learning_rate" and value <= 0:
        raise PerfmlpError(f"{where}learning_rate must be positive, got {value!r}")
    if name == "run_id" and value and not all(c.isalnum() or c in "-_." for c in value):
        raise PerfmlpError(f"{where}run_id may hold only letters, digits, '-', '_' and '.', got {value!r}")
    return value


def from_mapping(values: dict[str, Any], where: str = "", base: Config | None = None,
                 check: bool = True) -> Config:
    """A Config from `base` (default: the defaults) with `values` applied, all checked."""
    unknown = sorted(set(values) - set(_FIELDS))
    if unknown:
        raise PerfmlpError(f"{where}unknown configuration key{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}")
    checked = {k: _check_value(k, v, where) for k, v in values.items()}
    cfg = dataclasses.replace(base or Config(), **checked)
    if check:
        check_consistent(cfg)
    return cfg


def load_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML configuration file (safe loading only)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise PerfmlpError(f"cannot read configuration file {p}: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise PerfmlpError(f"{p}: not valid YAML{at}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PerfmlpError(f"{p}: expected a mapping of configuration keys, got {type(data).__name__}")
    return data


def check_consistent(cfg: Config) -> None:
    """Checks that involve more than one value (the process count comes later)."""
    if cfg.batch_size > cfg.n_train:
        raise PerfmlpError(f"batch_size ({cfg.batch_size}) is larger than n_train ({cfg.n_train})")


def check_procs(cfg: Config, nprocs: int) -> None:
    """Every rank must get at least one sample of every batch, the short last one too."""
    smallest = cfg.batch_size
    last = cfg.n_train % cfg.batch_size
    if last:
        smallest = min(smallest, last)
    if nprocs > smallest:
        what = "the last batch" if smallest != cfg.batch_size else "a batch"
        raise PerfmlpError(f"{nprocs} ranks but {what} holds only {smallest} samples: use fewer ranks or larger batches")


# ---- command line -------------------------------------------------------------

def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One --flag per configuration field (values parsed and checked later)."""
    parser.add_argument("--config", metavar="FILE.yaml", help="configuration file (YAML)")
    for f in fields(Config):
        default = f.default
        if f.name == "hidden_sizes":
            parser.add_argument("--hidden-sizes", dest="hidden_sizes", metavar="H1,H2,...",
                                help="hidden layer sizes, comma separated (default 512)")
            parser.add_argument("--hidden-size", dest="hidden_size", metavar="H",
                                help="one hidden layer of H units")
        elif isinstance(default, bool):
            parser.add_argument(_flag(f.name), dest=f.name, action=argparse.BooleanOptionalAction, default=None)
        else:
            kw = {"choices": CHOICES[f.name]} if f.name in CHOICES else {}
            parser.add_argument(_flag(f.name), dest=f.name, metavar=f.name.upper() if not kw else None,
                                default=None, **kw)


def _parse_scalar(name: str, text: str) -> Any:
    default = _FIELDS[name].default
    try:
        if isinstance(default, bool):
            return text
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
    except ValueError:
        kind = "an integer" if isinstance(default, int) else "a number"
        raise PerfmlpError(f"{_flag(name)} must be {kind}, got {text!r}") from None
    return text


def from_args(args: argparse.Namespace) -> Config:
    """Defaults, then --config FILE, then every flag given."""
    cfg = Config()
    if getattr(args, "config", None):
        cfg = from_mapping(load_yaml(args.config), where=f"{args.config}: ", check=False)
    overrides: dict[str, Any] = {}
    for f in fields(Config):
        if f.name == "hidden_sizes":
            continue
        v = getattr(args, f.name, None)
        if v is not None:
            overrides[f.name] = _parse_scalar(f.name, v) if isinstance(v, str) else v
    hs = getattr(args, "hidden_size", None)
    hss = getattr(args, "hidden_sizes", None)
    if hs is not None and hss is not None:
        raise PerfmlpError("give --hidden-size or --hidden-sizes, not both")
    if hs is not None or hss is not None:
        text = hs if hs is not None else hss
        try:
            overrides["hidden_sizes"] = [int(t) for t in text.split(",")]
        except ValueError:
            raise PerfmlpError(f"hidden sizes must be integers, got {text!r}") from None
        if hs is not None and len(overrides["hidden_sizes"]) != 1:
            raise PerfmlpError(f"--hidden-size takes one integer, got {hs!r}")
    return from_mapping(overrides, where="", base=cfg)
