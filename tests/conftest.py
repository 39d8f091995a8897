import compileall
import contextlib
import fcntl
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfmlp.blas import THREAD_ENV

ROOT = Path(__file__).resolve().parents[1]

# One BLAS thread in every test process and the commands they start (set before
# NumPy loads): the suite's workers already fill the cores, and a BLAS library's
# extra threads only spin against them. A test about thread counts sets its own.
for _var in THREAD_ENV:
    os.environ.setdefault(_var, "1")
# MPICH's ranks wait in MPI by sleeping, not spinning: the tests run more ranks than there are cores, and a
# spinning rank takes the core that the rank it waits for needs (Open MPI ignores the variable).
os.environ.setdefault("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")


def pytest_sessionstart(session):
    """Compile perfmlp's modules once, before the commands the tests start import
    them: where PYTHONDONTWRITEBYTECODE is set (as in many CI images) each of those
    processes would otherwise compile every module it imports again."""
    if not hasattr(session.config, "workerinput"):   # the controller, not each xdist worker
        compileall.compile_dir(ROOT / "perfmlp", quiet=1)


def yaml_load(text_or_file):
    """YAML data through libyaml's safe loader where PyYAML has it (PyYAML's own takes about a second for a
    calibrated file's tables)."""
    import yaml
    return yaml.load(text_or_file, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def yaml_dump(data) -> str:
    """YAML text for data, by libyaml's safe dumper where PyYAML has it."""
    import yaml
    return yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))


def mpiexec():
    exe = shutil.which("mpiexec") or shutil.which("mpirun")
    if exe is None:
        pytest.skip("no mpiexec on PATH (pip install mpi4py mpich)")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("mpi4py is not installed")
    return exe


def run_cmd(args, timeout=120, env=None, cwd=None):
    """Run a command; return CompletedProcess (text)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e.pop("PERFMLP_FAULT", None)
    if env:
        e.update(env)
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=e, cwd=cwd or ROOT)


def in_process(main, argv):
    """A command's main(argv) run in this process, no interpreter to start:
    a CompletedProcess of its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as e:   # argparse's own refusals
            rc = e.code
    return subprocess.CompletedProcess(argv, rc, out.getvalue(), err.getvalue())


def run_perfmlp(*args, procs=None, timeout=120, env=None, cwd=None):
    cmd = [sys.executable, "-m", "perfmlp.run", *args]
    if procs is not None:
        cmd = [mpiexec(), "-n", str(procs), *cmd]
    return run_cmd(cmd, timeout=timeout, env=env, cwd=cwd)


def refusal_line(*args, process: bool, procs: int | None = None) -> str:
    """perfmlp.run's refusal of `args` on `procs` ranks, stripped ("" if none): from the command itself (`process`;
    it must exit 2 and say it once), else found in this process by the checks the run makes before it starts MPI
    or writes anything. On several ranks, the launcher's own notice of the exit (Open MPI prints one) is left out."""
    if process:
        r = run_perfmlp(*args, procs=procs, timeout=60)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stdout + r.stderr
        assert r.stderr.count("perfmlp.run: ") == 1, r.stderr   # every rank finds it; said once
        if procs is None:
            return r.stderr.strip()
        return next(line for line in r.stderr.splitlines() if line.startswith("perfmlp.run: "))
    from perfmlp.errors import PerfmlpError
    from perfmlp.run import check_before_writing, parse
    try:
        check_before_writing(parse([str(a) for a in args]), procs or 1)
    except PerfmlpError as e:
        return f"perfmlp.run: error: {e}"
    return ""


def each_rank_count(script: str, sizes: tuple[int, ...], *args, timeout=300) -> None:
    """tests/<script> on each rank count of `sizes` in turn, in one job of the largest (tests/mpi_sizes.py):
    every count must pass."""
    r = run_cmd([mpiexec(), "-n", str(max(sizes)), sys.executable, str(ROOT / "tests" / script), *args,
                 "--sizes", ",".join(map(str, sizes))], timeout=timeout)
    assert r.returncode == 0 and all(f"OK {k} ranks" in r.stdout for k in sizes), r.stdout + r.stderr


def has_gpu():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


gpu = pytest.mark.skipif(not has_gpu(), reason="needs CuPy and a CUDA GPU")


def built_once(request, tmp_path_factory, name: str, build) -> Path:
    """The folder `name` that build(folder) fills, made once for every test file and xdist worker that asks
    (the first builds it, under a lock, in the folder the workers share): tests read it and never write into it."""
    shared = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):   # an xdist worker: its base's parent is the run's
        shared = shared.parent
    out, done = shared / name, shared / f"{name}.done"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)   # a build that failed part-way
            out.mkdir()
            build(out)
            done.touch()
    return out


@pytest.fixture(scope="session")
def four_runs_report(tmp_path_factory, request):
    """The report of test_report.four_runs(), built once (`built_once`)."""
    from perfmlp.report import build_from_runs
    from test_report import four_runs
    return built_once(request, tmp_path_factory, "four-runs-report", lambda out: build_from_runs(four_runs(), [], out))


@pytest.fixture
def drawing_only(monkeypatch):
    """drawing_only(*names): reports built after it draw only the figures whose names start with one of
    `names`, and write the others' files empty (the report's words and tables are unchanged): a test that
    checks a figure pays for that one alone."""
    import perfmlp.report as report

    def only(*names):
        def sections(*args, **kwargs):
            out = every(*args, **kwargs)
            for s in out:
                for f in s.figures:
                    if not f.name.startswith(names):
                        f.draw, f.args = (lambda: {"png": b"", "svg": b""}), {}
            return out
        every = report.sections_of
        monkeypatch.setattr(report, "sections_of", sections)
    return only


# The longest tests start first, longest first, so that no worker is left running one alone at the end.
FIRST = ("test_16bit_gradients_keep_the_jobs_accuracy", "test_the_readme_commands_work_in_order_on_a_fresh_folder",
         "test_the_section_renders_with_and_without_the_kernels_rates", "test_regenerated_report_is_byte_identical",
         "test_the_report_words_the_history", "test_execution_modes_set_measured_changes_beside_predicted")


def pytest_collection_modifyitems(items):
    def rank(item):
        name = getattr(item, "originalname", item.name)
        return FIRST.index(name) if name in FIRST else len(FIRST)
    items.sort(key=rank)   # stable: the rest keep their order
