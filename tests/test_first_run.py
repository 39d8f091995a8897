"""A first run on a CPU: what its manifest says about BLAS, the phases it
records, the hidden sizes as a newcomer types them, and one time per batch
for the trainer's lines and the reader."""
import re
import subprocess
import sys

import pytest

from conftest import ROOT, run_perfmlp
import argparse

from perfmlp import config, flags
from perfmlp import names as N
from perfmlp.trace import records as R
from perfmlp.trace.format import WARMUP_BATCHES, warmup_batches
from perfmlp.trace.reader import Run, read_run

SMALL = ["--backend", "numpy", "--data", "synthetic", "--input-size", "30", "--hidden-size", "8",
         "--num-classes", "3", "--batch-size", "20", "--learning-rate", "0.1"]


def test_the_trainer_finds_blas_without_calibrate():
    code = ("import sys; from perfmlp.blas import find_blas; b = find_blas(); "
            "print(b is not None, 'perfmlp.calibrate' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "False"]


def test_two_ranks_record_their_blas_threads_and_no_h2d(tmp_path):
    from perfmlp.blas import THREAD_ENV, find_blas
    env = {v: "1" for v in THREAD_ENV}
    r = run_perfmlp(*SMALL, "--n-train", "80", "--epochs", "1", "--trace-dir", str(tmp_path), "--run-id", "p2",
                    procs=2, env=env)
    assert r.returncode == 0, r.stderr
    run = read_run(tmp_path / "p2")
    blas = find_blas()
    if blas is not None and blas.getter:
        assert run.ran.blas_threads == (1, 1)   # each of the two ranks ran one thread
        assert run.ran.blas.startswith(blas.library)
    assert len(run.ran.blas_threads or ()) in (0, 2)
    # a NumPy batch is a view of the host arrays: nothing copied, so no h2d phase
    want = N.batch_phases(run.comm, N.IN_PLACE, run.exec)
    assert N.Phase.H2D not in want
    for rt in run.ranks.values():
        for b in rt.batches:
            assert tuple(b.t_ms) == want and b.bytes_h2d == 0


def test_a_numpy_run_copies_nothing_by_the_vocabulary():
    P = N.Phase
    assert N.batch_phases(N.MPI, N.IN_PLACE) == (P.FORWARD, P.LOSS, P.BACKWARD, P.ALLREDUCE, P.UPDATE)
    assert N.batch_phases(N.MPI, N.PAGEABLE)[0] == P.H2D   # a copied transfer still opens with its copy


@pytest.mark.parametrize("argv", [["--hidden-sizes", "256", "128"], ["--hidden-sizes", "256,128"],
                                  ["--hidden-sizes", "256,", "128"]])
def test_hidden_sizes_in_either_form(argv):
    ap = argparse.ArgumentParser()
    flags.add_arguments(ap)                                  # the run's flags
    assert flags.from_args(ap.parse_args(argv)).hidden_sizes == (256, 128)
    ap = argparse.ArgumentParser()
    flags.add_fields(ap, ["hidden_sizes", "batch_size"])     # the model's, the sweep's
    assert ap.parse_args([*argv, "--batch-size", "7"]).hidden_sizes == [256, 128]


def test_hidden_sizes_on_the_commands():
    from perfmlp.model.__main__ import parser
    assert parser().parse_args(["--hidden-sizes", "256", "128"]).hidden == [256, 128]
    from perfmlp.whatif import set_values
    assert set_values({"hidden_sizes": "256 128"}) == {"hidden_sizes": (256, 128)}   # --set hidden_sizes="256 128"
    assert config.from_mapping({"hidden_sizes": "256, 128"}).hidden_sizes == (256, 128)   # a YAML value
    with pytest.raises(config.PerfmlpError, match="hidden_sizes"):
        config.from_mapping({"hidden_sizes": " , "})


def test_warm_up_leaves_a_short_epoch_whole():
    assert warmup_batches(WARMUP_BATCHES + 1) == WARMUP_BATCHES   # 4 batches: the last one timed
    assert warmup_batches(WARMUP_BATCHES) == 0 and warmup_batches(1) == 0   # the whole epoch


def _figures(stdout: str) -> tuple[list[str], str]:
    epochs = re.findall(r"^epoch \d+/\d+: .*?([0-9.e+-]+) ms/batch", stdout, re.M)
    done = re.search(r"^done: .*?([0-9.e+-]+) ms/batch", stdout, re.M).group(1)
    return epochs, done


@pytest.mark.parametrize("n_train, epochs", [(200, 3), (60, 2)])   # 10 and 3 batches an epoch
def test_the_printed_time_per_batch_is_the_readers(tmp_path, n_train, epochs):
    r = run_perfmlp(*SMALL, "--n-train", str(n_train), "--epochs", str(epochs), "--trace-dir", str(tmp_path),
                    "--run-id", "t")
    assert r.returncode == 0, r.stderr
    printed, done = _figures(r.stdout)
    run = read_run(tmp_path / "t")
    by_epoch = [run.batch_time_ms(b) for b in run.ranks[0].batches if b.batch == n_train // 20 - 1]
    assert [f"{t:.4g}" for t in by_epoch] == printed
    assert f"{run.median_batch_ms():.4g}" == done


def test_the_reader_keeps_a_short_epoch_whole_and_times_it_whole():
    manifest = R.Manifest(schema=R.SCHEMA, run_id="x", config={
        "input_size": 4, "hidden_sizes": [3], "num_classes": 2, "batch_size": 5, "precision": "float32",
        "batch_transfer": N.PAGEABLE}, procs=1, status="complete", start="", end="", ran=None)
    shape = R.Shape(id=1, samples=5, local_samples=5, phases=(N.Phase.FORWARD,), flops={}, ops={}, bytes_h2d=0,
                    bytes_d2h=0, bytes_d2d=0, bytes_mpi=0, bytes_nccl=0, collectives=())
    batches = [R.Batch(epoch=0, batch=k, shape=shape, t0_s=0.0, wall_ms=1.0, loss=None, clock=N.HOST_CLOCK,
                       t_ms={N.Phase.FORWARD: R.Span(0.0, 1.0)}) for k in range(3)]
    run = Run.from_records(manifest, {0: [shape, *batches, R.Epoch(epoch=0, seconds=0.012, warmup_batches=0)]})
    assert sorted(k[1] for k in run.steady_batches()) == [0, 1, 2]
    assert run.median_batch_ms() == pytest.approx(4.0)   # 12 ms over the epoch's 3 batches
