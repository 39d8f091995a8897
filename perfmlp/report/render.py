"""The report on disk: report.md, a self-contained report.html (figures
embedded as PNG), each table as CSV and each figure as PNG and SVG.

A file whose bytes would not change is not rewritten, so regenerating a
report over a committed one touches only what changed.
"""
from __future__ import annotations

import base64
import csv
import html
import io
import math
from pathlib import Path

from ..errors import write_atomic
from .sections import Section


def fmt(v, nd=3) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if math.isinf(v):
            return "inf"
        if abs(v) >= 1e5 or (abs(v) < 1e-3 and v != 0):
            return f"{v:.3g}"
        return f"{v:.{nd}f}"
    return str(v)


def columns(rows: list[dict]) -> list[str]:
    """Every column name, in the order the rows first use them."""
    return list(dict.fromkeys(k for r in rows for k in r))


def csv_text(rows: list[dict]) -> str:
    f = io.StringIO(newline="")
    w = csv.DictWriter(f, columns(rows), lineterminator="\r\n")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    return f.getvalue()


def md_cell(text: str) -> str:
    """A Markdown table cell: a pipe inside it (|error|) escaped, or it would split the cell."""
    return text.replace("|", "\\|")


def md_table(rows: list[dict]) -> str:
    if not rows:
        return "(none)\n"
    keys = columns(rows)
    out = ["| " + " | ".join(map(md_cell, keys)) + " |", "| " + " | ".join("---" for _ in keys) + " |"]
    for r in rows:
        out.append("| " + " | ".join(md_cell(fmt(r.get(k))) for k in keys) + " |")
    return "\n".join(out) + "\n"


def html_table(rows: list[dict]) -> str:
    if not rows:
        return "<p>(none)</p>"
    keys = columns(rows)
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(r.get(k)))}</td>" for k in keys) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def write_if_changed(path: Path, data: bytes) -> bool:
    """Write `data` (whole: a temporary name, then renamed) unless the file
    already holds exactly it; True if written."""
    try:
        if path.read_bytes() == data:
            return False
    except OSError:
        pass
    write_atomic(path, data)
    return True


STYLE = ("body{font-family:sans-serif;max-width:1200px;margin:auto}table{border-collapse:collapse;"
         "font-size:11px;margin-bottom:1em}td,th{border:1px solid #ccc;padding:2px 5px}img{max-width:100%}")


def render(sections: list[Section], out: Path, title: str, header: list[str]) -> None:
    """Draw every figure and write every file of the report into `out` (which exists)."""
    md = [f"# {title}", ""] + header + [""]
    hb = [f"<h1>{html.escape(title)}</h1>"] + [f"<p>{html.escape(h)}</p>" for h in header]
    for s in sections:
        md += [f"## {s.title}", ""]
        hb.append(f"<h2>{html.escape(s.title)}</h2>")
        for p in s.paragraphs:
            md += [p, ""]
            hb.append(f"<p>{html.escape(p)}</p>")
        for fig in s.figures:
            images = fig.draw(**fig.args)
            for ext, data in images.items():
                write_if_changed(out / f"{fig.name}.{ext}", data)
            cap = fig.caption
            md += [f"![{cap}]({fig.name}.png)", "", f"*{cap}* ([SVG]({fig.name}.svg))", ""]
            data = base64.b64encode(images["png"]).decode()
            hb.append(f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(cap)}">'
                      f"<figcaption>{html.escape(cap)}</figcaption></figure>")
        for t in s.tables:
            write_if_changed(out / f"{t.name}.csv", csv_text(t.rows).encode("utf-8", "surrogateescape"))
            md += [f"**{t.caption}** ([{t.name}.csv]({t.name}.csv))", "", md_table(t.rows), ""]
            hb.append(f"<h3>{html.escape(t.caption)}</h3>{html_table(t.rows)}")
    # surrogateescape: a path the C locale could not decode goes back out as the bytes it was
    write_if_changed(out / "report.md", "\n".join(md).encode("utf-8", "surrogateescape"))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>{''.join(hb)}</body></html>")
    write_if_changed(out / "report.html", page.encode("utf-8", "surrogateescape"))
