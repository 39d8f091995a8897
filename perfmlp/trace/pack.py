"""`python -m perfmlp.trace.pack DIR...`: gzip every rank file (rank-<r>.jsonl and rank-<r>.batches) under
each DIR in place, for committing a trace set (the readers take either form: format.rank_files). Each
packed file is read back and compared before the plain one is removed; a file already packed is left as
it is. Prints the bytes before and after."""
from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

from .format import PACKED


def pack_file(path: Path) -> tuple[int, int]:
    """Gzip one rank file beside itself, check it, remove the plain one: (bytes before, after)."""
    data = path.read_bytes()
    out = path.with_name(path.name + PACKED)
    tmp = out.with_name(out.name + ".tmp")
    # the gzip header names rank-<r>.jsonl (gunzip -N), not the temporary file
    with open(tmp, "wb") as raw, gzip.GzipFile(path.name, "wb", 9, raw) as f:
        f.write(data)
    if gzip.decompress(tmp.read_bytes()) != data:
        tmp.unlink()
        raise OSError(f"{path}: the packed copy does not read back the same")
    tmp.replace(out)
    path.unlink()
    return len(data), out.stat().st_size


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfmlp.trace.pack", description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", metavar="DIR", help="trace folders (searched at any depth)")
    a = ap.parse_args(argv)
    before = after = files = 0
    try:
        for d in map(Path, a.dirs):
            if not d.is_dir():
                raise OSError(f"{d}: no such folder")
            for p in sorted([*d.rglob("rank-*.jsonl"), *d.rglob("rank-*.batches")]):
                if p.with_name(p.name + PACKED).exists():
                    raise OSError(f"{p}: already packed beside it ({p.name + PACKED}); remove one")
                b, g = pack_file(p)
                before, after, files = before + b, after + g, files + 1
    except OSError as e:
        print(f"perfmlp.trace.pack: {e}", file=sys.stderr)
        return 1
    print(f"packed {files} rank file(s): {before:,} -> {after:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
