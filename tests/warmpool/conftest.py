"""Shared by the warm pool's cluster tests: an in-process controller for the test namespace, and its
placeholders."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client

from warmscale.warmpool import objects as ob
from warmscale.warmpool.controller import Controller, Options, install_priority_class

MANAGED = f"{ob.MANAGED_BY}={ob.MANAGED_BY_VALUE}"


@pytest.fixture
async def warm_pool(k8s_admin: client.ApiClient, k8s_namespace: str) -> AsyncIterator[Callable[[], Awaitable[Any]]]:
    """Factory: start a controller scoped to the test namespace (2 s resync); all stopped at the end."""
    running: list[asyncio.Task[None]] = []
    await install_priority_class(k8s_admin)

    async def start() -> Controller:
        ctl = Controller(k8s_admin, Options(namespace=k8s_namespace, resync_s=2.0, stager_image="warmscale:test",
                                            scaler_address="scaler.test:9090"))
        running.append(asyncio.create_task(ctl.run()))
        return ctl

    yield start
    for t in running:
        t.cancel()
    await asyncio.gather(*running, return_exceptions=True)


async def placeholders(core: client.CoreV1Api, ns: str) -> list[client.V1Pod]:
    """The namespace's placeholder pods that are not being deleted."""
    pods = (await core.list_namespaced_pod(ns, label_selector=f"{MANAGED},{ob.ROLE}=placeholder")).items
    return [p for p in pods if p.metadata.deletion_timestamp is None]
