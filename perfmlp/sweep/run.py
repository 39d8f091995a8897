"""Running a sweep's jobs: the MPI launcher, the trace folder's lock, one job at a time in a process group
of its own, and what a job left.

The launcher is the installed MPI's (the one mpi4py loads: MPICH or Open MPI), looked for beside this
Python, then on PATH, and asked its version to be sure it belongs to that MPI; PERFMLP_MPIRUN names
another. The sweep ends a job's group (SIGTERM, then SIGKILL after END_GRACE_S) on a timeout, an
interruption or its own error; the launcher also gets SIGTERM should the sweep die (PR_SET_PDEATHSIG)."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..config import NOT_COMPUTED, first_difference
from ..errors import PerfmlpError, RunFailure, parent_death_signal
from ..params import AT_FAILURE
from ..trace.reader import TraceError, read_run
from .plan import SweepRun, run_identity

SWEEP_DIR = ".sweep"       # under the trace folder: the lock, each run's configuration and its output
END_GRACE_S = 5.0          # a job's ranks close their traces on SIGTERM (a rank's watchdog acts within 2 s)
KILLED = re.compile(r"\(signal (\d+)\)|on signal (\d+)")   # MPICH's and Open MPI's words for a rank a signal ended
LAUNCHERS = {"MPICH": ("mpiexec", "HYDRA"), "Open MPI": ("mpirun", "Open MPI")}


def mpi_library() -> str:
    """"MPICH", "Open MPI" or the first line of what mpi4py's MPI calls itself."""
    try:
        import mpi4py
        mpi4py.rc.initialize = False   # the sweep only asks; its jobs start MPI
        mpi4py.rc.finalize = False
        from mpi4py import MPI
    except ImportError:
        raise PerfmlpError("mpi4py is not installed, so no run can start under MPI (pip install -e '.[dev]', "
                           "or mpi4py and an MPI)") from None
    version = MPI.Get_library_version()
    for name in LAUNCHERS:
        if name in version or (name == "MPICH" and "MPICH" in version.upper()):
            return name
    return version.strip().splitlines()[0] if version.strip() else "an unknown MPI"


def _says(exe: str, words: str) -> bool:
    """Whether `exe --version` mentions `words` (it belongs to that MPI)."""
    try:
        r = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20, errors="replace",
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return False
    return words.lower() in (r.stdout + r.stderr).lower()


def find_launcher() -> list[str]:
    """The launcher's command line (before `-n P`)."""
    given = os.environ.get("PERFMLP_MPIRUN")
    if given is not None:
        try:
            argv = shlex.split(given)
        except ValueError as e:
            raise PerfmlpError(f"PERFMLP_MPIRUN {given!r}: {e}") from None
        if not argv:
            raise PerfmlpError("PERFMLP_MPIRUN is set but empty (unset it to use the installed MPI's launcher)")
        return argv
    lib = mpi_library()
    if lib not in LAUNCHERS:
        raise PerfmlpError(f"mpi4py uses {lib}, whose launcher perfmlp does not know: set PERFMLP_MPIRUN "
                           "(e.g. PERFMLP_MPIRUN=mpiexec)")
    name, words = LAUNCHERS[lib]
    here = Path(sys.executable).parent
    tried = []
    for exe in (here / name, here / "mpiexec", shutil.which(name), shutil.which("mpiexec")):
        if exe is None or str(exe) in tried or not os.access(exe, os.X_OK):
            continue
        tried.append(str(exe))
        if not _says(str(exe), words):
            continue
        if lib == "Open MPI":  # more ranks than cores (a laptop), and a container's root
            return [str(exe), "--oversubscribe", *(["--allow-run-as-root"] if os.geteuid() == 0 else [])]
        return [str(exe)]
    raise PerfmlpError(f"mpi4py uses {lib}, but no launcher of it was found beside {sys.executable} or on PATH "
                       f"({', '.join(tried) or 'no ' + name} tried); set PERFMLP_MPIRUN")


