"""Faults end the whole job within seconds, in one line, with everything
already written readable: a rank's disk fills, a rank is killed, stops or
hangs, SIGTERM, SIGINT and SIGHUP, ranks started with different
configurations; and the parameter files are never overwritten, half-written
or left non-finite."""
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, mpiexec, refusal_line, run_cmd, run_perfmlp
from perfmlp.trace.reader import read_run

# 40 batches of 30 on 2 ranks: a fault at batch 3 lands mid-run
JOB = ["--data", "synthetic", "--n-train", "1200", "--batch-size", "30", "--input-size", "50",
       "--hidden-size", "8", "--epochs", "20", "--learning-rate", "0.1"]


def faulty_run(tmp_path, fault, procs=2):
    t0 = time.monotonic()
    r = run_perfmlp(*JOB, "--trace-dir", str(tmp_path / "t"), "--run-id", "f", "--save-params",
                    str(tmp_path / "p"), procs=procs, env={"PERFMLP_FAULT": fault}, timeout=60)
    return r, time.monotonic() - t0


@pytest.mark.parametrize("fault, words", [
    ("1:3:disk", "rank 1: error: OSError: [Errno 28] No space left on device"),
    ("1:3:term", "rank 1: error: terminated (SIGTERM)"),
    ("1:3:int", "rank 1: error: interrupted (SIGINT)"),
    ("1:3:hup", "rank 1: error: hung up (SIGHUP)"),
    ("1:3:kill", None),
])
def test_a_faulty_rank_ends_the_job_and_keeps_what_was_written(tmp_path, fault, words):
    r, elapsed = faulty_run(tmp_path, fault)
    assert r.returncode != 0 and elapsed < 20, (r.returncode, elapsed, r.stderr)
    assert "Traceback" not in r.stderr and "UCX" not in r.stderr + r.stdout  # SIGHUP: no transport debug dump
    if words:
        assert words in r.stderr, r.stderr
        mine = [l for l in r.stderr.splitlines() if l.startswith("perfmlp.run: rank 1")]
        assert len(mine) == 1, r.stderr
    run = read_run(tmp_path / "t" / "f")  # readable: every finished batch of rank 0 is there
    assert not run.complete
    # the fault is at batch 3: rank 0 finished batches 0-2; on the GPU a batch's
    # line is written when a later batch starts (docs/trace-format.md), so a
    # rank torn down by the abort may lack its last one
    kept = [b.batch for b in run.ranks[0].batches]
    assert kept == list(range(len(kept))) and len(kept) >= (2 if run.on_gpu else 3)
    assert json.loads((tmp_path / "t" / "f" / "manifest.json").read_text())["config"]["batch_size"] == 30
    with np.load(tmp_path / "p" / "initial.npz", allow_pickle=False) as f:
        assert f["W1"].shape == (8, 50)
    if fault.endswith(("term", "int", "hup")):
        assert run.ranks[1].end.status == ("interrupted" if fault.endswith("int") else "terminated")


def test_a_full_disk_on_one_process_is_one_line(tmp_path):
    r, elapsed = faulty_run(tmp_path, "0:3:disk", procs=None)
    assert r.returncode == 1 and elapsed < 20
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], r.stderr
    m = json.loads((tmp_path / "t" / "f" / "manifest.json").read_text())
    assert m["status"] == "failed"  # the manifest is on another disk: it says how the run ended


def test_non_finite_loss_saves_the_last_finite_parameters(tmp_path):
    r = run_perfmlp(*JOB[:-2], "--learning-rate", "1e30", "--no-trace", "--save-params", str(tmp_path / "p"))
    assert r.returncode == 1
    line = r.stderr.strip()
    # lr 1e30: batch 1's update overflows the weights, batch 2's loss is nan;
    # the parameters before batch 2 are not finite, so the epoch's start is saved
    assert "\n" not in line and "loss is nan at epoch 1, batch 2" in line, line
    assert "parameters from the start of epoch 1 saved to" in line
    saved = tmp_path / "p" / "at-failure.npz"
    assert str(saved) in line
    with np.load(saved, allow_pickle=False) as f:
        assert all(np.isfinite(f[k]).all() for k in f.files)
    r = run_perfmlp(*JOB, "--no-trace", "--resume", str(saved))
    assert r.returncode == 0, r.stderr  # what was saved can be resumed


def test_resume_refuses_non_finite_parameters(tmp_path):
    np.savez(tmp_path / "nan.npz", W1=np.full((8, 50), np.nan), b1=np.zeros(8), W2=np.zeros((10, 8)),
             b2=np.zeros(10))
    r = run_perfmlp(*JOB, "--no-trace", "--resume", str(tmp_path / "nan.npz"))
    assert r.returncode == 2
    assert r.stderr.strip() == f"perfmlp.run: error: --resume: {tmp_path / 'nan.npz'}: W1 is not all finite numbers"


