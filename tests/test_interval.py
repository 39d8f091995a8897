"""Prediction intervals: the calibration's spread carried to a distribution
of the predicted time, and the judgement of intervals over a sweep."""
import dataclasses
import statistics

import pytest

from perfmlp.calibrate.spread import MAX_RATIOS, chunk_medians, ratios, spread_table, spread_words
from perfmlp.model import load_machine, predict_batch
from perfmlp.model.interval import (SOURCES, UNSCALED, _SCALARS, _TABLES, coverage, draw_factor, interval,
                                    interval_words, ks_distance, perturbed, pit)
from perfmlp.report.model_error import COLUMNS

from conftest import yaml_dump, yaml_load

CALIBRATED = "tests/data/h200-x2-calibrated.yaml"
SPREAD = {"host": (0.8, 0.9, 1.0, 1.0, 1.1, 1.4), "pageable_copy": (0.7, 1.0, 1.3), "pinned_copy": (0.99, 1.0, 1.01),
          "gpu": (0.995, 1.0, 1.005), "collective": (0.9, 1.0, 1.1)}


def predictor(comm, transfer, exec_mode, H=512, B=3200):
    return lambda m: predict_batch(m, (784, H, 10), B, 1, "float32", comm, transfer, None, exec_mode=exec_mode)


def test_every_machine_figure_has_a_source_or_is_left_alone():
    m = load_machine(CALIBRATED)
    scaled = {k for keys in _SCALARS.values() for k in keys} | {t for ts in _TABLES.values() for t, _, _ in ts}
    fields = {f.name for f in dataclasses.fields(m)}
    assert fields - scaled - set(UNSCALED) == set()       # a new figure must say which spread moves it
    assert scaled <= fields


def test_perturbed_scales_times_up_and_rates_down_per_source():
    m = load_machine(CALIBRATED)
    p = perturbed(m, {"host": 2.0, "gpu": 0.5})
    assert p.launch_overhead_s == pytest.approx(2 * m.launch_overhead_s)
    assert p.gemm_flops_per_s[0].flops_per_s == pytest.approx(2 * m.gemm_flops_per_s[0].flops_per_s)
    assert p.kernel_gap_s == pytest.approx(0.5 * m.kernel_gap_s)
    assert p.h2d_pageable_bytes_per_s == m.h2d_pageable_bytes_per_s        # another source: untouched
    assert m.launch_overhead_s == load_machine(CALIBRATED).launch_overhead_s   # the original is unchanged
    q = perturbed(m, {"pageable_copy": 3.0})
    assert q.h2d_pageable_bytes_per_s == pytest.approx(m.h2d_pageable_bytes_per_s / 3)
    assert q.h2d_pinned_bytes_per_s == m.h2d_pinned_bytes_per_s


def test_draw_factor_is_linear_between_order_statistics():
    r = (0.8, 1.0, 1.4)
    assert draw_factor(r, 0.0) == 0.8
    assert draw_factor(r, 0.25) == pytest.approx(0.9)      # x = 0.5: halfway from 0.8 to 1.0
    assert draw_factor(r, 0.75) == pytest.approx(1.2)      # x = 1.5: halfway from 1.0 to 1.4
    assert draw_factor((1.1,), 0.3) == 1.1


def test_no_spread_no_interval():
    m = load_machine("h100-sxm")                           # datasheet figures: nothing measured
    assert interval(m, predictor("nccl", "resident", "graph")) is None
    assert "unknown" in interval_words(None)


def test_interval_brackets_the_point_and_follows_what_bounds_the_step():
    m = load_machine(CALIBRATED)
    host_bound = predictor("mpi-staged", "pageable", "eager")
    gpu_bound = predictor("nccl", "resident", "graph", H=2048)
    a = interval(m, host_bound, draws=60, spread=SPREAD)
    b = interval(m, gpu_bound, draws=60, spread=SPREAD)
    for iv, f in ((a, host_bound), (b, gpu_bound)):
        assert iv.lo_s <= f(m).total_s <= iv.hi_s
        assert list(iv.quantiles_s) == sorted(iv.quantiles_s)
    assert a.half_width > 5 * b.half_width                 # host and pageable spread against the GPU's
    assert interval(m, host_bound, draws=60, spread=SPREAD) == a    # a fixed seed: the same draws
    json = a.as_json()
    assert json["interval_s"] == [a.lo_s, a.hi_s] and len(json["quantiles_s"]) == len(json["percentiles"]) == 21


