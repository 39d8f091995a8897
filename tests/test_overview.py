"""The report's overview: configurations (repeats merged, short labels), what
bounds each one, the changes the what-if engine prices beside the measured
gain, selections that say which run and never mix execution modes, a CPU
run's report without GPU values, and the screenshot script's errors."""
import csv
import json
import statistics

import pytest

from perfmlp.model.machine import load_machine
from perfmlp.report import analyse, build_from_runs, sections_of
from perfmlp.report.analysis import Machines, summarise
from perfmlp.report.browser import main as browser_main
from perfmlp.report.configurations import configurations, run_labels
from perfmlp.report.sections.overview import headline, overview_of
from perfmlp.report.sections.questions import section_q2_1
from perfmlp.report.render import collapsed
from perfmlp.report.sections import Table
from perfmlp.report.study import load_study
from perfmlp.report.thresholds import ALL as THRESHOLDS
from perfmlp.report.verdicts import COMMUNICATION, COPIES, CPU_COMPUTE, GEMMS, HOST, WAITING, attribute
from perfmlp.trace.upgrade import SCHEMA_V1 as SCHEMA, format1  # format-1 records, through the upgrader
from perfmlp.trace.reader import Run

from conftest import yaml_dump, yaml_load
from synthetic import gpu_run, model_phase_ms

H200_CAL = load_machine("h200-calibrated")


def analysis(runs, folder=None):
    return analyse(runs, [], load_study(), None, folder)


def cpu_run(procs=1, batch=100, phase_ms=None, run_id=None, batches=5):
    """A NumPy run's records: host-clock phases; on ranks > 0 the allreduce 0.5 ms longer (waiting)."""
    ms = phase_ms or {"h2d": 0.01, "forward": 2.0, "loss": 0.2, "backward": 2.5, "update": 0.3}
    if procs > 1:
        ms = {**ms, "allreduce": ms.get("allreduce", 1.0)}
    cfg = {"input_size": 784, "hidden_sizes": [512], "num_classes": 10, "batch_size": batch, "n_train": 10 * batch,
           "precision": "float32", "batch_transfer": "pageable", "comm": "auto", "gemm": "cublas", "exec": "auto",
           "backend": "numpy"}
    manifest = {"schema": SCHEMA, "run_id": run_id or f"cpu-p{procs}", "config": cfg, "procs": procs,
                "status": "complete", "backend": "numpy", "comm": "mpi", "trace_level": "counters",
                "start": "2026-11-25T10:00:00+00:00", "machine": {"nodes": {"h": {"ranks": list(range(procs))}}}}
    ranks = {}
    for r in range(procs):
        recs = []
        for k in range(batches):
            spans, t = {}, 0.0
            for p, v in ms.items():
                spans[p] = [t, v + (0.5 if p == "allreduce" and r > 0 else 0.0)]
                t += spans[p][1]
            recs.append({"kind": "batch", "epoch": 0, "batch": k, "samples": batch, "local_samples": batch // procs,
                         "t0_s": k * 0.01, "flops": {"forward": 1, "backward": 1}, "bytes_h2d": 0, "bytes_d2h": 0,
                         "bytes_mpi": 0, "bytes_nccl": 0, "wall_ms": t, "t_ms": spans, "clock": "host"})
        recs += [{"kind": "epoch", "epoch": 0}, {"kind": "end", "status": "complete"}]
        ranks[r] = recs
    return Run.from_records(*format1(manifest, ranks))


def modelled(run_id, transfer="pageable", comm="mpi-staged", exec_mode="eager", procs=1, scale=1.0, **kw):
    """A GPU run whose phases are the calibrated model's times (times `scale`)."""
    phases, _ = model_phase_ms(H200_CAL, procs=procs, transfer=transfer, comm=comm, exec_mode=exec_mode)
    return gpu_run(run_id=run_id, transfer=transfer, comm=comm, exec_mode=exec_mode, procs=procs,
                   phase_ms={p: v * scale for p, v in phases.items()}, **kw)


# ---- configurations --------------------------------------------------------------------------

