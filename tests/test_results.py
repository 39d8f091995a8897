"""The committed results agree with their data and with the current code.

- reports/BLIND-TESTS.md: its summary tables recomputed from
  reports/blind-tests.csv row by row (docs/results.md is written from the
  data by benchmarks/results_doc.py: tests/test_results_doc.py).
- Each committed set (reports/<set>/SET.md): the report its one command
  makes from its committed traces with the current code has the committed
  report.md and CSV tables, and no other (the figures are not drawn: their
  files and report.html follow from the same sections).

These read the committed results, as the rest of the suite does not: they
are what is tested here.
"""
from __future__ import annotations

import csv
import re
import shlex
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLIND = ROOT / "reports" / "blind-tests.csv"
BLIND_DOC = ROOT / "reports" / "BLIND-TESTS.md"
SETS = sorted(p.parent for p in (ROOT / "reports").glob("*/SET.md"))
REPORT_SETS = [s for s in SETS if (s / "traces").is_dir()]   # the GPU sets; reports/cpu holds benchmark outputs only

NUMBER = re.compile(r"(?<![\w.])([-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?)x?(?![\w.])", re.IGNORECASE)  # 1.72x too
CODE = re.compile(r"`[^`]*`")
QUIET = 0.03  # the rows "<selection>, spread < 3%"


# ---- reading the documents ------------------------------------------------------------------

def sections(text: str) -> list[tuple[str, list[str]]]:
    """(### heading, its lines) for each section."""
    out = []
    for line in text.splitlines():
        if line.startswith("### "):
            out.append((line[4:], []))
        elif line.startswith("#"):
            out.append(("", []))
        elif out:
            out[-1][1].append(line)
    return [s for s in out if s[0]]


def tables(lines: list[str]) -> list[list[list[str]]]:
    """Each Markdown table as rows of cells (header first, the rule left out)."""
    out, cur = [], None
    for line in lines + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if all(set(c) <= set("-: ") for c in cells):
                continue
            if cur is None:
                cur = []
                out.append(cur)
            cur.append([c.replace("\\|", "|") for c in cells])
        else:
            cur = None
    return out


def cited(lines: list[str], prefix: str) -> list[str]:
    """The backticked paths (or words) on the section's line starting with `prefix`."""
    line = next((x for x in lines if x.startswith(prefix)), "")
    return [c.strip("`") for c in CODE.findall(line)]


def numbers(text: str) -> list[str]:
    """Number tokens outside code spans."""
    return NUMBER.findall(CODE.sub(" ", text))


def half_ulp(token: str) -> float:
    """Half a unit in the token's last place: 1.662 -> 0.0005, 7.43e-07 -> 0.005e-07."""
    mant, _, exp = token.lower().lstrip("+-").partition("e")
    decimals = len(mant.partition(".")[2])
    return 0.5 * 10.0 ** (-decimals) * 10.0 ** int(exp or 0)


def matches(token: str, values: list[float]) -> bool:
    x, tol = float(token), half_ulp(token)
    return any(abs(v - x) <= tol * (1 + 1e-9) + 1e-12 for v in values)


# ---- the blind tests ------------------------------------------------------------------------

def blind_rows() -> list[dict]:
    return list(csv.DictReader(BLIND.open()))


def error_pct(r: dict) -> float:
    return 100 * (float(r["predicted_s"]) / float(r["measured_s"]) - 1)


def select(rows: list[dict], label: str) -> list[dict]:
    """A summary row's rows: a machine, a sweep or all, optionally ', spread < 3%' (run at least twice,
    the repeats within 3%: a configuration run once has no repeats to agree, as the report's validation)."""
    name, quiet = label.replace("`", ""), False
    if name.endswith(", spread < 3%"):
        name, quiet = name[: -len(", spread < 3%")], True
    out = [r for r in rows if name == "all" or name in (r["machine"], r["sweep"])]
    assert out, f"no row of blind-tests.csv is {label!r}"
    return [r for r in out if float(r["spread"]) < QUIET and int(r["repeats"]) > 1] if quiet else out


