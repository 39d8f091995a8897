"""The asynchronous parameter server (`--comm ps-async`): its schedule, its
update rule, staleness 0 against synchronous SGD on 2-4 ranks, the replay
of a stale run from its trace, its refusals and its stop on a bad loss."""
import sys

import numpy as np
import pytest

from conftest import ROOT, each_rank_count, gpu, mpiexec, run_cmd, run_perfmlp
from perfmlp.backend import check_options
from perfmlp.config import from_mapping
from perfmlp.errors import PerfmlpError
from perfmlp.mlp import FlatParams
from perfmlp.model.psasync import predict_async, worker_cycle_s
from perfmlp.psasync.replay import replay_run
from perfmlp.psasync.server import Piece, Schedule
from perfmlp.psasync.server import apply_gradient
from perfmlp.report.sections.strategies import section_psasync
from perfmlp.trace import records as R
from perfmlp.trace.lines import parse as parse_line
from perfmlp.trace.reader import Run, read_run
from perfmlp.trace.updates import update_record

SMALL = ("--data", "synthetic", "--input-size", "12", "--hidden-size", "6", "--precision", "float64")


def test_staleness_zero_hands_out_a_step_only_after_the_last_one():
    s = Schedule(steps=3, workers=2, staleness=0)
    assert [s.hand_out(), s.hand_out()] == [Piece(0, 0), Piece(0, 1)]
    assert not s.ready()                       # step 1 waits for both pieces of step 0
    assert s.first_of_step(Piece(0, 1))
    assert list(s.applied(Piece(0, 1))) == []  # half of step 0
    assert not s.first_of_step(Piece(0, 0)) and not s.ready()
    assert list(s.applied(Piece(0, 0))) == [0]
    assert s.ready() and s.hand_out() == Piece(1, 0)


def test_staleness_two_runs_ahead_by_two_steps_and_no_more():
    s = Schedule(steps=5, workers=2, staleness=2)
    out = [s.hand_out() for _ in range(6)]     # steps 0, 1 and 2: each needs K >= step - 2 = 0
    assert out[-1] == Piece(2, 1) and not s.ready()
    assert s.staleness_of(Piece(2, 0)) == 2
    assert list(s.applied(Piece(1, 0))) == [] and list(s.applied(Piece(1, 1))) == []  # step 1 first
    assert s.complete == 0 and not s.ready()   # K counts the unbroken prefix: step 0 is still out
    assert list(s.applied(Piece(0, 0))) == [] and list(s.applied(Piece(0, 1))) == [0, 1]
    assert s.complete == 2 and [s.hand_out() for _ in range(4)][-1] == Piece(4, 1)
    assert s.exhausted and not s.ready()


def test_a_steps_pieces_applied_one_by_one_make_one_synchronous_update():
    p = FlatParams(np, (3, 2), "float64")      # W 2x3, b 2: 8 parameters
    p.flat[:] = np.arange(1.0, 9.0)
    g1, g2 = np.linspace(-1, 1, 8), np.linspace(2, 0, 8)
    lr, reg = 0.1, 0.5
    sync = p.flat.copy()                       # Network._sgd_update on the summed gradient
    sync[:6] -= lr * (g1[:6] + g2[:6] + reg * sync[:6])
    sync[6:] -= lr * (g1[6:] + g2[6:])
    for g, first in ((g1, True), (g2, False)):
        apply_gradient(p, g[:6], g[6:8], lr, reg, first)
    np.testing.assert_allclose(p.flat, sync, rtol=1e-14)
    # w1 = 1 - 0.1 (-1 + 2 + 0.5 * 1) = 0.85
    assert abs(p.flat[0] - 0.85) < 1e-14


def test_staleness_zero_equals_synchronous_sgd():
    each_rank_count("mpi_psasync.py", (2, 3, 4), timeout=120)


def test_a_stale_run_is_replayed_from_its_trace(tmp_path):
    """S = 2 on 3 workers, the last 10 ms late per piece: the order is the
    run's own, and its update lines alone remake its parameters."""
    r = run_perfmlp(*SMALL, "--n-train", "90", "--batch-size", "20", "--epochs", "2", "--shuffle", "--comm",
                    "ps-async", "--staleness", "2", "--straggler-delay-ms", "10", "--straggler-rank", "3",
                    "--trace-dir", str(tmp_path / "t"), "--save-params", str(tmp_path / "p"), "--quiet", procs=4)
    assert r.returncode == 0, r.stderr
    (folder,) = (tmp_path / "t").iterdir()
    run = read_run(folder)
    ups = run.ranks[0].updates
    assert len(ups) == 2 * 5 * 3                # epochs x batches (20 20 20 20 10) x pieces
    assert all(u.staleness <= 2 and u.read <= u.update for u in ups)
    assert max(u.staleness for u in ups) > 0
    per_worker = {w: sum(u.worker == w for u in ups) for w in (1, 2, 3)}
    assert per_worker[3] < (per_worker[1] + per_worker[2]) / 2   # the others took the straggler's share
    final = np.load(tmp_path / "p" / "final.npz")
    again = replay_run(run)
    for k in again:
        np.testing.assert_allclose(again[k], final[k], rtol=0, atol=1e-12)
    start = np.load(tmp_path / "p" / "initial.npz")
    assert float(np.abs(final["W1"] - start["W1"]).max()) > 1e-2   # it learnt something to remake


