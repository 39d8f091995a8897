"""Faults end the whole job within seconds, in one line, with everything
already written readable (issue 10): a rank's disk fills, a rank is killed,
SIGTERM and SIGINT; and the parameter files are never overwritten or left
non-finite."""
import json
import sys
import time

import numpy as np
import pytest

from conftest import ROOT, run_cmd, run_perfmlp
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
    ("1:3:kill", None),
])
def test_a_faulty_rank_ends_the_job_and_keeps_what_was_written(tmp_path, fault, words):
    r, elapsed = faulty_run(tmp_path, fault)
    assert r.returncode != 0 and elapsed < 20, (r.returncode, elapsed, r.stderr)
    assert "Traceback" not in r.stderr
    if words:
        assert words in r.stderr, r.stderr
        mine = [l for l in r.stderr.splitlines() if l.startswith("perfmlp.run: rank 1")]
        assert len(mine) == 1, r.stderr
    run = read_run(tmp_path / "t" / "f")  # readable: every finished batch of rank 0 is there
    assert not run.complete
    # the fault is at batch 3: rank 0 finished batches 0-2; on the GPU a batch's
    # line is written when a later batch starts (docs/trace-format.md), so a
    # rank torn down by the abort may lack its last one
    kept = [b["batch"] for b in run.ranks[0].batches]
    assert kept == list(range(len(kept))) and len(kept) >= (2 if run.manifest.get("backend") == "cupy" else 3)
    assert json.loads((tmp_path / "t" / "f" / "manifest.json").read_text())["config"]["batch_size"] == 30
    with np.load(tmp_path / "p" / "initial.npz", allow_pickle=False) as f:
        assert f["W1"].shape == (8, 50)
    if fault.endswith(("term", "int")):
        assert run.ranks[1].end["status"] == ("terminated" if fault.endswith("term") else "interrupted")


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


@pytest.mark.parametrize("flag", [["--batch-transfer", "pinned"], ["--batch-transfer", "resident"],
                                  ["--gemm", "regblock"], ["--comm", "nccl"], ["--comm", "mpi-staged"]])
def test_gpu_only_options_are_refused_on_numpy(tmp_path, flag):
    r = run_perfmlp(*JOB, "--backend", "numpy", "--trace-dir", str(tmp_path), *flag)
    assert r.returncode == 2
    assert r.stderr.strip() == f"perfmlp.run: error: --{flag[0][2:]} {flag[1]} needs the cupy backend (this run is on numpy)"
    assert not any(tmp_path.iterdir())  # nothing written


def test_the_manifest_says_which_exchange_ran(tmp_path):
    r = run_perfmlp(*JOB, "--epochs", "1", "--backend", "numpy", "--trace-dir", str(tmp_path), "--run-id", "m")
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert (m["backend"], m["comm"], m["exec"]) == ("numpy", "mpi", "eager")


@pytest.mark.parametrize("flags, message", [
    (("--backend", "numpy", "--exec", "graph"), "--exec graph needs the cupy backend (this run is on numpy)"),
    (("--backend", "cupy", "--comm", "mpi-staged", "--overlap"),
     "--overlap on the GPU needs --comm nccl (the staged exchange needs the host between the backward pass "
     "and the update)"),
    (("--backend", "numpy", "--overlap", "--bucket-bytes", "0"), "--bucket-bytes must be positive, got 0"),
])
def test_exec_and_overlap_options_are_checked_before_anything_is_written(tmp_path, flags, message):
    r = run_perfmlp(*JOB, "--trace-dir", str(tmp_path), *flags)
    assert r.returncode == 2
    assert r.stderr.strip() == f"perfmlp.run: error: {message}"
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
    assert f"lacks numpy, yaml" in r.stderr and f"running under {good / 'python3'} instead" in r.stderr
    assert r.stdout.splitlines()[-1].startswith("done:")
