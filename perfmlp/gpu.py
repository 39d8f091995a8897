"""CuPy backend (filled in by the GPU trainer)."""


def available() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False
