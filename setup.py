"""The one compiled part of perfmlp: the tracer's batch hooks in C
(perfmlp/trace/_fastpath.c). Optional: without a C compiler, or on a system
other than little-endian Linux, the build skips it and the Python hooks run
(perfmlp/trace/fastpath.py). Everything else is in pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("perfmlp.trace._fastpath", ["perfmlp/trace/_fastpath.c"], optional=True)])
