import argparse

import pytest

from perfmlp import config as C
from perfmlp import flags as F
from perfmlp.errors import PerfmlpError

from conftest import ROOT, refusal_line, run_perfmlp


def parse(argv):
    ap = argparse.ArgumentParser()
    F.add_arguments(ap)
    return F.from_args(ap.parse_args(argv))


def test_defaults_are_the_job_that_learns():
    c = C.Config()
    assert (c.input_size, c.hidden_sizes, c.num_classes) == (784, (512,), 10)
    assert (c.reg, c.learning_rate, c.n_train, c.epochs, c.batch_size) == (1e-4, 1.0, 8000, 10, 100)
    assert c.precision == "float32"
    assert c.layer_sizes == (784, 512, 10)
    assert (c.backend, c.comm, c.batch_transfer, c.gemm) == ("auto", "auto", "pageable", "cublas")


def test_reference_configuration_is_one_flag_away():
    c = parse(["--config", str(ROOT / "configs" / "reference.yaml")])
    assert (c.input_size, c.hidden_sizes, c.num_classes) == (784, (512,), 10)
    assert (c.reg, c.learning_rate, c.n_train, c.epochs, c.batch_size) == (1e-4, 1e-4, 38400, 1, 3200)
    assert c.precision == "float32"


@pytest.mark.parametrize("text, value", [
    ("1e-3", 1e-3), ("1E-3", 1e-3), (".5", 0.5), ("5.", 5.0), ("+1e-4", 1e-4), ("1.5e3", 1500.0),
    ("0.001", 1e-3), ("2", 2.0), ("'1e-3'", 1e-3),
])
def test_every_spelling_of_a_number(tmp_path, text, value):
    # PyYAML reads 1e-3, 1E-3, +1e-4 and 1.5e3 as strings (its float needs a dot and a signed exponent)
    f = tmp_path / "c.yaml"
    f.write_text(f"learning_rate: {text}\n")
    assert parse(["--config", str(f)]).learning_rate == value
    assert parse(["--learning-rate", text.strip("'")]).learning_rate == value


def test_whole_numbers_in_any_spelling():
    c = C.from_mapping({"n_train": "6e4", "batch_size": 3.2e3, "epochs": "2", "hidden_sizes": ["1_024"]})
    assert (c.n_train, c.batch_size, c.epochs, c.hidden_sizes) == (60000, 3200, 2, (1024,))
    assert parse(["--n-train", "1e3"]).n_train == 1000