def test_repeats_merge_into_one_configuration_with_the_median_and_short_labels():
    runs = [modelled("a-r1", scale=1.0), modelled("a-r2", scale=1.2), modelled("a-r3", scale=0.9),
            modelled("b", transfer="pinned")]
    configs = configurations(analysis(runs))
    assert len(configs) == 2
    rep = next(c for c in configs if len(c.runs) == 3)
    assert rep.t_ms == pytest.approx(statistics.median(r.t_ms for r in rep.runs))
    assert rep.representative.run_id == "a-r1"          # the median repeat
    assert "repeat 1 of 3" in rep.which() and "eager" in rep.which() and "trace level phases" in rep.which()
    # only the setting that varies names the configurations; the run labels number the repeats
    assert {c.label for c in configs} == {"pageable", "pinned"}
    labels = run_labels(configs)
    assert labels["a-r2"] == "pageable #2" and labels["b"] == "pinned"


def test_a_numpy_run_has_no_gpu_settings():
    c, = configurations(analysis([cpu_run()]))
    s = c.s
    assert s["backend"] == "numpy" and s["transfer"] is None and s["gemm"] is None and s["exec"] is None


# ---- verdicts --------------------------------------------------------------------------------

def test_pageable_copies_bound_the_pageable_run():
    r = analysis([gpu_run(phase_ms={"h2d": 1.0, "forward": 0.1, "backward": 0.1})]).runs[0]
    v = attribute(r)
    assert v.bound_by == COPIES and v.source == "measured phases"
    # the batch's copy 1.0 ms and the staged gradients' two copies 0.1 ms each, of the batch's time
    assert v.share(COPIES) == pytest.approx((1.0 + 0.1 + 0.1) / r.t_ms)


def test_host_time_between_phases_is_launches_and_host():
    # 0.1 ms per phase, 3 ms of the batch outside them: the eager host's
    r = analysis([gpu_run(transfer="resident", comm="nccl", other_ms=3.0)]).runs[0]
    v = attribute(r)
    assert v.bound_by == HOST and dict(v.parts_ms)[HOST] >= 3.0


def test_an_unpriced_gemm_kernel_is_gemm_bound_not_host_bound():
    # a GEMM kernel the machine file has no rate for (h200.yaml, the datasheet) is priced as cuBLAS:
    # the 2 ms of compute beyond the model's GPU time are the kernel's, not the host's
    runs = [gpu_run(transfer="resident", comm="nccl", gemm="naive", phase_ms={"forward": 1.0, "backward": 1.0})]
    r = summarise(runs[0], Machines(load_machine("h200"), None))
    assert attribute(r, unpriced_gemm=True).bound_by == GEMMS
    assert attribute(r, unpriced_gemm=False).bound_by == HOST


def test_a_rank_that_waits_in_the_allreduce_is_waiting():
    # rank 1 spends 0.5 ms more in the allreduce than rank 0: the slowest rank waited that long
    r = analysis([cpu_run(procs=2, phase_ms={"forward": 0.2, "backward": 0.2, "allreduce": 0.1})]).runs[0]
    assert r.slowest_rank == 1
    v = attribute(r)
    assert dict(v.parts_ms)[WAITING] == pytest.approx(0.5)
    # the measured compute is the CPU model's to split (GEMMs, NumPy's passes, host), no longer one part
    assert dict(v.parts_ms)[COMMUNICATION] == pytest.approx(0.1) and v.share(GEMMS) > 0
    assert v.share(CPU_COMPUTE) == 0
    # the parts add up to the batch: the compute's launches and tracing share (host) kept beside the
    # time outside the phases, not written over by it
    assert v.total_ms == pytest.approx(r.t_ms) and dict(v.parts_ms)[HOST] > r.t_ms - sum(r.measured_terms(1).values())


def test_host_clock_phases_take_the_models_split():
    r = analysis([gpu_run(clock="host", transfer="pinned", comm="nccl", steady_ms=0.5)]).runs[0]
    v = attribute(r)
    assert v.source == "the model's split" and v.total_ms == pytest.approx(r.t_ms)


# ---- recommendations -------------------------------------------------------------------------

def test_a_change_the_set_ran_shows_its_measured_gain_beside_the_predicted_one():
    runs = [modelled("pageable"), modelled("pinned", transfer="pinned", scale=1.1)]
    o = overview_of(analysis(runs))
    by = {c.label: c for c in o.configs}
    rec = next(r for r in o.recs if r.change == "pinned copies instead of pageable")
    assert rec.configuration is by["pageable"] and rec.sibling is by["pinned"]
    assert rec.measured_gain == pytest.approx(by["pinned"].t_ms / by["pageable"].t_ms - 1)
    # the runs are the model's own times: the what-if engine predicts the pinned run's (less its 10%) closely
    assert rec.predicted_gain < -0.3 and rec.recommended
    assert (1 + rec.predicted_gain) * by["pageable"].t_ms == pytest.approx(by["pinned"].t_ms / 1.1, rel=0.1)
    assert [ad.predicted for ad in o.advice] == sorted(ad.predicted for ad in o.advice)


