"""The what-if: the solver is the model's (pure, numbers in), the command
refuses what the trainer refuses in the trainer's words, and reads its
values as a configuration file's."""
import json
import subprocess
import sys

import pytest

from perfmlp.backend import check_options
from perfmlp.config import Config
from perfmlp.errors import PerfmlpError
from perfmlp.model.machine import load_machine
from perfmlp.model.whatif import Setting, WhatIfError, changed_setting, what_if
from perfmlp.whatif import main

from conftest import in_process
from synthetic import gpu_records, write_run

H200_FIXTURE = str(__import__("pathlib").Path(__file__).parent / "data" / "h200-calibrated-fixture.yaml")  # values the tests work out

BEFORE = Setting((784, 512, 10), 3200, 1, "float32", "mpi-staged", "pageable", "eager", False, 1 << 20, "cublas",
                 "phases")


def whatif_command(run, *args):
    return subprocess.run([sys.executable, "-m", "perfmlp.whatif", str(run), *args], capture_output=True, text=True)


def whatif(run, *args):
    """The command's main in this process: its exit status, stdout and stderr."""
    return in_process(main, [run, *args])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return write_run(tmp_path_factory.mktemp("whatif"), gpu_records(batches=6, run_id="base"))


def trainers_words(**changes) -> str:
    """The trainer's refusal of the run's configuration with `changes`, on a GPU."""
    with pytest.raises(PerfmlpError) as e:
        check_options(Config(backend="cupy", batch_size=3200, **changes))
    return str(e.value)


def test_the_solver_takes_numbers_and_keeps_what_the_change_does_not_touch():
    m = load_machine(H200_FIXTURE)
    groups = {g: v * 1e3 for g, v in BEFORE.predict(m).groups().items()}
    groups["other"] = 0.05
    # the precision changes the GEMMs: compute is predicted, the untouched groups stay measured
    after = changed_setting(BEFORE, {"precision": "float64"})
    w = what_if(m, BEFORE, after, sum(groups.values()), groups, "run")
    assert "gemm" in w.changed_terms and "compute" in w.changed
    # float64 doubles the gradient bytes too, so the allreduce may move; what the change leaves is measured
    untouched = [g for g in groups if g not in w.changed]
    assert "other" in untouched and all(w.groups_ms[g] == groups[g] for g in untouched)
    assert w.groups_ms["other"] == 0.05
    with pytest.raises(WhatIfError, match="more processes than the 3200 samples"):
        changed_setting(BEFORE, {}, procs=4000)
    with pytest.raises(WhatIfError, match="not a key a what-if can change"):
        changed_setting(BEFORE, {"epochs": 2})


@pytest.mark.parametrize("sets, trainer", [
    (["--set", "comm=mpi"], dict(comm="mpi")),                                   # host buffers on a GPU
    (["--set", "comm=ps", "--set", "exec=graph"], dict(comm="ps", exec="graph")),
    (["--set", "overlap=true"], dict(comm="mpi-staged", overlap=True)),          # overlap needs NCCL on a GPU
])
def test_the_command_refuses_what_the_trainer_refuses_in_its_words(run, sets, trainer):
    r = whatif(run, *sets, "--procs", "2")
    words = trainers_words(**trainer)
    assert r.returncode == 2 and r.stderr == f"perfmlp.whatif: error: {words}\n"


def test_the_command_reads_values_as_a_configuration_file(run):
    for text, value in (("true", True), ("on", True), ("false", False)):
        r = whatif(run, "--set", "comm=nccl", "--set", f"overlap={text}", "--set", "bucket_bytes=1048576", "--json")
        assert r.returncode == 0, r.stderr
        after = json.loads(r.stdout)["after"]
        assert after["overlap"] is value and after["bucket_bytes"] == 1048576 and after["comm"] == "nccl"
    r = whatif(run, "--set", "hidden_sizes=1024,256", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["after"]["layer_sizes"][1:3] == [1024, 256]
    # what a configuration file would refuse is refused the same way, in one line
    for bad, word in (("overlap=maybe", "overlap"), ("bucket_bytes=-1", "bucket_bytes"), ("comm=[", "comm")):
        r = whatif(run, "--set", bad)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and word in r.stderr, r.stderr


def test_a_strategy_the_trainer_runs_but_the_what_if_does_not_price_is_one_line(run):
    r = whatif_command(run, "--set", "comm=ps-nccl", "--procs", "2")   # as a command, its interpreter started
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "data parallelism with an allreduce" in r.stderr


# ---- the sliced first layer (perfmlp/slices.py) ------------------------------------------------

X4 = __import__("pathlib").Path(__file__).resolve().parents[1] / "reports" / "h200-x4"
X4_NCCL = X4 / "traces" / "modes-h512-b3200-p4-float32-resident-nccl-cublas"   # 4 GPUs, resident, NCCL, eager
X4_MACHINE = str(X4 / "benchmarks" / "calibrated.yaml")


def test_slices_on_a_committed_four_gpu_run_move_only_the_exchange_by_the_models_chains():
    from perfmlp.model.predict.slices import choose_slices, predict_sliced
    from perfmlp.report.whatif import what_if_run
    from perfmlp.trace.reader import read_run
    m, run = load_machine(X4_MACHINE), read_run(X4_NCCL)
    w = what_if_run(run, m, {"slices": "auto"})
    s = w.before
    k = choose_slices(m, s.layer_sizes, s.batch, s.procs, comm="nccl", batch_transfer="resident", exec_mode="eager")
    assert w.before.slices == 1 and w.after.slices == k > 1
    p = predict_sliced(m, s.layer_sizes, s.batch, s.procs, k, comm="nccl", batch_transfer="resident",
                       exec_mode="eager")
    # the measured exchange less what the sliced chain saves against today's; every other group as measured
    saved_ms = (p["chain_today_s"] - p["chain_sliced_s"]) * 1e3
    assert saved_ms > 0 and w.changed == ("allreduce",)
    assert w.groups_ms["allreduce"] == pytest.approx(w.measured_groups_ms["allreduce"] - saved_ms)
    assert all(w.groups_ms[g] == w.measured_groups_ms[g] for g in w.groups_ms if g != "allreduce")
    assert w.total_ms == pytest.approx(w.measured_ms - saved_ms)
    # a count given is priced as given; one past the hidden units is one line
    assert what_if_run(run, m, {"slices": k}).total_ms == pytest.approx(w.total_ms)
    with pytest.raises(WhatIfError, match="the first layer has 512 hidden units"):
        what_if_run(run, m, {"slices": 4000})


def test_the_command_prices_slices_on_a_gpu_run_and_refuses_them_where_the_trainer_does():
    r = subprocess.run([sys.executable, "-m", "perfmlp.whatif", str(X4_NCCL), "--set", "slices=auto", "--machine",
                        X4_MACHINE, "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["before"]["slices"] == 1 and out["after"]["slices"] > 1 and out["predicted_ms"] < out["measured_ms"]
    staged = X4 / "traces" / "modes-h512-b3200-p4-float32-resident-mpi-staged-cublas"
    r = subprocess.run([sys.executable, "-m", "perfmlp.whatif", str(staged), "--set", "slices=4", "--machine",
                        X4_MACHINE], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr == f"perfmlp.whatif: error: {trainers_words(comm='mpi-staged', slices='4')}\n"
