"""The analytic model: FLOP and byte counts, rooflines, predicted time per batch.

Pure functions of shapes and machine numbers. This package imports nothing
from the trainer, CuPy, mpi4py or matplotlib; machine numbers live in
`models/*.yaml`.
"""
from .costs import OPS, op_cost, step_ops, batch_counts  # noqa: F401
from .machine import Machine, load_machine  # noqa: F401
from .roofline import standard_roofline, modified_roofline, ridge_point  # noqa: F401
from .predict import predict_batch  # noqa: F401
