"""The sliced first layer and the 16-bit exchange in the model's one
predictor, and in what reads it: the model command, a sweep's predictions
and the manifest's record of what ran."""
from types import SimpleNamespace

import pytest

from perfmlp import names as N
from perfmlp.config import from_mapping
from perfmlp.model.__main__ import main as model_main
from perfmlp.model.machine import load_machine
from perfmlp.model.predict import predict_batch
from perfmlp.model.predict.slices import choose_slices, predict_sliced, slice_count
from perfmlp.sweep.plan import SweepRun
from perfmlp.sweep.predict import run_prediction
from perfmlp.trace.manifest import what_ran

H200 = load_machine("h200-calibrated")
SIZES, ARGS = (784, 512, 10), dict(comm=N.NCCL, batch_transfer=N.RESIDENT, exec_mode=N.GRAPH)


def test_the_predictor_prices_the_schedule_in_its_terms():
    today = predict_batch(H200, SIZES, 3200, 4, **ARGS)
    for k, grad in ((2, N.FLOAT32), (4, N.FLOAT32), (1, N.BF16), (2, N.BF16)):
        new = predict_batch(H200, SIZES, 3200, 4, **ARGS, slices=k, grad_precision=grad)
        assert new.total_s == pytest.approx(sum(new.terms.values()))   # the terms still add up
        assert new.total_s == pytest.approx(predict_sliced(H200, SIZES, 3200, 4, k, grad_precision=grad)["sliced_s"])
        assert new.terms["allreduce"] < today.terms["allreduce"]      # some of the exchange is hidden or halved
        assert new.detail["slices"] == k
        # the step changes by what the sliced chain changes
        chains = new.detail["chain_sliced_s"] - new.detail["chain_today_s"]
        assert new.total_s - today.total_s == pytest.approx(chains, rel=1e-9, abs=1e-12)
    # more slices: smaller GEMMs, more compute
    two, four = (predict_batch(H200, SIZES, 3200, 4, **ARGS, slices=k) for k in (2, 4))
    assert four.terms["gemm"] > two.terms["gemm"] > today.terms["gemm"]


def test_auto_is_the_models_choice():
    assert slice_count("3", H200, SIZES, 3200, 4) == 3
    assert slice_count(N.AUTO, H200, SIZES, 3200, 4) == choose_slices(H200, SIZES, 3200, 4)
    assert slice_count(N.AUTO, H200, SIZES, 3200, 1) == 1   # nothing to hide on one GPU


def test_the_model_command_takes_the_flags(capsys):
    base = ["--machine", "h200-calibrated", "--procs", "4", "--batch-size", "3200", "--hidden-sizes", "512",
            "--comm", "nccl", "--batch-transfer", "resident", "--exec", "graph", "--trace-level", "untraced"]
    totals = {}
    for extra in ([], ["--slices", "2", "--grad-precision", "bf16"]):
        assert model_main(base + extra) == 0
        out = capsys.readouterr().out
        totals[bool(extra)] = float(next(ln for ln in out.splitlines() if "total (serialised)" in ln).split()[-1])
    assert "first layer in 2 slices, gradients reduced in bf16" in out
    assert "0 / 814,102" in out   # 407,051 gradient elements of 2 bytes (the loss slot with them)
    assert totals[True] < totals[False]


def test_a_sweeps_prediction_is_the_sliced_ones():
    cfg = from_mapping(dict(backend="cupy", comm="nccl", batch_transfer="resident", exec="graph",
                            batch_size=3200, hidden_sizes=[512], slices="auto", grad_precision="bf16", trace=False))
    pred = run_prediction(H200, SweepRun("r", 4, {}, cfg))
    k = choose_slices(H200, SIZES, 3200, 4, grad_precision=N.BF16)
    assert pred.total_s == pytest.approx(predict_batch(H200, SIZES, 3200, 4, **ARGS, slices=k,
                                                        grad_precision=N.BF16).total_s)


def test_the_manifest_says_how_many_slices_ran():
    cfg = from_mapping(dict(slices="auto", grad_precision="fp16"))
    machine = {"nodes": {}}
    levels = dict(trace_level=N.COUNTERS, trace_level_asked=N.AUTO)
    sliced = SimpleNamespace(name=N.NUMPY, net=None, reducer=SimpleNamespace(name=N.MPI, sliced=True, rows=[0] * 3))
    plain = SimpleNamespace(name=N.NUMPY, net=None, reducer=SimpleNamespace(name=N.MPI))
    ran = what_ran(cfg, sliced, machine, levels)
    assert (ran.slices, ran.grad_precision) == (3, N.FP16)
    assert what_ran(from_mapping({}), plain, machine, levels).slices == 1


@pytest.mark.parametrize("over", [dict(slices="2"), dict(grad_precision="bf16"), dict(parallel="model")])
def test_the_cpu_model_refuses_what_it_does_not_price(over):
    from perfmlp.errors import PerfmlpError
    cpu = load_machine("cpu-ci-2core")
    cfg = from_mapping(dict(backend="numpy", batch_size=200, hidden_sizes=[64], **over))
    with pytest.raises(PerfmlpError, match="r: the CPU model prices data parallelism"):
        run_prediction(cpu, SweepRun("r", 2, {}, cfg))
    plain = from_mapping(dict(backend="numpy", batch_size=200, hidden_sizes=[64]))
    assert run_prediction(cpu, SweepRun("r", 2, {}, plain)).total_s > 0
