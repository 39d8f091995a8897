import csv
import dataclasses
import json
import re
import shutil
import statistics
import subprocess
import sys

import pytest

from perfmlp.errors import PerfmlpError
from perfmlp.model.costs import DEFAULT_BUCKET_BYTES, batch_counts
from perfmlp.model.machine import load_machine
from perfmlp.model.predict import predict_batch
from perfmlp.names import PHASES
from perfmlp.trace.reader import Run
from perfmlp.trace.upgrade import format1
from perfmlp.report import build_from_runs, figures, sections_of
from perfmlp.report.__main__ import main as report_main
from perfmlp.report.analysis import TERMS, Machines, analyse, measured_terms, predicted_terms, summarise
from perfmlp.report.sections.validation import section_model
from perfmlp.report.study import load_study

from conftest import ROOT, in_process, run_perfmlp

SIZES = (784, 512, 10)
H200 = "NVIDIA H200"


def profiled(run, attached=True):
    """The run as if an NVTX tool had been attached."""
    return dataclasses.replace(run, manifest=dataclasses.replace(run.manifest, profiler_attached=attached))


def fake_run(procs, transfer, comm, t_ms, B=3200, run_id=None, gemm="cublas", gpu=H200, endings=None,
             manifest_status="complete", exec_mode=None, bucket_bytes=None, trace_level=None):
    """A run as its trace files would hold it: 4 batches per rank, the first
    (warm-up) 50 ms. `endings`: rank -> end-line status, None for no end line.
    `exec_mode`: run --exec (None: not in the configuration, as before --exec
    existed); `bucket_bytes`: run --overlap with these buckets (None: no overlap)."""
    cfg = {"input_size": 784, "hidden_sizes": [512], "num_classes": 10, "batch_size": B, "n_train": 4 * B,
           "precision": "float32", "batch_transfer": transfer, "comm": comm, "gemm": gemm}
    if exec_mode:
        cfg["exec"] = exec_mode
    if bucket_bytes:
        cfg.update(overlap=True, bucket_bytes=bucket_bytes)
    manifest = {"schema": "perfmlp.trace/1", "run_id": run_id or f"p{procs}-{transfer}-{comm}-{gemm}",
                "config": cfg, "procs": procs, "status": manifest_status, "backend": "cupy",
                "machine": {"nodes": {"h": {"gpu": gpu, "gpu_count": 4, "ranks": list(range(procs))}}}}
    if trace_level:
        manifest["trace_level"] = trace_level
    endings = endings or dict.fromkeys(range(procs), "complete")
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
                         "t_ms": phases, "t_ms_total": 50.0 if k == 0 else t_ms, "wall_ms": t_ms,
                         "clock": "cuda-events"})
        if endings[r] is not None:
            recs.append({"kind": "end", "status": endings[r]})
        ranks[r] = recs
    return Run.from_records(*format1(manifest, ranks))  # format-1 objects, through the upgrader


def read_csv(path):
    return list(csv.DictReader(open(path)))


def four_runs():
    return [fake_run(1, "pageable", "mpi-staged", 2.0), fake_run(2, "pageable", "mpi-staged", 1.5),
            fake_run(4, "pageable", "mpi-staged", 1.25), fake_run(1, "resident", "nccl", 0.25)]


