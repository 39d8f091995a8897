"""The report is written whole or not at all (perfmlp/report/render.py `staged`)."""
import errno
import importlib

import pytest

from perfmlp.report.sections import Section, Table

R = importlib.import_module("perfmlp.report.render")   # the module (the package exports its function `render`)


def sections(word: str) -> list[Section]:
    # t0.csv is the same whatever the word; t1 and t2 change with it
    return [Section(f"{word} {i}", [f"{word} paragraph {i}"],
                    [Table(f"t{i}", f"{word} table", [{"a": i, "b": word if i else "same"}])]) for i in range(3)]


def snapshot(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_a_write_failing_halfway_leaves_the_previous_report_whole(tmp_path, monkeypatch):
    out = tmp_path / "report"
    R.render(sections("before"), out, "perfmlp report", ["header"])
    (out / "SET.md").write_text("notes of the set, not the report's\n")
    before = snapshot(out)
    assert {"report.md", "report.html", "t0.csv", "t1.csv", "t2.csv"} <= set(before)
    written = []
    real = R._write

    def full_after_two(path, data):
        if len(written) == 2:   # the third file of the new report hits a full disk
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        written.append(path)
        real(path, data)
    monkeypatch.setattr(R, "_write", full_after_two)
    with pytest.raises(OSError):
        R.render(sections("after"), out, "perfmlp report", ["header"])
    assert len(written) == 2 and all(p.parent != out for p in written)   # the new files went beside it
    assert snapshot(out) == before                                        # every previous file as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]       # no staging folder left behind


def test_a_report_replaces_only_its_own_changed_files(tmp_path):
    out = tmp_path / "report"
    R.render(sections("before"), out, "perfmlp report", ["header"])
    (out / "SET.md").write_text("kept\n")
    same, changed = (out / "t0.csv").stat().st_ino, (out / "t1.csv").stat().st_ino
    R.render(sections("after"), out, "perfmlp report", ["header"])
    assert "after paragraph 1" in (out / "report.md").read_text() and "after" in (out / "t1.csv").read_text()
    assert (out / "SET.md").read_text() == "kept\n"
    assert (out / "t0.csv").stat().st_ino == same and (out / "t1.csv").stat().st_ino != changed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_a_new_report_folder_arrives_whole(tmp_path, monkeypatch):
    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))
    monkeypatch.setattr(R, "_write", full)
    with pytest.raises(OSError):
        R.render(sections("x"), tmp_path / "new", "perfmlp report", ["header"])
    assert list(tmp_path.iterdir()) == []   # neither the report folder nor its staging folder
