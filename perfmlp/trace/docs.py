"""docs/trace-format.md, made from the records themselves (trace/records.py: each field's documentation
is its metadata), so the page cannot drift from the format; a test holds the committed page to
`render()`. The page's prose is the template format-page.md beside this module; this fills in its
record tables, phases and trace levels.

    python -m perfmlp.trace.docs            (writes docs/trace-format.md)"""
from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path

from .. import names as N
from . import records as R
from .format import WARMUP_BATCHES
from .updates import Update

PAGE = Path(__file__).resolve().parents[2] / "docs" / "trace-format.md"
TEMPLATE = Path(__file__).with_name("format-page.md")
MADE_BY = "<!-- Made by `python -m perfmlp.trace.docs` from perfmlp/trace/records.py; do not edit by hand. -->"


def _flat(doc: str | None) -> str:
    return " ".join(s.strip() for s in (doc or "").split("\n") if s.strip())


def _table(cls, title: str, text: str | None = None) -> list[str]:
    return [f"### {title}", "", text or _flat(cls.__doc__), "", "| field | meaning |", "| --- | --- |",
            *(f"| `{f.name}` | {f.metadata.get('doc', '')} |" for f in fields(cls)), ""]


def render() -> str:
    records = ["## manifest.json", "", *_table(R.Manifest, "`Manifest`"),
               *_table(R.Ran, "`Ran` (the manifest's `ran`)"), "## rank-<r>.jsonl", ""]
    for cls in (R.Header, R.Clock, R.Activity, R.Shape, R.Epoch, R.GpuActivity, Update, R.End):
        records += _table(cls, f"`{cls.__name__}` (`kind: \"{cls.KIND}\"`)")
    records += _table(R.GpuRecord, "`GpuRecord`")
    records += ["## rank-<r>.batches", "", _flat(R.BatchLayout.__doc__), ""]
    records += _table(R.Batch, "`Batch` (as the reader returns it)",
                      "Its counts (samples, FLOPs, bytes, collectives) are its shape's, read through it.")
    return TEMPLATE.read_text(encoding="utf-8").format(
        made_by=MADE_BY, schema=R.SCHEMA, warmup=WARMUP_BATCHES, records="\n".join(records),
        phases="\n".join(f"| `{p.value}` | {N.PHASE_GROUP[p]} |" for p in N.Phase),
        levels="\n".join(f"| `{k}` | {v} |" for k, v in N.TRACE_LEVELS.items()))


def main() -> int:
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