@pytest.mark.parametrize("values, words", [
    (dict(comm="ps-async-nccl", backend="numpy"), "NCCL's receive names its sender"),
    (dict(comm="ps-async", exec="graph", backend="numpy"), "--exec graph with --comm ps-async"),
    (dict(comm="ps-async", overlap=True, backend="numpy"), "--overlap is for data parallelism"),
])
def test_combinations_that_cannot_work_are_refused(values, words):
    with pytest.raises(PerfmlpError, match=words):
        check_options(from_mapping(values))


@pytest.mark.parametrize("values, words", [
    (dict(comm="ps-async", parallel="model"), "data parallelism's exchange"),
    (dict(staleness=2), "staleness (2) is for comm ps-async"),
])
def test_configurations_that_cannot_work_are_refused(values, words):
    with pytest.raises(PerfmlpError, match=words.replace("(", r"\(").replace(")", r"\)")):
        from_mapping(values)


def test_one_rank_is_refused_in_one_line():
    r = run_perfmlp(*SMALL, "--n-train", "40", "--batch-size", "20", "--comm", "ps-async", "--no-trace")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["perfmlp.run: error: --comm ps-async needs at least 2 ranks "
                                             "(rank 0 serves, the others work); this run has 1"]


def test_a_loss_that_is_not_finite_stops_every_rank(tmp_path):
    r = run_perfmlp(*SMALL, "--n-train", "200", "--batch-size", "20", "--epochs", "3", "--comm", "ps-async",
                    "--staleness", "1", "--learning-rate", "1e30", "--trace-dir", str(tmp_path), procs=3, timeout=60)
    assert r.returncode == 1
    # perfmlp's one line on every launcher (Open MPI's mpiexec adds its own banner for a non-zero exit)
    (line,) = [l for l in r.stderr.splitlines() if l.startswith("perfmlp.")]
    assert "loss is nan at epoch" in line and "at-failure.npz" in line and "Traceback" not in r.stderr


def test_a_damaged_update_line_is_refused_by_name():
    good = ('{"kind":"update","update":3,"worker":1,"epoch":0,"batch":1,"piece":0,"read":2,"staleness":1,'
            '"queue":0,"blocked":0,"t_s":0.5,"apply_ms":0.1,"reply_ms":0.1}')
    assert parse_line(good).read == 2
    for bad, field in ((good.replace('"read":2', '"read":5'), "read: 5, after"),
                       (good.replace('"queue":0', '"queue":-1'), "queue"),
                       (good.replace('"t_s":0.5', '"t_s":"x"'), "t_s")):
        with pytest.raises(ValueError, match=field):
            parse_line(bad)