def test_report_tables_hold_the_known_numbers(four_runs_report):
    out = four_runs_report
    rows = {r["run"]: r for r in read_csv(out / "runs.csv")}
    r1 = rows["p1-pageable-mpi-staged-cublas"]
    flops = batch_counts(SIZES, 3200, 4).flops_total
    assert float(r1["t_ms"]) == 2.0  # the warm-up batch (50 ms) is left out
    peak = load_machine("h200").peak_flops_per_s_float32  # the datasheet file for "NVIDIA H200"
    assert float(r1["util_datasheet"]) == pytest.approx(flops / 2e-3 / peak)
    c = batch_counts(SIZES, 3200, 4)
    assert float(r1["ai"]) == pytest.approx(flops / c.bytes_copied)
    cal = load_machine("h200-calibrated")
    # a fake run's manifest names no trace level: an older run's, priced as phases
    pred = predict_batch(cal, SIZES, 3200, 1, "float32", "mpi-staged", "pageable", trace_level="phases")
    assert float(r1["err_calibrated_pct"]) == pytest.approx(100 * (pred.total_s / 2e-3 - 1))
    r4 = rows["p4-pageable-mpi-staged-cublas"]
    assert float(r4["flops_job"]) == pytest.approx(4 * batch_counts(SIZES, 800, 4).flops_total)
    strong = [r for r in read_csv(out / "scaling.csv") if r["scaling"] == "strong" and r["transfer"] == "pageable"]
    eff = {int(r["procs"]): float(r["efficiency %"]) for r in strong}
    assert eff[2] == pytest.approx(100 * 2.0 / (2 * 1.5)) and eff[4] == pytest.approx(100 * 2.0 / (4 * 1.25))
    util = read_csv(out / "q2_1_utilisation.csv")
    assert util[0]["reference (Quadro RTX 6000) utilisation"] == "6.45%"
    assert float(util[0]["reference (Quadro RTX 6000) ms"]) == 4.9
    # 5 x 6.45% = 32.25%, printed to one place
    assert util[0]["target (5x) utilisation"] == "32.2%"
    assert float(util[0]["perfmlp, reference scheme (pageable, mpi-staged, eager): ms"]) == 2.0
    md = (out / "report.md").read_text()
    assert "Question 2.1" in md and "Question 2.2" in md and "Scaling" in md
    for fig in ("roofline_modified", "roofline_standard", "measured_vs_predicted", "scaling_strong"):
        for ext in ("png", "svg"):
            assert (out / f"{fig}.{ext}").stat().st_size > 1000
    html = (out / "report.html").read_text()
    # each figure linked as the PNG written beside the page, none embedded
    linked = re.findall(r'<img src="([^"]+)"', html)
    assert len(linked) >= 4 and all((out / src).is_file() for src in linked) and "<table>" in html
    assert "base64" not in html
    # every run eager without overlap: no configuration ran two ways, so no execution-mode section
    assert "## Execution mode and overlap" not in md and not (out / "execution_modes.csv").exists()


def test_every_csv_has_distinct_column_names(four_runs_report):
    # the old q2_1 table had "utilisation" and "utilisation " (a trailing space)
    for path in four_runs_report.glob("*.csv"):
        header = next(csv.reader(open(path)))
        assert len({h.strip() for h in header}) == len(header), path.name
        assert all(h == h.strip() for h in header), path.name


def test_summaries_are_typed_and_frozen():
    run = fake_run(2, "pageable", "mpi-staged", 1.5)
    s = summarise(run, Machines(load_machine("h200"), load_machine("h200-calibrated")))
    assert s.hidden == (512,) and s.batch == 3200 and s.complete is True and s.profiled is False
    assert s.calibrated.machine == "NVIDIA H200 (calibrated)" and s.datasheet.machine == "NVIDIA H200"
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.t_ms = 0.0
    with pytest.raises(TypeError):
        s.phases_ms[0]["forward"] = 0.0


def test_terms_come_from_the_trace_format():
    # every phase of the trace format lands in one of the report's terms
    # and has a colour in the phase figure
    phases = {p: float(i + 1) for i, p in enumerate(PHASES)}  # 1 + 2 + ... + 16 = 136
    assert sum(measured_terms(phases).values()) == 136
    assert set(figures.PHASE_COLORS) == set(PHASES)
    # forward + loss + backward + update + graph = 2 + 3 + 4 + 8 + 9 = 26 ms of compute
    assert measured_terms(phases)["compute"] == 26
    # the model's terms sum into the report's without loss
    pred = predict_batch(load_machine("h200-calibrated"), SIZES, 3200, 2, "float32", "mpi-staged", "pageable",
                         trace_level="phases")
    assert sum(predicted_terms(pred).values()) == pytest.approx(pred.total_s * 1e3)
    assert tuple(predicted_terms(pred)) == TERMS


