"""The default job learns: the README's first command must show it."""
from perfmlp.comm import SingleWorld
from perfmlp.config import Config
from perfmlp.train import train


def test_default_configuration_learns_the_shipped_digits(tmp_path):
    # the defaults, on one process and NumPy, on the 8,000 shipped digits
    # (no MNIST folder), held-out accuracy on the other 2,000
    cfg = Config(backend="numpy", trace=False, quiet=True, data_dir=str(tmp_path / "no-mnist"))
    result = train(cfg, SingleWorld())
    accuracy = [e.accuracy for e in result.epochs]
    assert len(accuracy) == cfg.epochs
    assert accuracy[-1] >= 0.90, accuracy
    assert accuracy[-1] > accuracy[0]  # it learned during the run, not by luck of the start
