"""The pages that state results agree with the committed data.

- docs/results.md is what benchmarks/results_doc.py writes from the
  committed data (made again here in memory), and at most 300 lines.
- README.md is at most 300 lines, and every number its `## Results` section
  states is in a committed file that section cites in backticks, at the
  number's precision (1.662 is any value in [1.6615, 1.6625]); for
  reports/blind-tests.csv the per-sweep and per-machine summaries count as
  its values. The screenshot it shows was made from the committed
  report.html beside it (benchmarks/screenshot.py stamps the report's
  SHA-256 into the PNG).
"""
from __future__ import annotations

import csv
import hashlib
import importlib.util
import re
import shutil

from conftest import ROOT
from test_results import CODE, check_blind_table, matches, numbers, tables

SCRIPT = ROOT / "benchmarks" / "results_doc.py"
RESULTS = ROOT / "docs" / "results.md"
README = ROOT / "README.md"


def results_doc():
    spec = importlib.util.spec_from_file_location("results_doc", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- docs/results.md ------------------------------------------------------------------------

def test_results_md_is_what_the_committed_data_give():
    made = results_doc().render()
    assert RESULTS.read_text(encoding="utf-8") == made, "docs/results.md is stale: python benchmarks/results_doc.py"
    assert made.count("\n") <= 300


def test_results_md_blind_tables_are_the_csvs_rows():
    rows = list(csv.DictReader((ROOT / "reports" / "blind-tests.csv").open()))
    checked = sum(check_blind_table(t, rows) for t in tables(RESULTS.read_text().splitlines())
                  if t[0][0] in ("rows", "sweep"))
    assert checked > 100


def test_a_changed_blind_row_changes_the_page(tmp_path):
    # the page is made from the rows: a row measured 10% slower moves its sweep's figures
    mod = results_doc()
    (tmp_path / "reports").mkdir()
    shutil.copy(ROOT / "reports" / "blind-tests.csv", tmp_path / "reports" / "blind-tests.csv")
    before = mod.blind(tmp_path)
    path = tmp_path / "reports" / "blind-tests.csv"
    with path.open() as f:
        rows = list(csv.DictReader(f))
    for key in ("measured_s", "measured_min_s", "measured_max_s"):
        rows[0][key] = repr(float(rows[0][key]) * 10)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert mod.blind(tmp_path) != before


def test_the_summary_words_a_sweep_as_the_csv_gives_it():
    mod = results_doc()
    # predicted 1.1 s against 1.0 measured: +10%; 0.5 against 1.0: -50%; repeats 3% and 1% apart
    rows = [{"predicted_s": "1.1", "measured_s": "1.0", "repeats": "2", "spread": "0.03"},
            {"predicted_s": "0.5", "measured_s": "1.0", "repeats": "2", "spread": "0.01"}]
    assert mod.summary(rows) == ["2", "30.0%", "50.0%", "1 / 1", "2.0%"]
    assert mod.agree(rows) == rows[1:]


def test_the_script_checks_the_page(capsys):
    assert results_doc().main(["--check"]) == 0
    assert "current" in capsys.readouterr().out


# ---- README.md ------------------------------------------------------------------------------

def readme_section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def cited_values(section: str) -> list[float]:
    """The numbers of every committed file the section names in backticks (blind-tests.csv: its summaries)."""
    values = []
    for path in {c.strip("`") for c in CODE.findall(section)}:
        f = ROOT / path
        if not f.is_file():
            continue
        values += [float(t) for t in numbers(f.read_text(encoding="utf-8"))]
        if f.suffix == ".csv":   # a report's change is a fraction in its CSV, a percentage in words
            values += [100 * float(v) for r in csv.DictReader(f.open(encoding="utf-8")) for k, v in r.items()
                       if k and k.endswith("(fraction)") and v]
        if f.name == "blind-tests.csv":
            values += blind_summaries(f)
    return values


def blind_summaries(path) -> list[float]:
    mod = results_doc()
    rows = list(csv.DictReader(path.open()))
    groups = [rows, mod.agree(rows)]
    for key in ("sweep", "machine"):
        for name in {r[key] for r in rows}:
            sel = [r for r in rows if r[key] == name]
            groups += [sel, mod.agree(sel)]
    out = [float(len({r["sweep"] for r in rows}))]
    for g in groups:
        if g:
            out += [float(t) for cell in mod.summary(g) for t in numbers(cell)]
    return out


def test_readme_is_a_manual_of_at_most_300_lines():
    assert README.read_text(encoding="utf-8").count("\n") <= 300


def test_every_number_the_readme_states_as_a_result_is_in_the_data_it_cites():
    section = readme_section("Results")
    values = cited_values(section)
    prose = re.sub(r"\]\([^)]*\)", "]", section)          # link targets are paths, not figures
    tokens = numbers(prose)
    missing = [t for t in tokens if not matches(t, values)]
    assert len(tokens) > 20
    assert not missing, "README.md's results not in the files they cite: " + ", ".join(missing)


def test_the_number_check_catches_a_stale_figure():
    assert matches("0.194", [0.19441999]) and matches("40.31", [40.31]) and matches("25.2", [25.2])
    assert not matches("0.196", [0.19441999]) and not matches("40.00", [40.31])


def load_benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_readmes_screenshot_shows_the_committed_report():
    shot_mod = load_benchmark("screenshot")
    shots = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", README.read_text(encoding="utf-8"))
    assert shots
    for shot in shots:
        html = (ROOT / shot).with_name("report.html")
        made_from = shot_mod.stamp_of((ROOT / shot).read_bytes())
        assert made_from == hashlib.sha256(html.read_bytes()).hexdigest(), \
            f"{shot} is not a screenshot of the committed {html.relative_to(ROOT)}: python benchmarks/screenshot.py"


def test_a_screenshots_stamp_names_the_report_it_shows():
    shot_mod = load_benchmark("screenshot")
    png = (ROOT / "reports" / "h100" / "overview.png").read_bytes()
    bare = png[:png.index(b"tEXt") - 4] + png[png.rindex(b"IEND") - 4:]   # the stamp chunk cut out
    assert shot_mod.stamp_of(bare) is None
    made = shot_mod.stamped(bare, b"<html>one</html>")
    assert shot_mod.stamp_of(made) == hashlib.sha256(b"<html>one</html>").hexdigest()
    assert shot_mod.stamp_of(made) != hashlib.sha256(b"<html>two</html>").hexdigest()


def test_the_readmes_blind_table_gives_each_sweep_its_own_figures():
    mod = results_doc()
    rows = list(csv.DictReader((ROOT / "reports" / "blind-tests.csv").open()))
    (table,) = [t for t in tables(readme_section("Results").splitlines()) if t[0][0] == "sweep"]
    for line in table[1:]:
        name = CODE.findall(line[0])[0].strip("`")
        sweep = [r for r in rows if r["sweep"] == name]
        n, median, worst, _, _ = mod.summary(sweep)
        quiet = mod.agree(sweep)
        assert line[1:4] == [n, median, worst], f"README.md, {name}: {line[1:4]} (the CSV gives {[n, median, worst]})"
        assert line[4].startswith(f"{mod.summary(quiet)[1]} ({len(quiet)}"), f"README.md, {name}: {line[4]}"
    latest = {}
    for r in rows:
        latest[r["machine"]] = r["sweep"]
    assert {CODE.findall(x[0])[0].strip("`") for x in table[1:]} == set(latest.values()), "one row per machine kind's latest sweep"
