"""From start-up to exit nothing hangs and one line says why: a signal
while MPI starts (to the rank waiting inside MPI_Init or to the one held
before it), a tiny --stall-limit before the first batch, a rank that stops
after its last batch, SIGTERM to a rank other than 0, a full stdout, an
error every rank meets; and the lines that ranks print at once stay whole
lines, the manifest that they end at once a whole file."""
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, mpiexec, run_perfmlp
from test_faults import JOB, needs_proc, processes_with, wait_for

SHORT = [*JOB[:-4], "--epochs", "2"]   # 80 batches of 30 on 2 ranks, a second or two


def rank_processes(marker: str, rank: int) -> list[Path]:
    found = []
    for p in processes_with(marker):
        try:
            if f"PMI_RANK={rank}".encode() in (p / "environ").read_bytes().split(b"\0"):
                found.append(p)
        except OSError:
            pass
    return found


def rank_pythons(marker: str, rank: int) -> list[int]:
    """The rank's processes (the rank and its watcher), not a shell around it."""
    return sorted(int(p.name) for p in rank_processes(marker, rank)
                  if not (p / "cmdline").read_bytes().startswith(b"sh\0"))


def maps_libmpi(pids: list[int]) -> bool:
    """Whether one of the processes has loaded the MPI library."""
    for pid in pids:
        with contextlib.suppress(OSError):
            if "libmpi" in Path(f"/proc/{pid}/maps").read_text():
                return True
    return False


# the signalled rank under a shell that writes its exit status (the launcher's own is not the rank's),
# then dies of the same signal, as the launcher would have seen the rank do
STATUS_SHELL = ('python -m perfmlp.run "$@"; rc=$?; echo "exit of rank $PMI_RANK: $rc" >&2; '
                '[ $rc -gt 128 ] && kill -$((rc - 128)) $$; exit $rc')


@needs_proc
@pytest.mark.parametrize("signalled", [0, 1])
def test_a_signal_inside_mpi_init_ends_the_whole_job(tmp_path, signalled):
    # rank 1 is held just before MPI_Init, so rank 0 waits inside it, where Python runs no handler;
    # SIGTERM goes to the waiting rank or to the held one
    env = dict(os.environ, PYTHONPATH=str(ROOT), PERFMLP_FAULT="1:start:hang")
    args = [*SHORT, "--trace-dir", str(tmp_path / "t")]
    ranks = [[sys.executable, "-m", "perfmlp.run", *args], ["sh", "-c", STATUS_SHELL, "sh", *args]]
    first, second = ranks if signalled else ranks[::-1]
    cmd = [mpiexec(), "-n", "1", *first, ":", "-n", "1", *second]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        # rank 0, which has loaded MPI, and the process that watches its start-up, and rank 1
        assert wait_for(lambda: len(rank_pythons(str(tmp_path), 0)) == 2 and maps_libmpi(rank_pythons(str(tmp_path), 0))
                        and rank_pythons(str(tmp_path), 1), 20)
        time.sleep(0.5)
        t0 = time.monotonic()
        os.kill(rank_pythons(str(tmp_path), signalled)[0], signal.SIGTERM)
        _, err = job.communicate(timeout=20)
        elapsed = time.monotonic() - t0
    finally:
        job.kill()
    mine = [line for line in err.splitlines() if line.startswith("perfmlp.")]
    assert mine == [f"perfmlp.run: rank {signalled}: error: terminated (SIGTERM) while MPI was starting; "
                    "the job is ended"], err
    assert f"exit of rank {signalled}: 143" in err.splitlines(), err
    assert job.returncode != 0 and elapsed < 5, (job.returncode, elapsed, err)
    assert wait_for(lambda: not processes_with(str(tmp_path)), 5)


def catches(pid: int, signum: int) -> bool:
    """The process has a handler for `signum` (its SigCgt mask in /proc)."""
    try:
        mask = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(int(mask.split()[1], 16) >> (signum - 1) & 1)


