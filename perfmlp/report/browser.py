"""`python -m perfmlp.report.browser reports/X/report.html`: the report as
a person sees it, a screenshot of its first screen taken by headless
Chromium (`apt-get install chromium`).

The window is 1280 x 900 CSS pixels (a laptop's browser window): the
overview must fit in it. `--height` takes a taller window (the whole page
with `--full`). Chromium runs with a fresh profile in a temporary folder,
no network, sandbox or GPU; the screenshot is written to a temporary name
and renamed, so a failed run leaves no half-written PNG. Exit status 2 for
a bad argument or a missing Chromium, 1 when Chromium fails.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import PerfmlpError, cli, say, write_atomic

WINDOW = (1280, 900)    # CSS pixels: the overview's budget
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
HEADLESS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync")   # a fresh browser that reaches nothing
FLAGS = (*HEADLESS, "--hide-scrollbars", "--force-device-scale-factor=1", "--run-all-compositor-stages-before-draw",
         "--virtual-time-budget=5000")
TIMEOUT_S = 120


class BrowserError(PerfmlpError):
    """A screenshot that cannot be taken (one-line message); exit_code 2 for bad input, 1 for a failure."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def find_browser(name: str | None = None) -> str:
    """The Chromium binary: `name` (a path or a command), else the first of BROWSERS on PATH."""
    for candidate in ([name] if name else BROWSERS):
        path = shutil.which(candidate)
        if path:
            return path
    what = name or " or ".join(BROWSERS)
    raise BrowserError(f"no {what} on PATH (apt-get install -y chromium)", 2)


def page_height(html: Path) -> int:
    """A height that holds the whole page: the report's figures are images of
    known count, so a generous bound from the file's size and figure count."""
    text = html.read_text(encoding="utf-8", errors="replace")
    return min(60000, WINDOW[1] + 600 * text.count("<img") + len(text) // 40)


def screenshot(html: str | Path, out: str | Path, width: int = WINDOW[0], height: int = WINDOW[1],
               browser: str | None = None, timeout_s: float = TIMEOUT_S, flags: tuple = FLAGS) -> Path:
    """Render `html` in headless Chromium (`flags`) at width x height and write the PNG to `out`."""
    html, out = Path(html).resolve(), Path(out)
    if not html.is_file():
        raise BrowserError(f"{html}: no such file", 2)
    exe = find_browser(browser)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="perfmlp-chromium-") as profile:
        tmp = Path(profile) / "shot.png"
        cmd = [exe, *flags, f"--user-data-dir={profile}/profile", f"--window-size={width},{height}",
               f"--screenshot={tmp}", html.as_uri()]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, start_new_session=True)
        except subprocess.TimeoutExpired:
            raise BrowserError(f"{exe}: no screenshot of {html} within {timeout_s:g} s") from None
        if done.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise BrowserError(f"{exe}: no screenshot of {html} (exit {done.returncode}: {last})")
        write_atomic(out, tmp.read_bytes())
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfmlp.report.browser", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("html", help="a report.html")
    ap.add_argument("--out", default=None, help="PNG to write (default: overview.png beside the report)")
    ap.add_argument("--width", type=int, default=WINDOW[0], help=f"window width, CSS pixels (default: {WINDOW[0]})")
    ap.add_argument("--height", type=int, default=WINDOW[1], help=f"window height (default: {WINDOW[1]})")
    ap.add_argument("--full", action="store_true", help="a window tall enough for the whole page")
    ap.add_argument("--browser", default=None, help=f"Chromium binary (default: the first of {', '.join(BROWSERS)})")
    a = ap.parse_args(argv)
    html = Path(a.html)
    out = Path(a.out) if a.out else html.with_name("overview.png")
    try:
        if a.width <= 0 or a.height <= 0:
            raise BrowserError(f"--width/--height must be positive, got {a.width}x{a.height}", 2)
        height = page_height(html) if a.full and html.is_file() else a.height
        path = screenshot(html, out, a.width, height, a.browser)
    except PerfmlpError as e:
        say(f"perfmlp.report.browser: error: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:
        say(f"perfmlp.report.browser: error: {e.filename or out}: {e.strerror or e}", file=sys.stderr)
        return 1
    say(f"screenshot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(cli("perfmlp.report.browser", main))
