"""pytest plugin: the local cluster and clients for it.

Enable with ``pytest_plugins = ["tests.cluster.fixtures"]`` in ``tests/conftest.py``.

Fixtures
  k8s_cluster        session: a running :class:`Cluster`. Reuses ``$WARMSCALE_KUBECONFIG`` or
                     the ``python -m tests.cluster up`` cluster if one runs, else starts one.
  k8s_namespace      function: a fresh namespace (its ``default`` SA exists), deleted afterwards.
  k8s_admin          function: admin ``kubernetes_asyncio`` ApiClient.
  k8s_sa_client      function: factory ``await make(name, rules) -> ApiClient`` for a
                     ServiceAccount in ``k8s_namespace`` bound to a Role with ``rules``.
  k8s_node_pool      function: factory ``await make(pool) -> list[node names]`` creating
                     temporary kwok nodes (deleted afterwards).
  keda_cluster       session: ``k8s_cluster`` with the real KEDA operator + metrics adapter running
                     (started on it if needed, stopped at the end if started here).
  volcano_cluster    session: ``k8s_cluster`` with the real Volcano scheduler + controller-manager
                     running (started on it if needed, stopped at the end if started here); skipped,
                     even in CI, when its binaries are missing (built only by ``build-cluster.sh --volcano``).
  kueue_cluster      session: ``k8s_cluster`` with the real Kueue controller running (likewise); skips
                     with the reason when the Kueue binary is not built (``build-cluster.sh --kueue-only``).

Missing binaries fail the tests; they skip instead when ``WARMSCALE_ALLOW_SKIP_CLUSTER=1``
and ``CI`` is not ``true``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from warmscale.localcluster import fleet, keda, kueue, volcano
from warmscale.localcluster.binaries import BinariesMissing
from warmscale.localcluster.fleet import NodePool
from warmscale.localcluster.harness import (
    POD_CIDR_TEMPLATE,
    POD_OCTET_HIGH,
    POD_OCTET_LOW,
    STATE_FILE,
    TEMP_PREFIX,
    Cluster,
    ClusterConfig,
    default_state_dir,
    remove_stale_temp_clusters,
)

log = logging.getLogger(__name__)

SaClientFactory = Callable[[str, list[client.V1PolicyRule]], Awaitable[client.ApiClient]]
NodePoolFactory = Callable[[NodePool], Awaitable[list[str]]]


def _skip_allowed() -> bool:
    in_ci = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
    return not in_ci and os.environ.get("WARMSCALE_ALLOW_SKIP_CLUSTER") == "1"


def _existing_cluster() -> Cluster | None:
    kubeconfig = os.environ.get("WARMSCALE_KUBECONFIG")
    if kubeconfig:
        log.info("using cluster from WARMSCALE_KUBECONFIG", extra={"kubeconfig": kubeconfig})
        state = Path(kubeconfig).parent / STATE_FILE
        # A harness cluster's kubeconfig (an `up --state-dir DIR` cluster): attach to it, so that
        # KEDA can be started on it too; any other cluster is used as is.
        cluster = Cluster.attach(state.parent) if state.exists() else Cluster.from_kubeconfig(Path(kubeconfig))
        if not cluster.healthy(within=10):
            pytest.fail(f"WARMSCALE_KUBECONFIG={kubeconfig}: apiserver not ready", pytrace=False)
        return cluster
    state_dir = default_state_dir()
    if (state_dir / STATE_FILE).exists():
        cluster = Cluster.attach(state_dir)
        if cluster.healthy(within=5):
            log.info("reusing the `up` cluster", extra={"state_dir": str(state_dir)})
            return cluster
        log.warning(
            "ignoring the unhealthy `up` cluster; starting a session cluster", extra={"state_dir": str(state_dir)}
        )
    return None


def worker_pod_cidr() -> str | None:
    """A pod range no other pytest-xdist worker of this run can pick: worker i of n takes a second
    octet that is i modulo n (KWOK's pod IPs are this machine's addresses, and the simulated engines
    listen on them: two clusters must never share a range). None outside xdist (the harness' random
    range)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker or count < 2:
        return None
    index = int(worker.removeprefix("gw"))
    return POD_CIDR_TEMPLATE.format(random.choice(range(POD_OCTET_LOW + index, POD_OCTET_HIGH + 1, count)))


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[Cluster]:
    existing = _existing_cluster()
    if existing is not None:
        yield existing
        return
    remove_stale_temp_clusters()
    missing: BinariesMissing | None = None
    try:
        cluster = Cluster.start(ClusterConfig(die_with_parent=True, pod_cidr=worker_pod_cidr()))
    except BinariesMissing as exc:
        missing = exc
    if missing is not None:
        if _skip_allowed():
            pytest.skip(str(missing))
        pytest.fail(
            f"{missing}. Set WARMSCALE_ALLOW_SKIP_CLUSTER=1 to skip cluster tests outside CI "
            "(never skipped when CI=true).",
            pytrace=False,
        )
    log.info("session cluster started", extra={"seconds": cluster.info.get("startup_seconds")})
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def keda_cluster(k8s_cluster: Cluster) -> Iterator[Cluster]:
    try:
        keda.locate()
    except BinariesMissing as exc:
        if _skip_allowed():
            pytest.skip(str(exc))
        pytest.fail(f"{exc}. Set WARMSCALE_ALLOW_SKIP_CLUSTER=1 to skip them outside CI (never when CI=true).",
                    pytrace=False)
    yield from _started_beside(k8s_cluster, keda, "keda")


