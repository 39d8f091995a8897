"""`python -m perfmlp.fetch`: download the four official MNIST files and
check their digests.

Each file is written to a temporary name and renamed only once its md5
matches, so an interrupted or corrupted download never leaves a file that
the loader would trust. Files already present with the right digest are kept.
"""
from __future__ import annotations

import hashlib
import sys
import urllib.error
import urllib.request
from pathlib import Path

from .errors import OneLineParser, PerfmlpError, cli, say, seconds_arg

DEFAULT_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)
# The published md5 digests of the official files (LeCun et al.).
FILES = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}


def md5_of(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(out: Path, mirrors: tuple[str, ...] = DEFAULT_MIRRORS, timeout_s: float = 30.0,
          log=print) -> list[Path]:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PerfmlpError(f"cannot create {out}: {e.strerror}") from None
    done = []
    for name, digest in FILES.items():
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
                with urllib.request.urlopen(url, timeout=timeout_s) as r, open(tmp, "wb") as f:
                    while chunk := r.read(1 << 20):
                        f.write(chunk)
            except (urllib.error.URLError, OSError, ValueError) as e:  # ValueError: not a URL urllib can open
                tmp.unlink(missing_ok=True)
                errors.append(f"{url}: {getattr(e, 'reason', None) or e}")
                continue
            got = md5_of(tmp)
            if got != digest:
                tmp.unlink(missing_ok=True)
                errors.append(f"{url}: md5 {got}, expected {digest}")
                continue
            tmp.replace(dest)
            log(f"{dest}: downloaded from {url}, md5 ok")
            done.append(dest)
            break
        else:
            raise PerfmlpError(f"could not fetch {name}: " + "; ".join(errors))
    return done


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog="python -m perfmlp.fetch",
                                 description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--out", default="data/mnist", metavar="DIR",
                    help="folder to write the files to (default: data/mnist, where perfmlp.run looks)")
    ap.add_argument("--mirror", action="append", metavar="URL",
                    help="base URL to fetch from, tried in the order given; repeatable "
                         f"(default: {', '.join(DEFAULT_MIRRORS)})")
    ap.add_argument("--timeout", type=seconds_arg, default=30.0, metavar="SECONDS",
                    help="seconds to wait for each connection (default: 30)")
    try:
        args = ap.parse_args(argv)
        fetch(Path(args.out), tuple(args.mirror) if args.mirror else DEFAULT_MIRRORS, args.timeout, log=say)
    except PerfmlpError as e:
        say(f"perfmlp.fetch: error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(cli("perfmlp.fetch", main))
