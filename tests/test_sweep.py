import sys

import pytest

from perfmlp.errors import PerfmlpError
from perfmlp.sweep import expand

from conftest import mpiexec, run_cmd


def test_expand_matrix_and_batch_per_proc():
    runs = expand({"name": "s", "base": {"hidden_sizes": [8]}, "batch_per_proc": 100,
                   "matrix": {"procs": [1, 2], "batch_transfer": ["pinned", "resident"]},
                   "runs": [{"procs": 4, "batch_size": 40}]}, "s.yaml")
    assert len(runs) == 5
    assert runs[1][1] == 1 and runs[1][2]["batch_size"] == 100
    assert runs[2][1] == 2 and runs[2][2]["batch_size"] == 200
    assert runs[-1][2]["batch_size"] == 40


@pytest.mark.parametrize("spec, words", [
    ({"matrix": {"procs": 1}}, "matrix.procs must be a non-empty list"),
    ({"matrix": {"batch_sise": [1]}}, "unknown configuration key: batch_sise"),
    ({"runs": [{"procs": 0}]}, "procs must be a positive integer"),
    ({"matric": {}}, "unknown sweep key matric"),
    ({"runs": [{"procs": 1}, {"procs": 1}]}, "two runs would share the id"),
])
def test_bad_sweeps(spec, words):
    with pytest.raises(PerfmlpError, match=words):
        expand(spec, "s.yaml")


def test_sweep_runs_then_reports(tmp_path):
    mpiexec()
    f = tmp_path / "s.yaml"
    f.write_text("name: t\nbase: {data: synthetic, input_size: 20, hidden_sizes: [8], n_train: 60, epochs: 1}\n"
                 "batch_per_proc: 10\nmatrix: {procs: [1, 2]}\n")
    r = run_cmd([sys.executable, "-m", "perfmlp.sweep", str(f), "--trace-dir", str(tmp_path / "tr"),
                 "--report-out", str(tmp_path / "rep")], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(": ok") == 2
    assert (tmp_path / "tr" / "t-h8-b20-p2-float32-pageable-staged-cublas" / "rank-1.jsonl").is_file()
    assert (tmp_path / "rep" / "report.md").is_file()
    r = run_cmd([sys.executable, "-m", "perfmlp.sweep", str(f), "--trace-dir", str(tmp_path / "tr"), "--no-report"])
    assert r.stdout.count("already traced, skipped") == 2
