"""The first screen of each committed report, as a reader's browser shows it:
headless Chromium opens reports/<set>/report.html in a 1280 x 900 window and
writes reports/<set>/overview.png beside it, so the screenshot shows the
numbers the committed report holds. The PNG carries the SHA-256 of the
report.html it shows (a tEXt chunk, `report-sha256`), so a test can tell a
screenshot of another version of the report.

    apt-get install -y chromium
    python benchmarks/screenshot.py                  # every reports/<set>/report.html
    python benchmarks/screenshot.py reports/h100     # one set

Chromium runs with a fresh profile in a temporary folder, no sandbox, GPU,
QUIC, network services or sync; the PNG is written to a temporary name and
renamed. One line and exit status 2 for a missing report or Chromium, 1 when
Chromium fails.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import os
import struct
import zlib
import sys
import tempfile
from pathlib import Path

from perfmlp.report.browser import WINDOW, BrowserError, find_browser, screenshot

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--force-device-scale-factor=1", "--run-all-compositor-stages-before-draw",
         "--virtual-time-budget=5000")
KEY = b"report-sha256"
PNG_END = b"IEND"


def stamped(png: bytes, html: bytes) -> bytes:
    """The PNG with a tEXt chunk naming the SHA-256 of the report it shows, placed before its end chunk."""
    body = KEY + b"\0" + hashlib.sha256(html).hexdigest().encode()
    chunk = struct.pack(">I", len(body)) + b"tEXt" + body + struct.pack(">I", zlib.crc32(b"tEXt" + body))
    end = png.rindex(PNG_END) - 4            # the end chunk's length field
    return png[:end] + chunk + png[end:]


def palette(png: bytes) -> bytes:
    """The screenshot in 256 colours (a page of text and flat charts: a
    quarter of the bytes, no visible change), where Pillow is installed."""
    try:
        from PIL import Image
    except ImportError:
        return png
    out = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").quantize(256).save(out, format="PNG", optimize=True)
    return out.getvalue()


def stamp_of(png: bytes) -> str | None:
    """The report's SHA-256 a screenshot carries, None where it carries none."""
    pos = 8                                  # after the PNG signature
    while pos + 8 <= len(png):
        size, kind = struct.unpack(">I4s", png[pos:pos + 8])
        data = png[pos + 8:pos + 8 + size]
        if kind == b"tEXt" and data.startswith(KEY + b"\0"):
            return data[len(KEY) + 1:].decode("ascii", "replace")
        pos += 12 + size
    return None


def shoot(set_dir: Path, browser: str) -> Path:
    """reports/<set>/report.html -> reports/<set>/overview.png."""
    html = (set_dir / "report.html").resolve()
    if not html.is_file():
        raise BrowserError(f"{set_dir}: no report.html", 2)
    out = set_dir / "overview.png"
    with tempfile.TemporaryDirectory(prefix="perfmlp-screenshot-") as tmp:
        shot = screenshot(html, Path(tmp) / "shot.png", *WINDOW, browser=browser, flags=FLAGS)
        part = out.with_name(out.name + ".part")
        part.write_bytes(stamped(palette(shot.read_bytes()), html.read_bytes()))
        os.replace(part, out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sets", nargs="*", help="set folders (default: every reports/<set> with a report.html)")
    ap.add_argument("--browser", default=None, help="Chromium binary (default: chromium on PATH)")
    a = ap.parse_args(argv)
    sets = [Path(s) for s in a.sets] or sorted(p.parent for p in (ROOT / "reports").glob("*/report.html"))
    try:
        browser = find_browser(a.browser)
        for s in sets:
            print(f"screenshot: {shoot(s, browser)}")
    except BrowserError as e:
        print(f"screenshot: error: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:
        print(f"screenshot: error: {e.filename or 'overview.png'}: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
