import csv
import json
import shutil
import subprocess
import sys

import pytest

from perfmlp.model.costs import batch_counts
from perfmlp.model.machine import load_machine
from perfmlp.model.predict import predict_batch
from perfmlp.trace.reader import Run
from perfmlp.report import build_from_runs

from conftest import ROOT, run_perfmlp

SIZES = (784, 512, 10)


def fake_run(procs, transfer, comm, t_ms, B=3200, run_id=None):
    cfg = {"input_size": 784, "hidden_sizes": [512], "num_classes": 10, "batch_size": B, "n_train": 4 * B,
           "precision": "float32", "batch_transfer": transfer, "comm": comm, "gemm": "cublas"}
    manifest = {"schema": "perfmlp.trace/1", "run_id": run_id or f"p{procs}-{transfer}-{comm}", "config": cfg,
                "procs": procs, "status": "complete", "backend": "cupy",
                "machine": {"nodes": {"h": {"gpu": "NVIDIA H200", "gpu_count": 4, "ranks": list(range(procs))}}}}
    ranks = {}
    for r in range(procs):
        b = B // procs
        c = batch_counts(SIZES, b, 4, comm, transfer)
        recs = [{"kind": "header", "schema": "perfmlp.trace/1", "rank": r, "pid": 1}]
        for k in range(4):
            phases = {"h2d": [0.0, 0.1 * t_ms], "forward": [0.1 * t_ms, 0.4 * t_ms],
                      "backward": [0.5 * t_ms, 0.4 * t_ms], "update": [0.9 * t_ms, 0.1 * t_ms]}
            recs.append({"kind": "batch", "epoch": 0, "batch": k, "samples": B, "local_samples": b,
                         "t0_s": k * 0.01, "flops": dict(c.flops), "bytes_h2d": c.bytes_h2d,
                         "bytes_d2h": c.bytes_d2h, "bytes_mpi": c.bytes_mpi, "bytes_nccl": c.bytes_nccl,
                         "t_ms": phases, "t_ms_total": 50.0 if k == 0 else t_ms, "wall_ms": t_ms})
        recs.append({"kind": "end", "status": "complete"})
        ranks[r] = recs
    return Run.from_records(manifest, ranks)


def read_csv(path):
    return list(csv.DictReader(open(path)))


def test_report_tables_hold_the_known_numbers(tmp_path):
    runs = [fake_run(1, "pageable", "mpi-staged", 2.0), fake_run(2, "pageable", "mpi-staged", 1.5),
            fake_run(4, "pageable", "mpi-staged", 1.25), fake_run(1, "resident", "nccl", 0.25)]
    out = build_from_runs(runs, [], tmp_path / "rep")
    rows = {r["run"]: r for r in read_csv(out / "runs.csv")}
    r1 = rows["p1-pageable-mpi-staged"]
    flops = batch_counts(SIZES, 3200, 4).flops_total
    assert float(r1["t_ms"]) == 2.0  # the warm-up batch (50 ms) is left out
    peak = load_machine("h200").peak_flops_per_s_float32  # the datasheet file for "NVIDIA H200"
    assert float(r1["util_datasheet"]) == pytest.approx(flops / 2e-3 / peak)
    c = batch_counts(SIZES, 3200, 4)
    assert float(r1["ai"]) == pytest.approx(flops / c.bytes_copied)
    cal = load_machine("h200-calibrated")
    pred = predict_batch(cal, SIZES, 3200, 1, "float32", "mpi-staged", "pageable", traced=True)
    assert float(r1["err_calibrated_pct"]) == pytest.approx(100 * (pred.total_s / 2e-3 - 1))
    r4 = rows["p4-pageable-mpi-staged"]
    assert float(r4["flops_job"]) == pytest.approx(4 * batch_counts(SIZES, 800, 4).flops_total)
    strong = [r for r in read_csv(out / "scaling.csv") if r["scaling"] == "strong" and r["transfer"] == "pageable"]
    eff = {int(r["procs"]): float(r["efficiency %"]) for r in strong}
    assert eff[2] == pytest.approx(100 * 2.0 / (2 * 1.5)) and eff[4] == pytest.approx(100 * 2.0 / (4 * 1.25))
    util = read_csv(out / "q2_1_utilisation.csv")
    assert util[0]["reference solution (RTX 6000)"] == "6.45%"
    md = (out / "report.md").read_text()
    assert "Question 2.1" in md and "Question 2.2" in md and "Scaling" in md
    for fig in ("roofline_modified", "roofline_standard", "measured_vs_predicted", "scaling_strong"):
        for ext in ("png", "svg"):
            assert (out / f"{fig}.{ext}").stat().st_size > 1000
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 4 and "<table>" in html


def test_report_command_on_real_and_bad_folders(tmp_path):
    traces = tmp_path / "traces"
    args = ["--data", "synthetic", "--input-size", "20", "--hidden-size", "8", "--n-train", "40",
            "--batch-size", "10", "--trace-dir", str(traces)]
    assert run_perfmlp(*args, "--run-id", "good").returncode == 0
    assert run_perfmlp(*args, "--run-id", "other", "--hidden-size", "6").returncode == 0  # mixed configurations
    # a partial run: its end lines cut off
    shutil.copytree(traces / "good", traces / "partial")
    m = json.loads((traces / "partial" / "manifest.json").read_text())
    m.update(run_id="partial", status="running")
    (traces / "partial" / "manifest.json").write_text(json.dumps(m))
    lines = (traces / "partial" / "rank-0.jsonl").read_text().splitlines()
    (traces / "partial" / "rank-0.jsonl").write_text("\n".join(lines[:-3]) + "\n" + lines[-3][:20])
    # a malformed manifest and a folder with nothing to read
    (traces / "broken").mkdir()
    (traces / "broken" / "manifest.json").write_text("{oops")
    (traces / "broken" / "rank-0.jsonl").write_text("")
    out = tmp_path / "rep"
    r = subprocess.run([sys.executable, "-m", "perfmlp.report", str(traces), "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert f"skipped: {traces / 'broken' / 'manifest.json'}: unreadable manifest" in r.stderr
    assert "truncated last line (the run was cut off)" in r.stderr
    rows = {x["run"]: x for x in read_csv(out / "runs.csv")}
    assert set(rows) == {"good", "other", "partial"}
    assert rows["partial"]["status"].startswith("incomplete") and rows["good"]["status"] == "complete"
    empty = tmp_path / "empty"
    empty.mkdir()
    for folder, words in ((empty, "no readable run"), (tmp_path / "missing", "no such folder")):
        r = subprocess.run([sys.executable, "-m", "perfmlp.report", str(folder), "--out", str(tmp_path / "x")],
                           capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 2 and words in r.stderr and r.stderr.strip().count("\n") == 0
