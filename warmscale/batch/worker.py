"""A batch worker that drains a Redis list with the reliable-queue pattern (an I/O shell).

    python -m warmscale.batch.worker --redis redis://redis:6379 --queue batch:prompts \
        --exec 'python3 /app/run_one.py'          # the item on stdin; exit 0: done

Each item is moved atomically (``BLMOVE``) from the queue into this worker's processing list, handled,
then removed from it together with its push onto ``<queue>:done`` (one ``MULTI``). So an item is in
exactly one place at every instant, and a worker that stops loses nothing:

- **SIGTERM** (a preempted pod: Kueue evicting a lower-priority workload, the kubelet's grace period;
  a scale-down): the item in hand is put back at the head of the queue (the next one taken), the
  command it ran is stopped, and the worker exits 0 within ``--stop-grace`` seconds;
- **SIGKILL / a lost node**: the worker's ``alive`` key expires after ``--alive-ttl`` seconds, and the
  next worker to start (any of them) puts that worker's processing list back on the queue.

``--exec`` runs a command per item (the item on stdin; exit 0 marks it done, anything else puts it
back, up to ``--attempts`` times per worker, then it is left in ``<queue>:failed``). Without
``--exec``, ``--work-seconds`` only holds each item that long (a demo and test stand-in for work).
With ``--max-items`` the worker exits 0 after that many (a ScaledJob's one-shot Job); with
``--exit-when-empty`` it exits once the queue stays empty for ``--idle-exit`` seconds.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType

import redis

from warmscale.batch import keys

log = logging.getLogger("warmscale.batch")

# How long one BLMOVE blocks: the longest a stop request waits while the queue is empty.
POLL_S = 1
# The alive key lives this long without a refresh (refreshed every ALIVE_TTL_S / 3): a killed worker's
# items go back to the queue at most this long after it died, once another worker starts.
ALIVE_TTL_S = 30
# A command that ignores SIGTERM this long after the worker passed it on is killed.
STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class Options:
    redis_url: str
    queue: str
    worker: str
    command: str | None = None
    work_seconds: float = 0.0
    max_items: int = 0  # 0: no limit
    exit_when_empty: bool = False
    idle_exit_s: float = 5.0
    attempts: int = 3
    alive_ttl_s: int = ALIVE_TTL_S
    stop_grace_s: float = STOP_GRACE_S


class Worker:
    def __init__(self, opts: Options, client: redis.Redis | None = None) -> None:
        self.opts = opts
        self.r = client or redis.Redis.from_url(opts.redis_url, decode_responses=True)
        self.stopping = threading.Event()
        self.processing = keys.processing(opts.queue, opts.worker)
        self.alive = keys.alive(opts.queue, opts.worker)
        self._child: subprocess.Popen[bytes] | None = None

    # ----- the protocol --------------------------------------------------------------------

    def recover(self) -> int:
        """Put back on the queue every item of a processing list whose worker is not alive (this worker's own
        list included: a restart under the same name). Returns how many items went back."""
        moved = 0
        for key in self.r.scan_iter(match=f"{self.opts.queue}{keys.PROCESSING}*"):
            owner = keys.worker_of(self.opts.queue, key)
            if owner is None or (owner != self.opts.worker and self.r.exists(keys.alive(self.opts.queue, owner))):
                continue
            while self.r.lmove(key, self.opts.queue, "RIGHT", "RIGHT") is not None:
                moved += 1
        if moved:
            log.info("recovered items of stopped workers", extra={"queue": self.opts.queue, "items": moved})
        return moved

    def take(self) -> str | None:
        """The next item, moved into this worker's processing list (None: the queue stayed empty)."""
        item = self.r.blmove(self.opts.queue, self.processing, POLL_S, "RIGHT", "LEFT")
        return None if item is None else str(item)

    def finish(self, item: str) -> None:
        with self.r.pipeline(transaction=True) as p:
            p.lpush(keys.done(self.opts.queue), item)
            p.lrem(self.processing, 1, item)
            p.execute()

    def give_back(self, item: str) -> None:
        """The item back at the head of the queue (RIGHT: the end BLMOVE takes from), out of processing."""
        with self.r.pipeline(transaction=True) as p:
            p.rpush(self.opts.queue, item)
            p.lrem(self.processing, 1, item)
            p.execute()

    def fail(self, item: str) -> None:
        with self.r.pipeline(transaction=True) as p:
            p.lpush(f"{self.opts.queue}:failed", item)
            p.lrem(self.processing, 1, item)
            p.execute()

    # ----- the loop ------------------------------------------------------------------------

    def handle(self, item: str) -> bool | None:
        """True: done; False: failed this attempt; None: interrupted by a stop request."""
        if self.opts.command is None:
            return None if self.stopping.wait(self.opts.work_seconds) else True
        child = subprocess.Popen(self.opts.command, shell=True, stdin=subprocess.PIPE)
        self._child = child
        try:
            assert child.stdin is not None
            try:
                child.stdin.write(item.encode())
                child.stdin.close()
            except BrokenPipeError:
                pass
            while True:
                try:
                    rc = child.wait(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    if self.stopping.is_set():
                        child.terminate()
                        try:
                            child.wait(timeout=self.opts.stop_grace_s)
                        except subprocess.TimeoutExpired:
                            child.kill()
                            child.wait()
                        return None
        finally:
            self._child = None
        if self.stopping.is_set() and rc != 0:
            return None
        return rc == 0

    def _heartbeat(self) -> None:
        every = max(self.opts.alive_ttl_s / 3, 1.0)
        while not self.stopping.is_set():
            try:
                self.r.set(self.alive, "1", ex=self.opts.alive_ttl_s)
            except redis.RedisError as exc:
                log.warning("alive key not refreshed", extra={"error": str(exc)})
            self.stopping.wait(every)

    def run(self) -> int:
        self.r.set(self.alive, "1", ex=self.opts.alive_ttl_s)
        self.recover()
        beat = threading.Thread(target=self._heartbeat, name="alive", daemon=True)
        beat.start()
        handled = 0
        idle = 0.0
        tries: dict[str, int] = {}
        try:
            while not self.stopping.is_set():
                item = self.take()
                if item is None:
                    idle += POLL_S
                    if self.opts.exit_when_empty and idle >= self.opts.idle_exit_s:
                        break
                    continue
                idle = 0.0
                if self.stopping.is_set():  # the stop came while BLMOVE returned: nothing was started
                    self.give_back(item)
                    break
                result = self.handle(item)
                if result is None:
                    self.give_back(item)
                    log.info("stopped: item back on the queue", extra={"queue": self.opts.queue})
                    break
                if result:
                    self.finish(item)
                    handled += 1
                else:
                    tries[item] = tries.get(item, 0) + 1
                    if tries[item] >= self.opts.attempts:
                        self.fail(item)
                    else:
                        self.give_back(item)
                if self.opts.max_items and handled >= self.opts.max_items:
                    break
        finally:
            self.stopping.set()
            self.r.delete(self.alive)
        log.info("worker done", extra={"queue": self.opts.queue, "handled": handled})
        return 0

    def stop(self, signum: int = signal.SIGTERM, frame: FrameType | None = None) -> None:
        self.stopping.set()


def parse(argv: Sequence[str] | None = None) -> Options:
    p = argparse.ArgumentParser(prog="python -m warmscale.batch.worker",
                                description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--redis", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"),
                   help="Redis URL (default $REDIS_URL)")
    p.add_argument("--queue", required=True, help="the Redis list of items")
    p.add_argument("--worker-id", default=os.environ.get("POD_NAME") or socket.gethostname(),
                   help="this worker's name (default $POD_NAME, else the host name)")
    p.add_argument("--exec", dest="command", default=None, help="command per item (the item on stdin)")
    p.add_argument("--work-seconds", type=float, default=0.0, help="without --exec: hold each item this long")
    p.add_argument("--max-items", type=int, default=0, help="exit 0 after this many items (0: no limit)")
    p.add_argument("--exit-when-empty", action="store_true", help="exit 0 once the queue stays empty")
    p.add_argument("--idle-exit", type=float, default=5.0, help="seconds of empty queue before that exit")
    p.add_argument("--attempts", type=int, default=3, help="tries per item before <queue>:failed")
    p.add_argument("--alive-ttl", type=int, default=ALIVE_TTL_S, help="seconds the alive key outlives the worker")
    p.add_argument("--stop-grace", type=float, default=STOP_GRACE_S,
                   help="seconds a command gets after SIGTERM before it is killed")
    a = p.parse_args(argv)
    for flag, value in (("--attempts", a.attempts), ("--alive-ttl", a.alive_ttl)):
        if value < 1:
            p.error(f"{flag} must be at least 1, got {value}")
    for flag, fvalue in (("--work-seconds", a.work_seconds), ("--idle-exit", a.idle_exit),
                         ("--stop-grace", a.stop_grace), ("--max-items", a.max_items)):
        if fvalue < 0:
            p.error(f"{flag} must not be negative, got {fvalue}")
    return Options(redis_url=a.redis, queue=a.queue, worker=a.worker_id, command=a.command,
                   work_seconds=a.work_seconds, max_items=a.max_items, exit_when_empty=a.exit_when_empty,
                   idle_exit_s=a.idle_exit, attempts=a.attempts, alive_ttl_s=a.alive_ttl, stop_grace_s=a.stop_grace)


def main(argv: Sequence[str] | None = None) -> int:
    from warmscale.logs import setup_logging

    setup_logging("info")
    worker = Worker(parse(argv))
    signal.signal(signal.SIGTERM, worker.stop)
    signal.signal(signal.SIGINT, worker.stop)
    try:
        return worker.run()
    except redis.RedisError as exc:
        log.error("redis unavailable", extra={"error": str(exc)})
        return 1


if __name__ == "__main__":
    sys.exit(main())