def test_a_source_without_spread_is_named():
    m = load_machine(CALIBRATED)
    iv = interval(m, predictor("mpi-staged", "pageable", "eager"), draws=20, spread={"gpu": (0.99, 1.01)})
    assert iv.sources == ("gpu",)
    assert "launches" in iv.unmeasured and "h2d_batch" in iv.unmeasured
    assert "no measured spread for" in interval_words(iv)


def test_pit_ks_and_coverage():
    q = [1.0 + 0.05 * i for i in range(21)]               # a uniform distribution on [1, 2]
    assert pit(q, 1.5) == pytest.approx(0.5)
    assert pit(q, 0.5) == 0.0 and pit(q, 3.0) == 1.0
    # 4 values at 1/8, 3/8, 5/8, 7/8: the largest gap to the uniform CDF is 1/8
    assert ks_distance([0.125, 0.375, 0.625, 0.875]) == pytest.approx(0.125)
    assert ks_distance([0.0, 0.0, 0.0]) == pytest.approx(1.0)
    assert coverage([(1, 2, 1.5), (1, 2, 2.5), (1, 2, 1.0), (1, 2, 0.9)]) == 0.5


def test_calibration_spread_table():
    assert ratios([1.0, 2.0, 3.0]) == [0.5, 1.0, 1.5]
    assert chunk_medians([1, 2, 3, 10, 20, 30, 7], 3) == [2, 20]     # the last short chunk dropped
    table = spread_table({"gpu": [1.0] * 3, "host": [1 + i / 1000 for i in range(500)], "collective": [1.0]})
    assert [e["source"] for e in table] == ["host", "gpu"]          # SOURCES order; one ratio is no spread
    host = table[0]["ratios"]
    assert len(host) == MAX_RATIOS and host == sorted(host) and host[0] == 1.0 and host[-1] == 1.499
    assert set(e["source"] for e in table) <= set(SOURCES)
    assert "host 1.0" in spread_words(table)


def test_blind_intervals_judged_over_a_sweep():
    from types import SimpleNamespace as NS
    from perfmlp.report.model_error import judge_intervals, interval_table_rows
    q = [1e-3 * (1.0 + 0.01 * i) for i in range(21)]        # uniform on 1.00-1.20 ms: 90% interval 1.01-1.19

    def entry(**kw):
        return {"predicted_at": "2026-01-01T00:00:00+00:00", "total_s": 1.1e-3, "interval_s": [1.01e-3, 1.19e-3],
                "quantiles_s": q, **kw}

    def group(label, exec_mode, times):
        runs = [NS(run_id=f"{label}-r{i}", t_ms=t) for i, t in enumerate(times)]
        return NS(label=label, runs=runs, key=(0,) * 7 + (exec_mode,), t_ms=statistics.median(times))
    groups = {1: group("a", "graph", [1.05, 1.15]), 2: group("b", "eager", [1.30, 1.40]),
              3: group("c", "graph", [1.10, 1.10]), 4: group("d", "eager", [1.0, 1.0])}
    preds = {"runs": {r.run_id: entry() for g in groups.values() for r in g.runs}}
    for r in groups[4].runs:                                  # a machine file without spread
        preds["runs"][r.run_id] = entry(interval_s=None, quantiles_s=None)
    starts = {r.run_id: "2026-01-01T00:00:01+00:00" for g in groups.values() for r in g.runs}
    j = judge_intervals(groups, {"a", "b", "c", "d"}, preds, starts)
    assert [r.label for r in j.rows] == ["a", "b", "c"] and j.unknown == 1
    assert j.coverage == pytest.approx(2 / 3)                 # b's median 1.35 ms is above 1.19
    assert j.graph_half_width == pytest.approx(0.18 / 2.20)   # (1.19 - 1.01) / (1.19 + 1.01)
    # the six repeats' quantiles: 0.25, 0.75, 1, 1, 0.5, 0.5; the largest gap to the uniform CDF is 1/3
    assert j.ks == pytest.approx(1 / 3) and j.repeats == 6
    assert "cover 67%" in j.verdict() and "PRISM" in j.verdict()
    assert len(interval_table_rows(j)) == 3
    assert judge_intervals(groups, {"a"}, {"runs": {}}, starts) is None   # no blind prediction: nothing to judge