@pytest.mark.parametrize("content, why", [(b"PK\x03\x04 truncated", "BadZipFile"),
                                          (b"W1 = 1, 2, 3\n", "not an .npz archive")])
def test_resume_of_a_file_that_is_not_npz(tmp_path, content, why):
    (tmp_path / "p.npz").write_bytes(content)
    r = run_perfmlp(*JOB, "--no-trace", "--resume", str(tmp_path / "p.npz"))
    assert r.returncode == 2
    line = r.stderr.strip()
    assert "\n" not in line and why in line and str(tmp_path / "p.npz") in line and "pickle" not in line


def test_save_params_never_overwrites(tmp_path):
    d = tmp_path / "p"
    r = run_perfmlp(*JOB, "--epochs", "1", "--no-trace", "--save-params", str(d))
    assert r.returncode == 0, r.stderr
    before = (d / "final.npz").read_bytes()
    # again into the same folder, and resuming from its own final.npz
    for extra in ([], ["--resume", str(d / "final.npz")]):
        r = run_perfmlp(*JOB, "--epochs", "1", "--no-trace", "--save-params", str(d), *extra)
        assert r.returncode == 2
        assert "already holds initial.npz, final.npz" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert (d / "final.npz").read_bytes() == before


def test_save_params_on_a_file_or_read_only_folder(tmp_path):
    (tmp_path / "file").write_text("x")
    r = run_perfmlp(*JOB, "--no-trace", "--save-params", str(tmp_path / "file"))
    assert r.returncode == 2 and r.stderr.strip() == f"perfmlp.run: error: --save-params {tmp_path / 'file'}: not a folder"
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        import os
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user who may write anywhere (root)")
        r = run_perfmlp(*JOB, "--no-trace", "--save-params", str(ro / "sub"))
        assert r.returncode == 2 and "is not writable" in r.stderr
    finally:
        ro.chmod(0o700)


GPU_ONLY = [["--batch-transfer", "pinned"], ["--batch-transfer", "resident"], ["--gemm", "regblock"],
            ["--comm", "nccl"], ["--comm", "mpi-staged"]]


@pytest.mark.parametrize("flag", GPU_ONLY)
def test_gpu_only_options_are_refused_on_numpy(tmp_path, flag):
    line = refusal_line(*JOB, "--backend", "numpy", "--trace-dir", tmp_path, *flag, process=flag == GPU_ONLY[0])
    assert line == f"perfmlp.run: error: --{flag[0][2:]} {flag[1]} needs the cupy backend (this run is on numpy)"
    assert not any(tmp_path.iterdir())  # nothing written


def test_the_manifest_says_which_exchange_ran(tmp_path):
    r = run_perfmlp(*JOB, "--epochs", "1", "--backend", "numpy", "--trace-dir", str(tmp_path), "--run-id", "m")
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert (m["ran"]["backend"], m["ran"]["comm"], m["ran"]["exec"]) == ("numpy", "mpi", "eager")


EXEC_AND_OVERLAP = [
    (("--backend", "numpy", "--exec", "graph"), "--exec graph needs the cupy backend (this run is on numpy)"),
    (("--backend", "cupy", "--comm", "mpi-staged", "--overlap"),
     "--overlap on the GPU needs --comm nccl (the staged exchange needs the host between the backward pass "
     "and the update)"),
    (("--backend", "numpy", "--overlap", "--bucket-bytes", "0"), "--bucket-bytes must be positive, got 0"),
]


@pytest.mark.parametrize("flags, message", EXEC_AND_OVERLAP)
def test_exec_and_overlap_options_are_checked_before_anything_is_written(tmp_path, flags, message):
    line = refusal_line(*JOB, "--trace-dir", tmp_path, *flags, process=flags == EXEC_AND_OVERLAP[0][0])
    assert line == f"perfmlp.run: error: {message}"
    assert not any(tmp_path.iterdir())


