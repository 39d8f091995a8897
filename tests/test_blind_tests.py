"""The blind-test history (perfmlp/report/model_error.py) read from a CSV
fixture of the tests' own (tests/data/blind-tests.csv: errors chosen so
that each figure below can be worked out by hand), its figures per machine,
its worst configurations, the report's words, and bad input."""
import csv
import subprocess
import sys

import pytest

from perfmlp.errors import PerfmlpError
from perfmlp.report import build_from_runs
from perfmlp.report.__main__ import main as report_main
from perfmlp.report.model_error import COLUMNS, history_by_machine, read_blind_tests, worst_configurations

from conftest import ROOT, in_process
from synthetic import gpu_records, write_run
from test_report import four_runs

HISTORY = ROOT / "tests" / "data" / "blind-tests.csv"


def test_the_history_per_machine():
    history = read_blind_tests(HISTORY)
    assert history.path == str(HISTORY) and len(history) == 11
    tests = list(history.tests)
    assert len(tests) == 11 and tests[0].label == "H=512 B=3200 p=1 float32 pinned/nccl eager"
    assert tests[-1].label.endswith("graph model")   # a strategy other than data parallelism is named
    h100, x2, every = history_by_machine(tests)
    # h100: errors +2, -1, -4, -3, -10 %: |error| 1 2 3 4 10 -> median 3, worst 10; signed median -3
    assert (h100.machine, h100.configurations, h100.sweeps) == ("h100", 5, 2)
    assert h100.commits == ("1a2b3c4", "5d6e7f8") and (h100.first_date, h100.last_date) == ("2026-11-22", "2026-11-23")
    e = h100.errors
    assert (e.median_abs_pct, e.worst_abs_pct, e.signed_median_pct) == pytest.approx((3, 10, -3))
    # 1 above, 4 below: 2 (C(5,0) + C(5,1)) / 2^5 = 0.375, no bias; within half the 5% spread: +2 and -1
    assert (e.above, e.below, e.within_noise) == (1, 4, 2) and e.sign_p == pytest.approx(0.375) and not e.biased
    assert h100.median_spread_pct == pytest.approx(5) and h100.resolution.startswith("error larger")
    # h200-x2: -1 .. -6 %, all six below: 2 / 2^6 = 0.031 < 0.05, a bias (the model too fast); median 3.5
    e = x2.errors
    assert (e.median_abs_pct, e.worst_abs_pct, e.above, e.below) == pytest.approx((3.5, 6, 0, 6))
    assert e.sign_p == pytest.approx(2 / 64) and e.biased and e.within_noise == 0
    assert every.machine == "all" and every.configurations == 11 and every.errors.worst_abs_pct == pytest.approx(10)


def test_the_worst_configurations_of_each_machine():
    worst = worst_configurations(list(read_blind_tests(HISTORY).tests))
    assert [(t.machine, round(t.error_pct)) for t in worst] == [
        ("h100", -10), ("h100", -4), ("h100", -3), ("h200-x2", -6), ("h200-x2", -5), ("h200-x2", -4)]
    assert worst[0].sweep == "h100/validate2" and worst[0].label.startswith("H=2048 B=6400 p=1")


def test_the_report_words_the_history(tmp_path, four_runs_report):
    out = build_from_runs(four_runs(), [], tmp_path / "rep", history=read_blind_tests(HISTORY), draw=False)
    md = (out / "report.md").read_text()
    assert f"Blind-test history ({HISTORY}: every" in md and "h200-x2: 6 configuration(s) in 1 sweep(s)" in md
    assert "0 above, 6 below: biased, the model is too fast" in md
    rows = {r["machine"]: r for r in csv.DictReader(open(out / "blind_tests_by_machine.csv"))}
    assert set(rows) == {"h100", "h200-x2", "all"} and float(rows["h100"]["median |error| %"]) == pytest.approx(3)
    assert rows["h100"]["commits"] == "1a2b3c4, 5d6e7f8" and "2026-11-22 to 2026-11-23, median" in md
    assert "h200-x2: 6 configuration(s) in 1 sweep(s), 2026-11-24, median" in md   # one date, once
    worst = list(csv.DictReader(open(out / "blind_tests_worst.csv")))
    assert len(worst) == 6 and float(worst[0]["error %"]) == pytest.approx(-10)
    # without the history, none of it
    md = (four_runs_report / "report.md").read_text()
    assert "Blind-test history" not in md and not (four_runs_report / "blind_tests_worst.csv").exists()


def test_a_cpu_runs_report_still_shows_the_history(tmp_path):
    from test_report import fake_run
    import dataclasses
    run = fake_run(1, "resident", "nccl", 0.25)
    m = run.manifest
    run = dataclasses.replace(run, manifest=dataclasses.replace(
        m, config={**m.config, "backend": "numpy"}, machine={"nodes": {"h": {"cpu": "x86_64", "ranks": [0]}}},
        ran=dataclasses.replace(m.ran, backend="numpy", gpu=None)))
    out = build_from_runs([run], [], tmp_path / "rep", history=read_blind_tests(HISTORY), draw=False)
    assert "## The model's blind tests so far" in (out / "report.md").read_text()


def bad_copy(tmp_path, change):
    rows = list(csv.DictReader(open(HISTORY)))
    change(rows)
    path = tmp_path / "bad.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


