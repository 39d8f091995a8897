"""The commands' shared command line (perfmlp/errors.py, flags.add_fields):
one-line argument errors, one --machine, and the model command's
configuration flags built from Config's fields, so its defaults are the
trainer's by construction."""
import importlib
import importlib.util
import sys

import pytest

from perfmlp import errors as cli
from perfmlp import names as N
from perfmlp.config import Config
from perfmlp.flags import add_fields

from conftest import in_process, run_cmd


def test_a_bad_argument_is_one_line_and_exit_2(capsys):
    ap = cli.Parser(prog="python -m perfmlp.tool")
    ap.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as e:
        ap.parse_args(["--n", "x"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage" not in err
    assert err.startswith("perfmlp.tool: error: argument --n: invalid int value: 'x'")


@pytest.mark.parametrize("module", ["perfmlp.run", "perfmlp.model", "perfmlp.whatif", "perfmlp.sweep",
                                    "perfmlp.calibrate", "perfmlp.report", "perfmlp.trace.chrome", "perfmlp.fetch"])
def test_every_command_says_a_bad_argument_in_one_line(module):
    # the run as the command (it writes its errors to the descriptor, past Python's sys.stderr), the others'
    # main() in this process: the function `python -m module` calls
    if module == "perfmlp.run":
        r = run_cmd([sys.executable, "-m", module, "--no-such-flag"])
    else:
        package = importlib.util.find_spec(module).submodule_search_locations is not None
        r = in_process(importlib.import_module(module + ".__main__" if package else module).main, ["--no-such-flag"])
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "usage:" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"{module}: error: "), r.stderr


def test_the_model_commands_flags_are_the_configurations_with_its_defaults():
    from perfmlp.model.__main__ import CONFIG_FLAGS, parser
    ap = parser()
    a = ap.parse_args([])
    c = Config()
    dests = {"hidden_sizes": "hidden", "exec": "exec_mode"}
    flags = {opt for action in ap._actions for opt in action.option_strings}
    for name in CONFIG_FLAGS:
        assert "--" + name.replace("_", "-") in flags, name
        got = getattr(a, dests.get(name, name))
        if name == "comm":   # auto, resolved as the trainer resolves it on a GPU
            assert c.comm == N.AUTO and got == N.MPI_STAGED
        elif name == "hidden_sizes":
            assert got == list(c.hidden_sizes)
        else:
            assert got == getattr(c, name), name


def test_a_configuration_flag_is_checked_as_the_configuration_is(capsys):
    ap = cli.Parser(prog="python -m perfmlp.tool")
    add_fields(ap, ("batch_size", "hidden_sizes", "overlap"))
    a = ap.parse_args(["--batch-size", "64", "--hidden-sizes", "32,16", "--overlap"])
    assert (a.batch_size, a.hidden_sizes, a.overlap) == (64, [32, 16], True)
    with pytest.raises(SystemExit):
        ap.parse_args(["--batch-size", "0"])     # the configuration's own check: B > 0
    assert capsys.readouterr().err == ("perfmlp.tool: error: argument --batch-size: --batch-size must be positive, "
                                       "got 0\n")
    with pytest.raises(SystemExit):
        ap.parse_args(["--hidden-sizes", "32,-1"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hidden" in err


def test_one_machine_option():
    ap = cli.Parser(prog="x")
    cli.add_machine(ap, "the datasheet")
    (action,) = [a for a in ap._actions if "--machine" in a.option_strings]
    assert action.help.startswith(cli.MACHINE_HELP) and action.help.endswith("(default: the datasheet)")
    assert ap.parse_args(["--machine", "h200"]).machine == "h200" and ap.parse_args([]).machine is None
