"""The README's commands, in order, on a fresh folder, as a new user on a
CPU machine types them: train (its first command, as written: 10 epochs of
8,000 samples take a few seconds on two cores; the job must learn), the
report of traces/, and the what-if example on the run just made. The commands are read from the
README itself, so a change there is tested here; the full calibration
(over a minute) is left to test_calibrate's quick one."""
import csv
import re
import shlex
import sys

import pytest

from conftest import ROOT, mpiexec, run_cmd

README = (ROOT / "README.md").read_text()


def readme_command(pattern: str) -> list[str]:
    """The README's command line matching `pattern` (a regex), as words;
    `python` as this interpreter, `mpiexec` as the one on PATH."""
    m = re.search(pattern, README)
    assert m, f"the README no longer holds {pattern!r}"
    words = shlex.split(m.group(0).split("#")[0])
    return [sys.executable if w == "python" else mpiexec() if w == "mpiexec" else w for w in words]


def test_the_readme_commands_work_in_order_on_a_fresh_folder(tmp_path):
    if "mpi4py" not in sys.modules:
        pytest.importorskip("mpi4py")
    train = readme_command(r"mpiexec -n 2 python -m perfmlp\.run(?= &&)")
    report = readme_command(r"python -m perfmlp\.report traces/(?=\s*$|\s*#|\n)")
    whatif = readme_command(r"python -m perfmlp\.whatif traces/<run> [^\n#]*")

    r = run_cmd(train, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "done:" in r.stdout and "ms/batch" in r.stdout
    # the default job learns: over 90% of the 2,000 held-out digits, better than after its first epoch
    accuracy = [float(a) for a in re.findall(r"^epoch .*held-out accuracy (\d\.\d+),", r.stdout, re.M)]
    assert len(accuracy) == 10 and accuracy[-1] >= 0.90 and accuracy[-1] > accuracy[0], r.stdout
    runs = [p for p in (tmp_path / "traces").iterdir() if (p / "manifest.json").exists()]
    assert len(runs) == 1

    r = run_cmd(report, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "traces" / "report" / "report.md").read_text()
    assert "Bound by:" in md and "speed-up over it 0.0x" not in md
    # the recommendations are the CPU's, with one GPU move among them
    assert "rank(s) instead of" in md and "BLAS thread(s) per rank" in md
    with open(tmp_path / "traces" / "report" / "recommendations.csv", newline="") as f:
        changes = [row["change"] for row in csv.DictReader(f)]
    assert sum(c.startswith("run it on a GPU") for c in changes) == 1 and len(changes) > 1

    r = run_cmd([w.replace("traces/<run>", f"traces/{runs[0].name}") for w in whatif], timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "priced on a GPU" in out and "on this CPU instead" in out
    # a reduction said as one, never "Nx the measured"
    assert re.search(r"-\d+%, [\d.]+x faster than the measured", out) and "x the measured" not in out