def _started_beside(cluster: Cluster, component: Any, key: str) -> Iterator[Cluster]:
    """Start ``component`` (the ``keda`` or ``volcano`` module) next to ``cluster``, stop it at the end
    (one already running is used as it is)."""
    if cluster.state_dir is None:
        pytest.fail(f"the real-{key} tests need a harness cluster (WARMSCALE_KUBECONFIG names a foreign one)",
                    pytrace=False)
    if component.running(cluster) and key in cluster.info:
        yield cluster
        return
    component.start(cluster, die_with_parent=cluster.state_dir.name.startswith(TEMP_PREFIX))
    log.info("started beside the cluster", extra={"component": key,
                                                  "marks": cluster.info[key].get("startup_marks")})
    try:
        yield cluster
    finally:
        component.stop(cluster)


def _optional_beside(request: pytest.FixtureRequest, component: Any, key: str) -> Iterator[Cluster]:
    """An optional build (Volcano: only on request, the Go proxy does not serve the volcano.sh/apis it
    requires; Kueue: build-cluster.sh --kueue-only, a plain build makes it too): its tests skip without
    the binaries, even in CI, with the reason, checked before the cluster is asked for (a skip costs no
    cluster start)."""
    try:
        component.locate()
    except BinariesMissing as exc:
        pytest.skip(str(exc))
    k8s_cluster: Cluster = request.getfixturevalue("k8s_cluster")
    yield from _started_beside(k8s_cluster, component, key)


@pytest.fixture(scope="session")
def volcano_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    yield from _optional_beside(request, volcano, "volcano")


@pytest.fixture(scope="session")
def kueue_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    yield from _optional_beside(request, kueue, "kueue")


@pytest.fixture
async def k8s_admin(k8s_cluster: Cluster) -> AsyncIterator[client.ApiClient]:
    async with k8s_cluster.admin_client() as api:
        yield api


@pytest.fixture
async def k8s_namespace(k8s_admin: client.ApiClient) -> AsyncIterator[str]:
    core = client.CoreV1Api(k8s_admin)
    name = f"t-{uuid.uuid4().hex[:10]}"
    await core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"warmscale.io/test": "true"}))
    )
    await wait_for(lambda: _sa_exists(core, name, "default"), within=30, what=f"default SA in {name}")
    try:
        yield name
    finally:
        await ignore_not_found(core.delete_namespace(name))


