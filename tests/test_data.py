import gzip
import hashlib
import http.server
import shutil
import struct
import threading
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from perfmlp import data as D
from perfmlp import fetch as F
from perfmlp.errors import PerfmlpError

from conftest import run_perfmlp

SHIPPED = Path(D.__file__).parent / "mnist"


def write_idx(path, arr, magic, gz=False):
    if magic == D.IMAGES_MAGIC:
        head = struct.pack(">IIII", magic, arr.shape[0], 28, 28)
    else:
        head = struct.pack(">II", magic, arr.shape[0])
    raw = head + arr.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(raw) if gz else raw)


def test_shipped_test_set_is_real_mnist():
    ds = D.shipped_test_set()
    assert ds.images.shape == (10000, 784) and ds.labels.shape == (10000,)
    # the published class counts of the MNIST test set
    assert np.bincount(ds.labels).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert ds.labels[:5].tolist() == [7, 2, 1, 0, 4]


def test_raw_and_gzip_read_the_same(tmp_path):
    imgs = np.arange(3 * 784).reshape(3, 784) % 256
    write_idx(tmp_path / "a", imgs, D.IMAGES_MAGIC)
    write_idx(tmp_path / "b.gz", imgs, D.IMAGES_MAGIC, gz=True)
    a = D.read_idx(tmp_path / "a", D.IMAGES_MAGIC)
    b = D.read_idx(tmp_path / "b.gz", D.IMAGES_MAGIC)
    assert np.array_equal(a, b) and np.array_equal(a, imgs)


def test_bad_files(tmp_path):
    labels = np.array([1, 2, 3])
    write_idx(tmp_path / "l", labels, D.LABELS_MAGIC)
    with pytest.raises(PerfmlpError, match="wrong magic 0x00000801"):
        D.read_idx(tmp_path / "l", D.IMAGES_MAGIC)
    full = (tmp_path / "l").read_bytes()
    (tmp_path / "t").write_bytes(full[:-1])
    with pytest.raises(PerfmlpError, match="truncated IDX file"):
        D.read_idx(tmp_path / "t", D.LABELS_MAGIC)
    (tmp_path / "h").write_bytes(full[:5])
    with pytest.raises(PerfmlpError, match="truncated IDX file"):
        D.read_idx(tmp_path / "h", D.LABELS_MAGIC)
    (tmp_path / "g.gz").write_bytes(gzip.compress(full)[:20])
    with pytest.raises(PerfmlpError, match="damaged gzip"):
        D.read_idx(tmp_path / "g.gz", D.LABELS_MAGIC)
    with pytest.raises(PerfmlpError, match="cannot read"):
        D.read_idx(tmp_path / "missing", D.LABELS_MAGIC)