def test_no_warning_under_an_unactivated_interpreter(tmp_path):
    # python3 on PATH is not this interpreter: nothing is wrong, so nothing is said
    env = {"PATH": "/usr/bin:/bin"}
    r = run_cmd([sys.executable, "-m", "perfmlp.run", *JOB, "--epochs", "1", "--no-trace", "--quiet"], env=env)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_reexecutes_under_the_users_interpreter_when_shadowed(tmp_path):
    # An interpreter first on PATH that cannot import numpy or yaml (no site
    # packages), as /usr/bin/python3 is under `nsys profile mpirun`; the
    # user's interpreter is further down PATH.
    bad = tmp_path / "prefix-bin"
    bad.mkdir()
    (bad / "python3").write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    (bad / "python3").chmod(0o755)
    good = tmp_path / "user-bin"
    good.mkdir()
    # a wrapper, not a symlink: a venv's python found through a link elsewhere is not the venv
    (good / "python3").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (good / "python3").chmod(0o755)
    env = {"PATH": f"{bad}:{good}:/usr/bin:/bin"}
    r = run_cmd([str(bad / "python3"), "-m", "perfmlp.run", *JOB, "--epochs", "1", "--no-trace"], env=env,
                cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "lacks numpy, yaml" in r.stderr and f"running under {good / 'python3'} instead" in r.stderr
    assert r.stdout.splitlines()[-1].startswith("done:")


# ---- a rank that stops making progress -------------------------------------------------

def processes_with(marker: str) -> list[Path]:
    """/proc entries whose command line holds `marker` (Linux)."""
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            if marker.encode() in (p / "cmdline").read_bytes():
                found.append(p)
        except OSError:  # it ended meanwhile
            pass
    return found


def wait_for(condition, timeout_s=20.0, step=0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return False


def stopped(p: Path) -> bool:
    try:
        return (p / "stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


@needs_proc
@pytest.mark.parametrize("procs, fault, where", [
    (1, "0:3:hang", "rank 0 stalled at the start of epoch 1, batch 3"),
    (2, "1:3:stop:backward", "rank 1 stalled in phase backward of epoch 1, batch 3 (its process is stopped)"),
    (3, "2:3:stop", "rank 2 stalled at the start of epoch 1, batch 3 (its process is stopped)"),
])
def test_a_stalled_rank_is_named_and_the_job_ends(tmp_path, procs, fault, where):
    t0 = time.monotonic()
    r = run_perfmlp(*JOB, "--stall-limit", "1", "--trace-dir", str(tmp_path / "t"), "--run-id", "s", procs=procs,
                    env={"PERFMLP_FAULT": fault}, timeout=60)
    assert r.returncode == 1 and time.monotonic() - t0 < 20, r.stderr
    mine = [line for line in r.stderr.splitlines() if line.startswith("perfmlp.")]
    assert len(mine) == 1 and mine[0].startswith(f"perfmlp.run: error: {where}: no progress for "), r.stderr
    assert mine[0].endswith("s (--stall-limit 1); the job is ended")
    assert json.loads((tmp_path / "t" / "s" / "manifest.json").read_text())["status"] == "stalled"
    assert wait_for(lambda: not processes_with(str(tmp_path)), 5)   # the stopped rank too


@needs_proc
def test_sigterm_ends_a_job_whose_rank_0_waits_inside_mpi(tmp_path):
    # rank 1 stops in its allreduce; rank 0 then spins inside MPI_Allreduce, where Python cannot run its handler
    env = dict(os.environ, PYTHONPATH=str(ROOT), PERFMLP_FAULT="1:3:stop:allreduce")
    cmd = [mpiexec(), "-n", "2", sys.executable, "-m", "perfmlp.run", *JOB, "--stall-limit", "600", "--trace-dir",
           str(tmp_path / "t"), "--run-id", "s"]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        assert wait_for(lambda: any(stopped(p) for p in processes_with(str(tmp_path))))
        t0 = time.monotonic()
        job.send_signal(signal.SIGTERM)  # to mpiexec, which passes it on to the ranks
        _, err = job.communicate(timeout=30)
    finally:
        job.kill()
    assert job.returncode == 143 and time.monotonic() - t0 < 10, err
    mine = [line for line in err.splitlines() if line.startswith("perfmlp.")]
    assert mine == ["perfmlp.run: rank 0: error: terminated (SIGTERM) in phase allreduce of epoch 1, batch 3, "
                    "where the signal's handler could not run (blocked outside Python); the job is ended"], err
    assert json.loads((tmp_path / "t" / "s" / "manifest.json").read_text())["status"] == "terminated"
    assert wait_for(lambda: not processes_with(str(tmp_path)), 5)


@pytest.mark.parametrize("first, other, words", [
    (1, ["--epochs", "2"], "epochs is 20 on rank 0, 2 on rank 1"),
    (2, ["--hidden-size", "16"], "hidden_sizes is [8] on rank 0, [16] on rank 2"),
])
def test_ranks_started_with_different_configurations_are_refused(tmp_path, first, other, words):
    run = [sys.executable, "-m", "perfmlp.run", *JOB, "--trace-dir", str(tmp_path / "t")]
    r = run_cmd([mpiexec(), "-n", str(first), *run, ":", "-n", "1", *run, *other], timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"perfmlp.run: error: the ranks were started with different "
                                             f"configurations: {words} (start every rank with the same options)"]
    assert not (tmp_path / "t").exists()  # refused before anything was written


def test_an_error_on_one_rank_before_mpi_starts_ends_the_job(tmp_path):
    run = [sys.executable, "-m", "perfmlp.run", *JOB, "--no-trace"]
    r = run_cmd([mpiexec(), "-n", "1", *run, ":", "-n", "1", *run, "--epochs", "abc"], timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip() == "perfmlp.run: rank 1: error: --epochs must be an integer, got 'abc'"


def test_cprofile_without_a_trace_writes_nothing(tmp_path):
    r = run_perfmlp(*JOB, "--epochs", "1", "--no-trace", "--cprofile", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip() == ("perfmlp.run: error: --cprofile writes rank-<r>.prof into the run's trace "
                                "folder: it needs the trace (drop --no-trace)")
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_under_save_params_names_the_file_and_leaves_no_part(tmp_path, monkeypatch):
    from perfmlp import params as train
    from perfmlp.errors import RunFailure

    def full(f, **arrays):
        f.write(b"PK\x03\x04 half")
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(train.np, "savez", full)
    with pytest.raises(RunFailure) as e:
        train.save(tmp_path / "p" / "final.npz", {"W1": np.zeros(2)})
    assert str(e.value) == f"cannot write {tmp_path / 'p' / 'final.npz'}: No space left on device"
    assert list((tmp_path / "p").iterdir()) == []


def test_printing_never_fails_a_finished_run(tmp_path):
    # the C locale without UTF-8 mode, an ASCII terminal, a UTF-8 configuration and a non-ASCII folder
    cfg = tmp_path / "c.yaml"
    cfg.write_text("# réglage: the smallest job\nepochs: 1\n", encoding="utf-8")
    env = {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": "ascii"}
    r = run_perfmlp("--config", str(cfg), *JOB[:-4], "--trace-dir", str(tmp_path / "tracés"), env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1].startswith("done:") and "trac\\" in r.stdout  # escaped, not an error
    assert len(list((tmp_path / "tracés").iterdir())) == 1
    r = run_cmd([sys.executable, "-m", "perfmlp.report", str(tmp_path / "tracés"), "--out", str(tmp_path / "rép"),
                 "--no-figures"], env=env)
    assert r.returncode == 0, r.stderr
    assert str(tmp_path / "tracés") in (tmp_path / "rép" / "report.md").read_text(encoding="utf-8")


# ---- the other tools -------------------------------------------------------------------

def test_ctrl_c_in_the_report_is_one_line(tmp_path):
    # SIGINT as the report is being made (its build stands in for a long one)
    # SIGINT's default handler, as under a terminal: a job started in the background has it ignored
    code = ("import os, runpy, signal, perfmlp.report as report\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "report.build = lambda *a, **k: os.kill(os.getpid(), signal.SIGINT) or time.sleep(5)\n"
            "import time\n"
            "runpy.run_module('perfmlp.report', run_name='__main__', alter_sys=True)\n")
    r = run_cmd([sys.executable, "-c", code, str(tmp_path)], timeout=60)
    assert r.returncode == 130 and r.stderr == "perfmlp.report: interrupted (SIGINT)\n", r.stderr


def test_a_full_disk_leaves_the_report_files_as_they_were(tmp_path, monkeypatch):
    from perfmlp.errors import RunFailure
    from perfmlp.errors import write_atomic
    (tmp_path / "report.md").write_bytes(b"# the previous report\n")

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr("perfmlp.errors.os.replace", full)
    with pytest.raises(RunFailure) as e:
        write_atomic(tmp_path / "report.md", b"# a new report, cut short\n")
    assert str(e.value) == f"cannot write {tmp_path / 'report.md'}: No space left on device"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]   # no temporary file left
    assert (tmp_path / "report.md").read_bytes() == b"# the previous report\n"


@pytest.mark.parametrize("args, words", [
    (["--mirror", "not a url"], "could not fetch train-images-idx3-ubyte.gz: not a url/train-images-idx3-ubyte.gz: "
                                "unknown url type"),
    (["--timeout", "-1"], "argument --timeout: must be a positive number of seconds, got '-1'"),
])
def test_fetch_errors_are_one_line(tmp_path, capsys, args, words):
    from perfmlp.fetch import main
    assert main(["--out", str(tmp_path / "m"), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"perfmlp.fetch: error: {words}") and err.count("\n") == 1, err


def test_every_tool_ends_on_ctrl_c_with_one_line(capsys):
    from perfmlp.errors import cli

    def interrupted(argv):
        raise KeyboardInterrupt
    assert cli("perfmlp.x", interrupted) == 130
    assert capsys.readouterr().err == "perfmlp.x: interrupted (SIGINT)\n"