@pytest.fixture
async def k8s_sa_client(
    k8s_cluster: Cluster, k8s_admin: client.ApiClient, k8s_namespace: str
) -> AsyncIterator[SaClientFactory]:
    core = client.CoreV1Api(k8s_admin)
    rbac = client.RbacAuthorizationV1Api(k8s_admin)
    opened: list[client.ApiClient] = []

    async def make(name: str, rules: list[client.V1PolicyRule]) -> client.ApiClient:
        meta = client.V1ObjectMeta(name=name, namespace=k8s_namespace)
        await core.create_namespaced_service_account(k8s_namespace, client.V1ServiceAccount(metadata=meta))
        await rbac.create_namespaced_role(k8s_namespace, client.V1Role(metadata=meta, rules=rules))
        await rbac.create_namespaced_role_binding(
            k8s_namespace,
            client.V1RoleBinding(
                metadata=meta,
                role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=name),
                subjects=[client.RbacV1Subject(kind="ServiceAccount", name=name, namespace=k8s_namespace)],
            ),
        )
        if rules:
            # The RBAC authorizer works from an informer cache: wait until the binding is seen.
            await wait_for(
                lambda: _allowed(k8s_admin, k8s_namespace, name, rules[0]),
                within=10,
                what=f"RoleBinding {name} effective",
                interval=0.1,
            )
        token = await k8s_cluster.mint_token(k8s_namespace, name, expiration_seconds=3600)
        api = k8s_cluster.token_client(token)
        opened.append(api)
        return api

    yield make
    for api in opened:
        await api.close()


@pytest.fixture
async def k8s_node_pool(k8s_admin: client.ApiClient, k8s_namespace: str) -> AsyncIterator[NodePoolFactory]:
    """Temporary kwok nodes, labelled ``warmscale.io/test=<namespace>`` and named after it."""
    core = client.CoreV1Api(k8s_admin)
    created: list[str] = []

    async def make(pool: NodePool) -> list[str]:
        labels = {**pool.extra_labels, "warmscale.io/test": k8s_namespace}
        unique = replace(pool, name=f"{k8s_namespace}-{pool.name}", extra_labels=labels)
        names = [unique.node_name(i) for i in range(unique.count)]
        await fleet.create_nodes(k8s_admin, [unique])
        created.extend(names)
        await wait_for(lambda: _nodes_ready(core, names), within=60, what=f"nodes {names} Ready")
        return names

    yield make
    for name in created:
        # No kubelet will ever confirm these pods' deletion once the node is gone: force them.
        pods = await core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}")
        for pod in pods.items:
            await ignore_not_found(
                core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0))
        await ignore_not_found(core.delete_node(name))


async def ignore_not_found(call: Awaitable[Any]) -> None:
    """Await a delete (or any API call); an object that is already gone (404) is fine."""
    try:
        await call
    except ApiException as exc:
        if exc.status != 404:
            raise


async def wait_for(predicate: Callable[[], Awaitable[Any]], *, within: float, what: str, interval: float = 0.25) -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail the test after ``within`` seconds.

    The deadline is checked on the loop's clock at every round, and each call of the predicate is
    bounded by what is left: a predicate whose client swallows a cancellation (seen once in CI: the
    test sat idle until pytest-timeout's 300 s) ends the wait at the deadline all the same."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        left = deadline - loop.time()
        if left <= 0:
            break
        try:
            value = await asyncio.wait_for(predicate(), left)
        except TimeoutError:
            break
        if value:
            return value
        await asyncio.sleep(min(interval, max(0.0, deadline - loop.time())))
    pytest.fail(f"timed out after {within:.0f}s waiting for {what}", pytrace=False)


async def _allowed(api: client.ApiClient, namespace: str, sa: str, rule: client.V1PolicyRule) -> bool:
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{namespace}:{sa}",
            groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(
                namespace=namespace,
                verb=rule.verbs[0],
                group=(rule.api_groups or [""])[0],
                resource=(rule.resources or [""])[0],
            ),
        )
    )
    result = await client.AuthorizationV1Api(api).create_subject_access_review(review)
    return bool(result.status.allowed)


async def _sa_exists(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    try:
        await core.read_namespaced_service_account(name, namespace)
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


async def _nodes_ready(core: client.CoreV1Api, names: list[str]) -> bool:
    for name in names:
        node = await core.read_node(name)
        if not fleet.node_ready(node):
            return False
    return True
