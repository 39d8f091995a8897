"""What a report section is made of: paragraphs, tables (rows as dicts) and
figures (a drawing function and its arguments). Each section is a pure
function from the analysis, in the modules beside this one; render.py writes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Cell:
    """A cell with a tooltip and a colour class in report.html; Markdown and CSV write the text."""
    text: str
    tip: str = ""
    css: str = ""


@dataclass
class Table:
    name: str
    caption: str
    rows: list[dict]
    hidden: tuple = ()          # columns written to the CSV only (a run's full id beside its short label)
    tips: dict = field(default_factory=dict)   # shown column -> the (hidden) column its tooltip comes from
    collapse: bool | None = None   # report.html folds it into <details>; None: when longer than COLLAPSE_ROWS
    place: str = ""             # in a section laid out in columns: "main", "side" or "wide" (render.py)
    header: bool = True         # report.html shows the column names (a legend's row needs none)
    css: str = ""               # report.html's class for the table (render.py's STYLE)


@dataclass
class Figure:
    name: str
    caption: str
    draw: Callable[..., dict[str, bytes]]   # perfmlp/report/figures.py
    args: dict
    place: str = ""


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    anchor: str = ""            # report.html's id for the section ("" : made from the title)


def pct(fraction: float | None, nd: int = 2) -> str:
    return "-" if fraction is None else f"{100 * fraction:.{nd}f}%"
