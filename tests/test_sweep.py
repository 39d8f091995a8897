import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from perfmlp.config import from_mapping, load_yaml
from perfmlp.errors import PerfmlpError
from perfmlp.sweep import expand, sweep_run_id
from perfmlp.trace.format import WARMUP_BATCHES

from conftest import ROOT, has_gpu, mpiexec, run_cmd

# words of the tools a sweep is developed with, never of the project (spelled with a class so that this
# file says neither); case-insensitive, as before
TOOLING_WORDS = re.compile(r"iss[u]e|sess[i]on", re.IGNORECASE)
TINY = {"data": "synthetic", "input_size": 20, "hidden_sizes": [8], "n_train": 60, "batch_size": 20, "epochs": 1}


def test_expand_matrix_and_batch_per_proc():
    runs = expand({"name": "s", "base": {"hidden_sizes": [8]}, "batch_per_proc": 100,
                   "matrix": {"procs": [1, 2], "batch_transfer": ["pinned", "resident"]},
                   "runs": [{"procs": 4, "batch_size": 40}]}, "s.yaml")
    assert len(runs) == 5  # 2 x 2 + 1
    assert runs[1].procs == 1 and runs[1].values["batch_size"] == 100
    assert runs[2].procs == 2 and runs[2].values["batch_size"] == 200
    assert runs[-1].values["batch_size"] == 40 and runs[-1].config.batch_size == 40


@pytest.mark.parametrize("spec, words", [
    ({"matrix": {"procs": 1}}, "matrix.procs must be a non-empty list"),
    ({"matrix": {"batch_sise": [1]}}, "unknown configuration key: batch_sise"),
    ({"runs": [{"procs": 0}]}, "procs must be a positive integer"),
    ({"matric": {}}, "unknown sweep key matric"),
    ({"runs": [{"procs": 1}, {"procs": 1}]}, "two runs would share the id"),
    ({"name": "a b", "runs": [{"procs": 1}]}, "name may hold only"),
])
def test_bad_sweeps(spec, words):
    with pytest.raises(PerfmlpError, match=words):
        expand(spec, "s.yaml")


@pytest.mark.parametrize("change", [
    {"epochs": 2}, {"n_train": 61}, {"learning_rate": 0.5}, {"data": "auto"}, {"seed": 1}, {"reg": 0.0},
    {"shuffle": True}, {"n_heldout": 10}, {"precision": "float64"}, {"comm": "mpi"},
])
def test_run_ids_differ_in_anything_a_run_computes(change):
    a = from_mapping(TINY)
    b = from_mapping({**TINY, **change})
    assert sweep_run_id("s", a, 1) != sweep_run_id("s", b, 1)


def test_run_ids_are_stable_and_ignore_where_output_goes():
    a = from_mapping(TINY)
    b = from_mapping({**TINY, "trace_dir": "elsewhere", "run_id": "x", "quiet": True, "save_params": "p"})
    assert sweep_run_id("s", a, 2) == sweep_run_id("s", b, 2) != sweep_run_id("s", a, 1)
    # the readable part, then a hash of the configuration
    assert sweep_run_id("s", a, 2).startswith("s-h8-b20-p2-float32-pageable-auto-cublas-")