def test_a_numpy_run_is_told_the_cpus_changes_and_a_gpu_once():
    o = overview_of(analysis([cpu_run()]))
    gpu = [r for r in o.recs if r.change.startswith("run it on a GPU")]
    assert len(gpu) == 1 and gpu[0].predicted_gain < 0 and gpu[0].measured_gain is None
    # the CPU's own changes, each priced by the what-if engine on the CPU file
    cpu = [r for r in o.recs if r not in gpu]
    assert any("rank(s) instead of" in r.change for r in cpu) and any("BLAS thread" in r.change for r in cpu)
    assert all(r.how.startswith("what-if on") for r in cpu)


# ---- selections ------------------------------------------------------------------------------

def test_question_2_1_never_mixes_execution_modes():
    # the graph run sorts first by id; the reference scheme's column is eager, and names its runs
    runs = [gpu_run(run_id="a-graph", exec_mode="graph", transfer="pageable", phase_ms={"h2d": 0.05}),
            gpu_run(run_id="b-eager-1", phase_ms={"h2d": 2.0}), gpu_run(run_id="b-eager-2", phase_ms={"h2d": 3.0}),
            gpu_run(run_id="c-graph", exec_mode="graph", transfer="resident", comm="nccl")]
    a = analysis(runs)
    p1 = section_q2_1(a).tables[-1].rows[0]
    eager = statistics.median(r.t_ms for r in a.runs if r.run_id.startswith("b-"))
    assert p1["perfmlp, reference scheme (pageable, mpi-staged, eager): ms"] == pytest.approx(eager)
    assert p1["perfmlp, reference scheme (pageable, mpi-staged, eager): runs"] == "b-eager-1 b-eager-2"
    assert p1["perfmlp, resident + NCCL, CUDA graph: runs"] == "c-graph"
    assert p1["perfmlp, resident + NCCL, eager: ms"] is None


# ---- a CPU run's report ----------------------------------------------------------------------

def test_a_cpu_report_shows_no_gpu_values_and_gets_figures(tmp_path, drawing_only):
    drawing_only("overview_time", "phases_per_rank", "host_batch_")
    out = build_from_runs([cpu_run()], [], tmp_path / "rep")
    md = (out / "report.md").read_text()
    for word in ("pageable", "cublas", " inf ", "1 runs", "2569011200"):   # the last: 2 B H D at B=3200
        assert word not in md, word
    assert md.index("## Overview") < md.index("run it on a GPU") < md.index("## Configurations") < md.index("## Runs")
    flops = list(csv.DictReader(open(out / "q2_1_flops.csv")))
    assert {r["shape"] for r in flops} == {"784-512-10, B=100"}
    # 2 B H D = 2 * 100 * 512 * 784 = 80281600
    assert next(r for r in flops if r["part"] == "forward")["approx (2BHD)"] == "80281600"
    for fig in ("overview_time", "phases_per_rank"):
        assert (out / f"{fig}.png").stat().st_size > 1000
    assert any(p.stat().st_size > 1000 for p in out.glob("host_batch_*.png"))


def test_the_overview_comes_first_and_long_tables_fold():
    runs = [modelled(f"r{t}{c}", transfer=t, comm=c) for t in ("pageable", "pinned", "resident")
            for c in ("mpi-staged", "nccl")]
    secs = sections_of(analysis(runs))
    assert secs[0].title == "Overview" and secs[1].anchor == "configurations"
    runs_table = next(t for s in secs for t in s.tables if t.name == "runs")
    assert runs_table.hidden == ("run",) and not collapsed(runs_table)   # 6 rows
    assert collapsed(Table("x", "x", [{"a": i} for i in range(13)]))