def summary_cell(column: str, rows: list[dict]) -> str:
    """A summary column's cell, formatted as the documents write it."""
    errs = [error_pct(r) for r in rows]
    repeated = [r for r in rows if int(r["repeats"]) > 1]   # a configuration run once has no spread
    one = lambda key: ", ".join(sorted({r[key] for r in rows}))  # noqa: E731
    cells = {"sweeps": str(len({r["sweep"] for r in rows})), "configurations": str(len(rows)),
             "median |error|": f"{statistics.median(abs(e) for e in errs):.1f}%",
             "worst |error|": f"{max(abs(e) for e in errs):.1f}%",
             "above / below": f"{sum(e > 0 for e in errs)} / {sum(e < 0 for e in errs)}",
             "median spread": f"{100 * statistics.median(float(r['spread']) for r in repeated):.1f}%",
             "commit": one("commit"), "date": one("date")}
    return cells[column]


def check_blind_table(table: list[list[str]], rows: list[dict]) -> int:
    head, n = table[0], 0
    for line in table[1:]:
        sel = select(rows, line[0])
        for column, cell in zip(head[1:], line[1:]):
            assert cell == summary_cell(column, sel), f"{line[0]}, {column}: {cell} (the CSV gives " \
                                                      f"{summary_cell(column, sel)})"
            n += 1
    return n


def test_blind_tests_csv_has_the_agreed_columns_and_sane_rows():
    rows = blind_rows()
    assert list(rows[0]) == ["machine", "commit", "date", "sweep", "run", "hidden_sizes", "batch_size", "procs",
                             "batch_transfer", "comm", "exec", "parallel", "precision", "repeats", "predicted_s",
                             "measured_s", "measured_min_s", "measured_max_s", "spread", "calibration"]
    keys = [(r["sweep"], r["run"]) for r in rows]
    assert len(keys) == len(set(keys)), "one row per sweep and configuration"
    for r in rows:
        lo, med, hi = float(r["measured_min_s"]), float(r["measured_s"]), float(r["measured_max_s"])
        assert 0 < lo <= med <= hi and float(r["predicted_s"]) > 0
        assert abs(float(r["spread"]) - (hi / lo - 1)) < 1e-5
        assert r["sweep"].startswith(r["machine"] + "/") and re.fullmatch(r"[0-9a-f]{7,40}", r["commit"])


def test_blind_tests_document_tables_are_the_csvs():
    checked = sum(check_blind_table(t, blind_rows()) for t in tables(BLIND_DOC.read_text().splitlines())
                  if t[0][0] in ("rows", "sweep"))
    assert checked > 100


# ---- the committed reports ------------------------------------------------------------------

def report_args(set_dir: Path) -> list[str]:
    """The arguments of the one `python -m perfmlp.report` command in SET.md."""
    lines = [x.strip() for x in (set_dir / "SET.md").read_text().splitlines()
             if x.strip().startswith("python -m perfmlp.report ")]
    assert len(lines) == 1, f"{set_dir}/SET.md: one report command, not {len(lines)}"
    return shlex.split(lines[0])[3:]


@pytest.mark.parametrize("set_dir", REPORT_SETS, ids=[s.name for s in REPORT_SETS])
def test_committed_report_is_what_the_current_code_makes(set_dir, tmp_path, monkeypatch):
    import argparse

    from perfmlp.report import analyse, header_of, sections_of
    from perfmlp.report.render import render
    from perfmlp.report.study import load_study
    from perfmlp.trace.reader import read_traces

    ap = argparse.ArgumentParser()
    ap.add_argument("traces")
    ap.add_argument("--out")
    ap.add_argument("--machine")
    ap.add_argument("--study")
    a = ap.parse_args(report_args(set_dir))
    assert (ROOT / a.out).resolve() == set_dir.resolve()
    monkeypatch.chdir(ROOT)  # the report names its traces folder as the command gives it
    runs, skipped = read_traces(a.traces)
    an = analyse(runs, skipped, load_study(a.study), a.machine, Path(a.traces))
    secs = sections_of(an)
    for s in secs:
        for fig in s.figures:
            fig.draw, fig.args = (lambda: {"png": b"", "svg": b""}), {}
    render(secs, tmp_path, "perfmlp report", header_of(an))
    remake = "python -m perfmlp.report " + " ".join(report_args(set_dir))
    made = sorted(p.name for p in tmp_path.glob("*.csv"))
    assert made == sorted(p.name for p in set_dir.glob("*.csv")), f"tables differ; make it again: {remake}"
    for name in made + ["report.md"]:
        assert (tmp_path / name).read_bytes() == (set_dir / name).read_bytes(), \
            f"{set_dir.name}/{name} is not what the current code makes; make it again: {remake}"