def test_the_study_is_data(tmp_path):
    st = load_study()  # shipped: perfmlp/report/studies/cme213.yaml, read through importlib.resources
    assert (st.input_size, st.hidden_size, st.batch_size) == (784, 512, 3200)
    assert st.reference_utilisation == {1: 0.0645, 2: 0.0224, 4: 0.0096}
    assert st.reference_ms_per_batch == {1: 4.9, 2: 7.0, 4: 8.2}
    assert st.procs == (1, 2, 4) and st.q2_2_hidden_sizes == (512, 1024, 2048)
    # another study: the report's Question 2.1 follows it
    text = (ROOT / "perfmlp/report/studies/cme213.yaml").read_text()
    other = tmp_path / "small.yaml"
    other.write_text(text.replace("hidden_size: 512", "hidden_size: 256").replace("procs: [1, 2, 4]", "procs: [1, 2]")
                     .replace("{1: 0.0645, 2: 0.0224, 4: 0.0096}", "{1: 0.5, 2: 0.25}")
                     .replace("{1: 4.9, 2: 7.0, 4: 8.2}", "{1: 1.0, 2: 2.0}"))
    out = build_from_runs(four_runs(), [], tmp_path / "rep", study=str(other), draw=False)
    # no run of H=256: the FLOPs table counts the shapes the runs had (B split over 1, 2, 4), not the study's
    flops = {(r["shape"], r["part"]): int(r["exact"]) for r in read_csv(out / "q2_1_flops.csv")}
    assert flops[("784-512-10, B=1600", "batch")] == batch_counts((784, 512, 10), 1600, 4).flops_total
    assert not any("784-256-10" in shape for shape, _ in flops)
    util = read_csv(out / "q2_1_utilisation.csv")
    assert [u["GPUs"] for u in util] == ["1", "2"] and util[1]["reference (Quadro RTX 6000) utilisation"] == "25.00%"
    # no run of H=256: nothing measured to set beside the reference
    assert util[0]["perfmlp, reference scheme (pageable, mpi-staged, eager): utilisation"] == ""   # missing: empty
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("{1: 4.9, 2: 7.0, 4: 8.2}", "{1: 4.9, 2: 7.0}"))
    with pytest.raises(PerfmlpError, match=r"bad.yaml: reference_ms_per_batch must give a value for each of procs"):
        load_study(str(bad))
    with pytest.raises(PerfmlpError, match=r"no study named 'nope' \(shipped: cme213; or give a .yaml file\)"):
        load_study("nope")


def test_rank_endings_are_said_plainly(tmp_path):
    # rank 0 finished, rank 1 failed, rank 2 was killed (no end line); rank 0
    # never rewrote the manifest. The old report said "incomplete (running)".
    run = fake_run(3, "pageable", "mpi-staged", 1.5, run_id="killed",
                   endings={0: "complete", 1: "failed", 2: None}, manifest_status="running")
    out = build_from_runs([run, fake_run(1, "pageable", "mpi-staged", 2.0)], [], tmp_path / "rep", draw=False)
    rows = {r["run"]: r for r in read_csv(out / "runs.csv")}
    assert rows["killed"]["status"] == ("rank 0 complete; rank 1 failed; rank 2 killed (no end line); "
                                        "manifest still says running")
    assert rows["p1-pageable-mpi-staged-cublas"]["status"] == "complete"


