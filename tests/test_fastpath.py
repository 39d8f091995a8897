"""The tracer's batch hooks (perfmlp/trace/fastpath.py): the C ones and the
Python ones write the same records, take the general path for the same
batches, and the manifest says which ran."""
from __future__ import annotations

import json

import pytest

from perfmlp.trace import fastpath as fastpath_mod
from perfmlp.trace.reader import read_run
from perfmlp.trace.records import BatchLayout, Phase as P
from synthetic import drive_tracer

needs_c = pytest.mark.skipif(fastpath_mod.CFastPath is None, reason="perfmlp.trace._fastpath is not built here")

FOUR, TWO = (P.H2D, P.FORWARD, P.BACKWARD, P.UPDATE), (P.FORWARD, P.UPDATE)
# (piece size, phases, MPI bytes) per batch: the fast path, a size change and back, other phases, other
# bytes, and enough batches past the first 256 KiB to make the file grow (17,000 x 80 bytes = 1.3 MiB)
PLAN = ([(4, FOUR, 96)] * 3 + [(2, FOUR, 96), (4, FOUR, 96), (4, TWO, 96), (4, FOUR, 96), (4, FOUR, 64),
                                (4, FOUR, 96)] + [(4, FOUR, 96)] * 17_000)


def _drive(tmp_path, compiled: bool, name: str):
    """The PLAN through a Tracer with the given hooks, on the real clock."""
    drive_tracer(tmp_path, name, PLAN, compiled, epoch=1, loss_every=3)
    return tmp_path / name


def _records(run_dir):
    """(shape id, epoch, batch, loss, size) of each record on disk: all but
    its clock stamps."""
    data = (run_dir / "rank-0.batches").read_bytes()
    phases = {x["id"]: len(x["phases"]) for x in map(json.loads, (run_dir / "rank-0.jsonl").read_text().splitlines())
              if x["kind"] == "shape"}
    out, pos = [], BatchLayout.FILE.size
    while pos < len(data):
        rec = BatchLayout.record(phases[BatchLayout.HEAD.unpack_from(data, pos)[0]])
        sid, epoch, batch, loss, *_, size = rec.unpack_from(data, pos)
        assert size == rec.size  # stored last: the record is whole
        out.append((sid, epoch, batch, None if loss != loss else loss, size))
        pos += size
    return out


@needs_c
def test_c_and_python_hooks_write_the_same_records(tmp_path):
    py = _drive(tmp_path, False, "py")
    c = _drive(tmp_path, True, "c")
    assert _records(c) == _records(py)
    assert len(_records(c)) == len(PLAN)
    # the same shapes, written at the same batches
    shapes = [[ln for ln in (d / "rank-0.jsonl").read_text().splitlines() if '"kind":"shape"' in ln] for d in (py, c)]
    assert shapes[0] == shapes[1]
    run = read_run(c)
    assert run.complete and [b.batch for b in run.ranks[0].batches] == list(range(len(PLAN)))
    assert [b.local_samples for b in run.ranks[0].batches[:5]] == [4, 4, 4, 2, 4]


@needs_c
def test_c_hooks_stamp_perf_counters_clock(tmp_path):
    """The C hooks' batch start and end lie on time.perf_counter()'s clock,
    which stamps the phases: every phase starts inside its batch."""
    import time
    before = time.perf_counter()
    run = read_run(_drive(tmp_path, True, "clock"))
    took_s = time.perf_counter() - before
    batches = run.ranks[0].batches
    assert all(0 <= b.t0_s and b.t0_s + b.wall_ms / 1e3 <= took_s for b in batches)
    assert all(0 <= span.offset_ms <= b.wall_ms for b in batches for span in b.t_ms.values())
    assert sum(len(b.t_ms) for b in batches) > 60_000  # 17,000 fast batches of four phases


def test_python_hooks_where_c_is_not_built(monkeypatch):
    monkeypatch.setattr(fastpath_mod, "CFastPath", None)
    with pytest.raises(ImportError, match="not built"):
        fastpath_mod.fast_path([], bytearray(64), 16, 64, None, None, None, compiled=True)
    assert isinstance(fastpath_mod.fast_path([], bytearray(64), 16, 64, None, None, None), fastpath_mod.PyFastPath)


@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=needs_c)])
def test_the_manifest_names_the_hooks_that_ran(tmp_path, compiled):
    run = read_run(_drive(tmp_path, compiled, "named"))
    assert run.manifest.ran.batch_hooks == ("c" if compiled else "python")


@needs_c
def test_the_c_stamper_appends_perf_counters_clock():
    import time
    from perfmlp.trace.fastpath import stamp_class
    stamps: list = []
    hook = stamp_class(stamps, compiled=True)()
    before = time.perf_counter()
    for _ in range(3):
        with hook:
            pass
    after = time.perf_counter()
    assert len(stamps) == 3 and before <= stamps[0] <= stamps[1] <= stamps[2] <= after
    assert all(type(t) is float for t in stamps)
