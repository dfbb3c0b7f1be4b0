"""Real servers on loopback for tests and benchmarks: a private ``redis-server``, a private
``prometheus`` scraping given targets, and a fake engine ``/metrics`` endpoint.

* :class:`RedisServer`: ``/usr/bin/redis-server`` on a free 127.0.0.1 port, AOF on, temp dir;
  ``.url``, ``.port``, ``restart()`` (data kept), ``flush()``.
* :class:`PrometheusServer`: ``/usr/bin/prometheus`` scraping ``targets`` (``host:port`` or metrics
  URLs); ``.url``, ``restart()`` (TSDB kept), ``set_targets()`` (config reload), ``query()``,
  ``wait_for()``.
* :class:`FakeEngine`: serves a ``/metrics`` payload from an aiohttp server on its own thread
  (usable from sync and async code, scrapable by Prometheus) and can be switched to hang, refuse
  connections, serve garbage, a huge body, or an HTTP error.

The binaries come from ``.ci/install-servers.sh`` (``WARMSCALE_REDIS_SERVER`` and
``WARMSCALE_PROMETHEUS`` override their paths). The pytest fixtures over these are in
``tests/servers.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from .processes import free_port

REDIS_BIN = os.environ.get("WARMSCALE_REDIS_SERVER", "/usr/bin/redis-server")
PROMETHEUS_BIN = os.environ.get("WARMSCALE_PROMETHEUS", "/usr/bin/prometheus")


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"server did not listen on {port} within {timeout}s: {log.read_text()[-2000:]}")


def stop_process(proc: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """SIGTERM, wait up to ``timeout`` s, then SIGKILL; nothing when it has already exited."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


# --------------------------------------------------------------------------------------------- Redis


class RedisServer:
    def __init__(self, binary: str = REDIS_BIN) -> None:
        self.binary = binary
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="warmscale-redis-"))
        self.log = self.dir / "redis.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
            "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
            "--protected-mode", "no", "--logfile", str(self.log),
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.log.touch()
        _wait_port(self.port, self.proc, 15.0, self.log)
        self._wait_ping()

    def _wait_ping(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return
            time.sleep(0.05)
        raise RuntimeError("redis-server does not answer PING (still loading?)")

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None

    def restart(self) -> None:
        """Stop (the AOF keeps every write) and start again on the same port."""
        self.stop()
        self.start()

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), 2.0) as s:
            s.sendall(b"FLUSHALL\r\n")
            s.recv(64)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------- Prometheus


def _target(t: str) -> tuple[str, str, str]:
    """(scheme, host:port, path) of a target given as host:port or a URL."""
    if "://" not in t:
        return "http", t, "/metrics"
    u = urllib.parse.urlparse(t)
    return u.scheme or "http", u.netloc, u.path or "/metrics"


class PrometheusServer:
    def __init__(self, targets: Sequence[str], scrape_interval: str = "1s", binary: str = PROMETHEUS_BIN) -> None:
        self.binary = binary
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="warmscale-prometheus-"))
        self.config = self.dir / "prometheus.yml"
        self.tsdb = self.dir / "data"
        self.log = self.dir / "prometheus.log"
        self.scrape_interval = scrape_interval
        self.proc: subprocess.Popen[bytes] | None = None
        self._write_config(targets)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _write_config(self, targets: Sequence[str]) -> None:
        jobs: dict[tuple[str, str], list[str]] = {}
        for t in targets:
            scheme, hostport, path = _target(t)
            jobs.setdefault((scheme, path), []).append(hostport)
        scrape_configs = [
            {
                "job_name": f"engines-{i}",
                "scheme": scheme,
                "metrics_path": path,
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": self.scrape_interval,
                "static_configs": [{"targets": hosts}],
            }
            for i, ((scheme, path), hosts) in enumerate(sorted(jobs.items()))
        ]
        cfg = {"global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.scrape_interval},
               "scrape_configs": scrape_configs}
        self.config.write_text(json.dumps(cfg, indent=1))  # JSON is YAML

    def start(self, timeout: float = 30.0) -> None:
        args = [
            self.binary, f"--config.file={self.config}", f"--storage.tsdb.path={self.tsdb}",
            f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-lifecycle",
            "--storage.tsdb.retention.time=1d", "--log.level=warn",
        ]  # fmt: skip
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}: {self.log.read_text()[-3000:]}")
            with contextlib.suppress(OSError, urllib.error.URLError):
                with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            time.sleep(0.1)
        raise RuntimeError(f"prometheus not ready within {timeout}s: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        stop_process(self.proc, timeout=20.0)
        self.proc = None

    def restart(self) -> None:
        """Stop cleanly and start again on the same port with the same TSDB."""
        self.stop()
        self.start()

    def set_targets(self, targets: Sequence[str]) -> None:
        self._write_config(targets)
        req = urllib.request.Request(self.url + "/-/reload", method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200

    def query(self, promql: str) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=10) as r:
            body = json.loads(r.read())
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_for(
        self, promql: str, predicate: Callable[[list[dict[str, Any]]], bool] = bool, timeout: float = 20.0
    ) -> list[dict[str, Any]]:
        """Poll ``promql`` until ``predicate(result)`` holds (e.g. the first scrape landed)."""
        deadline = time.monotonic() + timeout
        last: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, urllib.error.URLError, KeyError, ValueError):
                last = self.query(promql)
                if predicate(last):
                    return last
            time.sleep(0.2)
        raise TimeoutError(f"{promql!r} did not satisfy the predicate within {timeout}s; last: {last}")

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