def test_model_summary_carries_the_interval():
    from perfmlp.model.machine import machine_from_mapping
    from perfmlp.model.summary import summary
    data = yaml_load(open(CALIBRATED))
    spread = [{"source": s, "ratios": list(r)} for s, r in SPREAD.items()]
    m = machine_from_mapping({**data, "spread": spread}, "x.yaml")
    p = summary(m, (784, 512, 10), 3200, comm="nccl", batch_transfer="resident", exec_mode="graph")["prediction"]
    lo, hi = p["interval_s"]
    assert lo <= p["total_s"] <= hi and len(p["distribution"]["quantiles_s"]) == 21
    assert "90% interval" in p["interval_note"]
    q = summary(load_machine(CALIBRATED), (784, 512, 10), 3200)["prediction"]    # no spread in the file
    assert q["interval_s"] is None and q["distribution"] is None and "unknown" in q["interval_note"]


def test_the_reports_validation_judges_the_blind_intervals(tmp_path):
    from synthetic import gpu_run, write_predictions
    from perfmlp.report.analysis import analyse
    from perfmlp.report.study import load_study
    from perfmlp.report.sections.validation import section_validation
    started = "2026-11-21T13:14:21+00:00"
    resident = dict(transfer="resident", comm="nccl", batches=6, start=started)
    runs = [gpu_run(**resident, run_id="r1"), gpu_run(**resident, run_id="r2", phase_ms={"forward": 0.12})]
    q = [1e-3 * (0.45 + 0.005 * i) for i in range(21)]      # 0.45-0.55 ms: the repeats' 0.50 and 0.52 inside
    entry = {"total_s": 0.5e-3, "groups_s": {"compute": 0.5e-3}, "predicted_at": "2026-11-21T00:00:00+00:00",
             "interval_s": [q[1], q[19]], "quantiles_s": q}
    write_predictions(tmp_path, {"r1": entry, "r2": entry})
    sec = section_validation(analyse(runs, [], load_study(None), "h200-calibrated", tmp_path))
    words = next(p for p in sec.paragraphs if p.startswith("Intervals:"))
    assert "cover 100%" in words and "PRISM" in words
    rows = {t.name: t.rows for t in sec.tables}["validation_intervals"]
    # the repeats' 0.50 and 0.52 ms at quantiles 0.5 and 0.7 of 0.45-0.55 ms
    assert len(rows) == 1 and rows[0]["covered"] == "yes" and rows[0]["repeats' quantiles"] == "0.50 0.70"


