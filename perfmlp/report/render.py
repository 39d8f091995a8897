"""The report on disk: report.md, report.html (each figure an image linked
beside it, so the folder stays small enough to commit), each table as CSV
and each figure as PNG and SVG.

`render` writes into a staging folder (safeio.replace_folder swaps it in
whole, so a failure halfway leaves the previous report as it was); a file
whose bytes would not change is not rewritten, so regenerating a committed
report touches only what changed.
"""
from __future__ import annotations

import contextlib
import csv
import html
import io
import math
import re
from pathlib import Path

from .figures import CATEGORY_COLORS
from .sections import Cell, Figure, Section, Table
from .thresholds import COLLAPSE_ROWS

# the verdict colours as CSS classes (dark backgrounds take white text)
CELL_COLORS = {f"v{i}": (c, i in (0, 2, 5, 6)) for i, c in enumerate(CATEGORY_COLORS.values())}


def fmt(v, nd=3) -> str:
    if v is None:
        return "-"
    if isinstance(v, Cell):
        return v.text
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


# words a cell uses for "no value": the CSV writes each as an empty field
MISSING = ("", "-", "not run", "n/a")
# a change in percent, alone or with its interval: "-92%", "+3.1% (-47% to +8%)"
CHANGE = re.compile(r"^([+-]\d+(?:\.\d+)?)%(?: \(([+-]?\d+(?:\.\d+)?)% to ([+-]?\d+(?:\.\d+)?)%\))?$")
# a ratio: "25.2x"
TIMES = re.compile(r"^(\d+(?:\.\d+)?(?:e[+-]?\d+)?)x$")


def _text(v) -> str | None:
    return v.text if isinstance(v, Cell) else v if isinstance(v, str) else None


def csv_columns(rows: list[dict]) -> dict:
    """Column -> "change" where every value given is a signed percentage, "times" where every one is a ratio."""
    kinds = {}
    for k in columns(rows):
        given = [_text(r.get(k)) for r in rows if _text(r.get(k)) not in MISSING and r.get(k) is not None]
        if given and all(t is not None and CHANGE.match(t) for t in given):
            kinds[k] = "change"
        elif given and all(t is not None and TIMES.match(t) for t in given):
            kinds[k] = "times"
    return kinds


def csv_cells(k: str, v, kind: str | None) -> dict:
    """One cell as the CSV's field(s): numbers as numbers, missing as empty."""
    t = _text(v)
    if v is None or t in MISSING:
        v = t = None
    if kind == "change":
        m = CHANGE.match(t) if t else None
        ends = [float(x) / 100 if x else None for x in (m.groups() if m else (None, None, None))]
        return {f"{k} change (fraction)": ends[0], f"{k} change low (fraction)": ends[1],
                f"{k} change high (fraction)": ends[2]}
    if kind == "times":
        return {f"{k} (times)": float(TIMES.match(t).group(1)) if t else None}
    return {k: t if isinstance(v, Cell) else v}


def csv_text(rows: list[dict]) -> str:
    """The table as CSV: a change in percent as a fraction (its interval's ends beside it), a ratio ("25.2x")
    as its number, each column named so; missing as empty."""
    kinds = csv_columns(rows)
    out = [{n: x for k, v in r.items() for n, x in csv_cells(k, v, kinds.get(k)).items()} for r in rows]
    names = columns(out)
    # an interval's ends only where some row has one
    names = [n for n in names if not n.endswith(("low (fraction)", "high (fraction)"))
             or any(r.get(n) is not None for r in out)]
    f = io.StringIO(newline="")
    w = csv.DictWriter(f, names, lineterminator="\r\n", extrasaction="ignore")
    w.writeheader()
    w.writerows(out)
    return f.getvalue()


def md_cell(text: str) -> str:
    """A Markdown table cell: a pipe inside it (|error|) escaped, or it would split the cell."""
    return text.replace("|", "\\|")


def shown(t: Table) -> list[str]:
    return [k for k in columns(t.rows) if k not in t.hidden]


def md_table(t: Table) -> str:
    if not t.rows:
        return "(none)\n"
    keys = shown(t)
    rows = [map(md_cell, keys), ["---"] * len(keys), *([md_cell(fmt(r.get(k))) for k in keys] for r in t.rows)]
    return "".join(f"| {' | '.join(cells)} |\n" for cells in rows)


def html_cell(row: dict, key: str, tips: dict) -> str:
    v = row.get(key)
    tip = v.tip if isinstance(v, Cell) else ""
    if key in tips and row.get(tips[key]) is not None:
        tip = fmt(row[tips[key]])
    attrs = (f' class="{v.css}"' if isinstance(v, Cell) and v.css else "") + (f' title="{html.escape(tip)}"'
                                                                                if tip else "")
    return f"<td{attrs}>{html.escape(fmt(v))}</td>"


def html_table(t: Table) -> str:
    if not t.rows:
        return "<p>(none)</p>"
    keys = shown(t)
    head = "<tr>" + "".join(f"<th>{html.escape(k)}</th>" for k in keys) + "</tr>" if t.header else ""
    body = "".join("<tr>" + "".join(html_cell(r, k, t.tips) for k in keys) + "</tr>" for r in t.rows)
    css = f' class="{t.css}"' if t.css else ""
    return f"<table{css}>{head}{body}</table>"


def collapsed(t: Table) -> bool:
    return t.collapse if t.collapse is not None else len(t.rows) > COLLAPSE_ROWS.value


