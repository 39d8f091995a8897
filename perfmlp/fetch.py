"""`python -m perfmlp.fetch`: download the four official MNIST files and check their digests.

Each file is written to a temporary name and renamed only once its md5 matches, so an interrupted or
corrupted download never leaves a file that the loader would trust. Files already present with the
right digest are kept."""
from __future__ import annotations

import hashlib
import signal
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from .errors import OneLineParser, PerfmlpError, cli, say, seconds_arg

DEFAULT_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)
# The official files: their published md5 digests (LeCun et al.) and their sizes in bytes (a server that
# sends more is cut off there).
FILES = {
    "train-images-idx3-ubyte.gz": ("f68b3c2dcbeaaa9fbdd348bbdeb94873", 9_912_422),
    "train-labels-idx1-ubyte.gz": ("d53e105ee54ea40749a09fcbcd1e9432", 28_881),
    "t10k-images-idx3-ubyte.gz": ("9fb629c4189551a2d022fa330f9573f3", 1_648_877),
    "t10k-labels-idx1-ubyte.gz": ("ec29112dd5afa0611ce80d1b7f02629c", 4_542),
}
DEADLINE_S = 600.0   # the whole download, however slowly a server sends


class Terminated(Exception):
    """SIGTERM or SIGHUP during a download (the partial file is removed)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def md5_of(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _download(url: str, tmp: Path, size: int, timeout_s: float, deadline: float) -> None:
    """`url` into `tmp`, at most `size` bytes, by `deadline` (monotonic); else OSError (ValueError: a bad URL)."""
    got = 0
    with urllib.request.urlopen(url, timeout=timeout_s) as r, open(tmp, "wb") as f:
        while chunk := r.read(min(1 << 20, size + 1 - got)):
            got += len(chunk)
            if got > size:
                raise OSError(f"sends more than the file's {size:,} bytes")
            if time.monotonic() > deadline:
                raise OSError(f"not done within {DEADLINE_S:g} s")
            f.write(chunk)


def fetch(out: Path, mirrors: tuple[str, ...] = DEFAULT_MIRRORS, timeout_s: float = 30.0,
          log=print) -> list[Path]:
    if out.exists() and not out.is_dir():
        raise PerfmlpError(f"--out {out}: a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PerfmlpError(f"cannot create {out}: {e.strerror}") from None
    deadline = time.monotonic() + DEADLINE_S
    done = []
    for name, (digest, size) in FILES.items():
        dest = out / name
        if dest.is_file() and md5_of(dest) == digest:
            log(f"{dest}: present, md5 ok")
            done.append(dest)
            continue
        errors = []
        for base in mirrors:
            url = base.rstrip("/") + "/" + name
            tmp = dest.with_suffix(dest.suffix + ".part")
            try:
                _download(url, tmp, size, timeout_s, deadline)
                got = md5_of(tmp)
                if got != digest:
                    raise OSError(f"md5 {got}, expected {digest}")
            except (urllib.error.URLError, OSError, ValueError) as e:  # ValueError: not a URL urllib can open
                tmp.unlink(missing_ok=True)
                errors.append(f"{url}: {getattr(e, 'reason', None) or e}")
                continue
            except BaseException:   # Ctrl-C, SIGTERM: no partial file is left
                tmp.unlink(missing_ok=True)
                raise
            tmp.replace(dest)
            log(f"{dest}: downloaded from {url}, md5 ok")
            done.append(dest)
            break
        else:
            raise PerfmlpError(f"could not fetch {name}: " + "; ".join(errors))
    return done


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog="python -m perfmlp.fetch", description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--out", default="data/mnist", metavar="DIR",
                    help="folder to write the files to (default: data/mnist, where perfmlp.run looks)")
    ap.add_argument("--mirror", action="append", metavar="URL",
                    help="base URL to fetch from, tried in the order given; repeatable "
                         f"(default: {', '.join(DEFAULT_MIRRORS)})")
    ap.add_argument("--timeout", type=seconds_arg, default=30.0, metavar="SECONDS",
                    help="seconds to wait for each connection (default: 30)")
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _terminated)
    try:
        args = ap.parse_args(argv)
        fetch(Path(args.out), tuple(args.mirror) if args.mirror else DEFAULT_MIRRORS, args.timeout, log=say)
    except PerfmlpError as e:
        say(f"perfmlp.fetch: error: {e}", file=sys.stderr)
        return e.exit_code
    except Terminated as e:
        what = "terminated (SIGTERM)" if e.signum == signal.SIGTERM else "hung up (SIGHUP)"
        say(f"perfmlp.fetch: {what}; no partial file is left", file=sys.stderr)
        return 128 + e.signum
    return 0


def _terminated(signum, frame):
    raise Terminated(signum)


if __name__ == "__main__":
    sys.exit(cli("perfmlp.fetch", main))