@needs_proc
def test_a_signal_while_python_imports_the_trainer_is_one_line():
    # SIGTERM the moment the process first handles it: perfmlp.run's first lines, while it still imports
    job = subprocess.Popen([sys.executable, "-m", "perfmlp.run", "--data", "synthetic", "--n-train", "40"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert wait_for(lambda: catches(job.pid, signal.SIGTERM), 20, step=0.0005)
        job.send_signal(signal.SIGTERM)
        _, err = job.communicate(timeout=20)
    finally:
        job.kill()
    assert err.splitlines() == ["perfmlp.run: error: terminated (SIGTERM) while starting; the job is ended"], err
    assert job.returncode == -signal.SIGTERM   # it died of the signal, as the launcher must see


@pytest.mark.parametrize("procs", [None, 2])
def test_a_tiny_stall_limit_never_fires_before_the_first_batch(tmp_path, procs):
    r = run_perfmlp(*SHORT, "--stall-limit", "0.001", "--trace-dir", str(tmp_path / "t"), "--run-id", "s",
                    procs=procs, timeout=60)
    assert "before its first batch" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    status = json.loads((tmp_path / "t" / "s" / "manifest.json").read_text())["status"]
    mine = [line for line in r.stderr.splitlines() if line.startswith("perfmlp.")]
    # a limit of a millisecond may fire later, between batches (on 2 ranks, in an allreduce waiting for the
    # other): then as any stall does, and the job ends; a line that says so never comes with a complete run
    if r.returncode == 0:
        assert status == "complete" and not mine, r.stderr
    else:
        assert status == "stalled" and len(mine) == 1 and mine[0].endswith("the job is ended"), (status, r.stderr)
        assert "another node" not in mine[0], mine[0]   # every rank is on this node


@needs_proc
@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_that_stops_after_its_last_batch_is_named(tmp_path, rank):
    t0 = time.monotonic()
    r = run_perfmlp(*SHORT, "--stall-limit", "1", "--trace-dir", str(tmp_path / "t"), "--run-id", "s", procs=2,
                    env={"PERFMLP_FAULT": f"{rank}:end:hang"}, timeout=60)
    assert r.returncode == 1 and time.monotonic() - t0 < 25, r.stderr
    mine = [line for line in r.stderr.splitlines() if line.startswith("perfmlp.")]
    assert len(mine) == 1 and mine[0].startswith(f"perfmlp.run: error: rank {rank} stalled after its last batch: "
                                                 "no progress for "), r.stderr
    assert wait_for(lambda: not processes_with(str(tmp_path)), 5)


def test_sigterm_to_rank_1_leaves_the_manifest_terminated(tmp_path):
    r = run_perfmlp(*SHORT, "--trace-dir", str(tmp_path / "t"), "--run-id", "s", procs=2,
                    env={"PERFMLP_FAULT": "1:3:term"}, timeout=60)
    assert r.returncode != 0 and "rank 1: error: terminated (SIGTERM)" in r.stderr, r.stderr
    assert json.loads((tmp_path / "t" / "s" / "manifest.json").read_text())["status"] == "terminated"


def test_a_full_stdout_never_fails_a_finished_run(tmp_path):
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "perfmlp.run", *SHORT, "--trace-dir", str(tmp_path / "t"),
                            "--run-id", "s"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert json.loads((tmp_path / "t" / "s" / "manifest.json").read_text())["status"] == "complete"


def test_an_error_every_rank_meets_is_one_line(tmp_path):
    (tmp_path / "p.npz").write_text("not parameters")
    r = run_perfmlp(*SHORT, "--no-trace", "--resume", str(tmp_path / "p.npz"), procs=2, timeout=60)
    mine = [line for line in r.stderr.splitlines() if line.startswith("perfmlp.")]
    assert r.returncode == 2 and len(mine) == 1 and "not an .npz archive" in mine[0], r.stderr


@needs_proc
def test_an_exit_that_holds_pythons_lock_still_ends(tmp_path):
    # rank 1 sleeps inside a C call at its exit, as a teardown in a C library would: no Python thread runs
    t0 = time.monotonic()
    r = run_perfmlp(*SHORT, "--stall-limit", "1", "--no-trace", procs=2, env={"PERFMLP_FAULT": "1:exit:hold"},
                    timeout=60, cwd=tmp_path)
    assert r.returncode != 0 and time.monotonic() - t0 < 20, r.stderr
    mine = [line for line in r.stderr.splitlines() if line.startswith("perfmlp.")]
    # one line: the held rank's, or a peer's that waits for it in MPI_Finalize (whichever watcher claims first)
    assert len(mine) == 1 and mine[0].startswith("perfmlp.run: error: rank ") and \
        " stalled at its exit: no progress for 3 s (--stall-limit 1;" in mine[0], r.stderr


# every line a job may print when SIGTERM reaches all its ranks at once: the ranks' own, MPICH's abort,
# rank 0's progress, the launcher's notice; two messages glued or one split match none of them
LINE_FORMS = [re.compile(f) for f in (
    r"perfmlp\.run: rank [01]: error: terminated \(SIGTERM\)(?: [a-z][^;]*)?(?:; the job is ended)?",
    r"Abort\(143\) on node \d+ \(rank \d+ in comm \d+\): application called MPI_Abort\(MPI_COMM_WORLD, 143\) "
    r"- process \d+",
    r"data: synthetic, 1200 training and 2000 held-out samples \(seed 0\)",
    r"epoch \d+/200: loss \d+\.\d+, held-out accuracy \d\.\d+, \d+\.\d+ s, \d+(?:\.\d+)? ms/batch",
    r"", r"=+", r"=   (?:BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES|CLEANING UP REMAINING PROCESSES|"
    r"YOU CAN IGNORE THE BELOW CLEANUP MESSAGES|PID \d+ RUNNING AT \S+|EXIT CODE: \d+)",
    r"YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Terminated \(signal 15\)",
    r"This typically refers to a problem with your application\.", r"Please see the FAQ page for debugging suggestions",
)]


@needs_proc
@pytest.mark.parametrize("unbuffered", ["1", None])
@pytest.mark.parametrize("when", ["start", "training"])
def test_lines_that_ranks_print_at_once_are_whole(tmp_path, when, unbuffered):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update(PYTHONPATH=str(ROOT), **({"PYTHONUNBUFFERED": unbuffered} if unbuffered else {}))
    if when == "start":   # rank 1 held before MPI starts, rank 0 inside MPI_Init: both say so at once
        env["PERFMLP_FAULT"] = "1:start:hang"
    run = tmp_path / "t" / "s"
    cmd = [mpiexec(), "-n", "2", sys.executable, "-m", "perfmlp.run", *JOB[:-4], "--epochs", "200",
           "--trace-dir", str(tmp_path / "t"), "--run-id", "s"]
    # stdout and stderr in one pipe, as a terminal or a log file gets them
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    try:
        # at the start: rank 0 has forked its watcher and loaded MPI (its handlers for MPI's start are set)
        started = (lambda: len(rank_pythons(str(tmp_path), 0)) == 2 and maps_libmpi(rank_pythons(str(tmp_path), 0))
                   and rank_pythons(str(tmp_path), 1)) \
            if when == "start" else (lambda: len(list(run.glob("rank-*.jsonl"))) == 2)
        assert wait_for(started, 20)
        time.sleep(0.3)
        job.send_signal(signal.SIGTERM)   # the launcher passes it to every rank
        out, _ = job.communicate(timeout=20)
    finally:
        job.kill()
    lines = out.split("\n")
    assert lines[-1] == "" and all(any(f.fullmatch(line) for f in LINE_FORMS) for line in lines), out
    ranks = [line.split(":")[1] for line in lines if line.startswith("perfmlp.run: ")]
    assert ranks and len(ranks) == len(set(ranks)) and job.returncode != 0, out
    if when == "start":   # rank 0's line comes from its watcher, which the launcher may end first once rank 1 ends
        said = {line for line in lines if line.startswith("perfmlp.run: ")}
        assert said <= {f"perfmlp.run: rank {r}: error: terminated (SIGTERM) while MPI was starting; the job is ended"
                        for r in (0, 1)}, out
    else:   # the manifest, which both ranks end, is whole
        assert json.loads((run / "manifest.json").read_text())["status"] == "terminated"
    assert wait_for(lambda: not processes_with(str(tmp_path)), 5)


def test_ranks_ending_a_manifest_at_once_each_write_their_own_temporary_file(tmp_path):
    from perfmlp.trace.manifest import write_json
    others = tmp_path / "manifest.json.tmp", tmp_path / ".manifest.json.1.1.tmp"   # another rank's, half-written
    for other in others:
        other.write_text('{"sta')
    write_json(tmp_path / "manifest.json", {"status": "terminated"})
    assert json.loads((tmp_path / "manifest.json").read_text()) == {"status": "terminated"}
    assert [o.read_text() for o in others] == ['{"sta', '{"sta']
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["manifest.json", *(o.name for o in others)])
