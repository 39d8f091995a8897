"""The analytic model: FLOP and byte counts, rooflines, predicted time per batch.
Pure functions of shapes and machine numbers (those live in `models/*.yaml`);
nothing from the trainer, CuPy, mpi4py or matplotlib."""
import importlib

__all__ = ["load_machine", "predict_batch"]
_HOME = {"load_machine": ".machine", "predict_batch": ".predict"}


def __getattr__(name):
    # loaded on first use: the trainer reads the model's counts (perfmlp.model.costs) but never a machine file
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name], __name__), name)