def lock(trace_dir: Path):
    """The open file locking the trace folder (released however the sweep ends); an error if another sweep holds it."""
    import fcntl
    folder = trace_dir / SWEEP_DIR
    try:
        folder.mkdir(parents=True, exist_ok=True)
        f = open(folder / "lock", "a+", encoding="utf-8")
    except OSError as e:
        raise PerfmlpError(f"cannot create {folder}: {e.strerror}") from None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise RunFailure(f"{trace_dir} is in use by another sweep ({holder}); wait for it to end or choose "
                         "another --trace-dir") from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()}\n")
    f.flush()
    return f


def trace_state(folder: Path, run: SweepRun) -> tuple[str, str]:
    """("absent" | "complete" | "different" | "incomplete", one-line detail)."""
    if not folder.exists():
        return "absent", ""
    try:
        trace = read_run(folder)
    except TraceError as e:
        return "incomplete", str(e)
    recorded = {k: v for k, v in trace.config.items() if k not in NOT_COMPUTED}
    recorded["procs"] = trace.procs
    wanted = run_identity(run.config, run.procs)
    key = first_difference(recorded, wanted)
    if key:
        return "different", f"{key} {recorded.get(key)!r} there, {wanted.get(key)!r} here"
    if not trace.complete:
        return "incomplete", trace.status
    if trace.problems:
        return "incomplete", trace.problems[0]
    return "complete", ""


def remove_failed(folder: Path, keep_as: Path | None = None) -> dict[str, str]:
    """A failed run's trace folder removed, so that no report reads it (its output is kept in the sweep's folder), its
    at-failure.npz (the parameters its error line names) moved to `keep_as` first; the paths moved, old -> new."""
    moved = {}
    saved = folder / AT_FAILURE
    if keep_as is not None and saved.is_file():
        try:
            os.replace(saved, keep_as)
            moved[str(saved.resolve())] = str(keep_as)
        except OSError:
            return moved   # the folder stays rather than lose what it holds
    shutil.rmtree(folder, ignore_errors=True)
    return moved


def launch(cmd: list[str], timeout_s: float, output: Path) -> tuple[bool, str]:
    """One job in a process group of its own, its output into `output`; (ok, why it failed, in one line)."""
    try:
        out = open(output, "wb")
    except OSError as e:
        return False, f"cannot write {output}: {e.strerror}"
    with out:
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True,
                                    preexec_fn=parent_death_signal if sys.platform == "linux" else None)
        except OSError as e:
            return False, f"cannot start {cmd[0]}: {e.strerror}"
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            end_group(proc)
            return False, f"timed out after {timeout_s:g} s"
        except BaseException:  # interrupted, or the sweep's own error: the job does not outlive it
            end_group(proc)
            raise
    return (True, "") if rc == 0 else (False, why_failed(output, rc))


def why_failed(output: Path, rc: int) -> str:
    """perfmlp's own line in a failed job's output (not the launcher's abort notice), else its last line or status."""
    try:
        lines = [ln.strip() for ln in output.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    ours = [ln for ln in lines if ln.startswith("perfmlp.") and "error:" in ln]
    if ours:
        return ours[0]
    # the launcher's notice of a signal
    signals = [m.group(1) or m.group(2) for ln in lines if (m := KILLED.search(ln))]
    if signals or rc < 0:
        return f"killed (signal {signals[0] if signals else -rc})"
    return (lines or [f"exit status {rc}"])[-1]


def end_group(proc: subprocess.Popen, grace_s: float = END_GRACE_S) -> None:
    """SIGTERM to the job's whole group (the launcher and its ranks, which then close their traces), SIGKILL to whatever
    is left of it after grace_s. Another Ctrl-C meanwhile waits until this is done."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            proc.poll()  # reap the launcher, or the group never looks empty
            os.killpg(proc.pid, 0)  # raises once every member is gone
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    finally:
        proc.wait()
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
