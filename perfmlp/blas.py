"""The BLAS library NumPy calls and its thread count (recorded in each run's manifest; calibrate sets it),
without threadpoolctl: through the library's own API, found by ctypes among the shared objects this
process has mapped (OpenBLAS, scipy-openblas's prefixed symbols, MKL, BLIS). A child process gets its
count through its environment (`thread_env`): the libraries read it once, when NumPy loads them."""
from __future__ import annotations

import contextlib
import ctypes
import os
from dataclasses import dataclass

# read by the BLAS libraries when they load: OpenBLAS, OpenMP builds, MKL, BLIS
THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")

# (library, keyword in its file name, getter symbols, setter symbols), the first found is used
_APIS = (
    ("openblas", "openblas",
     ("openblas_get_num_threads", "openblas_get_num_threads64_", "scipy_openblas_get_num_threads64_"),
     ("openblas_set_num_threads", "openblas_set_num_threads64_", "scipy_openblas_set_num_threads64_")),
    ("mkl", "mkl_rt", ("MKL_Get_Max_Threads",), ("MKL_Set_Num_Threads",)),
    ("blis", "blis", ("bli_thread_get_num_threads",), ("bli_thread_set_num_threads",)),
)


@dataclass(frozen=True)
class Blas:
    """A loaded BLAS library and its thread-count calls (None where absent)."""
    library: str
    path: str
    getter: str | None
    setter: str | None

    def _fn(self, symbol: str):
        fn = getattr(ctypes.CDLL(self.path), symbol)
        fn.restype = ctypes.c_int
        return fn

    def threads(self) -> int | None:
        """The library's thread count now, or None where it has no getter."""
        return int(self._fn(self.getter)()) if self.getter else None

    def set_threads(self, n: int) -> None:
        if not self.setter:
            raise RuntimeError(f"{self.library} ({self.path}) has no thread-count call; "
                               f"set {THREAD_ENV[0]} before NumPy loads")
        self._fn(self.setter)(ctypes.c_int(int(n)))

    def words(self) -> str:
        how = f"set through {self.setter} (ctypes)" if self.setter else f"fixed at load ({', '.join(THREAD_ENV)})"
        return f"{self.library} ({os.path.basename(self.path)}), threads {how}"


def loaded_libraries() -> list[str]:
    """Paths of the shared objects this process has mapped (Linux); [] elsewhere."""
    try:
        with open("/proc/self/maps", "rb") as f:   # bytes: a mapped path need not be in the locale's encoding
            paths = [os.fsdecode(line.split()[-1]) for line in f if b"/" in line and b".so" in line]
    except OSError:
        return []
    return list(dict.fromkeys(paths))


def find_blas() -> Blas | None:
    """The BLAS library NumPy has loaded, with its thread-count symbols, or None."""
    import numpy  # noqa: F401  (loads the library whose symbols are looked for)
    for path in loaded_libraries():
        name = os.path.basename(path).lower()
        for library, keyword, getters, setters in _APIS:
            if keyword not in name:
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            getter = next((s for s in getters if hasattr(lib, s)), None)
            setter = next((s for s in setters if hasattr(lib, s)), None)
            if getter or setter:
                return Blas(library, path, getter, setter)
    return None


def thread_env(n: int) -> dict:
    """A copy of os.environ in which a child process's BLAS runs n threads."""
    return {**os.environ, **{var: str(int(n)) for var in THREAD_ENV}}


def cpu_cores() -> int:
    """Cores this process may run on (its affinity where the OS says, else the count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_name() -> str:
    """The processor's model name (Linux /proc/cpuinfo), else the platform's word."""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    import platform
    return platform.processor() or platform.machine() or "unknown CPU"