# --------------------------------------------------------------------------------------- fake engine


class FakeEngine:
    """An aiohttp ``/metrics`` server on a private thread and loop.

    Modes: :meth:`serve` (a payload), :meth:`hang` (accept, never answer), :meth:`garbage`,
    :meth:`huge` (stream ``nbytes``), :meth:`fail` (HTTP status), :meth:`refuse` (stop listening;
    :meth:`serve` listens again on the same port)."""

    def __init__(self, payload: str = "", path: str = "/metrics") -> None:
        self.path = path
        self.port = free_port()
        self.hits = 0
        self._mode = "ok"
        self._payload = payload
        self._status = 200
        self._huge = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"fake-engine-{self.port}", daemon=True)
        self._thread.start()
        self._runner: web.AppRunner | None = None
        self._release: asyncio.Event | None = None
        self._call(self._listen())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _call(self, coro: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.hits += 1
        mode = self._mode
        if mode == "hang":
            await self._released().wait()
        if mode == "status":
            return web.Response(status=self._status, text="engine error\n")
        if mode == "huge":
            resp = web.StreamResponse(headers={"Content-Type": "text/plain; version=0.0.4"})
            await resp.prepare(request)
            line = b'filler_metric{pad="' + b"x" * 200 + b'"} 1\n'
            sent = 0
            with contextlib.suppress(ConnectionError):
                while sent < self._huge:
                    await resp.write(line * 64)
                    sent += len(line) * 64
                await resp.write_eof()
            return resp
        return web.Response(text=self._payload, content_type="text/plain", charset="utf-8",
                            headers={"X-Mode": mode})

    def _released(self) -> asyncio.Event:
        if self._release is None:
            self._release = asyncio.Event()
        return self._release

    async def _listen(self) -> None:
        app = web.Application()
        app.router.add_get(self.path, self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()

    async def _unlisten(self) -> None:
        self._released().set()
        self._release = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _arm(self) -> None:
        self._release = asyncio.Event()

    async def _unhang(self) -> None:
        self._released().set()

    def serve(self, payload: str | None = None) -> FakeEngine:
        if payload is not None:
            self._payload = payload
        self._mode = "ok"
        self._call(self._unhang())
        if self._runner is None:
            self._call(self._listen())
        return self

    def hang(self) -> FakeEngine:
        self._call(self._arm())
        self._mode = "hang"
        return self

    def garbage(self, text: str = "<html><body>502 Bad Gateway</body></html>\n") -> FakeEngine:
        self._payload = text
        self._mode = "garbage"
        return self

    def huge(self, nbytes: int) -> FakeEngine:
        self._huge = nbytes
        self._mode = "huge"
        return self

    def fail(self, status: int = 500) -> FakeEngine:
        self._status = status
        self._mode = "status"
        return self

    def refuse(self) -> FakeEngine:
        self._call(self._unlisten())
        return self

    async def _shutdown(self) -> None:
        self._released().set()
        await self._unlisten()
        me = asyncio.current_task()
        pending = [t for t in asyncio.all_tasks() if t is not me]
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()