@gpu
def test_staleness_zero_on_the_gpu_equals_synchronous_sgd():
    r = run_cmd([mpiexec(), "-n", "3", sys.executable, str(ROOT / "tests" / "mpi_psasync.py"), "cupy"], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK 3 ranks" in r.stdout


# ---- the model (perfmlp/model/psasync.py) ----------------------------------------------------

def test_equal_workers_at_staleness_zero_update_as_synchronous_sgd():
    p = predict_async([0.012, 0.012, 0.012], staleness=0)
    assert p.update_s == pytest.approx(0.004)       # 12 ms per step of 3 updates
    assert p.bound == "workers" and p.staleness_to_hide == 0


def test_a_straggler_holds_the_others_back_until_the_staleness_hides_it():
    # 10 ms and 30 ms: the slow one's piece lets the other take 30 / 10 = 3 pieces;
    # S pieces ahead: (S + 1) 2 - 1 of them, so S = 0 allows 1, S = 1 allows 3
    cycles = [0.010, 0.030]
    s0, s1 = predict_async(cycles, 0), predict_async(cycles, 1)
    assert s0.update_s == pytest.approx(0.030 / 2) and s0.bound == "staleness"    # synchronous: 30 ms a step
    assert s1.update_s == pytest.approx(1 / (1 / 0.010 + 1 / 0.030))             # 7.5 ms: nobody waits
    assert s1.bound == "workers" and s0.staleness_to_hide == 1


def test_the_server_bounds_the_update_and_saturates():
    # 1.6 MB each way over 8 GB/s: 2 x 0.2 ms on the link, plus a 0.6 ms update: 1 ms per update;
    # 4 workers of 2 ms would send one every 0.5 ms, so the server is the bound, saturated at 2 workers
    p = predict_async([0.002] * 4, 4, message_bytes=1_600_000, link_bytes_per_s=8e9, apply_s=0.0006)
    assert p.link_s == pytest.approx(0.0004) and p.server_s == pytest.approx(0.001)
    assert p.update_s == pytest.approx(0.001) and p.bound == "server"
    assert p.saturation_workers == pytest.approx(2.0)
    # a worker's cycle: 1 ms compute, two 1.6 MB messages over 8 GB/s with 5 us latency
    assert worker_cycle_s(0.001, 1_600_000, 8e9, latency_s=5e-6) == pytest.approx(0.001 + 2 * (5e-6 + 2e-4))


# ---- the report's section (perfmlp/report/sections/strategies.py) -----------------------------------------

JOB = dict(input_size=4, hidden_sizes=[3], num_classes=2, n_train=40, batch_size=20, epochs=2, learning_rate=0.5,
           reg=0.0, precision="float64", seed=0, shuffle=False, data="synthetic", n_heldout=10, parallel="data")


def _manifest(run_id, procs, comm, config):
    ran = R.Ran(backend="numpy", comm=comm, exec="eager", parallel="data", model_procs=0, batch_transfer="pageable",
                overlap=False, bucket_bytes=1, gemm="cublas", output_grad_cols=256, fuse_output=True,
                trace_level="counters", trace_level_asked="auto")
    return R.Manifest(schema=R.SCHEMA, run_id=run_id, config=config, procs=procs, status="complete", start="",
                      ran=ran)


def _async_run():
    ups = [update_record(update=u, worker=1 + u % 2, epoch=u // 4, batch=u // 2 % 2, piece=u % 2,
                         read=max(0, u - 1), staleness=u % 2, queue=u % 3, blocked=0, t_s=0.01 * u, apply_ms=0.3,
                         reply_ms=0.2) for u in range(8)]
    epochs = [R.Epoch(epoch=e, accuracy=0.6 + 0.1 * e, seconds=0.02, updates=4 * (e + 1)) for e in (0, 1)]
    # each worker: 10 ms a piece, 3 of them waiting for the server's answer (pull):
    # a cycle of 10 - 3 + 0.5 (the server's 0.3 + 0.2 ms on its request) = 7.5 ms
    shape = R.Shape(id=1, samples=20, local_samples=10, phases=(R.Phase.FORWARD, R.Phase.PULL, R.Phase.PARAMS),
                    flops={}, ops={}, bytes_h2d=0, bytes_d2h=0, bytes_d2d=0, bytes_mpi=0, bytes_nccl=0,
                    collectives=())
    work = [shape, R.Batch(epoch=0, batch=0, shape=shape, t0_s=0.0, wall_ms=10.0, clock="host",
                           t_ms={"forward": R.Span(0, 5.0), "pull": R.Span(5.0, 3.0), "params": R.Span(9.0, 1.0)})]
    return Run.from_records(_manifest("async-s1", 3, "ps-async", dict(JOB, comm="ps-async", staleness=1)),
                            {0: ups + epochs, 1: work, 2: work})


def test_the_report_puts_a_stale_run_beside_its_synchronous_one():
    sync = Run.from_records(_manifest("sync", 2, "mpi", dict(JOB, comm="auto")),
                            {0: [R.Epoch(epoch=e, accuracy=0.65 + 0.1 * e, seconds=0.05) for e in (0, 1)], 1: []})
    s = section_psasync([_async_run(), sync])
    rows = s.tables[0].rows
    assert [r["scheme"] for r in rows] == ["synchronous all-reduce", "ps-async S=1"]
    a = rows[1]
    assert a["final_accuracy"] == pytest.approx(0.7) and a["staleness_max"] == 1 and a["queue_max"] == 2
    assert a["measured_ms_per_update"] == pytest.approx(1e3 * 0.04 / 8)       # 40 ms over 8 updates
    assert a["predicted_ms_per_update"] == pytest.approx(3.75)                  # two 7.5 ms cycles: 7.5 / 2
    assert a["bound"] == "workers" and a["server_ms_per_update"] == pytest.approx(0.5)
    assert "synchronous 75.00% held-out accuracy in 0.1 s; ps-async S=1 70.00% in 0.0 s (2.50x)" in s.paragraphs[1]
    groups = s.figures[0].args["groups"]
    (series,) = groups.values()
    assert [x for x, _, _ in series[1][1]] == [2.0, 4.0]   # 4 and 8 updates of 2 workers: batches of B
    assert s.figures[0].draw(**s.figures[0].args)["png"][:4] == b"\x89PNG"


def test_no_async_run_no_section():
    assert section_psasync([]) is None