def test_no_calibration_is_not_called_calibrated(tmp_path):
    # an H100: the shipped files hold its datasheet and no calibration
    runs = [fake_run(1, "pageable", "mpi-staged", 2.0, gpu="NVIDIA H100 SXM5 80GB"),
            fake_run(2, "pageable", "mpi-staged", 1.5, gpu="NVIDIA H100 SXM5 80GB")]
    out = build_from_runs(runs, [], tmp_path / "rep", draw=False)
    md = (out / "report.md").read_text()
    assert "calibrated model" not in md and "Term by term, datasheet model" in md
    secs = sections_of(analyse(runs, [], load_study()))
    (fig,) = [f for s in secs for f in s.figures if f.name == "roofline_modified"]
    assert "predicted (datasheet model)" in fig.draw(**fig.args)["svg"].decode()
    assert "No calibrated machine file for this GPU" in md
    assert "pred_calibrated_ms" not in read_csv(out / "runs.csv")[0]
    accuracy = read_csv(out / "model_accuracy.csv")
    assert {r["machine file"] for r in accuracy} == {"NVIDIA H100 SXM5 80GB"}


def test_reference_gemm_runs_are_not_accuracy_points():
    runs = four_runs() + [fake_run(1, "resident", "nccl", 2.3, gemm="naive"),
                          fake_run(1, "resident", "nccl", 0.3, run_id="profiled")]
    runs[-1] = profiled(runs[-1])
    a = analyse(runs, [], load_study())
    (fig,) = section_model(a).figures
    labels = {p["label"] for p in fig.args["rows"]}
    assert labels == {r.run_id for r in four_runs()}  # no naive GEMM, no profiled run
    # the terms table still lists every GPU run
    terms = next(t for t in section_model(a).tables if t.name == "terms")
    assert len(terms.rows) == 6


def test_report_cites_nothing_outside_the_repository(four_runs_report):
    md = (four_runs_report / "report.md").read_text()
    assert "SPEC" not in md and "cme213.yaml" in md


def test_regenerated_report_is_byte_identical(tmp_path, four_runs_report):
    # a copy of the shared report, its files' times kept, built again over itself: every file the same bytes
    # as the shared report's (built in a fresh folder), and none rewritten
    a = shutil.copytree(four_runs_report, tmp_path / "a")
    stamps = {p.name: p.stat().st_mtime_ns for p in a.iterdir()}
    build_from_runs(four_runs(), [], a)
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in four_runs_report.iterdir()) and any(n.endswith(".svg") for n in names)
    for name in names:
        assert (a / name).read_bytes() == (four_runs_report / name).read_bytes(), name
        assert (a / name).stat().st_mtime_ns == stamps[name], name


def test_report_command_on_real_and_bad_folders(tmp_path):
    traces = tmp_path / "traces"
    args = ["--backend", "numpy", "--data", "synthetic", "--input-size", "20", "--hidden-size", "8",
            "--n-train", "40", "--batch-size", "10", "--trace-dir", str(traces)]
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
    r = in_process(report_main, [traces, "--out", out, "--no-figures"])   # the figures: the next tests'
    assert r.returncode == 0, r.stderr
    assert f"skipped: {traces / 'broken' / 'manifest.json'}: unreadable manifest" in r.stderr
    assert "truncated last line (the run was cut off)" in r.stderr
    rows = {x["run"]: x for x in read_csv(out / "runs.csv")}
    assert set(rows) == {"good", "other", "partial"}
    assert rows["partial"]["status"] == "rank 0 killed (no end line); manifest still says running"
    assert rows["good"]["status"] == "complete"
    # CPU runs: the report says why the GPU sections are not there, and names
    # the communication as `run --comm` does
    assert {x["comm"] for x in rows.values()} == {"mpi"} and {x["backend"] for x in rows.values()} == {"numpy"}
    assert "util_datasheet" not in rows["good"] and "pred_datasheet_ms" not in rows["good"]
    md = (out / "report.md").read_text()
    assert "## No GPU runs" in md and "None of the 3 runs ran on a GPU (backend numpy)" in md
    for gpu_section in ("Question 2.2", "Scaling", "Measured against predicted", "Which change"):
        assert f"## {gpu_section}" not in md
    assert "calibrated" not in md and "mpi-host" not in md
    assert not (out / "scaling.csv").exists() and not (out / "q2_1_utilisation.csv").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    for folder, words in ((empty, "no readable run"), (tmp_path / "missing", "no such folder")):
        r = in_process(report_main, [folder, "--out", tmp_path / "x"])   # the refusals: no interpreter to start
        assert r.returncode == 2 and words in r.stderr and r.stderr.strip().count("\n") == 0


