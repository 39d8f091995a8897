"""Bad input and outputs that would overwrite an input, each refused in one
line naming the file or value: configuration files (keys that are not
strings, nesting, alias bombs, sizes no array can have), sweep files
(counted before expanded, a base with no runs), resumed parameter files
(headers checked before data is read), trace JSON nested too deep, chrome's
-o onto the run it reads or onto a link or a FIFO, a download that never
ends, and the --save-params folder two runs would share."""
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import zipfile

import numpy as np
import pytest

from conftest import ROOT, run_cmd
from perfmlp import params, run, safeio
from perfmlp.errors import PerfmlpError, cli
from perfmlp.sweep import plan
from perfmlp.sweep.run import remove_failed, why_failed
from perfmlp.trace.reader import TraceError, read_run


def config_error(tmp_path, text: str) -> str:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(PerfmlpError) as e:
        run.parse(["--config", str(f)])
    return str(e.value)


@pytest.mark.parametrize("text, words", [
    ("1: 2\n~: 1\n", "unknown configuration keys: 1, None"),
    ("epochs: " + "[" * 5000 + "]" * 5000 + "\n", "YAML nested deeper"),
    ("hidden_sizes: [1e23]\n", "hidden_sizes must each be at most 2147483647"),
    ("hidden_sizes: [[1, 2]]\n", "hidden_sizes must be a non-empty list of integers, got [[1, 2]]"),
])
def test_configuration_values_the_checks_used_to_miss(tmp_path, text, words):
    msg = config_error(tmp_path, text)
    assert words in msg and "c.yaml" in msg and "\n" not in msg


def test_a_yaml_alias_bomb_is_refused_quickly_and_quoted_short(tmp_path):
    # 9 lists of 9 aliases, six deep: 9^6 = 531,441 strings from 300 bytes
    rows = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    rows += [f"{n}: &{n} [{','.join(['*' + p] * 9)}]" for p, n in zip("abcde", "bcdef")]
    msg = config_error(tmp_path, "\n".join(rows) + "\nepochs: *f\n")
    assert "aliases expand to more than" in msg and len(msg) < 300
    # a value printed in a message is cut to a short prefix
    msg = config_error(tmp_path, "epochs: [" + ", ".join(["123456789"] * 200) + "]\n")
    assert "epochs must be a single value" in msg and len(msg) < 200


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("chrome")
    r = run_cmd([sys.executable, "-m", "perfmlp.run", "--data", "synthetic", "--n-train", "60", "--batch-size", "30",
                 "--input-size", "20", "--hidden-size", "4", "--epochs", "1", "--quiet", "--trace-dir", str(d),
                 "--run-id", "r"])
    assert r.returncode == 0, r.stderr
    return d / "r"


DEEP = "[" * 100_000 + "]" * 100_000


def tools(run, tmp_path):
    """(name, main, argv) of each command that reads a run."""
    from perfmlp import whatif
    from perfmlp.report.__main__ import main as report
    from perfmlp.trace import chrome
    return [("perfmlp.whatif", whatif.main, [str(run)]),
            ("perfmlp.report", report, [str(run.parent), "--out", str(tmp_path / "rep")]),
            ("perfmlp.trace.chrome", chrome.main, [str(run), "-o", str(tmp_path / "x.json")])]


@pytest.mark.parametrize("damaged", ["manifest.json", "rank-0.jsonl"])
def test_deep_json_in_a_manifest_or_a_trace_line_is_one_line(traced_run, tmp_path, capsys, damaged):
    run = tmp_path / "traces" / "r"
    shutil.copytree(traced_run, run)
    if damaged == "manifest.json":
        (run / damaged).write_text('{"schema": ' + DEEP + "}")
    else:   # a line in the middle of the rank's file
        lines = (run / damaged).read_text().splitlines()
        lines[2] = lines[2][:-1] + ', "x": ' + DEEP + "}"
        (run / damaged).write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError) as e:
        read_run(run)
    assert "nested too deeply" in str(e.value)
    for prog, main, argv in tools(run, tmp_path):
        assert cli(prog, main, argv) == 2, prog
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"{prog}: error: ") and str(run / damaged) in err \
            and "nested too deeply" in err, err
    assert not (tmp_path / "rep").exists() and not (tmp_path / "x.json").exists()
    with pytest.raises(ValueError):
        safeio.read_json(DEEP)