def html_table_block(t: Table) -> str:
    link = f' (<a href="{html.escape(t.name)}.csv">{html.escape(t.name)}.csv</a>)'
    if not t.caption:
        return html_table(t)
    if collapsed(t):
        return (f"<details><summary><b>{html.escape(t.caption)}</b>: {len(t.rows)} rows{link}</summary>"
                f"{html_table(t)}</details>")
    return f'<h3>{html.escape(t.caption)}</h3>{html_table(t)}'


def html_figure(fig: Figure) -> str:
    """A figure as the PNG written beside the page (the folder is the report)."""
    cap = html.escape(fig.caption)
    src = html.escape(f"{fig.name}.png")
    return f'<figure><img src="{src}" alt="{cap}"><figcaption>{cap}</figcaption></figure>'


def anchor(s: Section) -> str:
    return s.anchor or "".join(c if c.isalnum() else "-" for c in s.title.lower()).strip("-")[:40]


STYLE = ("body{font-family:sans-serif;max-width:1240px;margin:auto;padding:0 12px;font-size:14px}"
         "h1{font-size:20px;margin:6px 0 2px}h2{font-size:17px;margin:18px 0 6px}h3{font-size:13px;margin:8px 0 3px}"
         "p.meta{font-size:11px;color:#555;margin:0 0 4px}"
         "table{border-collapse:collapse;font-size:11px;margin-bottom:.6em}td,th{border:1px solid #ccc;"
         "padding:1px 4px}th{background:#f4f4f4}img{max-width:100%}figure{margin:4px 0}"
         "figcaption{font-size:11px;color:#444}details{margin:4px 0 10px}summary{cursor:pointer;font-size:12px}"
         "td[title]{text-decoration:underline dotted #999}"
         "section.overview{font-size:12.5px}section.overview h2{margin-top:4px}section.overview p{margin:2px 0 5px}"
         ".cols{display:flex;gap:14px;align-items:flex-start}.cols .main{flex:1 1 58%;min-width:0}"
         ".cols .side{flex:0 0 40%}nav{font-size:11px;margin:6px 0}"
         "table.map td{padding:0 3px;white-space:nowrap;font-size:10.5px;text-align:right}"
         "table.map td:first-child{text-align:left}table.map th{font-size:10px;font-weight:normal;padding:0 2px}"
         "table.legend td{font-size:11px;padding:1px 6px}"
         + "".join(f".{css}{{background:{color};color:{'#fff' if dark else '#000'}}}"
                   for css, (color, dark) in CELL_COLORS.items()))


def html_section(s: Section, figures: bool = True) -> str:
    """One section: its words, then its figures and tables, in columns where they name a place."""
    paras = "".join(f"<p>{html.escape(p)}</p>" for p in s.paragraphs)
    figs = s.figures if figures else []
    items = [(t.place, html_table_block(t)) for t in s.tables] + [(f.place, html_figure(f)) for f in figs]
    if any(place for place, _ in items):
        main = "".join(h for place, h in items if place in ("main", ""))
        side = "".join(h for place, h in items if place == "side")
        wide = "".join(h for place, h in items if place == "wide")
        body = f'<div class="cols"><div class="main">{main}</div><div class="side">{side}</div></div>{wide}'
        css = ' class="overview"'
    else:
        body = "".join(html_figure(f) for f in figs) + "".join(html_table_block(t) for t in s.tables)
        css = ""
    return f'<section id="{anchor(s)}"{css}><h2>{html.escape(s.title)}</h2>{paras}{body}</section>'


def md_section(s: Section, figures: bool = True) -> list[str]:
    md = [f"## {s.title}", ""]
    for p in s.paragraphs:
        md += [p, ""]
    for fig in s.figures if figures else ():
        md += [f"![{fig.caption}]({fig.name}.png)", "", f"*{fig.caption}* ([SVG]({fig.name}.svg))", ""]
    for t in s.tables:
        title = f"**{t.caption}** " if t.caption else ""
        md += [f"{title}([{t.name}.csv]({t.name}.csv))", "", md_table(t), ""]
    return md


def render(sections: list[Section], out: Path, title: str, header: list[str], figures: bool = True) -> None:
    """Draw every figure and write every file of the report into the folder `out`; a line of links to the
    sections follows the first. `figures=False`: words and tables only, no earlier figure left beside them."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    md = [f"# {title}", ""] + header + [""]
    parts = [f"<h1>{html.escape(title)}</h1>"] + [f'<p class="meta">{html.escape(h)}</p>' for h in header]
    for i, s in enumerate(sections):
        for fig in s.figures:
            if figures:
                for ext, data in fig.draw(**fig.args).items():
                    _write(out / f"{fig.name}.{ext}", data)
            else:
                for ext in ("png", "svg"):
                    (out / f"{fig.name}.{ext}").unlink(missing_ok=True)
        for t in s.tables:
            _write(out / f"{t.name}.csv", csv_text(t.rows).encode("utf-8", "surrogateescape"))
        md += md_section(s, figures)
        parts.append(html_section(s, figures))
        if i == 0 and len(sections) > 1:
            links = " · ".join(f'<a href="#{anchor(x)}">{html.escape(x.title)}</a>' for x in sections[1:])
            parts.append(f"<nav>Details: {links}</nav>")
    # surrogateescape: a path the C locale could not decode goes back out as the bytes it was
    _write(out / "report.md", "\n".join(md).encode("utf-8", "surrogateescape"))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>")
    _write(out / "report.html", page.encode("utf-8", "surrogateescape"))


def _write(path: Path, data: bytes) -> None:
    """Write into the staging folder (a copy of the previous report) unless the bytes are already there."""
    with contextlib.suppress(OSError):
        if path.read_bytes() == data:
            return
    path.write_bytes(data)
