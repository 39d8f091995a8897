"""--help of every command: each flag says what it does and its default, and
no description stops mid-sentence."""
import importlib
import sys

import pytest

from perfmlp import config as C

from conftest import in_process, run_cmd


def flag_entries(help_text: str) -> dict[str, str]:
    """{first flag: its description} from argparse's "options:" section."""
    entries, flag = {}, None
    for line in help_text.split("options:", 1)[1].splitlines():
        if line.startswith("  -"):
            head, _, desc = line.strip().partition("  ")
            flag = head.split()[0].rstrip(",")
            entries[flag] = desc.strip()
        elif flag and line.startswith(" " * 6) and line.strip():
            entries[flag] = (entries[flag] + " " + line.strip()).strip()
    return entries


def description(help_text: str) -> str:
    """The text between the usage and the first section."""
    return help_text.split("\n\n", 1)[1].split("\npositional arguments:")[0].split("\noptions:")[0].strip()


@pytest.mark.parametrize("module, flags", [
    ("perfmlp.run", len(C.fields(C.Config)) + 3),  # a flag per field, --hidden-size, --config, -h
    ("perfmlp.sweep", 11),  # + --predict, --predict-also, --calibration-sizes, --no-figures
    ("perfmlp.fetch", 4),
    ("perfmlp.model", 22),  # + --exec, --overlap, --bucket-bytes, --gemm, --trace-level, --parallel, --model-procs,
    #                         --cluster, --threads, --slices, --grad-precision
    ("perfmlp.whatif", 5),
])
def test_every_flag_says_what_it_does_and_its_default(module, flags):
    if module == "perfmlp.run":   # a process: the run's main ends its own stdout
        r = run_cmd([sys.executable, "-m", module, "--help"])
    else:
        package = module in ("perfmlp.sweep", "perfmlp.model")
        r = in_process(importlib.import_module(module + (".__main__" if package else "")).main, ["--help"])
    assert r.returncode == 0, r.stderr
    entries = flag_entries(r.stdout)
    assert len(entries) == flags, sorted(entries)
    for flag, desc in entries.items():
        assert desc, f"{module} {flag} has no description"
        if flag != "-h":
            assert "(default: " in desc and desc.endswith(")"), f"{module} {flag}: {desc!r}"
    text = description(r.stdout)
    assert text.endswith((".", ")")), f"{module}: description stops mid-sentence: {text[-60:]!r}"


def test_run_help_shows_the_defaults():
    r = run_cmd([sys.executable, "-m", "perfmlp.run", "--help"])
    entries = flag_entries(r.stdout)
    assert "(default: 1.0)" in entries["--learning-rate"] and "(default: 100)" in entries["--batch-size"]
    assert "(default: off)" in entries["--shuffle"] and "(default: on)" in entries["--trace"]
    assert "configs/reference.yaml" in entries["--config"]
