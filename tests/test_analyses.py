"""The report's analyses: typed tables from runs made in memory (Run.from_records, through test_report's fake_run)."""
import dataclasses

import pytest

from perfmlp.errors import PerfmlpError
from perfmlp.model.predict import Prediction
from perfmlp.report import analyses
from perfmlp.report.analyses import Analyses, Table

from test_report import fake_run


def three_runs():
    # p = 1 twice (repeats: 2.0 and 3.0 ms), p = 2 once (1.5 ms), all pageable + mpi-staged, B = 3200
    return [fake_run(1, "pageable", "mpi-staged", 2.0, run_id="a"), fake_run(1, "pageable", "mpi-staged", 3.0,
                                                                            run_id="b"),
            fake_run(2, "pageable", "mpi-staged", 1.5, run_id="c")]


def test_a_table_has_named_columns_and_typed_rows():
    t = Table.from_records("t", [{"x": 1, "y": "a"}, {"x": 2}])
    assert t.columns == ("x", "y") and t.rows == ((1, "a"), (2, None)) and len(t) == 2
    assert t.column("x") == [1, 2] and t.where(x=2).records() == [{"x": 2, "y": None}]
    with pytest.raises(ValueError):
        Table("bad", ("x", "y"), ((1,),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.rows = ()


def test_runs_and_configurations_from_in_memory_runs():
    a = Analyses.from_runs(three_runs())
    runs = a.runs()
    assert {"run", "t_ms", "flops_job", "ai", "util_datasheet", "bound by"} <= set(runs.columns)
    assert dict(zip(runs.column("run"), runs.column("t_ms"))) == {"a": 2.0, "b": 3.0, "c": 1.5}
    conf = {r["procs"]: r for r in a.configurations()}
    # the two one-GPU repeats merged: median (2.0 + 3.0) / 2 = 2.5, fastest 2.0, slowest 3.0
    assert conf[1]["repeats"] == 2 and conf[1]["ms per batch"] == 2.5
    assert (conf[1]["fastest ms"], conf[1]["slowest ms"]) == (2.0, 3.0)
    assert conf[2]["repeats"] == 1 and conf[2]["ms per batch"] == 1.5


def test_scaling_table_worked_by_hand():
    t = Analyses.from_runs(three_runs()).scaling()
    assert t.columns[:4] == ("scaling", "H", "B", "B/p") and "efficiency %" in t.columns
    strong = {r["procs"]: r for r in t.where(scaling="strong")}
    # T1 = 2.5 (the median repeat), T2 = 1.5: speed-up 2.5 / 1.5 = 1.667, efficiency 2.5 / (2 x 1.5) = 83.3%
    assert strong[2]["speed-up"] == pytest.approx(2.5 / 1.5)
    assert strong[2]["efficiency %"] == pytest.approx(100 * 2.5 / 3.0)
    assert strong[2]["B"] == 3200 and strong[2]["B/p"] is None and strong[1]["runs"] == 2
    assert not t.where(scaling="weak").rows   # B / p differs (3200 against 1600): no weak group


def test_imbalance_of_ranks_that_ran_alike_is_zero():
    t = Analyses.from_runs(three_runs()).imbalance()
    (row,) = t.records()   # only the two-rank configuration
    assert row["procs"] == 2 and row["run"] == "c"
    # each rank: h2d 0.1 x 1.5 + forward 0.4 x 1.5 + backward 0.4 x 1.5 + update 0.1 x 1.5 = 1.5 ms busy
    assert row["compute+copy max ms"] == pytest.approx(1.5) and row["imbalance ms"] == pytest.approx(0.0)


def test_model_accuracy_and_terms_tables():
    a = Analyses.from_runs(three_runs())
    acc = a.model_accuracy()
    assert acc.columns[:5] == ("runs", "machine file", "n", "median |error| %", "worst |error| %")
    every = acc.where(runs="every cuBLAS GPU run")
    assert sorted(every.column("n")) == [3, 3]   # calibrated and datasheet, three runs each
    terms = a.terms()
    r = {row["run"]: row for row in terms}["a"]
    assert r["total measured ms"] == 2.0
    assert r["error %"] == pytest.approx(100 * (r["total predicted ms"] / 2.0 - 1))
    assert "limit" not in terms.columns   # no prediction says the host paces its step


def test_a_host_paced_prediction_prints_its_limit():
    pred = Prediction(terms={}, total_s=1e-3, overlapped_s=1e-3, flops_per_rank=1, flops_job=1,
                      bytes_copied_per_rank=0, machine="m", detail={"host_paced": True, "interval_s": (0.9e-3, 1.1e-3)})
    # half-width (1.1 - 0.9) / (1.1 + 0.9) = 10%
    assert analyses.host_paced_spread(pred) == pytest.approx(0.1)
    assert analyses.limit_text(pred) == "host-paced: +-10% from one run to the next"
    gpu_paced = dataclasses.replace(pred, detail={"host_paced": False, "interval_s": (0.9e-3, 1.1e-3)})
    assert analyses.limit_text(gpu_paced) is None and analyses.limit_text(None) is None


def test_load_reads_a_folder_and_names_an_empty_one(tmp_path):
    with pytest.raises(PerfmlpError, match="no readable run"):
        analyses.load(tmp_path)


def test_ceilings_use_each_runs_own_counts():
    # a run of input size 20 (not the study's 784): its HBM intensity is its own FLOPs over its own bytes
    from types import SimpleNamespace
    from perfmlp.report.sections.questions import ceilings_points
    from perfmlp.report.analysis import analyse
    from perfmlp.report.study import load_study
    run = fake_run(1, "pageable", "mpi-staged", 2.0, run_id="small")
    s = analyse([run], [], load_study()).runs[0]
    s = dataclasses.replace(s, layer_sizes=(20, 512, 10), mem_bytes_rank0=4_000_000)
    (pt,) = ceilings_points(SimpleNamespace(runs=(s,)))
    assert pt["ai_hbm"] == pytest.approx(s.flops_rank0 / 4_000_000)    # FLOPs / 4 MB
    assert pt["measured"] == pytest.approx(s.flops_rank0 / 2e-3)        # per 2 ms batch
    (none,) = ceilings_points(SimpleNamespace(runs=(dataclasses.replace(s, mem_bytes_rank0=None),)))
    assert none["ai_hbm"] is None                                       # a trace that counts no memory bytes


def test_the_overlapped_bound_sits_under_the_serial_one_by_the_shorter_chain():
    runs = [fake_run(2, "resident", "nccl", 1.0, run_id="p2"), fake_run(1, "resident", "nccl", 1.0, run_id="p1"),
            fake_run(2, "resident", "mpi-staged", 1.0, run_id="staged")]
    t = Analyses.from_runs(runs).overlap_bounds()
    # only several GPUs with NCCL: the sliced schedule needs both
    assert len(t) == 1 and t.records()[0]["procs"] == 2
    r = t.records()[0]
    # serial = the rest + compute + comm; overlapped = the rest + max(compute, comm): they differ by the shorter
    shorter = min(r["compute chain ms"], r["communication chain ms"])
    assert r["serial bound ms"] - r["overlapped bound ms"] == pytest.approx(shorter)
    assert r["overlapped bound ms"] <= r["sliced ms"] + 1e-9 and r["sliced ms"] <= r["serial bound ms"] + 1e-9


def test_question_2_2_draws_the_bounds_on_the_exchanges_roofline():
    from perfmlp.report.sections.questions import section_q2_2
    runs = [fake_run(2, "resident", "nccl", 1.0, run_id="p2"), fake_run(1, "resident", "nccl", 1.0, run_id="p1")]
    s = section_q2_2(Analyses.from_runs(runs).analysis)
    fig = next(f for f in s.figures if f.name == "overlap_roofline")
    rows = Analyses.from_runs(runs).overlap_bounds().records()
    assert fig.args["rows"] == rows and rows[0]["bytes all-reduced per GPU"] > 0 and rows[0]["FLOPs per GPU"] > 0
    drawn = fig.draw(**fig.args)
    assert drawn["png"].startswith(b"\x89PNG") and b"overlapped bound (model)" in drawn["svg"]
    # without a configuration the schedule applies to: neither the table nor the figure
    alone = section_q2_2(Analyses.from_runs([fake_run(1, "resident", "nccl", 1.0, run_id="p1")]).analysis)
    assert not any(f.name == "overlap_roofline" for f in alone.figures)