def test_report_command_cannot_write_its_folder(tmp_path):
    traces = tmp_path / "traces"
    assert run_perfmlp("--data", "synthetic", "--input-size", "20", "--hidden-size", "8", "--n-train", "40",
                       "--batch-size", "10", "--trace-dir", str(traces), "--run-id", "one").returncode == 0
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    r = in_process(report_main, [traces, "--out", blocker / "rep"])  # a folder under a file: no root can make it
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "cannot write the report" in r.stderr and "Traceback" not in r.stderr


def test_report_command_without_matplotlib(tmp_path):
    # matplotlib made unimportable in the child: one line naming the extra, exit 2, nothing written
    code = ("import sys; sys.modules['matplotlib'] = None; from perfmlp.report.__main__ import main; "
            f"sys.exit(main([{str(tmp_path)!r}, '--out', {str(tmp_path / 'rep')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "pip install 'perfmlp[report]'" in r.stderr
    assert not (tmp_path / "rep").exists()


def test_a_report_without_figures_needs_no_matplotlib_and_leaves_no_old_figure(tmp_path):
    traces = tmp_path / "t"
    assert run_perfmlp("--data", "synthetic", "--input-size", "20", "--hidden-size", "8", "--n-train", "40",
                       "--batch-size", "10", "--trace-dir", traces, "--run-id", "r").returncode == 0
    assert in_process(report_main, [traces, "--out", tmp_path / "rep"]).returncode == 0   # with its figures, first
    drawn = sorted(p.name for p in (tmp_path / "rep").glob("*.png"))
    assert drawn and all((tmp_path / "rep" / f"{n[:-4]}.svg").exists() for n in drawn)
    code = ("import sys; sys.modules['matplotlib'] = None; from perfmlp.report.__main__ import main; "
            f"sys.exit(main([{str(traces)!r}, '--out', {str(tmp_path / 'rep')!r}, '--no-figures']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    rep = tmp_path / "rep"
    assert not list(rep.glob("*.png")) and not list(rep.glob("*.svg"))   # the earlier report's went with it
    md, page = (rep / "report.md").read_text(), (rep / "report.html").read_text()
    assert ".png" not in md and "<img" not in page and (rep / "configurations.csv").exists()


def test_verdict_of_a_graph_run_never_blames_the_hosts_launches():
    # a replayed step's compute phase is GPU time (events around the replay): twice the model's
    # GPU time is GPU time the model misses, while the same figures eager are the host's
    from perfmlp.report.verdicts import GEMMS, HOST, attribute
    m = load_machine("h200-calibrated")
    pred = predict_batch(m, (784, 512, 10), 3200, 2, comm="nccl", batch_transfer="resident", exec_mode="graph")
    inside = sum(pred.terms.values()) * 1e3
    runs = {mode: fake_run(2, "resident", "nccl", 2 * inside, exec_mode=mode) for mode in ("eager", "graph")}
    a = analyse(list(runs.values()), [], load_study())
    graph, eager = (attribute(next(r for r in a.runs if r.exec == mode)) for mode in ("graph", "eager"))
    assert graph.bound_by == GEMMS and graph.share(HOST) < 0.2
    assert eager.bound_by == HOST


MiB = 1 << 20


def mode_variant(procs, exec_mode, bucket_bytes, times_ms, transfer="resident", comm="nccl"):
    """The repeats of one variant: one fake run per time per batch."""
    name = f"p{procs}-{transfer}-{comm}-{exec_mode}-{bucket_bytes or 'none'}"
    return [fake_run(procs, transfer, comm, t, run_id=f"{name}-r{i}", exec_mode=exec_mode, bucket_bytes=bucket_bytes)
            for i, t in enumerate(times_ms)]


def predicted_ms(procs, exec_mode, bucket_bytes):
    pred = predict_batch(load_machine("h200-calibrated"), SIZES, 3200, procs, "float32", "nccl", "resident",
                         trace_level="phases", exec_mode=exec_mode, overlap=bucket_bytes is not None,
                         bucket_bytes=bucket_bytes or DEFAULT_BUCKET_BYTES)
    return pred.total_s * 1e3


def test_execution_modes_set_measured_changes_beside_predicted(tmp_path):
    runs = (mode_variant(2, "eager", None, [0.30, 0.36, 0.33])      # median 0.33, min 0.30, max 0.36
            + mode_variant(2, "eager", MiB, [0.31])
            + mode_variant(2, "graph", None, [0.21, 0.20, 0.25])    # median 0.21
            + mode_variant(2, "graph", MiB, [0.19])
            + mode_variant(2, "graph", 16 * MiB, [0.23])
            + mode_variant(4, "graph", None, [0.20])                # no eager run: the graph is the baseline
            + mode_variant(4, "graph", MiB, [0.18])
            # left out: one variant, repeated
            + mode_variant(1, "eager", None, [2.0, 2.1], transfer="pageable", comm="mpi-staged")
            # left out: the other variants of p=1 resident/nccl were profiled or killed
            + mode_variant(1, "eager", None, [0.25]) + mode_variant(1, "graph", None, [0.2])
            + [fake_run(1, "resident", "nccl", 0.19, run_id="killed", exec_mode="graph", bucket_bytes=MiB,
                        endings={0: None})])
    runs[-2] = profiled(runs[-2])
    out = build_from_runs(runs, [], tmp_path / "rep", draw=False)
    rows = read_csv(out / "execution_modes.csv")
    assert [(r["p"], r["exec"], r["overlap"], r["runs"]) for r in rows] == [
        ("2", "eager", "none", "3"), ("2", "eager", "1 MiB", "1"), ("2", "graph", "none", "3"),
        ("2", "graph", "1 MiB", "1"), ("2", "graph", "16 MiB", "1"), ("4", "graph", "none", "1"),
        ("4", "graph", "1 MiB", "1")]
    measured = {(2, "eager", None): 0.33, (2, "eager", MiB): 0.31, (2, "graph", None): 0.21, (2, "graph", MiB): 0.19,
                (2, "graph", 16 * MiB): 0.23, (4, "graph", None): 0.20, (4, "graph", MiB): 0.18}
    predicted = {k: predicted_ms(*k) for k in measured}
    base = {2: (2, "eager", None), 4: (4, "graph", None)}
    for row, k in zip(rows, measured):
        assert float(row["measured ms (median)"]) == pytest.approx(measured[k])
        assert float(row["predicted ms"]) == pytest.approx(predicted[k])
        assert float(row["error %"]) == pytest.approx(100 * (predicted[k] / measured[k] - 1))
        if k == base[k[0]]:
            assert row["measured vs baseline"] == row["predicted vs baseline"] == "baseline"
        else:
            assert row["measured vs baseline"] == f"{measured[k] / measured[base[k[0]]]:.2f}x"
            assert row["predicted vs baseline"] == f"{predicted[k] / predicted[base[k[0]]]:.2f}x"
    assert (rows[0]["measured min ms"], rows[0]["measured max ms"]) == ("0.3", "0.36")
    assert rows[1]["measured min ms"] == rows[1]["measured max ms"] == ""   # one run: no spread
    assert rows[2]["measured vs baseline"] == "0.64x"   # 0.21 / 0.33 = 0.636
    # a single-run variant's figures are its run's in "Measured against predicted"
    terms = {r["run"]: r for r in read_csv(out / "terms.csv")}["p2-resident-nccl-graph-16777216-r0"]
    assert float(rows[4]["predicted ms"]) == pytest.approx(float(terms["total predicted ms"]))
    assert float(rows[4]["error %"]) == pytest.approx(float(terms["error %"]))

    # the single changes: eager -> graph at each overlap, no overlap -> overlap at each exec mode
    pairs = {"eager -> graph": [((2, "eager", None), (2, "graph", None)), ((2, "eager", MiB), (2, "graph", MiB))],
             "no overlap -> overlap": [((2, "eager", None), (2, "eager", MiB)), ((2, "graph", None), (2, "graph", MiB)),
                                       ((2, "graph", None), (2, "graph", 16 * MiB)),
                                       ((4, "graph", None), (4, "graph", MiB))]}
    changes = read_csv(out / "execution_changes.csv")
    where = [(c["change"], c["from"], c["to"], " ".join(c["configuration"].split()[:3])) for c in changes]
    assert sorted(where) == sorted([
        ("eager -> graph", "eager", "graph", "H=512 B=3200 p=2"),
        ("eager -> graph", "eager, overlap 1 MiB", "graph, overlap 1 MiB", "H=512 B=3200 p=2"),
        ("no overlap -> overlap", "eager", "eager, overlap 1 MiB", "H=512 B=3200 p=2"),
        ("no overlap -> overlap", "graph", "graph, overlap 1 MiB", "H=512 B=3200 p=2"),
        ("no overlap -> overlap", "graph", "graph, overlap 16 MiB", "H=512 B=3200 p=2"),
        ("no overlap -> overlap", "graph", "graph, overlap 1 MiB", "H=512 B=3200 p=4")])
    (section,) = [p for p in (out / "report.md").read_text().split("\n## ") if p.startswith("Execution mode")]
    assert section.count("\n| 512 |") == 7   # the p=1 configurations left out
    assert "2 configuration(s) ran in more than one execution mode" in section
    for kind, kind_pairs in pairs.items():
        m = [measured[b] / measured[a] for a, b in kind_pairs]
        p = [predicted[b] / predicted[a] for a, b in kind_pairs]
        wrong = [(a, b, x, y) for (a, b), x, y in zip(kind_pairs, m, p) if (x < 1) != (y < 1)]  # none is exactly 1
        right = len(m) - len(wrong)
        assert (f"{kind.capitalize()} (" in section and f"{len(m)} pair(s)" in section
                and f"median ratio {statistics.median(m):.2f}x measured, {statistics.median(p):.2f}x predicted; "
                    f"the model gets the direction right in {right} of {len(m)}" in section)
        assert sum(c["direction right"] == "True" for c in changes if c["change"] == kind) == right
        for a, b, x, y in wrong:
            assert f"p={a[0]} " in section and f"{label(a)} -> {label(b)}: {x:.2f}x measured, {y:.2f}x predicted" \
                in section
    # eager -> graph: 0.21 / 0.33 = 0.636 and 0.19 / 0.31 = 0.613, median 0.62
    assert "median ratio 0.62x measured" in section
    # no overlap -> overlap: 0.31 / 0.33 = 0.939, 0.19 / 0.21 = 0.905, 0.23 / 0.21 = 1.095, 0.18 / 0.20 = 0.900;
    # median (0.905 + 0.939) / 2 = 0.92; the 16 MiB buckets measured slower than none
    assert "median ratio 0.92x measured" in section
    # overlap can only hide communication, so the model never predicts it slower with buckets no smaller than
    # a layer's gradient (16 MiB > 512 x 784 x 4 B): the measured loss, 0.23 / 0.21 = 1.10, is a wrong direction
    sixteen = next(c for c in changes if c["to"] == "graph, overlap 16 MiB")
    assert (sixteen["measured (times)"], sixteen["direction right"]) == ("1.1", "False")
    assert "graph -> graph, overlap 16 MiB: 1.10x measured" in section


def label(variant):
    _, exec_mode, bucket_bytes = variant
    return exec_mode + (f", overlap {bucket_bytes // MiB} MiB" if bucket_bytes else "")


def test_direction_of_a_change():
    from types import SimpleNamespace
    from perfmlp.report.analyses.scaling import Change, Variant

    def v(t_ms, pred_ms):
        return Variant("graph", None, (SimpleNamespace(t_ms=t_ms, predicted_ms=pred_ms),))
    before = v(1.0, 2.0)
    assert Change("x", "c", before, v(0.5, 1.0)).direction_right        # both gains
    assert Change("x", "c", before, v(1.5, 3.2)).direction_right        # both losses
    assert not Change("x", "c", before, v(0.9, 2.2)).direction_right    # measured gain, predicted loss
    assert not Change("x", "c", before, v(1.0, 1.8)).direction_right    # no change measured, a gain predicted
    assert Change("x", "c", before, v(1.0, 2.0)).direction_right        # neither changed
    half = Change("x", "c", before, v(0.5, 1.2))
    assert half.measured == 0.5 and half.predicted == pytest.approx(0.6)   # 0.5 / 1.0, 1.2 / 2.0


def test_no_configuration_ran_two_ways():
    from perfmlp.report.sections.scaling import section_execution
    # repeats of one variant, and a second variant only under a profiler: nothing to set side by side
    runs = mode_variant(2, "eager", None, [0.3, 0.31]) + mode_variant(2, "graph", None, [0.2])
    runs[-1] = profiled(runs[-1])
    assert section_execution(analyse(runs, [], load_study())) is None
    runs[-1] = profiled(runs[-1], False)
    assert section_execution(analyse(runs, [], load_study())) is not None


def test_each_run_is_predicted_at_the_trace_level_it_ran_at():
    machines = Machines(load_machine("h200"), load_machine("h200-calibrated"))
    preds = {}
    for recorded in (None, "auto", "counters", "phases", "kernels"):
        run = fake_run(1, "resident", "nccl", 0.2, exec_mode="graph", trace_level=recorded)
        preds[recorded] = summarise(run, machines).calibrated
        assert run.trace_level == {None: "phases", "auto": "counters"}.get(recorded, recorded)
    # no level recorded: a run made before the levels, its phases timed with CUDA events (one per replay here)
    assert preds[None].terms == preds["phases"].terms and preds[None].terms["tracing"] > 0
    # auto in graph mode ran the default, counters: no events
    assert preds["auto"].terms == preds["counters"].terms and preds["counters"].terms["tracing"] == 0
    assert preds["kernels"].detail["trace_uncalibrated"] and not preds["phases"].detail["trace_uncalibrated"]
    # the report says what its predictions leave out
    runs = [fake_run(1, "resident", "nccl", 0.2, exec_mode="graph", trace_level="kernels")]
    text = " ".join(section_model(analyse(runs, [], load_study(None), "h200-calibrated")).paragraphs)
    assert ("Not in the predictions (those levels priced as `counters`): CUPTI activity records, every kernel "
            "inside CUDA graphs too (kernels level), not calibrated, 1 run(s).") in text


def test_csv_numbers_are_numbers_and_missing_is_empty():
    from perfmlp.report.render import csv_text
    from perfmlp.report.sections import Cell
    rows = [{"change": "a", "predicted": "-92%", "speed-up": "25.2x", "measured": "-", "note": "-"},
            {"change": "b", "predicted": Cell("-88% (-47% to -93%)", "tip"), "speed-up": None, "measured": "not run",
             "note": "kept"}]
    got = list(csv.DictReader(csv_text(rows).splitlines()))
    assert list(got[0]) == ["change", "predicted change (fraction)", "predicted change low (fraction)",
                            "predicted change high (fraction)", "speed-up (times)", "measured", "note"]
    # -92% is -0.92; -88% (-47% to -93%): -0.88, its interval -0.47 to -0.93
    assert [float(got[0]["predicted change (fraction)"]), got[0]["predicted change low (fraction)"]] == [-0.92, ""]
    assert [float(got[1][k]) for k in ("predicted change (fraction)", "predicted change low (fraction)",
                                       "predicted change high (fraction)")] == [-0.88, -0.47, -0.93]
    assert float(got[0]["speed-up (times)"]) == 25.2 and got[1]["speed-up (times)"] == ""
    assert [g["measured"] for g in got] == ["", ""] and [g["note"] for g in got] == ["", "kept"]

