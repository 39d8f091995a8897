"""The configuration's fields as command-line flags, from perfmlp/config.py, so that every command taking
a configuration key (run, model, whatif) spells it alike, with the trainer's default."""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import fields
from typing import Any

from . import checks
from .config import (_DEFAULT_TEXT, _FIELDS, CHOICES, HELP, METAVAR, Config, _convert, from_mapping,
                     load_yaml)
from .errors import PerfmlpError


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _help(name: str, default: Any = dataclasses.MISSING) -> str:
    default = _FIELDS[name].default if default is dataclasses.MISSING else default
    if name == "hidden_sizes":
        shown = ",".join(map(str, default))
    elif isinstance(default, bool):
        shown = "on" if default else "off"
    else:
        shown = _DEFAULT_TEXT.get(name, default)
    return f"{HELP[name]} (default: {shown})".replace("%", "%%")  # argparse %-formats help


def field_value(name: str):
    """argparse `type` for field `name`: the text converted and checked as the configuration does."""
    def convert(text):
        try:
            if name == "hidden_sizes":
                return list(_convert(name, str(text), _flag(name)))
            return _convert(name, text, _flag(name))
        except checks.CheckError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    convert.__name__ = name   # argparse names the type in its messages
    return convert


class _Sizes(argparse.Action):
    """--hidden-sizes 256,128 or 256 128 (or both mixed): one flat list."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, [h for v in values for h in (v if isinstance(v, list) else [v])])


def add_field(parser: argparse.ArgumentParser, name: str, *, default: Any = None, typed: bool = False,
              choices: tuple | None = None, dest: str | None = None, aliases: tuple = (), convert=None) -> None:
    """--flag (and `aliases`) of field `name` with its help, choices and metavar. With `typed` it is
    converted as parsed (field_value, or `convert`), `default` in the help; else from_args converts."""
    kw = {"dest": dest or name, "default": default,
          "help": _help(name, default) if typed else _help(name)}
    if isinstance(_FIELDS[name].default, bool):
        parser.add_argument(_flag(name), *aliases, action=argparse.BooleanOptionalAction, **kw)
        return
    if typed:
        kw["type"] = convert or field_value(name)
    if name in CHOICES:
        kw["choices"] = choices or CHOICES[name]
    else:
        kw["metavar"] = METAVAR.get(name, "H1,H2,...")
    if name == "hidden_sizes":
        kw.update(nargs="+", action=_Sizes)
    parser.add_argument(_flag(name), *aliases, **kw)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One --flag per configuration field (values converted and checked later)."""
    parser.add_argument("--config", metavar="FILE.yaml",
                        help="configuration file (YAML) applied over the defaults, before the flags "
                             "(default: none; configs/reference.yaml is the reference configuration)")
    for f in fields(Config):
        add_field(parser, f.name)
        if f.name == "hidden_sizes":
            parser.add_argument("--hidden-size", dest="hidden_size", metavar="H",
                                help="one hidden layer of H units (default: 512)")


def add_fields(parser: argparse.ArgumentParser, names, *, choices: dict | None = None,
               dests: dict | None = None, aliases: dict | None = None, convert: dict | None = None) -> None:
    """A typed flag, Config's default, per field in `names`; the dicts narrow or rename a field's flag."""
    defaults = Config()
    for name in names:
        default = getattr(defaults, name)
        add_field(parser, name, default=list(default) if isinstance(default, tuple) else default,
                  typed=True, choices=(choices or {}).get(name), dest=(dests or {}).get(name),
                  aliases=(aliases or {}).get(name, ()), convert=(convert or {}).get(name))


def from_args(args: argparse.Namespace) -> Config:
    """Defaults, then --config FILE, then every flag given."""
    cfg = Config()
    if getattr(args, "config", None):
        cfg = from_mapping(load_yaml(args.config), where=f"{args.config}: ", check=False)
    overrides: dict[str, Any] = {}
    try:
        for f in fields(Config):
            v = getattr(args, f.name, None)
            if f.name != "hidden_sizes" and v is not None:
                overrides[f.name] = _convert(f.name, v, _flag(f.name))
        hs = getattr(args, "hidden_size", None)
        hss = getattr(args, "hidden_sizes", None)
        if hs is not None and hss is not None:
            raise PerfmlpError("give --hidden-size or --hidden-sizes, not both")
        if hs is not None:
            overrides["hidden_sizes"] = (checks.integer("--hidden-size", hs),)
        elif hss is not None:
            overrides["hidden_sizes"] = _convert("hidden_sizes", hss, "--hidden-sizes")
    except checks.CheckError as e:
        raise PerfmlpError(str(e)) from None
    return from_mapping(overrides, where="", base=cfg)