def test_reference_sweeps_run_the_reference_hyperparameters():
    reference = load_yaml(ROOT / "configs" / "reference.yaml")
    for f in sorted((ROOT / "sweeps").glob("*.yaml")):
        spec = load_yaml(f)
        assert spec.get("config") == "../configs/reference.yaml", f
        for run in expand(spec, str(f)):
            c = run.config
            assert (c.learning_rate, c.reg, c.input_size, c.num_classes) == (1e-4, 1e-4, 784, 10)
            if "min_steady_batches" in spec:  # n_train sized for the steady batches: 20 + the warm-up ones
                per_epoch = WARMUP_BATCHES + -(-spec["min_steady_batches"] // c.epochs)
                assert c.n_train == c.batch_size * per_epoch * c.epochs
            else:
                assert c.n_train == 38400
            if not any("batch_size" in r for r in spec.get("runs") or []) and \
                    "batch_size" not in (spec.get("matrix") or {}):  # partition.yaml varies B on purpose
                assert c.batch_size == 3200 * (run.procs if "batch_per_proc" in spec else 1)
            assert c.learning_rate == reference["learning_rate"] or str(reference["learning_rate"]) == "1e-4"


def test_config_key_is_relative_to_the_sweep_file(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "start.yaml").write_text("learning_rate: 1e-2\nepochs: 3\n")
    runs = expand({"name": "s", "config": "c/start.yaml", "base": {"epochs": 4}, "runs": [{"procs": 1}]},
                  str(tmp_path / "s.yaml"))
    assert (runs[0].config.learning_rate, runs[0].config.epochs) == (1e-2, 4)  # base over config
    (tmp_path / "c" / "start.yaml").write_text("learning_rate: fast\n")
    with pytest.raises(PerfmlpError, match=r"start.yaml: learning_rate must be a number"):
        expand({"config": "c/start.yaml", "runs": [{"procs": 1}]}, str(tmp_path / "s.yaml"))


# ---- the sweep command, under mpiexec -------------------------------------------------

def sweep(f, trace_dir, *extra, timeout=300):
    return run_cmd([sys.executable, "-m", "perfmlp.sweep", str(f), "--trace-dir", str(trace_dir), *extra],
                   timeout=timeout)


def write_sweep(tmp_path, **base) -> Path:
    f = tmp_path / "s.yaml"
    base = {**TINY, **base}
    f.write_text("name: t\nbase: " + json.dumps(base) + "\nbatch_per_proc: 10\nmatrix: {procs: [1, 2]}\n")
    return f


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A two-run sweep (1 and 2 ranks) run once with its report: (sweep file, its command's result); tests that
    change its folder take a copy (`copied`)."""
    mpiexec()
    where = tmp_path_factory.mktemp("swept")
    f = write_sweep(where)
    return f, sweep(f, where / "tr", "--report-out", str(where / "rep"), "--no-figures")


def copied(swept, tmp_path) -> tuple[Path, list[str]]:
    """A copy of the swept folder beside the same sweep file, and the sweep's run ids."""
    f = swept[0]
    shutil.copytree(f.parent / "tr", tmp_path / "tr")
    return f, [run.run_id for run in expand(load_yaml(f), str(f))]


def test_sweep_runs_then_reports_then_reuses(swept):
    f, r = swept
    where = f.parent
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(": ok") == 2
    ids = [run.run_id for run in expand(load_yaml(f), str(f))]
    assert ids[1].startswith("t-h8-b20-p2-float32-pageable-auto-cublas-")
    assert (where / "tr" / ids[1] / "rank-1.jsonl").is_file()
    assert (where / "rep" / "report.md").is_file() and not list((where / "rep").glob("*.png"))   # --no-figures
    r = sweep(f, where / "tr", "--no-report")
    assert r.returncode == 0 and r.stdout.count("already traced, skipped") == 2, r.stdout + r.stderr


def test_sweep_reruns_an_incomplete_run(swept, tmp_path):
    f, ids = copied(swept, tmp_path)
    # a run cut off: rank 1 never wrote its end line, the manifest still says running
    folder = tmp_path / "tr" / ids[1]
    lines = (folder / "rank-1.jsonl").read_text().splitlines()
    (folder / "rank-1.jsonl").write_text("\n".join(line for line in lines if '"kind": "end"' not in line
                                                   and '"kind":"end"' not in line) + "\n")
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "status": "running"}))
    r = sweep(f, tmp_path / "tr", "--no-report")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("already traced") == 1 and r.stdout.count(": ok") == 1
    line = next(ln for ln in r.stdout.splitlines() if "did not complete" in ln)
    assert ids[1] in line and "(running)" in line and line.endswith("its trace folder was removed")
    assert json.loads((folder / "manifest.json").read_text())["status"] == "complete"
    assert sorted(p.name for p in (tmp_path / "tr").iterdir()) == sorted([".sweep", *ids])


def test_sweep_refuses_a_folder_of_another_configuration(swept, tmp_path):
    f, ids = copied(swept, tmp_path)
    path = tmp_path / "tr" / ids[0] / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["config"]["learning_rate"] = 0.5  # as if made by hand with --run-id
    path.write_text(json.dumps(manifest))
    r = sweep(f, tmp_path / "tr", "--no-report")
    assert r.returncode == 1
    refused = [line for line in r.stdout.splitlines() if "REFUSED" in line]
    assert len(refused) == 1 and "learning_rate 0.5 there, 1.0 here" in refused[0]
    assert json.loads(path.read_text())["config"]["learning_rate"] == 0.5  # left alone
    assert r.stdout.count("already traced") == 1


