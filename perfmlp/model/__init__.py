"""The analytic model: FLOP and byte counts, rooflines, predicted time per batch.
Pure functions of shapes and machine numbers (those live in `models/*.yaml`);
nothing from the trainer, CuPy, mpi4py or matplotlib."""
from .machine import load_machine
from .predict import predict_batch

__all__ = ["load_machine", "predict_batch"]
