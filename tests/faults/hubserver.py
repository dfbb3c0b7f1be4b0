"""A stand-in for the Hugging Face Hub on 127.0.0.1 (real HTTP over loopback, one thread per request).

Each route is a function ``(handler) -> None`` that writes the whole response itself, so a test can
misbehave the way real servers and proxies do: promise more bytes than it sends, cut a chunked body,
send no length, trickle, redirect to another origin. Every request's path and headers are recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

Route = Callable[[http.server.BaseHTTPRequestHandler], None]


@dataclass
class Hub:
    routes: dict[str, Route] = field(default_factory=dict)
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    base: str = ""

    def hits(self, path: str) -> int:
        return sum(1 for p, _ in self.seen if p.split("?")[0] == path)


@contextlib.contextmanager
def serve() -> Iterator[Hub]:
    hub = Hub()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            hub.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            route = hub.routes.get(self.path.split("?")[0])  # routes are paths; the query is recorded only
            if route is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            route(self)

        def log_message(self, *_: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    hub.base = f"http://127.0.0.1:{srv.server_address[1]}"
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield hub
    finally:
        srv.shutdown()
        srv.server_close()


def body(data: bytes, *, length: int | None = None, status: int = 200, headers: dict[str, str] | None = None,
         close: bool = True) -> Route:
    """``data``, announced as ``length`` bytes (default: its own length; -1: no Content-Length, the end of the
    body is the closed connection)."""

    def route(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        n = len(data) if length is None else length
        if n >= 0:
            h.send_header("Content-Length", str(n))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        if close or n < 0:
            h.send_header("Connection", "close")
            h.close_connection = True
        h.end_headers()
        h.wfile.write(data)
        h.wfile.flush()

    return route


def chunked(parts: list[bytes], *, cut: bool = False) -> Route:
    """A chunked body of ``parts``; ``cut``: the connection closes before the terminating chunk."""

    def route(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Transfer-Encoding", "chunked")
        h.send_header("Connection", "close")
        h.close_connection = True
        h.end_headers()
        for p in parts:
            h.wfile.write(f"{len(p):x}\r\n".encode() + p + b"\r\n")
        if not cut:
            h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    return route


def trickle(total: int, every_s: float, stop: threading.Event) -> Route:
    """``total`` promised bytes, one every ``every_s`` seconds (under any socket timeout), until ``stop``."""

    def route(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", str(total))
        h.send_header("Connection", "close")
        h.close_connection = True
        h.end_headers()
        for _ in range(total):
            if stop.wait(every_s):
                return
            try:
                h.wfile.write(b"x")
                h.wfile.flush()
            except OSError:
                return

    return route


def redirect(to: str, status: int = 302) -> Route:
    def route(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Location", to)
        h.send_header("Content-Length", "0")
        h.end_headers()

    return route


def listing(files: dict[str, bytes], *, sizes: bool = True, lfs: set[str] | None = None,
            lie: dict[str, int] | None = None, commit: str | None = None) -> bytes:
    """The Hub's ``/api/models/<repo>/revision/<rev>?blobs=true`` answer for ``files``: sizes (``lie``
    overrides some), for the names in ``lfs`` an LFS entry with the file's SHA-256, and the revision's
    ``commit`` as ``sha`` (files are then read at that commit)."""
    sibs = []
    for name, data in files.items():
        sib: dict[str, object] = {"rfilename": name}
        if sizes:
            sib["size"] = (lie or {}).get(name, len(data))
        if name in (lfs or set()):
            sib["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": (lie or {}).get(name, len(data)),
                          "pointerSize": 134}
        sibs.append(sib)
    out: dict[str, object] = {"id": "org/model", "siblings": sibs}
    if commit:
        out["sha"] = commit
    return json.dumps(out).encode()


def model(hub: Hub, files: dict[str, bytes], repo: str = "org/model", rev: str = "r1", commit: str | None = None,
          **kw: object) -> None:
    """Routes serving ``files`` as ``hf://<repo>@<rev>`` (listing + one resolve route per file, at
    ``commit`` when given, as the Hub resolves a branch)."""
    hub.routes[f"/api/models/{repo}/revision/{rev}"] = body(listing(files, commit=commit, **kw))  # type: ignore[arg-type]
    for name, data in files.items():
        hub.routes[f"/{repo}/resolve/{commit or rev}/{name}"] = body(data)


def wait_until(cond: Callable[[], bool], within: float, step: float = 0.02) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()
