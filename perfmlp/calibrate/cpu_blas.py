"""The BLAS finder, kept importable here for calibrate's modules; it lives
in perfmlp/blas.py, where the trainer (which may not import calibrate) reads it too."""
from ..blas import THREAD_ENV, Blas, cpu_cores, cpu_name, find_blas, loaded_libraries, thread_env  # noqa: F401