def test_a_deep_last_line_cut_off_is_a_cut_off_line(traced_run, tmp_path, capsys):
    # a run killed while writing: its last line has no newline; deep nesting there must not fail the reading
    run = tmp_path / "traces" / "r"
    shutil.copytree(traced_run, run)
    with open(run / "rank-0.jsonl", "a") as f:
        f.write('{"kind": "batch", "x": ' + "[" * 100_000)
    assert any("truncated last line" in p for p in read_run(run).problems)
    prog, main, argv = tools(run, tmp_path)[0]
    assert cli(prog, main, argv) == 0, capsys.readouterr().err


def test_deep_json_in_the_files_beside_a_run_is_skipped_or_one_line(tmp_path):
    # the report's predictions, peers' and correctness rows, a format-1 trace line, a sweep's predictions
    from perfmlp.report.sections.timeline import section_correctness
    from perfmlp.report.sections.overview import read_peers
    from perfmlp.report.model_error import read_predictions
    from perfmlp.sweep.predict import _existing
    from perfmlp.trace.upgrade import TraceError, rank_records
    for name in ("predictions.json", "graph_step.jsonl", "correctness.jsonl"):
        (tmp_path / name).write_text(DEEP + "\n")
    assert read_predictions(tmp_path) == (None, f"{tmp_path / 'predictions.json'}: unreadable, ignored")
    assert read_peers(tmp_path) == []
    assert section_correctness(tmp_path) is not None   # the section, without the row
    with pytest.raises(TraceError, match="rank-0.jsonl:1: not JSON .JSON nested too deeply"):
        rank_records([(1, DEEP)], "rank-0.jsonl")
    with pytest.raises(PerfmlpError, match="predictions.json: unreadable"):
        _existing(tmp_path / "predictions.json", "", [])


@pytest.mark.parametrize("value", ["batch_size=" + "[" * 100_000, "batch_size=" + DEEP[99_000:-99_000],
                                   "hidden_sizes=8," + "[" * 100_000])
def test_a_deep_what_if_value_is_one_line(traced_run, capsys, value):
    from perfmlp import whatif
    with pytest.raises(SystemExit) as ended:
        whatif.main([str(traced_run), "--set", value])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and err.count("\n") == 1 and err.startswith("perfmlp.whatif: error: ") \
        and len(err) < 300 and value.split("=")[0] in err, err


