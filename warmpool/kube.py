"""Thin Kubernetes plumbing: list+watch caches of raw JSON objects, retries, Events, leader election."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from kubernetes_asyncio.client.exceptions import ApiException

from warmscale.scaler.kube import (  # noqa: F401  (re-exported: Events and timestamps, the scaler's too)
    EventRecorder,
    now_rfc3339,
)
from warmscale.scaler.kubecache import Cache, Obj, read_raw

log = logging.getLogger("warmscale.warmpool")
T = TypeVar("T")


async def with_retries(what: str, call: Callable[[], Awaitable[T]], attempts: int = 5) -> T:
    """Retry conflicts (409 on update), throttling (429) and server errors with jittered back-off."""
    delay = 0.2
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except ApiException as exc:
            retriable = exc.status in (429, 500, 502, 503, 504) or (exc.status == 409 and "Conflict" in str(exc.reason))
            if not retriable or attempt == attempts:
                raise
            log.info("retrying API call", extra={"what": what, "status": exc.status, "attempt": attempt})
        except (TimeoutError, OSError):
            if attempt == attempts:
                raise
        await asyncio.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 5.0)
    raise AssertionError("unreachable")


async def wait_event(event: asyncio.Event, within: float) -> bool:
    """Wait for ``event`` at most ``within`` s; True if it is set. Unlike ``asyncio.wait_for`` on Python
    3.11, a cancellation arriving as the event fires is never swallowed (the caller stops for sure)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            await event.wait()
    return event.is_set()


async def cancel_and_wait(task: asyncio.Task[Any], every: float = 1.0) -> None:
    """Cancel ``task`` and wait until it is done, cancelling again if it swallowed the cancellation."""
    task.cancel()
    while not task.done():
        done, _ = await asyncio.wait({task}, timeout=every)
        if not done:
            log.warning("task ignored its cancellation; cancelling again", extra={"task": task.get_name()})
            task.cancel()


async def ignore_status(coro: Awaitable[Any], *statuses: int) -> Any:
    try:
        return await coro
    except ApiException as exc:
        if exc.status in statuses:
            return None
        raise


class MergedCache:
    """One read-only view over per-namespace caches of a resource (a controller watching several
    namespaces runs one list+watch per namespace: its Roles allow nothing cluster-wide)."""

    def __init__(self, name: str, parts: list[Cache]) -> None:
        self.name = name
        self.parts = parts

    @property
    def items(self) -> dict[str, Obj]:
        out: dict[str, Obj] = {}
        for part in self.parts:
            out.update(part.items)
        return out


class LeaseNamespaceMissing(RuntimeError):
    """The Lease's namespace does not exist: waiting cannot fix that, so the controller stops."""

    def __init__(self, namespace: str) -> None:
        super().__init__(f"the leader-election namespace {namespace!r} does not exist: create it, or pass "
                         f"--lease-namespace NS naming an existing namespace (with --namespace NS and no "
                         f"--lease-namespace the Lease goes to NS)")
        self.namespace = namespace


class LeaderElector:
    """Leader election on a coordination.k8s.io Lease (the client-go algorithm, simplified).

    A candidate takes the lease when it is free or its record has not changed for
    ``lease_duration`` seconds of the candidate's own (monotonic) clock, so clock skew between
    replicas does not matter. The leader renews every ``renew_period``; if it cannot renew for
    ``lease_duration`` it stops leading. On a clean shutdown it releases the lease.
    """

    def __init__(self, coord: Any, namespace: str, name: str, identity: str,
                 lease_duration: float = 15.0, renew_period: float = 5.0, retry_period: float = 2.0) -> None:
        self.coord, self.namespace, self.name, self.identity = coord, namespace, name, identity
        self.lease_duration, self.renew_period, self.retry_period = lease_duration, renew_period, retry_period
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self.is_leader = False

    def _spec(self, acquire_time: str | None, transitions: int) -> Obj:
        now = now_rfc3339(micro=True)
        return {"holderIdentity": self.identity, "leaseDurationSeconds": max(1, int(self.lease_duration)),
                "acquireTime": acquire_time or now, "renewTime": now, "leaseTransitions": transitions}

    async def try_acquire_or_renew(self) -> bool:
        try:
            lease = await read_raw(self.coord.read_namespaced_lease, self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace}, "spec": self._spec(None, 0)}
            try:
                await self.coord.create_namespaced_lease(self.namespace, body)
            except ApiException as exc2:
                if exc2.status == 409:
                    return False
                if exc2.status == 404:  # creating in a namespace that does not exist
                    raise LeaseNamespaceMissing(self.namespace) from None
                raise
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
        mono = time.monotonic()
        if record != self._observed:
            self._observed, self._observed_at = record, mono
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and mono - self._observed_at < duration:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        mine = holder == self.identity
        lease["spec"] = self._spec(spec.get("acquireTime") if mine else None, transitions if mine else transitions + 1)
        try:  # replace carries metadata.resourceVersion: a concurrent writer makes this a 409
            await self.coord.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        self._observed, self._observed_at = None, mono
        return True

    async def release(self) -> None:
        with contextlib.suppress(Exception):
            lease = await read_raw(self.coord.read_namespaced_lease, self.name, self.namespace)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["leaseDurationSeconds"] = 1
                await self.coord.replace_namespaced_lease(self.name, self.namespace, lease)

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]], stop: asyncio.Event) -> None:
        """Campaign until ``stop``; while leading, run ``lead()`` (cancelled when leadership is lost)."""
        try:
            while not stop.is_set():
                try:
                    got = await self.try_acquire_or_renew()
                except LeaseNamespaceMissing:
                    raise
                except Exception as exc:
                    log.warning("lease check failed", extra={"error": str(exc)[:200]})
                    got = False
                if not got:
                    await wait_event(stop, self.retry_period)
                    continue
                log.info("became leader", extra={"identity": self.identity, "lease": self.name})
                self.is_leader = True
                task = asyncio.create_task(lead())
                last_renew = time.monotonic()
                try:
                    while not stop.is_set() and not task.done():
                        await wait_event(stop, self.renew_period)
                        if stop.is_set():
                            break
                        try:
                            if await self.try_acquire_or_renew():
                                last_renew = time.monotonic()
                            else:
                                break  # someone else holds it now
                        except Exception as exc:
                            log.warning("lease renew failed", extra={"error": str(exc)[:200]})
                        if time.monotonic() - last_renew > self.lease_duration:
                            break
                finally:
                    self.is_leader = False
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await cancel_and_wait(task)
                    log.info("stopped leading", extra={"identity": self.identity})
                if task.done() and not task.cancelled() and task.exception() is not None:
                    log.error("controller crashed", extra={"error": str(task.exception())})
        finally:
            await self.release()
