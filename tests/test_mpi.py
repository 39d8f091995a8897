import time

from conftest import each_rank_count, run_perfmlp


def test_data_parallel_equals_one_process():
    each_rank_count("mpi_equivalence.py", (1, 2, 3, 4))


def test_one_failing_rank_ends_the_job_fast():
    t0 = time.monotonic()
    r = run_perfmlp("--data", "synthetic", "--n-train", "600", "--batch-size", "30", "--input-size", "50",
                    "--hidden-size", "8", "--epochs", "50", "--no-trace",
                    procs=3, env={"PERFMLP_FAULT": "1:3"}, timeout=60)
    elapsed = time.monotonic() - t0
    assert r.returncode != 0
    assert "rank 1: error: RuntimeError: injected fault at batch 3" in r.stderr
    assert "Traceback" not in r.stderr
    assert elapsed < 30, elapsed


def test_only_rank0_prints(tmp_path):
    r = run_perfmlp("--backend", "numpy", "--data", "synthetic", "--n-train", "60", "--batch-size", "20",
                    "--input-size", "30", "--hidden-size", "8", "--epochs", "2", "--trace-dir", str(tmp_path), procs=2)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("data: synthetic")
    assert [l.split(":")[0] for l in lines[1:3]] == ["epoch 1/2", "epoch 2/2"]
    assert lines[3].startswith("done: 6 batches on 2 ranks (numpy)")
    assert len(lines) == 4
