"""End-to-end runs of `python -m perfmlp.run` on the NumPy backend."""
import json

import numpy as np
import pytest

from conftest import run_perfmlp

SMALL = ["--data", "synthetic", "--input-size", "30", "--hidden-size", "8", "--n-train", "60",
         "--batch-size", "20"]


def test_learns_real_mnist_digits():
    """Real digits (the shipped test set: 8000 to train on, 2000 held out)."""
    r = run_perfmlp("--hidden-size", "64", "--batch-size", "50", "--learning-rate", "0.5",
                    "--epochs", "3", "--no-trace", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "no MNIST training files" in r.stdout.splitlines()[0]
    acc = float(r.stdout.split("final held-out accuracy ")[1].split()[0].rstrip(","))
    assert acc >= 0.85, r.stdout  # chance is 0.10


def test_save_and_resume(tmp_path):
    base = [*SMALL, "--learning-rate", "0.3", "--precision", "float64", "--no-trace"]
    r = run_perfmlp(*base, "--epochs", "2", "--save-params", str(tmp_path / "two"))
    assert r.returncode == 0, r.stderr
    r = run_perfmlp(*base, "--epochs", "1", "--save-params", str(tmp_path / "one"))
    assert r.returncode == 0, r.stderr
    r = run_perfmlp(*base, "--epochs", "1", "--resume", str(tmp_path / "one" / "final.npz"),
                    "--save-params", str(tmp_path / "resumed"))
    assert r.returncode == 0, r.stderr
    two = np.load(tmp_path / "two" / "final.npz", allow_pickle=False)
    res = np.load(tmp_path / "resumed" / "final.npz", allow_pickle=False)
    init = np.load(tmp_path / "two" / "initial.npz", allow_pickle=False)
    assert sorted(two.files) == ["W1", "W2", "b1", "b2"]
    for k in two.files:
        assert np.allclose(two[k], res[k], rtol=0, atol=1e-12)
    assert not np.allclose(two["W1"], init["W1"])


def test_resume_of_wrong_shape(tmp_path):
    np.savez(tmp_path / "p.npz", W1=np.zeros((9, 30)), b1=np.zeros(9), W2=np.zeros((10, 9)), b2=np.zeros(10))
    r = run_perfmlp(*SMALL, "--no-trace", "--resume", str(tmp_path / "p.npz"))
    assert r.returncode == 2
    assert r.stderr.strip() == (f"perfmlp.run: error: --resume: {tmp_path / 'p.npz'}: W1 has shape (9, 30), "
                                "the network needs (8, 30)")


def test_non_finite_loss_stops_and_saves(tmp_path):
    r = run_perfmlp(*SMALL, "--learning-rate", "1e30", "--epochs", "5", "--trace-dir", str(tmp_path / "t"),
                    "--run-id", "nan")
    assert r.returncode == 1
    line = r.stderr.strip()
    assert "\n" not in line and "loss is" in line and "stopping" in line
    saved = tmp_path / "t" / "nan" / "at-failure.npz"
    assert saved.is_file() and f"saved to {saved}" in line
    m = json.loads((tmp_path / "t" / "nan" / "manifest.json").read_text())
    assert m["status"] == "failed"


@pytest.mark.parametrize("content, words", [
    (b"\x00\x00\x08\x01" + b"\x00" * 12, "wrong magic 0x00000801"),
    (b"\x00\x00\x08\x03\x00\x00\x00\x05\x00\x00\x00\x1c\x00\x00\x00\x1c" + b"\x00" * 100, "truncated IDX file"),
])
def test_bad_mnist_files(tmp_path, content, words):
    (tmp_path / "train-images-idx3-ubyte").write_bytes(content)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x05" + b"\x01" * 5)
    r = run_perfmlp("--data-dir", str(tmp_path), "--no-trace")
    assert r.returncode == 2
    assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_nccl_without_gpu_is_an_error():
    r = run_perfmlp(*SMALL, "--no-trace", "--backend", "numpy", "--comm", "nccl")
    assert r.returncode == 2 and "needs the cupy backend" in r.stderr