def test_yaml_then_flags(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("hidden_sizes: [1024, 1024]\nbatch_size: 100\nlearning_rate: 0.1\n")
    c = parse(["--config", str(f), "--batch-size", "200", "--precision", "float64"])
    assert c.hidden_sizes == (1024, 1024)
    assert c.batch_size == 200 and c.learning_rate == 0.1 and c.precision == "float64"
    assert parse(["--hidden-size", "1024"]).hidden_sizes == (1024,)
    assert parse(["--hidden-sizes", "64,32"]).hidden_sizes == (64, 32)
    assert parse(["--no-trace"]).trace is False


@pytest.mark.parametrize("values, words", [
    ({"hidden_size": 3}, "unknown configuration key: hidden_size"),
    ({"batch_size": 0}, "batch_size must be positive"),
    ({"batch_size": -5}, "batch_size must be positive"),
    ({"batch_size": 2.5}, "batch_size must be an integer"),
    ({"epochs": True}, "epochs must be an integer"),
    ({"learning_rate": "fast"}, "learning_rate must be a number"),
    ({"learning_rate": "nan"}, "learning_rate must be finite"),
    ({"learning_rate": 0}, "learning_rate must be positive"),
    ({"n_train": "1e3.5"}, "n_train must be an integer"),
    ({"n_train": 1.5e3 + 0.5}, "n_train must be an integer"),
    ({"comm": "mpi-host"}, "comm must be one of auto, mpi, mpi-staged, nccl"),
    ({"shuffle": "yes"}, "shuffle must be true or false"),
    ({"reg": -1.0}, "reg must not be negative"),
    ({"precision": "float16"}, "precision must be one of"),
    ({"hidden_sizes": [512, 0]}, "hidden_sizes must all be positive"),
    ({"hidden_sizes": []}, "hidden_sizes must be a non-empty list"),
    ({"batch_size": 500, "n_train": 100}, "batch_size (500) is larger than n_train (100)"),
])
def test_bad_values_named(values, words):
    with pytest.raises(PerfmlpError) as e:
        C.from_mapping(values, where="x.yaml: ")
    assert words in str(e.value)


def test_yaml_is_safe_loaded(tmp_path):
    f = tmp_path / "evil.yaml"
    f.write_text("!!python/object/apply:os.system ['echo hacked']\n")
    with pytest.raises(PerfmlpError, match="not valid YAML"):
        C.load_yaml(f)


def test_more_ranks_than_samples():
    c = C.from_mapping({"n_train": 10, "batch_size": 4})  # batches 4, 4, 2
    C.check_procs(c, 2)
    with pytest.raises(PerfmlpError, match="last batch holds only 2 samples"):
        C.check_procs(c, 3)
    with pytest.raises(PerfmlpError, match="a batch holds only 4"):
        C.check_procs(C.from_mapping({"n_train": 8, "batch_size": 4}), 5)


CLI_ERRORS = [
    (["--batch-size", "abc"], "--batch-size must be an integer"),
    (["--hidden-size", "0"], "hidden_sizes must all be positive"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["--config", "/nonexistent.yaml"], "cannot read configuration file"),
    (["--batch-size", "20000", "--n-train", "100"], "larger than n_train"),
]


@pytest.mark.parametrize("args, words", CLI_ERRORS)
def test_cli_errors_are_one_line(args, words):
    line = refusal_line(*args, "--no-trace", process=args == CLI_ERRORS[0][0])
    assert line.count("\n") == 0 and line.startswith("perfmlp.run: error: ") and words in line, line


def test_comm_names_match_run():
    assert C.CHOICES["comm"] == ("auto", "mpi", "mpi-staged", "nccl", "ps", "ps-nccl", "ps-async", "ps-async-nccl")
    assert C.from_mapping({"comm": "mpi"}).comm == "mpi"



@pytest.mark.parametrize("text, line", [("epochs: 1\nepochs: 2\n", 2),
                                        ("base:\n  lr: 1\nhidden_sizes: [8]\nbase: {}\n", 4)])
def test_a_key_written_twice_is_refused(tmp_path, text, line):
    f = tmp_path / "c.yaml"
    key = text.split(":")[0]
    f.write_text(text)
    with pytest.raises(PerfmlpError) as e:
        C.load_yaml(f)
    assert str(e.value) == f"{f}: key '{key}' appears twice (again at line {line})"


def test_a_machine_file_or_sweep_with_a_key_twice_is_refused(tmp_path):
    from perfmlp.model.machine import MachineError, load_machine
    m = tmp_path / "m.yaml"
    m.write_text("name: a GPU\npeak_flops_per_s_float32: 6.7e13\npeak_flops_per_s_float32: 1.0e12\n")
    with pytest.raises(MachineError, match=r"m.yaml: key 'peak_flops_per_s_float32' appears twice \(again at line 3\)"):
        load_machine(str(m))
    s = tmp_path / "s.yaml"
    s.write_text("name: a\nruns: [{procs: 1}]\nname: b\n")
    with pytest.raises(PerfmlpError, match=r"s.yaml: key 'name' appears twice \(again at line 3\)"):
        C.load_yaml(str(s))   # what the sweep reads its file with


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no FIFOs here")
def test_only_regular_files_are_read_as_configurations(tmp_path):
    import os
    fifo = tmp_path / "c.yaml"
    os.mkfifo(fifo)  # reading it would block until someone writes
    r = run_perfmlp("--config", str(fifo), "--no-trace", timeout=30)
    assert r.returncode == 2
    assert r.stderr.strip() == f"perfmlp.run: error: configuration file {fifo}: not a regular file"
    with pytest.raises(PerfmlpError, match="a folder"):
        C.load_yaml(tmp_path)


def test_a_configuration_that_is_not_utf8_is_named(tmp_path):
    # (a UTF-8 one under the C locale: test_faults.py, test_printing_never_fails_a_finished_run)
    f = tmp_path / "c.yaml"
    f.write_bytes(b"epochs: 3 \xff\n")
    with pytest.raises(PerfmlpError, match="c.yaml: not a UTF-8 text file"):
        C.load_yaml(f)
