"""What a report section is made of: paragraphs, tables (rows as dicts) and
figures (a drawing function and its arguments). Each section is a pure
function from the analysis, in the modules beside this one; render.py writes.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from ..analyses.accuracy import HOST_CLOCK_COLUMN
from ..analysis import TERMS


@dataclass(frozen=True)
class Cell:
    """A cell with a tooltip and a colour class in report.html; Markdown and CSV write the text."""
    text: str
    tip: str = ""
    css: str = ""

    def __str__(self) -> str:
        return self.text


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


def host_clock_note(left_out: list[tuple[str, ...]], rows: str, outcome: str) -> str | None:
    """One sentence on the measured terms a per-term table leaves out (`left_out`: each row's)."""
    by_term = Counter(t for terms in left_out for t in terms)
    if not by_term:
        return None
    where = ", ".join(f"{t} in {by_term[t]}" for t in TERMS if by_term[t])
    return (f"{sum(by_term.values())} measured term(s) in {sum(map(bool, left_out))} of {len(left_out)} {rows} "
            f"{outcome} ({where}): they were timed on the host clock (trace level counters), where work the host "
            "only enqueues (kernels, graph replays, NCCL collectives, pinned copies) measures its enqueue and the "
            "staged D2H its wait for the backward pass, not the time the model's term prices "
            f"(trace.format.comparable_terms; the host's times are in the column '{HOST_CLOCK_COLUMN}').")


def pct(fraction: float | None, nd: int = 2) -> str:
    return "-" if fraction is None else f"{100 * fraction:.{nd}f}%"