def test_peers_measured_beside_the_traces_join_the_headline(tmp_path):
    (tmp_path / "traces").mkdir()
    (tmp_path / "benchmarks").mkdir()
    row = {"variant": "pytorch graph (DDP)", "hidden": [512], "B": 3200, "procs": 1, "median_us": 250.0}
    (tmp_path / "benchmarks" / "graph_step.jsonl").write_text(json.dumps(row) + "\nnot json\n")
    a = analysis([modelled("x", transfer="resident", comm="nccl")], folder=tmp_path / "traces")
    assert headline(a, overview_of(a)).rows[0]["PyTorch, CUDA graph (benchmark)"] == pytest.approx(0.25)


# ---- the study and the thresholds ------------------------------------------------------------

def test_the_study_names_its_question_rightly():
    title = load_study().title
    assert "Homework 6" in title and "Problem 2" in title and "final project" not in title


def test_every_threshold_has_a_name_a_meaning_and_a_source():
    names = [t.name for t in THRESHOLDS]
    assert len(set(names)) == len(names)
    assert all(t.meaning and t.source and t.value > 0 for t in THRESHOLDS)


# ---- the screenshot script -------------------------------------------------------------------

def test_the_screenshot_script_fails_in_one_line(tmp_path, capsys):
    page = tmp_path / "report.html"
    page.write_text("<html><body>x</body></html>")
    assert browser_main([str(page), "--browser", "no-such-browser-here"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("perfmlp.report.browser: error: no no-such-browser-here on PATH") and "\n" not in err
    assert browser_main([str(tmp_path / "missing.html"), "--browser", "sh"]) == 2
    assert "missing.html: no such file" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.png"))


# ---- repeats that disagree, BLAS threads, labels ----------------------------------------------

def test_repeats_that_disagree_are_flagged_with_their_range(tmp_path):
    import dataclasses
    from perfmlp.report.sections.overview import what_ran
    slow = {"h2d": 0.01, "forward": 8.0, "loss": 0.2, "backward": 10.0, "update": 0.3}
    runs = [cpu_run(run_id="a1"), cpu_run(run_id="a2"), cpu_run(run_id="a3", phase_ms=slow)]
    a = analysis(runs)
    # a NumPy run records its ranks' BLAS threads (the manifest's ran.blas_threads)
    a = dataclasses.replace(a, runs=tuple(dataclasses.replace(r, blas="openblas", blas_threads=(2,)) for r in a.runs))
    o = overview_of(a)
    c, = o.configs
    lo, hi = min(r.t_ms for r in c.runs), max(r.t_ms for r in c.runs)
    assert hi > 3 * lo and c.disagree == f"{lo:.3f} to {hi:.3f} ms, the slowest {100 * (hi / lo - 1):+.0f}%"
    text = what_ran(a, o)
    assert f"{c.label} {c.disagree}" in text and "Repeats disagree by more than 10%" in text
    assert "BLAS threads each NumPy rank ran (openblas): 2 with 1 rank." in text
    out = build_from_runs(runs, [], tmp_path / "rep", draw=False)
    row, = csv.DictReader(open(out / "configurations.csv"))
    assert row["repeats disagree"] == c.disagree and row["BLAS threads a rank"] == ""   # format-1: not recorded
    # repeats within 10% of each other: no flag
    assert configurations(analysis([cpu_run(run_id="b1"), cpu_run(run_id="b2")]))[0].disagree is None


def test_a_label_names_each_word_once():
    # a parameter server's strategy and its comm are both "ps": the label says it once
    from perfmlp.report.configurations import labels
    base = {"hidden": "512", "batch": 100, "procs": 2, "backend": "numpy", "precision": "float32",
            "transfer": None, "gemm": None, "exec": None, "overlap": None, "trace_level": "counters",
            "profiler": None}
    names = labels([{**base, "strategy": "data parallel", "comm": "mpi"}, {**base, "strategy": "ps", "comm": "ps"}])
    assert names[1].split().count("ps") == 1 and len(set(names)) == 2


def test_a_cpu_run_has_no_speed_up_over_a_gpu_reference(tmp_path):
    # the study's job on a CPU: its time beside the GPU reference solution's is missing, not "0.0x"
    out = build_from_runs([cpu_run(batch=3200)], [], tmp_path / "rep", draw=False)
    row, = csv.DictReader(open(out / "overview_headline.csv"))
    assert row["speed-up over it"] == "" and "0.0x" not in (out / "report.md").read_text()


def test_the_header_counts_the_runs_as_the_text_does():
    from perfmlp.report import header_of
    from perfmlp.report.sections.overview import what_ran
    a = analysis([cpu_run(run_id="a"), cpu_run(run_id="b", procs=2)])
    assert what_ran(a, overview_of(a)).startswith("2 runs in 2 configurations")
    assert "(2 runs)" in header_of(a)[0]
    # one asynchronous parameter-server run more, which has its own section: the header says so
    assert "(3 runs: 2 analysed, 1 asynchronous parameter server in its own section)" in header_of(a, 3)[0]


def test_a_multi_run_cpu_report_does_not_scroll_sideways_at_1280_px(tmp_path):
    import re
    import shutil
    import subprocess
    from perfmlp.report.browser import FLAGS, WINDOW, BrowserError, find_browser
    try:
        exe = find_browser()
    except BrowserError:
        pytest.skip("no Chromium")
    runs = [cpu_run(procs=p, batch=b, run_id=f"cpu-p{p}-b{b}-{k}",
                    phase_ms={"forward": 2.0 * b / 100, "backward": 2.5 * b / 100, "update": 0.3})
            for p in (1, 2) for b in (50, 100, 200, 400, 800, 1600, 3200) for k in (1, 2)]
    out = build_from_runs(runs, [], tmp_path / "rep")
    page = out / "report.html"
    # every folded table opened, then the page's width beside the window's
    page.write_text(page.read_text().replace("</body>", '<script>document.querySelectorAll("details").forEach('
                                             'd => d.open = true); document.body.setAttribute("data-width", '
                                             'document.documentElement.scrollWidth);</script></body>'))
    dom = subprocess.run([exe, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={WINDOW[0]},"
                          f"{WINDOW[1]}", "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)
    width = re.search(r'data-width="(\d+)"', dom.stdout)
    assert width and int(width.group(1)) <= WINDOW[0], dom.stderr[-300:]


def test_slicing_the_first_layers_exchange_is_offered_only_where_the_model_predicts_min_gain():
    from perfmlp.report.recommend import SLICES
    from perfmlp.report.thresholds import MIN_GAIN
    slicing = SLICES.split(",")[0]

    def sliced(runs):
        return [r for r in overview_of(analysis(runs)).recs if r.change.startswith(slicing)]

    # four GPUs with NCCL at the model's own times: the sliced chain hides most of the exchange
    two = sliced([modelled("p4", transfer="resident", comm="nccl", exec_mode="graph", procs=4)])
    assert len(two) == 1 and two[0].recommended and two[0].predicted_gain <= -MIN_GAIN.value
    assert two[0].change == SLICES.format(k=int(two[0].change.split(", ")[1].split()[0]))
    # the same saving in a run measured ten times slower is under min_gain: not offered
    assert not sliced([modelled("slow", transfer="resident", comm="nccl", exec_mode="graph", procs=4,
                                scale=10.0)])
    # one GPU, or the staged exchange: the schedule does not apply
    assert not sliced([modelled("p1", transfer="resident", comm="nccl", exec_mode="graph")])
    assert not sliced([modelled("staged", transfer="resident", procs=2)])


def test_the_cpu_model_prices_no_sliced_or_16bit_numpy_run():
    import dataclasses
    from perfmlp.report.analysis import predict_run
    cpu, run = load_machine("cpu-ci-2core"), cpu_run(procs=2)
    assert predict_run(run, cpu).total_s > 0
    for change in ({"slices": 2}, {"grad_precision": "bf16"}):
        ran = dataclasses.replace(run.ran, **change)
        other = dataclasses.replace(run, manifest=dataclasses.replace(run.manifest, ran=ran))
        assert predict_run(other, cpu) is None, change


def test_a_cpu_file_given_prices_the_numpy_runs_recommendations(tmp_path):
    from pathlib import Path
    data = yaml_load((Path(__file__).resolve().parents[1] / "models" / "cpu-ci-2core.yaml").read_text())
    for e in data["gemm_flops_per_s"]:
        e["flops_per_s"] /= 4   # a machine whose GEMMs are four times slower
    slow = tmp_path / "slow-cpu.yaml"
    slow.write_text(yaml_dump(data))
    runs = [cpu_run(procs=2)]

    def gains(machine):
        return {r.change: r.predicted_gain for r in overview_of(analyse(runs, [], load_study(), machine)).recs}
    shipped, given = gains(None), gains(str(slow))
    assert shipped.keys() == given.keys() and shipped != given