@pytest.mark.parametrize("change, words", [
    (lambda rows: [r.pop("spread") for r in rows], "no column spread"),
    (lambda rows: rows[2].update(measured_s="fast"), ":4: measured_s 'fast' is not a number"),
    (lambda rows: rows[0].update(predicted_s="0"), ":2: predicted_s '0' must be positive"),
    (lambda rows: rows[1].update(measured_max_s="0.0009"), ":3: measured_s 0.001 is not between"),
    (lambda rows: rows[4].update(machine=""), ":6: no machine")])
def test_a_bad_history_is_one_line_naming_the_file(tmp_path, change, words):
    path = bad_copy(tmp_path, change)
    with pytest.raises(PerfmlpError, match=words) as e:
        read_blind_tests(path)
    assert str(e.value).startswith(str(path)) and "\n" not in str(e.value)


def test_the_report_command_takes_the_history(tmp_path):
    write_run(tmp_path / "t", gpu_records(transfer="resident", comm="nccl", batches=6))
    cmd = [sys.executable, "-m", "perfmlp.report", str(tmp_path / "t"), "--out", str(tmp_path / "r"), "--no-figures"]
    r = subprocess.run(cmd + ["--blind-tests", str(HISTORY)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "r" / "blind_tests_by_machine.csv").exists()
    # a history that is not one: one line, exit 2, nothing written
    (tmp_path / "not.csv").write_text("a,b\n1,2\n")
    for bad in (tmp_path / "not.csv", tmp_path / "absent.csv"):
        r = in_process(report_main, [tmp_path / "t", "--out", tmp_path / "r2", "--blind-tests", bad])   # no interpreter
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and str(bad) in r.stderr, r.stderr
        assert not (tmp_path / "r2").exists()


def test_the_columns_are_the_documented_ones():
    assert list(csv.DictReader(open(HISTORY)).fieldnames) == list(COLUMNS)


def test_an_empty_history_is_said_so(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text(",".join(COLUMNS) + "\n")
    out = build_from_runs(four_runs(), [], tmp_path / "rep", history=read_blind_tests(empty), draw=False)
    assert f"Blind-test history ({empty}): the file holds no blind test." in (out / "report.md").read_text()


def test_a_sweeps_rows_come_from_its_traces_as_the_report_times_them(tmp_path, capsys):
    from synthetic import write_predictions
    from perfmlp.report.blind_rows import main
    sweep = tmp_path / "validate-x"
    sweep.mkdir()
    started = "2026-11-21T13:14:21+00:00"
    runs = {"validate-x-h512-b3200-p1-float32-resident-nccl-cublas-graph-r1-0a1b2c3d": 0.10,   # ms a replay
            "validate-x-h512-b3200-p1-float32-resident-nccl-cublas-graph-r2-4e5f6a7b": 0.12,
            "validate-x-h512-b3200-p1-float32-pinned-nccl-cublas-graph-r1-8c9d0e1f": 0.10}
    for run_id, replay_ms in runs.items():
        transfer = "pinned" if "pinned" in run_id else "resident"
        manifest, ranks = gpu_records(transfer=transfer, comm="nccl", exec_mode="graph", batches=6, start=started,
                                      run_id=run_id, phase_ms={"graph": replay_ms})
        manifest["versions"] = {"perfmlp_git": "abc1234def"}
        write_run(sweep, (manifest, ranks))
    blind = {"total_s": 0.5e-3, "groups_s": {"compute": 0.5e-3}, "predicted_at": "2026-11-21T00:00:00+00:00"}
    late = {**blind, "predicted_at": "2026-11-22T00:00:00+00:00"}   # written after its run started
    write_predictions(sweep, {**{r: blind for r in runs if "resident" in r},
                              next(r for r in runs if "pinned" in r): late})
    assert main([str(sweep), "--machine-kind", "h200", "--machine", "h200-calibrated"]) == 0
    out = capsys.readouterr()
    rows = list(csv.DictReader([",".join(COLUMNS) + "\n", *out.out.splitlines(keepends=True)]))
    assert len(rows) == 1 and "pinned" in out.err and "left out" in out.err   # the late prediction is not blind
    r = rows[0]
    assert (r["machine"], r["commit"], r["date"], r["sweep"], r["repeats"]) == \
        ("h200", "abc1234", "2026-11-21", "h200/validate-x", "2")
    assert r["run"] == "validate-x-h512-b3200-p1-float32-resident-nccl-cublas-graph"
    lo, med, hi = float(r["measured_min_s"]), float(r["measured_s"]), float(r["measured_max_s"])
    assert lo < med < hi and med == pytest.approx((lo + hi) / 2) and float(r["spread"]) == pytest.approx(hi / lo - 1)
    assert hi - lo == pytest.approx(0.02e-3, rel=1e-6)    # the repeats differ by 0.02 ms a batch
    history = tmp_path / "history.csv"
    history.write_text(",".join(COLUMNS) + "\n" + out.out)
    assert read_blind_tests(history).tests[0].predicted_s == pytest.approx(0.5e-3)


def test_a_sweep_without_predictions_is_one_line(tmp_path):
    write_run(tmp_path / "s", gpu_records(run_id="a"))
    r = subprocess.run([sys.executable, "-m", "perfmlp.report.blind_rows", str(tmp_path / "s"), "--machine-kind",
                        "h200", "--machine", "h200-calibrated"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
    assert "predictions.json" in r.stderr
