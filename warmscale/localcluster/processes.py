"""Start, watch and stop the control-plane processes.

Processes run in their own session (so a Ctrl-C in a terminal does not hit them) with
stdout/stderr appended to ``<state dir>/logs/<name>.log``. When ``die_with_parent`` is
set (pytest-owned clusters) the kernel SIGKILLs them if the parent dies: a graceful
kube-apiserver shutdown can hang once etcd is gone, and the state is throw-away anyway.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class ProcessHandle:
    """A started process, identified by pid (survives the Python process that started it)."""

    name: str
    pid: int
    log_path: Path

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except OSError as exc:
            return exc.errno == errno.EPERM
        # A zombie still answers kill(0); check /proc for its state.
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{self.pid}/stat").read_text()
            return stat.rsplit(")", 1)[1].split()[0] != "Z"
        return True

    def rss_bytes(self) -> int:
        """Resident memory of the process (0 if gone)."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def cpu_seconds(self) -> float:
        """User + system CPU time consumed so far (0 if gone)."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        # Fields after the command: state is [0]; utime and stime are [11] and [12].
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds."""
        if not self.alive():
            return
        log.info("stopping process", extra={"component": self.name, "pid": self.pid})
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _reap(self.pid)
            if not self.alive():
                return
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        _reap(self.pid)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def start(
    name: str, argv: Sequence[str], log_dir: Path, *, die_with_parent: bool = False, env: dict[str, str] | None = None
) -> ProcessHandle:
    """Start ``argv`` detached, logging to ``log_dir/<name>.log``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    preexec: Callable[[], None] | None = _die_with_parent if die_with_parent else None
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec,
            env={**os.environ, **(env or {})},
            close_fds=True,
        )
    log.info("started process", extra={"component": name, "pid": proc.pid, "log": str(log_path)})
    # The Popen object is dropped on purpose: the pid is the handle, so `down` can stop it
    # from another Python process. Silence the "still running" ResourceWarning.
    proc.returncode = 0
    return ProcessHandle(name, proc.pid, log_path)


def wait_http(handle: ProcessHandle, url: str, deadline: float) -> None:
    """Poll ``url`` until it answers 200 (before the monotonic ``deadline``); fail early if the process exits."""
    last = ""
    while time.monotonic() < deadline:
        if not handle.alive():
            raise RuntimeError(f"{handle.name} exited during startup:\n{handle.log_tail(30)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(0.25)
    raise TimeoutError(f"{handle.name} not ready at {url}: {last}\n{handle.log_tail(30)}")
