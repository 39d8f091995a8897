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