def test_mnist_folder_with_training_files(tmp_path):
    rng = np.random.default_rng(0)
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", rng.integers(0, 256, (50, 784)), D.IMAGES_MAGIC, gz=True)
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", rng.integers(0, 10, 50), D.LABELS_MAGIC, gz=True)
    s = D.load("auto", str(tmp_path), 40, 100, 784, 10, 0)
    # validation: the last 10% of the 50 training images (5); training on the first 40 of the other 45
    assert len(s.train) == 40 and len(s.heldout) == 5
    assert "MNIST training set" in s.note and "validating on 5" in s.note
    s = D.load("auto", str(tmp_path), 1000, 3, 784, 10, 0)
    assert len(s.train) == 45 and len(s.heldout) == 3 and "cut to the 45" in s.note
    # the validation samples are the training files' last five, never trained on
    full = D.read_mnist_pair(tmp_path, D.TRAIN_FILES, "x")
    assert np.array_equal(s.heldout.images, full.images[45:48])
    assert not any((s.train.images == row).all(axis=1).any() for row in full.images[45:])
    (tmp_path / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(PerfmlpError, match="train-labels-idx1-ubyte"):
        D.load("auto", str(tmp_path), 40, 100, 784, 10, 0)


def test_fallback_to_shipped_set_says_so(tmp_path):
    s = D.load("auto", str(tmp_path / "nothing"), 38400, 2000, 784, 10, 0)
    assert len(s.train) == 8000 and len(s.heldout) == 2000
    assert "no MNIST training files" in s.note and "\n" not in s.note
    with pytest.raises(PerfmlpError, match="does not exist"):
        D.load("mnist", str(tmp_path / "nothing"), 100, 10, 784, 10, 0)


def test_synthetic_is_deterministic_and_structured():
    a, b = D.synthetic(500, seed=3), D.synthetic(500, seed=3)
    assert np.array_equal(a.images, b.images) and np.array_equal(a.labels, b.labels)
    assert not np.array_equal(a.images, D.synthetic(500, seed=4).images)
    # class-structured: samples are nearer their own class mean than another's
    x = a.images.astype(float)
    means = np.stack([x[a.labels == c].mean(0) for c in range(10)])
    nearest = ((x[:, None, :] - means[None]) ** 2).sum(-1).argmin(1)
    assert (nearest == a.labels).mean() > 0.9
    assert D.synthetic(7, input_size=30).images.shape == (7, 30)


def test_to_arrays_scales_and_one_hots():
    ds = D.Dataset(np.array([[0, 255], [51, 102]], np.uint8), np.array([1, 0], np.uint8), "t")
    x, y = D.to_arrays(ds, 3, np.float32)
    assert x.dtype == np.float32 and np.allclose(x, [[0, 1], [0.2, 0.4]])
    assert y.tolist() == [[0, 1, 0], [1, 0, 0]]


@pytest.fixture
def http_dir(tmp_path):
    """A local HTTP server serving files from tmp_path/www."""
    www = tmp_path / "www"
    www.mkdir()
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield www, f"http://127.0.0.1:{srv.server_address[1]}/"
    srv.shutdown()


def test_fetch_checks_digests(http_dir, tmp_path, monkeypatch):
    www, url = http_dir
    fake = {}
    for name in F.FILES:
        content = f"content of {name}".encode()
        (www / name).write_bytes(content)
        fake[name] = (hashlib.md5(content).hexdigest(), F.FILES[name][1])
    monkeypatch.setattr(F, "FILES", fake)
    out = tmp_path / "out"
    got = F.fetch(out, (url,), log=lambda *a: None)
    assert sorted(p.name for p in got) == sorted(fake)
    assert (out / "t10k-labels-idx1-ubyte.gz").read_bytes() == b"content of t10k-labels-idx1-ubyte.gz"
    # a corrupted file on the server: refused, nothing left behind
    (out / "train-images-idx3-ubyte.gz").unlink()
    (www / "train-images-idx3-ubyte.gz").write_bytes(b"corrupted")
    with pytest.raises(PerfmlpError, match="md5"):
        F.fetch(out, (url,), log=lambda *a: None)
    assert not (out / "train-images-idx3-ubyte.gz").exists()
    assert not list(out.glob("*.part"))


def test_fetch_real_digests_against_shipped_files(http_dir, tmp_path):
    """The official digests in fetch.FILES match the real test files we ship."""
    www, url = http_dir
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        shutil.copy(SHIPPED / name, www / name)
        assert F.md5_of(www / name) == F.FILES[name][0]
    with pytest.raises(PerfmlpError, match="could not fetch train-images"):
        F.fetch(tmp_path / "o", (url,), log=lambda *a: None)
    assert F.main(["--out", str(tmp_path / "o2"), "--mirror", url]) == 2


def test_corrupted_gzip_names_the_file(tmp_path):
    # bytes flipped inside the deflate stream: zlib's "Error -3", which escaped before
    raw = bytearray((SHIPPED / "t10k-labels-idx1-ubyte.gz").read_bytes())
    for i in range(200, 216):
        raw[i] ^= 0xFF
    bad = tmp_path / "t10k-labels-idx1-ubyte.gz"
    bad.write_bytes(bytes(raw))
    with pytest.raises(PerfmlpError) as e:
        D.read_idx(bad, D.LABELS_MAGIC)
    assert str(e.value).startswith(f"{bad}: damaged gzip file")


def test_corrupted_training_file_is_one_line(tmp_path):
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.arange(20) % 10, D.LABELS_MAGIC, gz=True)
    raw = bytearray((SHIPPED / "t10k-images-idx3-ubyte.gz").read_bytes())
    for i in range(5000, 5016):
        raw[i] ^= 0xFF
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(bytes(raw))
    r = run_perfmlp("--data", "mnist", "--data-dir", str(tmp_path), "--no-trace", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0, r.stderr
    assert "train-images-idx3-ubyte.gz: damaged gzip file" in r.stderr and "error: error" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"]


def test_idx_header_that_disagrees_with_the_file(tmp_path):
    # 2^31 images of 2^16 x 2^16 pixels: 2^63 bytes, which overflowed int64 before
    (tmp_path / "big").write_bytes(struct.pack(">IIII", D.IMAGES_MAGIC, 2**31, 2**16, 2**16) + bytes(100))
    with pytest.raises(PerfmlpError, match=r"big: truncated IDX file \(116 bytes, header announces 9223372036854775824\)"):
        D.read_idx(tmp_path / "big", D.IMAGES_MAGIC)
    # 3 labels announced, 5 present: 8 + 3 = 11 bytes expected, 13 found
    (tmp_path / "long").write_bytes(struct.pack(">II", D.LABELS_MAGIC, 3) + bytes(5))
    with pytest.raises(PerfmlpError, match="long: 13 bytes, but its IDX header announces 11"):
        D.read_idx(tmp_path / "long", D.LABELS_MAGIC)


def test_fewer_classes_than_the_labels(tmp_path):
    with pytest.raises(PerfmlpError, match="num_classes is 5 but the MNIST labels go up to 9"):
        D.load("auto", str(tmp_path / "nothing"), 100, 10, 784, 5, 0)
    write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros((4, 784)), D.IMAGES_MAGIC)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.array([0, 1, 2, 7]), D.LABELS_MAGIC)
    with pytest.raises(PerfmlpError, match="num_classes is 5 but the MNIST labels go up to 7"):
        D.load("mnist", str(tmp_path), 4, 10, 784, 5, 0)
    assert len(D.load("synthetic", "", 40, 10, 784, 5, 0).train) == 40  # its labels are drawn below 5