def test_chrome_never_writes_over_the_run_it_reads_a_link_or_a_fifo(traced_run, tmp_path, capsys):
    from perfmlp.trace import chrome
    manifest = (traced_run / "manifest.json").read_bytes()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere.json")
    for out, words in ((traced_run / "manifest.json", "which this command reads"),
                       (traced_run / "rank-0.jsonl", "which this command reads"),
                       (tmp_path / "fifo", "not a regular file"), (tmp_path / "link", "a symbolic link")):
        assert chrome.main([str(traced_run), "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1, err
    assert (traced_run / "manifest.json").read_bytes() == manifest
    assert (tmp_path / "fifo").is_fifo() and (tmp_path / "link").is_symlink()
    assert chrome.main([str(traced_run), "-o", str(tmp_path / "ok.json")]) == 0   # a new name is written
    assert json.loads((tmp_path / "ok.json").read_text())["traceEvents"]
    with pytest.raises(SystemExit) as ended:   # -o missing: one line and status 2, not argparse's usage
        chrome.main([str(traced_run)])
    assert ended.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_sweep_is_counted_before_it_is_expanded(monkeypatch):
    def expanded(*a):
        raise AssertionError("the matrix was expanded before it was counted")
    monkeypatch.setattr(plan.itertools, "product", expanded)
    spec = {"matrix": {f"k{i}": list(range(20)) for i in range(8)}}   # 20^8 configurations
    with pytest.raises(PerfmlpError, match="25600000000 configurations x 1 repeats"):
        plan.expand(spec, "s.yaml")


@pytest.mark.parametrize("spec, words", [
    ({"base": {"epochs": 1}}, "no runs (give a matrix or runs"),
    ({"base": {"epochz": 1}, "runs": [{}]}, "base: unknown configuration key: epochz"),
    ({"base": {"repeats": 1e9}, "runs": [{}]}, "base: unknown configuration key: repeats"),
])
def test_a_sweeps_base_alone_is_an_error_and_is_checked(spec, words):
    with pytest.raises(PerfmlpError) as e:
        plan.expand(spec, "s.yaml")
    assert words in str(e.value)


def test_a_failed_sweep_run_keeps_the_parameters_its_line_names(tmp_path):
    run_dir = tmp_path / "t" / "run1"
    run_dir.mkdir(parents=True)
    np.savez(run_dir / params.AT_FAILURE, W1=np.ones(2))
    moved = remove_failed(run_dir, tmp_path / "run1.at-failure.npz")
    assert not run_dir.exists()
    assert moved == {str((run_dir / params.AT_FAILURE).resolve()): str(tmp_path / "run1.at-failure.npz")}
    with np.load(tmp_path / "run1.at-failure.npz") as f:
        assert f["W1"].tolist() == [1.0, 1.0]


def test_a_killed_sweep_run_says_which_signal(tmp_path):
    out = tmp_path / "job.out"
    out.write_text("=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   EXIT CODE: 9\n"
                   "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)\n"
                   "This typically refers to a problem with your application.\n"
                   "Please see the FAQ page for debugging suggestions\n")
    assert why_failed(out, 9) == "killed (signal 9)"


# ---- parameter files -----------------------------------------------------------------------------

SIZES = (3, 2, 2)   # W1 2x3, b1 2, W2 2x2, b2 2


def good_arrays(dtype=np.float32):
    return {"W1": np.ones((2, 3), dtype), "b1": np.zeros(2, dtype), "W2": np.ones((2, 2), dtype),
            "b2": np.zeros(2, dtype)}


def resume_error(path) -> str:
    with pytest.raises(PerfmlpError) as e:
        params.load_resume(str(path), SIZES)
    assert "\n" not in str(e.value) and str(path) in str(e.value)
    return str(e.value)


def test_resume_refuses_an_npy_a_bad_member_and_integers(tmp_path):
    np.save(tmp_path / "a.npy", np.ones(3))
    assert "not an .npz archive" in resume_error(tmp_path / "a.npy")
    with zipfile.ZipFile(tmp_path / "bad.npz", "w") as z:
        for name in good_arrays():
            z.writestr(f"{name}.npy", b"not an array")
    assert "not a readable .npz file" in resume_error(tmp_path / "bad.npz")
    np.savez(tmp_path / "int.npz", **good_arrays(np.int64))
    assert "W1 holds int64 values, not floating-point numbers" in resume_error(tmp_path / "int.npz")
    np.savez(tmp_path / "ok.npz", **good_arrays())
    assert params.load_resume(str(tmp_path / "ok.npz"), SIZES)["W1"].shape == (2, 3)


def test_resume_checks_a_declared_shape_before_reading_the_data(tmp_path):
    # a 2 GB array declared in a header of a few hundred bytes: refused, never allocated
    arrays = good_arrays()
    with zipfile.ZipFile(tmp_path / "huge.npz", "w") as z:
        for name, a in arrays.items():
            header = {"descr": "<f4", "fortran_order": False, "shape": (2, 3) if name != "W1" else (16384, 32768)}
            import io
            buf = io.BytesIO()
            np.lib.format.write_array_header_1_0(buf, header)
            z.writestr(f"{name}.npy", buf.getvalue() + (a.tobytes() if name != "W1" else b"\0" * 64))
    assert "W1 has shape (16384, 32768), the network needs (2, 3)" in resume_error(tmp_path / "huge.npz")


def test_two_runs_cannot_claim_one_save_params_folder(tmp_path):
    d = tmp_path / "p"
    params.claim_folder(str(d))
    other = subprocess.run([sys.executable, "-c", f"from perfmlp import params; params.claim_folder({str(d)!r})"],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=30)
    assert other.returncode != 0 and "in use by another run" in other.stderr


# ---- a download that never ends ------------------------------------------------------------------

class Endless(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        try:
            while True:
                self.wfile.write(b"\0" * 65536)
        except OSError:
            pass

    def log_message(self, *a):
        pass


def test_fetch_stops_a_server_that_never_stops_and_leaves_no_part(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        r = run_cmd([sys.executable, "-m", "perfmlp.fetch", "--out", str(tmp_path / "m"), "--mirror",
                     f"http://127.0.0.1:{server.server_port}/"], timeout=30)
    finally:
        server.shutdown()
    assert r.returncode == 2 and "sends more than the file's 9,912,422 bytes" in r.stderr, r.stderr
    assert list((tmp_path / "m").iterdir()) == []


def test_fetch_out_naming_a_file_says_so(tmp_path):
    (tmp_path / "f").write_text("x")
    r = run_cmd([sys.executable, "-m", "perfmlp.fetch", "--out", str(tmp_path / "f")], timeout=30)
    assert r.returncode == 2 and r.stderr.strip() == f"perfmlp.fetch: error: --out {tmp_path / 'f'}: a file, not a folder"


def test_a_rank_header_claiming_another_size_is_refused(traced_run, tmp_path):
    import shutil
    bad = tmp_path / "r"
    shutil.copytree(traced_run, bad)
    lines = (bad / "rank-0.jsonl").read_text().splitlines(keepends=True)
    lines[0] = lines[0].replace('"size":1,', '"size":1000000,')
    (bad / "rank-0.jsonl").write_text("".join(lines))
    with pytest.raises(TraceError, match="size: 1000000, but the run had 1 process"):
        read_run(bad)


def test_the_automatic_run_id_stays_a_file_name():
    from perfmlp.comm import SingleWorld
    from perfmlp.config import from_mapping
    from perfmlp.trace.writer import new_run_id
    cfg = from_mapping({"hidden_sizes": [1024] * 48})
    assert len(new_run_id(cfg, SingleWorld())) < 255


def test_mnist_files_that_are_folders_and_a_data_dir_that_is_a_file(tmp_path):
    from perfmlp import data
    (tmp_path / "train-images-idx3-ubyte.gz").mkdir()
    with pytest.raises(PerfmlpError, match="train-images-idx3-ubyte.gz: not a file"):
        data.load("mnist", str(tmp_path), 100, 10, 784, 10, 0)
    (tmp_path / "file").write_text("x")
    with pytest.raises(PerfmlpError) as e:
        data.load("mnist", str(tmp_path / "file"), 100, 10, 784, 10, 0)
    assert str(e.value) == f"--data-dir {tmp_path / 'file'}: a file, not the folder of the MNIST files"


def test_a_report_folder_is_replaced_whole_or_not_at_all(tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / "report.md").write_text("# the previous report\n")

    def half(folder):
        (folder / "report.md").write_text("# half a report\n")
        raise OSError(28, "No space left on device")
    with pytest.raises(OSError):
        safeio.replace_folder(out, half, "report.md")
    assert [p.name for p in tmp_path.iterdir()] == ["report"]
    assert (out / "report.md").read_text() == "# the previous report\n"
    safeio.replace_folder(out, lambda d: (d / "report.md").write_text("# new\n"), "report.md")
    assert (out / "report.md").read_text() == "# new\n" and [p.name for p in tmp_path.iterdir()] == ["report"]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("a user's own file")
    with pytest.raises(PerfmlpError, match="holds files but no report.md"):
        safeio.replace_folder(tmp_path / "mine", lambda d: None, "report.md")


def test_a_report_folder_never_replaces_a_run_it_reads(traced_run):
    for out in (traced_run, traced_run / "inner"):
        with pytest.raises(PerfmlpError, match="which this command reads"):
            safeio.check_output_folder(out, [traced_run])
    safeio.check_output_folder(traced_run.parent / "report", [traced_run])   # beside the runs: fine
    safeio.check_output_folder(traced_run.parent, [traced_run])   # above them (a set's folder): carried along


def test_a_report_over_the_folder_of_its_runs_keeps_them(tmp_path, traced_run):
    # a committed set's report is written into the folder that holds its traces: the runs stay whole
    before = {p.relative_to(traced_run.parent): p.read_bytes() for p in traced_run.rglob("*") if p.is_file()}
    (traced_run.parent / "report.md").write_text("# earlier\n")
    safeio.replace_folder(traced_run.parent, lambda d: (d / "report.md").write_text("# new\n"), "report.md")
    assert (traced_run.parent / "report.md").read_text() == "# new\n"
    assert {p.relative_to(traced_run.parent): p.read_bytes() for p in traced_run.rglob("*") if p.is_file()} == before
