"""The trace's Shape holds the device-memory bytes the roofline needs: the
model's formulas on the launched shapes, written by the tracer and filled
by the reader for traces written without them, so no reader recounts."""
import json
import shutil

from perfmlp.model.costs import batch_counts, widths
from perfmlp.names import Phase
from perfmlp.trace.reader import read_run
from perfmlp.trace.shapes import mem_bytes

from conftest import ROOT
from test_trace import tiny_run

FORMAT1 = ROOT / "tests" / "data" / "format1" / "format1-p2"

# a 4-3-2 network, a piece of 5 samples: the forward pass as launched
FORWARD = [("gemm", (3, 5, 4)), ("bias_sigmoid", (3, 5)), ("gemm", (2, 5, 3)), ("bias_add", (2, 5))]


def test_a_tiny_forward_passes_bytes_by_hand():
    # gemm 3x4 @ 4x5:      4 * (3*4 + 4*5 + 3*5) = 4 * 47 = 188
    # bias_sigmoid 3x5:    4 * 2 * 15 + 4 * 3    = 120 + 12 = 132
    # gemm 2x3 @ 3x5:      4 * (2*3 + 3*5 + 2*5) = 4 * 31 = 124
    # bias_add 2x5:        4 * 2 * 10 + 4 * 2    = 80 + 8 = 88
    # 188 + 132 + 124 + 88 = 532
    assert mem_bytes({Phase.FORWARD: FORWARD}, widths("float32"), 0) == {Phase.FORWARD: 532}


def test_narrow_weight_gradients_are_written_at_the_parameters_width():
    # bf16: the weight-gradient GEMM 3x5 @ 5x4 reads and writes 2 * (15 + 20 + 12) = 94 bytes at 16 bits;
    # its 12 float32 outputs cost (4 - 2) * 12 = 24 bytes more: 118
    launched = {Phase.BACKWARD: [("gemm", (3, 4, 5))]}
    assert mem_bytes(launched, widths("bf16"), 12) == {Phase.BACKWARD: 118}
    assert mem_bytes(launched, widths("float32"), 12) == {Phase.BACKWARD: 4 * 47}   # no narrower operands


def test_the_tracer_writes_the_models_bytes(tmp_path):
    run = read_run(tiny_run(tmp_path))
    b = run.ranks[0].batches[0]
    want = batch_counts((4, 3, 2), 5, widths("float32"), "mpi", "pageable").mem_bytes
    assert {str(p): v for p, v in b.mem_bytes.items() if v} == want


def test_a_trace_written_without_them_is_read_with_them(tmp_path):
    folder = tiny_run(tmp_path)
    written = read_run(folder).ranks[0].batches[0].mem_bytes
    rank0 = folder / "rank-0.jsonl"
    lines = [json.loads(s) for s in rank0.read_text().splitlines()]
    for rec in lines:
        rec.pop("mem_bytes", None)
    rank0.write_text("".join(json.dumps(rec) + "\n" for rec in lines))
    assert "mem_bytes" not in rank0.read_text()
    old = read_run(folder).ranks[0]
    assert old.batches[0].mem_bytes == written and all(s.mem_bytes for s in old.shapes.values())


def test_a_format1_trace_gets_them_from_its_own_layer_sizes(tmp_path):
    folder = tmp_path / "f1"
    shutil.copytree(FORMAT1, folder)
    run = read_run(folder)
    c = run.manifest.config
    b = run.ranks[0].batches[0]
    counts = batch_counts((c["input_size"], *c["hidden_sizes"], c["num_classes"]), b.local_samples,
                          widths(c["precision"]), run.manifest.ran.comm, run.manifest.ran.batch_transfer,
                          exec_mode=run.manifest.ran.exec, fuse_output=run.manifest.ran.fuse_output).mem_bytes
    assert sum(b.mem_bytes.values()) == sum(v for k, v in counts.items() if Phase(k) in b.shape.phases) > 0
