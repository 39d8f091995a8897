"""The benchmarks as a user meets them, on any machine: each script loads
without a GPU, imports only perfmlp's public names, is described in
benchmarks/README.md, and the shell scripts lay a result set out as the
committed sets are (reports/<set>/)."""
import ast
import importlib.util
import shutil
import subprocess

import pytest

from conftest import ROOT

BENCH = ROOT / "benchmarks"
PYTHON = sorted(BENCH.rglob("*.py"))
SHELL = sorted(BENCH.rglob("*.sh"))


@pytest.mark.parametrize("path", PYTHON, ids=lambda p: str(p.relative_to(BENCH)))
def test_a_benchmark_loads_without_a_gpu_and_imports_only_public_names(path):
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))   # CuPy, mpi4py, torch: inside functions
    private = [f"{node.module}.{a.name}" for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("perfmlp")
               for a in node.names if a.name.startswith("_")]
    assert private == []


def test_the_readme_names_every_benchmark():
    readme = (BENCH / "README.md").read_text()
    scripts = [p for p in BENCH.rglob("*") if p.suffix in (".py", ".sh", ".cu")]
    assert len(scripts) >= 10
    assert [str(p.relative_to(BENCH)) for p in scripts if p.name not in readme] == []


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize("path", SHELL, ids=lambda p: p.name)
def test_a_shell_script_parses(path):
    r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_a_set_is_laid_out_as_the_committed_sets(tmp_path):
    script = ("source benchmarks/gpu_env.sh; set_dir h100 tests; set_dir h100 step; touch $B/calibrated.yaml; set_md; "
              "echo $R $T $B")
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path), "PERFMLP_GIT_COMMIT": "abc1234",
                            "HOME": str(tmp_path), "GPU_KIT": str(tmp_path / "no-kit")})   # nothing installed
    assert r.returncode == 0, r.stderr
    s = tmp_path / "h100"
    assert r.stdout.split() == [str(s), str(s / "traces"), str(s / "benchmarks")]
    assert (s / "traces").is_dir() and (s / "machine.txt").is_file()
    text = (s / "SET.md").read_text()
    assert text.startswith("# h100\n")
    # the command that remakes the report names the set where it is committed, and its calibration
    assert ("python -m perfmlp.report reports/h100/traces --out reports/h100 "
            "--machine reports/h100/benchmarks/calibrated.yaml") in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "abc1234" in line]
    assert [row.split(" | ")[0] for row in rows] == ["| tests", "| step"]   # one line per part run, in order


def test_the_gemm_floor_adds_the_steps_bytes_at_bandwidth_to_its_gemms():
    spec = importlib.util.spec_from_file_location("gemm_floor", ROOT / "benchmarks" / "gemm_floor.py")
    floor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(floor)
    result = {"rows": [{"variant": "GEMMs alone", "H": 512, "B": 3200, "precision": "bf16", "median_us": 20.0},
                       {"variant": "perfmlp", "H": 512, "B": 3200, "precision": "bf16", "median_us": 50.0},
                       {"variant": "pytorch", "H": 512, "B": 3200, "precision": "bf16", "median_us": 150.0}]}
    (row,) = floor.floor_rows(result, 1e12)   # 1 TB/s: a microsecond a megabyte
    own, static = floor.step_bytes((784, 512, 10), 3200, "bf16")
    assert static == 2 * 2 * 3200 * (784 + 10)          # X and Y in bf16, read and written
    assert own > 4 * 2 * 512 * 3200                      # at least the hidden layer's 4 passes of 2 bytes
    assert row["floor_us"] == pytest.approx(20.0 + own / 1e6 + static / 1e6)
    assert row["step_x"] == pytest.approx(2.5) and row["floor_x"] == pytest.approx(row["floor_us"] / 20.0)
    # tf32 stores 32 bits: twice bf16's static copy
    assert floor.step_bytes((784, 512, 10), 3200, "tf32")[1] == 2 * static
