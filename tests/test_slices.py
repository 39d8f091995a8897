"""The sliced first layer and the 16-bit exchange: their flags, the model's
price of the schedule, and (under mpiexec) their arithmetic."""
import sys

import numpy as np
import pytest

from conftest import ROOT, each_rank_count, mpiexec, run_cmd
from perfmlp import names as N
from perfmlp.comm import SingleWorld
from perfmlp.config import Config, from_mapping
from perfmlp.errors import PerfmlpError
from perfmlp.mixed import narrow
from perfmlp.mlp import Network
from perfmlp.model.machine import load_machine
from perfmlp.model.predict import predict_batch
from perfmlp.model.predict.schedule import chain_s, slice_rows
from perfmlp.model.predict.slices import choose_slices, predict_sliced
from perfmlp.slices import SlicedExchange, check

H200 = ROOT / "models" / "h200-calibrated.yaml"


def test_sliced_step_equals_unsliced_on_several_ranks():
    each_rank_count("mpi_slices.py", (2, 3))


def test_16bit_gradients_keep_the_jobs_accuracy():
    # the default job's first 3 epochs on 4,000 samples, 2 ranks, float32 / bf16 / fp16 gradients, within 0.5
    # points (the whole default job: `mpiexec -n 2 python tests/mpi_slices.py accuracy`)
    r = run_cmd([mpiexec(), "-n", "2", sys.executable, str(ROOT / "tests" / "mpi_slices.py"), "accuracy", "short"],
                timeout=300)
    assert r.returncode == 0 and "held-out accuracy" in r.stdout, r.stdout + r.stderr


def test_flags_are_checked():
    assert Config().slices == "1" and Config().grad_precision == N.FLOAT32
    assert from_mapping({"slices": 4}).slices == "4"
    assert from_mapping({"slices": "AUTO"}).slices == N.AUTO
    for bad in (0, -2, "two", 1.5):
        with pytest.raises(PerfmlpError, match="slices"):
            from_mapping({"slices": bad})
    with pytest.raises(PerfmlpError, match="grad_precision"):
        from_mapping({"grad_precision": "float64"})


def test_the_gpu_and_the_partitioned_strategies_are_refused_in_one_line():
    check(from_mapping({"grad_precision": N.BF16, "comm": N.NCCL}), N.CUPY, False)   # built
    with pytest.raises(PerfmlpError, match="--grad-precision fp16 on the GPU rounds float32"):
        check(from_mapping({"grad_precision": N.FP16, "precision": N.FLOAT64, "comm": N.NCCL}), N.CUPY, False)
    with pytest.raises(PerfmlpError, match="--grad-precision with --precision fp16"):
        check(from_mapping({"grad_precision": N.BF16, "precision": N.FP16, "comm": N.NCCL}), N.CUPY, False)
    with pytest.raises(PerfmlpError, match="comm nccl"):
        check(from_mapping({"slices": "2", "comm": N.MPI_STAGED}), N.CUPY, False)
    check(from_mapping({"slices": "2", "comm": N.NCCL}), N.CUPY, False)   # built
    with pytest.raises(PerfmlpError, match="data parallelism"):
        check(from_mapping({"grad_precision": N.BF16}), N.NUMPY, True)
    check(from_mapping({}), N.CUPY, True)   # nothing asked: nothing refused


def test_more_slices_than_hidden_units_is_refused():
    net = Network(np, (5, 3, 2), "float64", 0.1, 0.0, 4)
    with pytest.raises(PerfmlpError, match="3 hidden units"):
        SlicedExchange(SingleWorld(), net, 4)


def test_slices_split_the_hidden_units_unevenly_by_at_most_one():
    assert slice_rows(7, 3) == [(0, 3), (3, 5), (5, 7)]   # 3 + 2 + 2 = 7
    assert slice_rows(512, 1) == [(0, 512)]


def _parts(k, fwd=1.0, bwd=1.0, upd=0.0, middle=2.0):
    rows = [r1 - r0 for r0, r1 in slice_rows(4, k)]   # 4 hidden units, one element each (D = 1)
    return dict(fwd=[fwd / k] * k, bwd=[bwd / k] * k, upd=[upd] * k, middle=middle, upd_rest=0.0, upd_all=0.0,
                rows=rows, rest_elems=0, loss_elems=0, D=1)


def test_the_unpipelined_chain_is_the_serial_sum():
    # forward 1 + middle 2 + backward 1 + one collective of 4 elements at 0.5 each = 6
    assert chain_s(_parts(1), lambda n: 0.5 * n, False) == pytest.approx(6.0)


def test_the_pipelined_chain_hides_communication_behind_the_slices():
    comm = lambda n: 0.25 * n   # noqa: E731  (the 4 elements: 1 s)
    serial = chain_s(_parts(1), comm, False)              # 1 + 2 + 1 + 4 * 0.25 = 5
    assert chain_s(_parts(1), comm, True) == pytest.approx(serial)   # one slice: nothing to pipeline
    # two slices: each 0.5 s of backward GEMM hides the other's 0.5 s collective, and the
    # next forward's slices wait for none: the compute chain alone, 1 + 2 + 1 = 4
    assert chain_s(_parts(2), comm, True) == pytest.approx(4.0)
    slow = lambda n: 1.0 * n    # noqa: E731  (the 4 elements: 4 s, longer than the compute)
    assert chain_s(_parts(2), slow, True) > 4.0


def test_the_model_prices_today_as_predict_batch_and_chooses_a_candidate():
    m = load_machine(H200)
    layers = (784, 512, 10)
    one = predict_sliced(m, layers, 3200, 4, 1)
    base = predict_batch(m, layers, 3200, 4, N.FLOAT32, N.NCCL, N.RESIDENT, None, N.GRAPH)
    assert one["today_s"] == pytest.approx(base.total_s) and one["sliced_s"] == pytest.approx(base.total_s)
    half = predict_sliced(m, layers, 3200, 4, 1, grad_precision=N.BF16)
    assert half["sliced_s"] < one["sliced_s"]   # half the bytes on the wire
    k = choose_slices(m, layers, 3200, 4)
    assert predict_sliced(m, layers, 3200, 4, k)["sliced_s"] <= one["sliced_s"]


def test_narrowing_to_float16_rounds_as_numpy_does():
    # subnormals, the edge of the normals, signed zero, NaN and overflow: the same bits as astype's
    rng = np.random.default_rng(1)
    for dtype in (np.float32, np.float64):
        for scale in (1.0, 1e-5, 1e-7, 1e-9, 1e5):
            a = (rng.standard_normal(5000) * scale).astype(dtype)
            a[:4] = [np.nan, -0.0, 2.0 ** -14 * (1 - 2.0 ** -12), -2.0 ** -25]
            with np.errstate(over="ignore"):
                assert np.array_equal(narrow(a, np.dtype(np.float16)).view(np.uint16),
                                      a.astype(np.float16).view(np.uint16)), (dtype, scale)