def test_what_if_carries_the_interval(tmp_path, capsys):
    import json
    from synthetic import gpu_records, write_run
    from perfmlp.trace.reader import read_run
    from perfmlp.model.whatif import what_if
    from perfmlp.report.whatif import measured_groups_ms, setting_of
    from perfmlp.model.whatif import changed_setting
    from perfmlp.whatif import main, what_if_interval
    folder = write_run(tmp_path, gpu_records(transfer="pageable", comm="mpi-staged", run_id="ref"))
    run = read_run(folder)
    data = yaml_load(open(CALIBRATED))
    path = tmp_path / "spread.yaml"
    path.write_text(yaml_dump({**data, "spread": [{"source": s, "ratios": list(r)} for s, r in SPREAD.items()]}))
    m = load_machine(path)
    before = setting_of(run)
    after = changed_setting(before, {"batch_transfer": "resident"})
    w = what_if(m, before, after, *measured_groups_ms(run))
    assert what_if_interval(load_machine(CALIBRATED), w) is None
    assert main([str(folder), "--set", "batch_transfer=resident", "--machine", CALIBRATED]) == 0
    assert "90% interval: unknown" in capsys.readouterr().out
    assert main([str(folder), "--set", "batch_transfer=resident", "--machine", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["interval_s"][0] <= out["predicted_ms"] * 1e-3 <= out["interval_s"][1]
    assert w.total_ms == pytest.approx(out["predicted_ms"])


def test_the_host_spread_pools_both_dispatch_draws():
    from perfmlp.calibrate.host import mean_dispatch
    a = {"launch_overhead_s": 1e-5, "trace_phase_host_s": 0.0, "graph_step_host_s": 1e-5,
         "_rounds": {"untraced": [1.0, 1.0], "graph": [2.0, 2.0]}}
    b = {**a, "_rounds": {"untraced": [1.0, 3.0], "graph": [2.0, 4.0]}}
    # the eager step's 1, 1, 1, 3 over their median 1; the graph step's 2, 2, 2, 4 over 2
    assert sorted(mean_dispatch(a, b)["_spread_host"]) == [1.0] * 6 + [2.0, 3.0]


def test_the_sweeps_blind_predictions_carry_their_intervals(tmp_path):
    import json
    from perfmlp.sweep import expand, write_predictions
    spec = {"name": "v", "base": {"data": "synthetic", "backend": "cupy", "hidden_sizes": [64], "batch_size": 400,
                                  "epochs": 1, "batch_transfer": "resident", "comm": "nccl", "exec": "graph"},
            "matrix": {"procs": [1]}, "repeats": 2}
    runs = expand(spec, "v.yaml")
    data = yaml_load(open(CALIBRATED))
    path = tmp_path / "spread.yaml"
    path.write_text(yaml_dump({**data, "spread": [{"source": s, "ratios": list(r)} for s, r in SPREAD.items()]}))
    f = tmp_path / "predictions.json"
    assert write_predictions(f, str(path), runs) == 2
    entries = list(json.loads(f.read_text())["runs"].values())
    lo, hi = entries[0]["interval_s"]
    assert lo <= entries[0]["total_s"] <= hi and len(entries[0]["quantiles_s"]) == 21
    assert entries[0]["quantiles_s"] == entries[1]["quantiles_s"]     # the repeats share one distribution
    g = tmp_path / "plain.json"
    write_predictions(g, CALIBRATED, runs)
    assert all(e["interval_s"] is None for e in json.loads(g.read_text())["runs"].values())


def test_the_models_own_error_scales_the_total_of_its_execution_mode_only():
    m = load_machine(CALIBRATED)
    gpu = {"gpu": (0.999, 1.0, 1.001)}
    graph, eager = predictor("nccl", "resident", "graph", H=2048), predictor("nccl", "resident", "eager", H=2048)
    narrow = interval(m, graph, draws=80, spread=gpu)
    wide = interval(m, graph, draws=80, spread={**gpu, "model_graph": (0.8, 1.0, 1.3)})
    other = interval(m, graph, draws=80, spread={**gpu, "model_eager": (0.5, 1.0, 2.0)})
    assert narrow.half_width < 0.01 < 0.1 < wide.half_width
    assert wide.lo_s < 0.9 * graph(m).total_s and wide.hi_s > 1.15 * graph(m).total_s
    assert other == narrow and "model_eager" not in other.sources     # the eager error leaves a graph step alone
    assert "model_eager" in interval(m, eager, draws=20, spread={**gpu, "model_eager": (0.5, 1.0, 2.0)}).sources


def test_a_step_staged_through_pageable_memory_draws_the_pageable_model_error_where_the_file_has_it():
    m = load_machine(CALIBRATED)
    gpu = {"gpu": (0.999, 1.0, 1.001)}
    errors = {"model_graph": (0.99, 1.0, 1.01), "model_graph_pageable": (0.7, 1.0, 1.5)}
    resident, pageable = predictor("nccl", "resident", "graph", H=2048), predictor("nccl", "pageable", "graph", H=2048)
    a, b = interval(m, resident, draws=80, spread={**gpu, **errors}), interval(m, pageable, draws=80,
                                                                              spread={**gpu, **errors})
    assert "model_graph" in a.sources and "model_graph_pageable" not in a.sources and a.half_width < 0.05
    assert "model_graph_pageable" in b.sources and "model_graph" not in b.sources and b.half_width > 0.1
    # a file with the execution mode's error only: every transfer draws it, as before
    c = interval(m, pageable, draws=80, spread={**gpu, "model_graph": (0.99, 1.0, 1.01)})
    assert "model_graph" in c.sources and c.half_width < 0.05


def test_the_blind_tests_model_error_goes_into_a_machine_file(tmp_path):
    from perfmlp.report.blind_spread import main, model_error_ratios
    from perfmlp.report.model_error import read_blind_tests
    from perfmlp.model.machine import load_machine as load
    head = ",".join(COLUMNS)
    rows = [f"k,abc,2026-11-25,s,r{i},512,800,1,resident,nccl,{'graph' if i < 6 else 'eager'},data,float32,2,"
            f"1.0,{m},{m},{m},0.0" for i, m in enumerate((1.1, 0.9, 1.0, 1.2, 0.95, 1.05, 2.0, 1.0))]
    csv = tmp_path / "b.csv"
    csv.write_text("\n".join([head, *rows, rows[0].replace("k,", "other,", 1)]) + "\n")
    ratios = model_error_ratios(read_blind_tests(csv).tests, "k")
    assert ratios == {"model_graph": (0.9, 0.95, 1.0, 1.05, 1.1, 1.2)}     # 2 eager tests: too few
    staged = tmp_path / "p.csv"   # the same tests staged through pageable memory: the pageable entry
    staged.write_text("\n".join([head, *(r.replace(",resident,", ",prefetch-pageable,") for r in rows)]) + "\n")
    assert model_error_ratios(read_blind_tests(staged).tests, "k") == {"model_graph_pageable": ratios["model_graph"]}
    f = tmp_path / "m.yaml"
    f.write_text(open(CALIBRATED).read())
    before = load(str(f))
    assert main([str(csv), "--machine-kind", "k", "--into", str(f)]) == 0
    after = load(str(f))
    assert {e.source: e.ratios for e in after.spread}["model_graph"] == ratios["model_graph"]
    assert [e for e in after.spread if e.source != "model_graph"] == list(before.spread)
    assert main([str(csv), "--machine-kind", "k", "--into", str(f)]) == 0   # replaced, not added twice
    assert sum(e.source == "model_graph" for e in load(str(f)).spread) == 1
    with pytest.raises(Exception, match="kinds: k, other"):
        main([str(csv), "--machine-kind", "nope", "--into", str(f)])
    # --sweeps: only those sweeps' tests (six more graph tests of sweep t, far off, are left out)
    more = [r.replace(",s,r", ",t,q").replace(",1.0,1.1,1.1,1.1,", ",1.0,3.0,3.0,3.0,") for r in rows[:6]]
    csv.write_text("\n".join([head, *rows, *more]) + "\n")
    assert main([str(csv), "--machine-kind", "k", "--sweeps", "s", "--into", str(f)]) == 0
    assert {e.source: e.ratios for e in load(str(f)).spread}["model_graph"] == ratios["model_graph"]
    with pytest.raises(Exception, match="has no sweep 'u'"):
        main([str(csv), "--machine-kind", "k", "--sweeps", "s,u", "--into", str(f)])


def test_only_the_other_modes_model_error_gives_no_interval():
    m = load_machine(CALIBRATED)
    graph = predictor("nccl", "resident", "graph")
    assert interval(m, graph, draws=10, spread={"model_eager": (0.9, 1.0, 1.2)}) is None


def test_blind_spread_refuses_a_file_that_is_not_a_machine_file_in_one_line(tmp_path):
    import subprocess
    import sys
    head = ",".join(COLUMNS)
    rows = [f"k,abc,2026-11-25,s,r{i},512,800,1,resident,nccl,graph,data,float32,2,1.0,1.0,1.0,1.0,0.0"
            for i in range(6)]
    (tmp_path / "b.csv").write_text("\n".join([head, *rows]) + "\n")
    for name, text in (("list.yaml", "- 1\n- 2\n"), ("bad.yaml", "name: x\npeak_flops_per_s_float32: -3\n")):
        (tmp_path / name).write_text(text)
        r = subprocess.run([sys.executable, "-m", "perfmlp.report.blind_spread", str(tmp_path / "b.csv"),
                            "--machine-kind", "k", "--into", str(tmp_path / name)], capture_output=True, text=True)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and name in r.stderr, r.stderr
        assert (tmp_path / name).read_text() == text          # left as it was
    r = subprocess.run([sys.executable, "-m", "perfmlp.report.blind_spread", "--nope"], capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_the_run_to_run_floor_of_a_graph_interval():
    from perfmlp.report.model_error import MEDIAN_SD, judge_intervals, noise_floor
    # first two runs 2%, 4% and 0% apart (over their median): median |d| 2/101, sigma = that / (0.6745 sqrt 2)
    runs = [[1.0, 1.02], [1.0, 1.04], [1.0, 1.0]]
    sigma = (0.02 / 1.01) / (0.6745 * 2 ** 0.5)
    assert noise_floor(runs) == pytest.approx(1.6449 * sigma / 2 ** 0.5, rel=1e-3)   # the mean of two
    # three runs each: the first two's difference, the median of three's spread
    assert noise_floor([rs + [1.5] for rs in runs]) == pytest.approx(noise_floor(runs) / 0.7071 * 0.6696, rel=1e-3)
    assert noise_floor(runs[:2] + [[1.0]]) is None            # fewer than three configurations ran twice
    assert MEDIAN_SD[2] == pytest.approx(0.5 ** 0.5, abs=1e-4)
    # judged: three graph configurations with two runs each say the floor in the verdict
    from types import SimpleNamespace as NS
    q = [1e-3 * (1.0 + 0.01 * i) for i in range(21)]
    groups = {i: NS(label=k, runs=[NS(run_id=f"{k}-r{j}", t_ms=t) for j, t in enumerate(ts)],
                    key=(0,) * 7 + ("graph",), t_ms=statistics.median(ts))
              for i, (k, ts) in enumerate(zip("abc", runs))}
    preds = {"runs": {r.run_id: {"predicted_at": "2026-01-01T00:00:00+00:00", "total_s": 1.1e-3,
                                 "interval_s": [1.01e-3, 1.19e-3], "quantiles_s": q}
                      for g in groups.values() for r in g.runs}}
    starts = {r.run_id: "2026-01-01T00:00:01+00:00" for g in groups.values() for r in g.runs}
    j = judge_intervals(groups, {"a", "b", "c"}, preds, starts)
    assert j.graph_floor == pytest.approx(noise_floor(runs)) and j.graph_floor_configs == 3
    assert f"+-{100 * j.graph_floor:.1f}%" in j.verdict() and "run-to-run spread of 3 configurations" in j.verdict()


def test_blind_spread_keeps_the_machine_files_comments_and_makes_a_missing_file(tmp_path):
    import yaml
    from perfmlp.report.blind_spread import main
    from perfmlp.model.machine import load_machine as load
    head = ",".join(COLUMNS)
    rows = [f"k,abc,2026-11-25,s,r{i},512,800,1,resident,nccl,graph,data,float32,2,1.0,{m},{m},{m},0.0"
            for i, m in enumerate((1.1, 0.9, 1.0, 1.2, 0.95, 1.05))]
    (tmp_path / "b.csv").write_text("\n".join([head, *rows]) + "\n")
    text = open(CALIBRATED).read()
    f = tmp_path / "m.yaml"
    own = "spread:  # the calibration's\n# the host's repeats\n- source: host\n  ratios: [0.9, 1.0, 1.1]\n"
    f.write_text("# where this file came from\n" + text + own)
    assert main([str(tmp_path / "b.csv"), "--machine-kind", "k", "--into", str(f)]) == 0
    after = f.read_text()
    assert after.startswith("# where this file came from\n") and "# the host's repeats\n" in after
    assert {e.source: e.ratios for e in load(str(f)).spread}["model_graph"] == (0.9, 0.95, 1.0, 1.05, 1.1, 1.2)
    # every line of the file but the new entry's is kept
    assert after == f"# where this file came from\n{text}{own}- source: model_graph\n" \
                    "  ratios: [0.9, 0.95, 1.0, 1.05, 1.1, 1.2]\n"
    assert main([str(tmp_path / "b.csv"), "--machine-kind", "k", "--into", str(f)]) == 0   # replaced, not added
    assert f.read_text() == after
    # a missing file is made, holding the entries
    g = tmp_path / "new.yaml"
    assert main([str(tmp_path / "b.csv"), "--machine-kind", "k", "--into", str(g)]) == 0
    assert yaml.safe_load(g.read_text()) == {"spread": [{"source": "model_graph",
                                                         "ratios": [0.9, 0.95, 1.0, 1.05, 1.1, 1.2]}]}
    # a flow-style spread in a commented file: refused in one line, the file as it was
    flow = tmp_path / "flow.yaml"
    flow.write_text("# notes\n" + text + "spread: [{source: host, ratios: [0.9, 1.0, 1.1]}]\n")
    before = flow.read_text()
    with pytest.raises(Exception, match="flow.yaml: its spread is not a block list.*would lose its 2 comment line"):
        main([str(tmp_path / "b.csv"), "--machine-kind", "k", "--into", str(flow)])
    assert flow.read_text() == before