def test_a_failed_run_is_removed_and_its_own_error_quoted(tmp_path):
    mpiexec()
    f = write_sweep(tmp_path)
    ids = [run.run_id for run in expand(load_yaml(f), str(f))]
    env = {"PERFMLP_FAULT": "1:1"}  # rank 1 fails at batch 1; MPICH's abort notice is printed after its line
    r = run_cmd([sys.executable, "-m", "perfmlp.sweep", str(f), "--trace-dir", str(tmp_path / "tr"),
                 "--report-out", str(tmp_path / "rep"), "--no-figures"], env=env, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    out = tmp_path / "tr" / ".sweep" / f"{ids[1]}.out"
    assert (f"{ids[1]}: FAILED: perfmlp.run: rank 1: error: RuntimeError: injected fault at batch 1 "
            f"(its output: {out})") in r.stdout
    # the job's whole output is kept there (MPICH's "Abort(...)" lines too, when it prints them
    # before the job ends: it does not always)
    assert "injected fault at batch 1" in out.read_text()
    assert not (tmp_path / "tr" / ids[1]).exists()  # no trace folder for a report to read
    assert "skipped:" not in r.stderr and (tmp_path / "rep" / "report.md").is_file()
    # a failed run is not "already traced": a rerun tries again
    r = run_cmd([sys.executable, "-m", "perfmlp.sweep", str(f), "--trace-dir", str(tmp_path / "tr"),
                 "--no-report"], env=env, timeout=120)
    assert r.returncode == 1 and r.stdout.count("already traced") == 1 and r.stdout.count("FAILED") == 1


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
def test_sweep_timeout_ends_the_run(tmp_path):
    mpiexec()
    f = tmp_path / "s.yaml"
    f.write_text("name: t\nbase: " + json.dumps({**TINY, "n_train": 600000, "batch_size": 10, "epochs": 100})
                 + "\nruns: [{procs: 2}]\n")
    r = sweep(f, tmp_path / "tr", "--no-report", "--timeout", "1", timeout=60)
    assert r.returncode == 1 and "FAILED: timed out after 1 s" in r.stdout, r.stdout + r.stderr
    # mpiexec and its ranks are gone (their command lines name the run's configuration file)
    marker = str(tmp_path / "tr" / ".sweep").encode()
    left = []
    for _ in range(50):
        left = [p for p in Path("/proc").glob("[0-9]*") if _cmdline_has(p, marker)]
        if not left:
            break
        time.sleep(0.1)
    assert not left


def _cmdline_has(proc: Path, text: bytes) -> bool:
    try:
        return text in (proc / "cmdline").read_bytes()
    except OSError:  # it ended meanwhile
        return False


def test_sweep_predicts_with_a_second_machine_file_apart(tmp_path):
    mpiexec()
    from perfmlp.model.scaled import main as scaled_main
    scaled = tmp_path / "scaled.yaml"   # the H200 calibration carried to the H100 by datasheet ratios
    assert scaled_main([str(ROOT / "models/h200-calibrated.yaml"), "--from", "h200", "--to", "h100-sxm",
                        "--out", str(scaled)]) == 0
    f = write_sweep(tmp_path)
    r = sweep(f, tmp_path / "tr", "--no-report", "--max-procs", "1", "--predict", "h200-calibrated",
              "--predict-also", str(scaled))
    assert r.returncode == 0, r.stdout + r.stderr
    main = json.loads((tmp_path / "tr" / "predictions.json").read_text())
    other = json.loads((tmp_path / "tr" / "predictions-scaled.json").read_text())
    assert main["machine"]["name"] == "NVIDIA H200 (calibrated)"
    assert other["machine"]["name"] == "NVIDIA H200 (calibrated) scaled to NVIDIA H100 SXM5 80GB"
    assert list(main["runs"]) == list(other["runs"]) and len(other["runs"]) == 1   # p = 2 skipped
    assert "2 blind prediction(s)" not in r.stdout and r.stdout.count("1 blind prediction(s) written") == 2


@pytest.mark.parametrize("values, exec_mode, level", [
    ({}, "graph", "counters"),                                       # auto: the default of the mode that runs
    ({"exec": "eager"}, "eager", "counters"),
    ({"trace_level": "phases"}, "graph", "phases"),
    ({"trace_level": "kernels", "exec": "eager"}, "eager", "kernels"),
    ({"trace": False}, "graph", "untraced")])
def test_blind_predictions_are_at_the_level_the_run_will_trace_at(values, exec_mode, level):
    from perfmlp.model.machine import load_machine
    from perfmlp.model.predict import predict_batch
    from perfmlp.sweep import SweepRun, predict_run
    from perfmlp.names import DEFAULT_TRACE_LEVEL
    assert DEFAULT_TRACE_LEVEL[exec_mode] == "counters"  # the table this test's first rows assume
    cfg = from_mapping({**TINY, "backend": "cupy", "comm": "nccl", "batch_transfer": "resident", **values})
    m = load_machine("h200-calibrated")
    entry = predict_run(m, SweepRun("t", 1, {}, cfg))
    want = predict_batch(m, cfg.layer_sizes, 20, 1, comm="nccl", batch_transfer="resident", exec_mode=exec_mode,
                         trace_level=None if level == "untraced" else level)
    assert entry["trace_level"] == level and entry["total_s"] == want.total_s


def test_min_steady_seconds_adds_epochs_by_the_prediction():
    from perfmlp.model.machine import load_machine
    from perfmlp.sweep import lengthen, predict_run
    spec = {"name": "s", "base": {**TINY, "backend": "cupy", "comm": "nccl", "batch_transfer": "resident",
                                  "input_size": 784, "hidden_sizes": [512], "batch_size": 3200},
            "min_steady_batches": 20, "runs": [{"procs": 1}, {"procs": 1, "batch_size": 800}]}
    runs = expand(spec, "s.yaml")
    m = load_machine("h200-calibrated")
    long = lengthen(runs, "h200-calibrated", 2.0, "s")
    for r, x in zip(runs, long):
        assert x.config.n_train == r.config.n_train and r.config.epochs == 1   # the same samples, more epochs
        t = predict_run(m, r)["total_s"]
        steady = 20 * x.config.epochs
        assert steady * t >= 2.0 > (steady - 20) * t   # the fewest epochs whose steady batches last 2 s
        assert x.run_id != r.run_id and x.repeat == r.repeat
    assert long[1].config.epochs > long[0].config.epochs   # smaller batches: more of them
    assert lengthen(runs, "h200-calibrated", 1e-9, "s") == runs   # already long enough: unchanged


@pytest.mark.parametrize("value, words", [(0, "positive number"), ("2", "positive number"), (True, "positive"),
                                          (2, "needs a machine file")])
def test_min_steady_seconds_is_checked(tmp_path, capsys, value, words):
    spec = json.dumps({"name": "s", "base": TINY, "min_steady_seconds": value, "runs": [{"procs": 1}]})
    rc, out = sweep_main(tmp_path, capsys, spec)
    assert rc == 2 and words in out.err and out.err.count("\n") == 1


# ---- the sweep's own faults ------------------------------------------------------------

def sweep_main(tmp_path, capsys, spec: str, *args):
    from perfmlp.sweep.__main__ import main
    f = tmp_path / "s.yaml"
    f.write_text(spec)
    rc = main([str(f), "--trace-dir", str(tmp_path / "tr"), "--no-report", *args])
    return rc, capsys.readouterr()


SPEC = "name: t\nbase: " + json.dumps(TINY) + "\nruns: [{procs: 1}]\n"


@pytest.mark.parametrize("spec, args, words", [
    (SPEC, ["--timeout", "nan"], "argument --timeout: must be a positive number of seconds, got 'nan'"),
    (SPEC, ["--timeout", "-1"], "argument --timeout: must be a positive number of seconds, got '-1'"),
    (SPEC, ["--max-procs", "0"], "argument --max-procs: must be a positive number of processes, got '0'"),
    (SPEC + "batch_per_proc: abc\n", [], "s.yaml: batch_per_proc must be a positive integer, got 'abc'"),
    (SPEC + "repeats: 1000000000\n", ["--calibration-sizes"],
     "s.yaml: 1 configurations x 1000000000 repeats would be 1,000,000,000 runs (at most 10,000)"),
    (SPEC + "name: u\n", [], "s.yaml: key 'name' appears twice (again at line 4)"),
])
def test_bad_sweep_input_is_one_line(tmp_path, capsys, spec, args, words):
    rc, out = sweep_main(tmp_path, capsys, spec, *args)
    assert rc == 2 and out.out == "" and out.err.endswith(words + "\n") and out.err.count("\n") == 1, out.err
    assert not (tmp_path / "tr").exists()


def test_a_launcher_with_an_unclosed_quote_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PERFMLP_MPIRUN", 'mpiexec "-n')
    rc, out = sweep_main(tmp_path, capsys, SPEC)
    assert rc == 2 and out.err == "perfmlp.sweep: error: PERFMLP_MPIRUN 'mpiexec \"-n': No closing quotation\n"
    assert not (tmp_path / "tr").exists()


def test_the_launcher_is_the_installed_mpis(monkeypatch):
    from perfmlp.sweep.run import find_launcher, mpi_library
    mpiexec()
    monkeypatch.delenv("PERFMLP_MPIRUN", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")  # found beside this Python (a virtual environment's bin/)
    lib = mpi_library()
    if lib != "MPICH" or not (Path(sys.executable).parent / "mpiexec").exists():
        pytest.skip(f"mpi4py uses {lib}, not the mpich wheel beside this Python")
    assert find_launcher() == [str(Path(sys.executable).parent / "mpiexec")]


@pytest.mark.skipif(has_gpu(), reason="a GPU is here")
def test_a_sweep_that_needs_a_gpu_is_refused_at_once(tmp_path, capsys):
    t0 = time.monotonic()
    rc, out = sweep_main(tmp_path, capsys, SPEC.replace("{procs: 1}", "{procs: 1}, {procs: 1, comm: nccl}"))
    assert time.monotonic() - t0 < 1.0
    assert rc == 2 and out.err == ("perfmlp.sweep: error: " + str(tmp_path / "s.yaml") + ": 1 of 2 runs need a "
                                   "GPU (the first: --comm nccl needs the cupy backend) and CuPy sees none here; "
                                   "run it on a GPU machine (pip install 'perfmlp[gpu]')\n")
    assert not (tmp_path / "tr").exists()


def test_shipped_sweeps_run_on_a_cpu_or_need_a_gpu_in_every_run():
    from perfmlp.sweep.plan import gpu_need
    for f in sorted((ROOT / "sweeps").glob("*.yaml")):
        runs = expand(load_yaml(f), str(f))
        needs = [gpu_need(r.config) for r in runs]
        if not any(needs):
            assert all(r.config.backend == "auto" for r in runs), f   # a GPU where there is one
        else:
            assert all(needs), f   # never a sweep that half runs on a CPU
        assert not TOOLING_WORDS.search(f.read_text()), f
    q2_1 = ROOT / "sweeps" / "q2_1.yaml"
    assert not any(gpu_need(r.config) for r in expand(load_yaml(q2_1), str(q2_1)))


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT])  # SIGTERM and SIGHUP take the same path (perfmlp/sweep)
def test_an_interrupted_sweep_ends_its_job_and_holds_its_lock(tmp_path, signum):
    import subprocess
    from test_faults import processes_with, wait_for
    mpiexec()
    f = tmp_path / "s.yaml"
    f.write_text("name: t\nbase: " + json.dumps({**TINY, "n_train": 600000, "batch_size": 10, "epochs": 100})
                 + "\nruns: [{procs: 2}]\n")
    own = tmp_path / "tr" / ".sweep"
    cmd = [sys.executable, "-m", "perfmlp.sweep", str(f), "--trace-dir", str(tmp_path / "tr"), "--no-report"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        run_id = expand(load_yaml(f), str(f))[0].run_id
        assert wait_for(lambda: (tmp_path / "tr" / run_id / "rank-1.jsonl").exists())   # both ranks training
        if signum == signal.SIGINT:  # a second sweep on the same folder is refused while this one runs
            r = run_cmd(cmd)
            assert r.returncode == 1 and r.stderr.startswith(f"perfmlp.sweep: error: {tmp_path / 'tr'} is in use "
                                                             f"by another sweep (pid {job.pid})"), r.stderr
        job.send_signal(signum)
        out, err = job.communicate(timeout=30)
    finally:
        job.kill()
    assert job.returncode == 128 + signum, err
    what = "interrupted (SIGINT)" if signum == signal.SIGINT else "terminated (SIGTERM)"
    assert err == (f"perfmlp.sweep: {what}; the job of {run_id} was ended (its output: {own / run_id}.out)\n")
    assert wait_for(lambda: not processes_with(f"{own}/"), 5)   # mpiexec and both ranks are gone
    assert sorted(p.name for p in (tmp_path / "tr").iterdir()) == [".sweep"]   # no half run left
    assert "terminated (SIGTERM)" in (own / f"{run_id}.out").read_text()  # the ranks were ended cleanly
