"""A local Kubernetes control plane with a simulated (KWOK) fleet.

    cluster = Cluster.start(ClusterConfig(pools=default_fleet(per_pool=2)))
    cluster.kubeconfig           # admin kubeconfig (client cert, O=system:masters)
    async with cluster.admin_client() as api: ...
    token = await cluster.mint_token("ns", "sa")      # TokenRequest
    cluster.stop()

All processes bind 127.0.0.1 on free ports. A cluster's state (PKI, etcd data, logs,
kubeconfigs, ``state.json`` with pids and ports) lives in one directory, so another
Python process can attach to it (``Cluster.attach``) and stop it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import shutil
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio import config as kube_config

from . import crds, fleet, kubeconfig, pki, processes
from .binaries import Binaries, cache_root, locate
from .fleet import NodePool

log = logging.getLogger(__name__)

T = TypeVar("T")

STATE_FILE = "state.json"
STAGES_DIR = Path(__file__).parent / "stages"
KWOK_CONFIG = Path(__file__).parent / "kwok-config.yaml"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CIDR = "10.96.0.0/16"
# Pod IPs come from a loopback range (the whole 127.0.0.0/8 is this machine), so that a simulated
# engine can listen on a KWOK pod's IP and port and be scraped there like a real pod. The second
# octet is drawn per cluster, so clusters running side by side do not hand out the same IPs.
POD_CIDR_TEMPLATE = "127.{}.0.0/16"
# The second octets a pod range is drawn from.
POD_OCTET_LOW, POD_OCTET_HIGH = 16, 250


def random_pod_cidr() -> str:
    import random

    return POD_CIDR_TEMPLATE.format(random.randint(POD_OCTET_LOW, POD_OCTET_HIGH))


TEMP_PREFIX = "warmscale-cluster-"

# ServiceAccount requests only (what a test runs under a ServiceAccount), at Metadata level: user, verb,
# resource, namespace, name, response code. Control-plane components (kube-system ServiceAccounts
# included, as the controller-manager uses them), nodes and the admin (system:masters) are not logged.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  userGroups: ["system:serviceaccounts:kube-system", "system:nodes", "system:masters"]
- level: None
  users: ["system:kube-controller-manager", "system:kube-scheduler", "system:apiserver"]
- level: Metadata
  userGroups: ["system:serviceaccounts"]
- level: None
"""


def remove_stale_temp_clusters() -> list[Path]:
    """Delete temporary cluster dirs whose processes are all gone (owner killed); return them."""
    removed: list[Path] = []
    for state in Path(tempfile.gettempdir()).glob(f"{TEMP_PREFIX}*/{STATE_FILE}"):
        try:
            cluster = Cluster.attach(state.parent)
        except (OSError, ValueError, KeyError):
            continue
        if cluster.processes and not any(p.alive() for p in cluster.processes):
            shutil.rmtree(state.parent, ignore_errors=True)
            removed.append(state.parent)
    if removed:
        log.info("removed stale temporary clusters", extra={"dirs": [str(p) for p in removed]})
    return removed


def default_state_dir() -> Path:
    """State directory of the cluster started by ``python -m tests.cluster up``."""
    return cache_root() / "clusters" / "default"


@dataclass
class ClusterConfig:
    """What to start."""

    pools: list[NodePool] = field(default_factory=fleet.default_fleet)
    state_dir: Path | None = None  # None: a fresh temporary directory
    die_with_parent: bool = False  # kill the processes if the starting process dies
    install_keda_crds: bool = True
    install_inference_crds: bool = True  # InferencePool & co. (Gateway API Inference Extension module)
    install_lws_crds: bool = True  # LeaderWorkerSet (testbed/lws; its controller: tests/cluster/lws_standin.py)
    hpa_sync_period: str = "5s"
    startup_timeout: float = 120.0
    build_missing: bool = False  # run .ci/build-cluster.sh if binaries are missing
    # Audit log of ServiceAccount requests (Metadata level; control-plane components, kube-system SAs
    # and the admin are not logged): <state dir>/logs/audit.log, see Cluster.audit_events().
    audit: bool = True
    extra_apiserver_args: list[str] = field(default_factory=list)  # e.g. ["--watch-cache=false"]
    keda: bool = False  # also start the real KEDA operator + metrics adapter (tests/cluster/keda.py)
    kueue: bool = False  # also start the real Kueue controller (tests/cluster/kueue.py)
    pod_cidr: str | None = None  # None: a random 127.X.0.0/16


@dataclass
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int

    @classmethod
    def allocate(cls) -> Ports:
        ports: set[int] = set()
        while len(ports) < 5:
            ports.add(processes.free_port())
        return cls(*sorted(ports))


class ClusterStartError(RuntimeError):
    pass


def run_sync(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from synchronous code, even inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    result: list[T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(factory()))
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=target, name="cluster-sync")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


class Cluster:
    """A running control plane (owned: started here; attached: started elsewhere)."""

    def __init__(
        self,
        state_dir: Path | None,
        kubeconfig_path: Path,
        server: str,
        handles: list[processes.ProcessHandle] | None = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.kubeconfig = kubeconfig_path
        self.server = server
        self.processes = handles or []
        self.info = info or {}

    # ----- lifecycle -------------------------------------------------------------------

    @classmethod
    def start(cls, cfg: ClusterConfig | None = None) -> Cluster:
        """Start etcd, the control plane and kwok; create the fleet; return when usable."""
        cfg = cfg or ClusterConfig()
        binaries = locate(build=cfg.build_missing)
        t0 = time.monotonic()
        state_dir = cfg.state_dir or Path(tempfile.mkdtemp(prefix=TEMP_PREFIX))
        if (state_dir / STATE_FILE).exists():
            raise ClusterStartError(f"a cluster state already exists in {state_dir}; stop it first")
        state_dir.mkdir(parents=True, exist_ok=True)
        cluster = _Starter(binaries, cfg, state_dir).run()
        cluster.info["startup_seconds"] = round(time.monotonic() - t0, 2)
        cluster._write_state()
        from . import keda, kueue

        for wanted, component in ((cfg.keda, keda), (cfg.kueue, kueue)):
            if not wanted:
                continue
            try:
                component.start(cluster, die_with_parent=cfg.die_with_parent, build=cfg.build_missing)
            except BaseException:
                cluster.stop()
                raise
            cluster.info["startup_seconds"] = round(time.monotonic() - t0, 2)
            cluster._write_state()
        log.info("cluster ready", extra={"state_dir": str(state_dir), "seconds": cluster.info["startup_seconds"]})
        return cluster

    @classmethod
    def attach(cls, state_dir: Path | None = None) -> Cluster:
        """Attach to a cluster started by another process (default: the ``up`` cluster)."""
        state_dir = state_dir or default_state_dir()
        state = json.loads((state_dir / STATE_FILE).read_text())
        handles = [processes.ProcessHandle(p["name"], p["pid"], Path(p["log"])) for p in state["processes"]]
        return cls(state_dir, Path(state["kubeconfig"]), state["server"], handles, state)

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Cluster:
        """Use an existing cluster given only its admin kubeconfig (not stopped by us)."""
        data = yaml.safe_load(path.read_text())
        server = data["clusters"][0]["cluster"]["server"]
        return cls(None, path, server)

    def alive(self) -> bool:
        """All processes of an owned/attached cluster exist (says nothing about their health)."""
        return bool(self.processes) and all(p.alive() for p in self.processes)

    def healthy(self, within: float = 5.0) -> bool:
        """The apiserver answers ``/readyz`` (which covers etcd) with 200 within ``within`` seconds."""
        if self.processes and not self.alive():
            return False
        try:
            ctx = self._ssl_context()
        except (OSError, KeyError, IndexError, ValueError):
            return False
        deadline = time.monotonic() + within
        while True:
            try:
                with urllib.request.urlopen(f"{self.server}/readyz", context=ctx, timeout=2) as resp:
                    if resp.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.3)

    def _ssl_context(self) -> ssl.SSLContext:
        data = yaml.safe_load(self.kubeconfig.read_text())
        ctx = ssl.create_default_context(cafile=data["clusters"][0]["cluster"]["certificate-authority"])
        user = data["users"][0]["user"]
        if "client-certificate" in user:
            ctx.load_cert_chain(user["client-certificate"], user["client-key"])
        return ctx

    def stop(self, remove_state: bool = True) -> None:
        """Stop the processes (reverse start order) and remove the state directory."""
        for handle in reversed(self.processes):
            handle.stop()
        if remove_state and self.state_dir is not None:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        log.info("cluster stopped", extra={"state_dir": str(self.state_dir)})

    def status(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "state_dir": str(self.state_dir) if self.state_dir else None,
            "startup_seconds": self.info.get("startup_seconds"),
            "nodes": self.info.get("nodes"),
            "pod_cidr": self.info.get("pod_cidr"),
            "hpa_sync_period": self.info.get("hpa_sync_period"),
            "processes": [
                {"name": p.name, "pid": p.pid, "alive": p.alive(), "rss_mib": round(p.rss_bytes() / 2**20, 1)}
                for p in self.processes
            ],
        }

    # ----- faults and the audit log ----------------------------------------------------

    @property
    def audit_log(self) -> Path | None:
        """The apiserver's audit log (None when this cluster was started without one)."""
        path = self.info.get("audit_log")
        return Path(path) if path else None

    def audit_events(self, user: str | None = None) -> list[dict[str, Any]]:
        """Audit events so far (ResponseComplete stage), optionally of one user only."""
        path = self.audit_log
        if path is None:
            raise RuntimeError("this cluster runs without an audit log (ClusterConfig.audit)")
        out = []
        for f in (path.with_name(path.name + ".1"), path):  # the rotated file first, if any
            if not f.exists():
                continue
            for line in f.read_text(errors="replace").splitlines():
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("stage") != "ResponseComplete":
                    continue
                if user is None or (ev.get("user") or {}).get("username") == user:
                    out.append(ev)
        return out

    def _process(self, name: str) -> processes.ProcessHandle:
        return next(p for p in self.processes if p.name == name)

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver (SIGTERM, then SIGKILL after 10 s); :meth:`start_apiserver` brings it back."""
        self._process("kube-apiserver").stop(timeout=10)

    def start_apiserver(self) -> None:
        """Start kube-apiserver again with its recorded arguments and port (does not wait for it).

        Call it from the main (a long-lived) thread: with ``die_with_parent`` the kernel kills the
        process when the *thread* that started it exits."""
        argv = (self.info.get("argv") or {}).get("kube-apiserver")
        if not argv or self.state_dir is None:
            raise RuntimeError("only a cluster started by this harness (with recorded argv) can restart its apiserver")
        old = self._process("kube-apiserver")
        new = processes.start("kube-apiserver", argv, self.state_dir / "logs",
                              die_with_parent=bool(self.info.get("die_with_parent")))
        self.processes[self.processes.index(old)] = new
        self._write_state()

    def wait_apiserver(self, within: float = 90.0) -> None:
        deadline = time.monotonic() + within
        new = self._process("kube-apiserver")
        while not self.healthy(within=1):
            if not new.alive() or time.monotonic() > deadline:
                raise ClusterStartError(f"kube-apiserver did not come back:\n{new.log_tail()}")

    def restart_apiserver(self, downtime: float = 0.0, before_start: Callable[[], None] | None = None) -> float:
        """Stop kube-apiserver, wait ``downtime`` s, run ``before_start`` (e.g. an etcd compaction), start it
        again with the same arguments and port; returns the seconds until ``/readyz`` answered again.
        Blocking, and to be called from the main thread (see :meth:`start_apiserver`)."""
        t0 = time.monotonic()
        self.stop_apiserver()
        time.sleep(downtime)
        if before_start is not None:
            before_start()
        self.start_apiserver()
        self.wait_apiserver()
        return time.monotonic() - t0

    def etcd_compact(self) -> int:
        """Compact etcd to its current revision (every older resourceVersion is gone: watches from one get
        410 Gone); returns the revision."""
        port = self.info["ports"]["etcd_client"]

        def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
            req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as resp:
                return dict(json.loads(resp.read()))

        rev = int(post("/v3/kv/range", {"key": "Lw=="})["header"]["revision"])  # key "/"
        try:
            post("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        except urllib.error.HTTPError as exc:  # nothing written since the last compaction
            if "compacted" not in exc.read().decode(errors="replace"):
                raise
        return rev

    def memory_bytes(self) -> dict[str, int]:
        """Resident memory per process."""
        return {p.name: p.rss_bytes() for p in self.processes}

    def cpu_usage(self, seconds: float = 10.0) -> dict[str, float]:
        """Average CPU use per process over ``seconds`` (1.0 = one core busy)."""
        before = {p.name: p.cpu_seconds() for p in self.processes}
        time.sleep(seconds)
        return {p.name: round((p.cpu_seconds() - before[p.name]) / seconds, 3) for p in self.processes}

    def _write_state(self) -> None:
        assert self.state_dir is not None
        self.info.update(
            server=self.server,
            kubeconfig=str(self.kubeconfig),
            processes=[{"name": p.name, "pid": p.pid, "log": str(p.log_path)} for p in self.processes],
        )
        tmp = self.state_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(self.info, indent=2))
        tmp.replace(self.state_dir / STATE_FILE)

    # ----- clients and tokens ----------------------------------------------------------

    @contextlib.asynccontextmanager
    async def admin_client(self) -> AsyncIterator[client.ApiClient]:
        """An admin ``ApiClient`` (closed on exit)."""
        api = await kube_config.new_client_from_config(config_file=str(self.kubeconfig))
        try:
            yield api
        finally:
            await api.close()

    def token_client(self, token: str) -> client.ApiClient:
        """An ``ApiClient`` authenticating with a bearer token (caller closes it)."""
        configuration = client.Configuration()
        configuration.host = self.server
        configuration.ssl_ca_cert = str(self._ca_file())
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return client.ApiClient(configuration)

    async def mint_token(
        self,
        namespace: str,
        service_account: str,
        *,
        expiration_seconds: int = 3600,
        audiences: list[str] | None = None,
    ) -> str:
        """A TokenRequest token for an existing ServiceAccount."""
        async with self.admin_client() as api:
            spec = client.V1TokenRequestSpec(audiences=audiences or [], expiration_seconds=expiration_seconds)
            resp = await client.CoreV1Api(api).create_namespaced_service_account_token(
                service_account, namespace, client.AuthenticationV1TokenRequest(spec=spec)
            )
            return str(resp.status.token)

    def write_token_kubeconfig(self, path: Path, token: str, user: str = "service-account") -> Path:
        """A kubeconfig using ``token`` (for tools and subprocesses)."""
        return kubeconfig.write(path, self.server, self._ca_file(), user, token=token)

    def _ca_file(self) -> Path:
        data = yaml.safe_load(self.kubeconfig.read_text())
        ca = data["clusters"][0]["cluster"]["certificate-authority"]
        return Path(ca)


class _Starter:
    """The start sequence of one cluster."""

    def __init__(self, binaries: Binaries, cfg: ClusterConfig, state_dir: Path) -> None:
        self.bin = binaries
        self.cfg = cfg
        self.dir = state_dir
        self.logs = state_dir / "logs"
        self.handles: list[processes.ProcessHandle] = []
        self.deadline = time.monotonic() + cfg.startup_timeout
        self.t0 = time.monotonic()
        self.pod_cidr = cfg.pod_cidr or random_pod_cidr()

    def run(self) -> Cluster:
        try:
            return self._run()
        except BaseException:
            for handle in reversed(self.handles):
                handle.stop(timeout=3)
            raise

    def _run(self) -> Cluster:
        p = pki.generate(self.dir / "pki")
        ports = Ports.allocate()
        server = f"https://127.0.0.1:{ports.apiserver}"
        admin_kc = kubeconfig.write(self.dir / "admin.kubeconfig", server, p.ca.cert, "admin", client=p.admin)
        kcm_kc = kubeconfig.write(
            self.dir / "controller-manager.kubeconfig",
            server,
            p.ca.cert,
            "system:kube-controller-manager",
            client=p.controller_manager,
        )
        sched_kc = kubeconfig.write(
            self.dir / "scheduler.kubeconfig", server, p.ca.cert, "system:kube-scheduler", client=p.scheduler
        )
        marks: dict[str, float] = {}
        t0 = self.t0 = time.monotonic()

        etcd = self._spawn("etcd", self._etcd_args(ports))
        self._wait(etcd, f"http://127.0.0.1:{ports.etcd_client}/health", None)
        marks["etcd"] = time.monotonic() - t0

        apiserver_argv = self._apiserver_args(p, ports)
        apiserver = self._spawn("kube-apiserver", apiserver_argv)
        admin_ssl = ssl.create_default_context(cafile=str(p.ca.cert))
        admin_ssl.load_cert_chain(str(p.admin.cert), str(p.admin.key))
        self._wait(apiserver, f"{server}/readyz", admin_ssl)
        marks["apiserver"] = time.monotonic() - t0

        kcm = self._spawn("kube-controller-manager", self._kcm_args(p, ports, kcm_kc))
        sched = self._spawn("kube-scheduler", self._scheduler_args(ports, sched_kc))
        kwok = self._spawn("kwok", self._kwok_args(admin_kc))

        cluster = Cluster(
            self.dir,
            admin_kc,
            server,
            self.handles,
            {
                "ports": dataclasses.asdict(ports),
                "pod_cidr": self.pod_cidr,
                "hpa_sync_period": self.cfg.hpa_sync_period,
                "nodes": sum(pool.count for pool in self.cfg.pools),
                "pools": {pool.name: pool.count for pool in self.cfg.pools},
                "argv": {"kube-apiserver": apiserver_argv},
                "die_with_parent": self.cfg.die_with_parent,
                **({"audit_log": str(self.logs / "audit.log")} if self.cfg.audit else {}),
            },
        )
        # Record pids now, so `down` can clean up even if the bootstrap below fails.
        cluster._write_state()

        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        self._wait(kcm, f"https://127.0.0.1:{ports.controller_manager}/healthz", insecure)
        self._wait(sched, f"https://127.0.0.1:{ports.scheduler}/healthz", insecure)
        marks["controllers"] = time.monotonic() - t0

        remaining = max(self.deadline - time.monotonic(), 1.0)
        run_sync(lambda: self._bootstrap(cluster, remaining, [kwok, kcm]))
        marks["bootstrap"] = time.monotonic() - t0
        cluster.info.setdefault("startup_marks", {}).update({k: round(v, 2) for k, v in marks.items()})
        return cluster

    async def _bootstrap(self, cluster: Cluster, within: float, watched: list[processes.ProcessHandle]) -> None:
        async with cluster.admin_client() as api:
            core = client.CoreV1Api(api)
            await _ensure_namespace(core, "keda")
            steps: list[Awaitable[Any]] = [
                fleet.create_nodes(api, self.cfg.pools),
                _wait_default_service_account(core, within),
            ]
            if self.cfg.install_keda_crds:
                steps.append(crds.install(api, crds.load_crds(crds.keda_crd_dir()), within))
            if self.cfg.install_lws_crds:
                steps.append(crds.install(api, crds.load_crds(crds.lws_crd_dir()), within))
            if self.cfg.install_inference_crds:
                bases = await asyncio.to_thread(crds.gaie_crd_dir)
                steps.append(crds.install(api, crds.load_crds(bases), within))
            await asyncio.gather(*steps)
            cluster.info.setdefault("startup_marks", {})["objects_created"] = round(time.monotonic() - self.t0, 2)
            expected = sum(pool.count for pool in self.cfg.pools)
            wait = asyncio.ensure_future(fleet.wait_nodes_ready(api, expected, within))
            while not wait.done():
                for handle in watched:
                    if not handle.alive():
                        wait.cancel()
                        raise ClusterStartError(f"{handle.name} exited:\n{handle.log_tail()}")
                await asyncio.wait([wait], timeout=0.5)
            wait.result()

    # ----- processes -------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> processes.ProcessHandle:
        handle = processes.start(name, args, self.logs, die_with_parent=self.cfg.die_with_parent)
        self.handles.append(handle)
        return handle

    def _wait(self, handle: processes.ProcessHandle, url: str, ctx: ssl.SSLContext | None) -> None:
        """Poll ``url`` until it answers 200; fail early if the process exits."""
        last = ""
        while time.monotonic() < self.deadline:
            if not handle.alive():
                raise ClusterStartError(f"{handle.name} exited during startup:\n{handle.log_tail()}")
            try:
                with urllib.request.urlopen(url, context=ctx, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise ClusterStartError(f"{handle.name} not healthy at {url}: {last}\n{handle.log_tail()}")

    def _etcd_args(self, ports: Ports) -> list[str]:
        client_url = f"http://127.0.0.1:{ports.etcd_client}"
        peer_url = f"http://127.0.0.1:{ports.etcd_peer}"
        return [
            str(self.bin.etcd),
            "--name=warmscale",
            f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=warmscale={peer_url}",
            "--unsafe-no-fsync=true",
            "--quota-backend-bytes=8589934592",
            "--auto-compaction-mode=periodic",
            "--auto-compaction-retention=5m",
            "--log-level=warn",
        ]

    def _audit_args(self) -> list[str]:
        if not self.cfg.audit:
            return []
        policy = self.dir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        return [f"--audit-policy-file={policy}", f"--audit-log-path={self.logs / 'audit.log'}",
                "--audit-log-format=json", "--audit-log-maxsize=200", "--audit-log-maxbackup=1"]

    def _apiserver_args(self, p: pki.Pki, ports: Ports) -> list[str]:
        return [*self._apiserver_base_args(p, ports), *self._audit_args(), *self.cfg.extra_apiserver_args]

    def _apiserver_base_args(self, p: pki.Pki, ports: Ports) -> list[str]:
        return [
            str(self.bin.kube_apiserver),
            f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports.apiserver}",
            f"--tls-cert-file={p.serving.cert}",
            f"--tls-private-key-file={p.serving.key}",
            f"--client-ca-file={p.ca.cert}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-signing-key-file={p.sa_private_key}",
            f"--service-account-key-file={p.sa_public_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            f"--cert-dir={self.dir / 'apiserver-certs'}",
            "--enable-admission-plugins=NodeRestriction",
            f"--requestheader-client-ca-file={p.front_proxy_ca.cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={p.front_proxy_client.cert}",
            f"--proxy-client-key-file={p.front_proxy_client.key}",
            "--v=1",
        ]

    def _kcm_args(self, p: pki.Pki, ports: Ports, kc: Path) -> list[str]:
        return [
            str(self.bin.kube_controller_manager),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports.controller_manager}",
            # Each controller acts as its own ServiceAccount (system:controller:*), as in
            # kubeadm clusters; the KCM identity alone may not update nodes.
            "--use-service-account-credentials=true",
            # Client-side rate limits (default 20 qps) dominate startup with large fleets.
            "--kube-api-qps=500",
            "--kube-api-burst=1000",
            f"--root-ca-file={p.ca.cert}",
            f"--service-account-private-key-file={p.sa_private_key}",
            f"--cluster-signing-cert-file={p.ca.cert}",
            f"--cluster-signing-key-file={p.ca.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--horizontal-pod-autoscaler-sync-period={self.cfg.hpa_sync_period}",
            "--node-monitor-period=5s",
            "--node-monitor-grace-period=40s",
            f"--cert-dir={self.dir / 'kcm-certs'}",
            "--v=1",
        ]

    def _scheduler_args(self, ports: Ports, kc: Path) -> list[str]:
        return [
            str(self.bin.kube_scheduler),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports.scheduler}",
            f"--cert-dir={self.dir / 'scheduler-certs'}",
            "--kube-api-qps=500",
            "--kube-api-burst=1000",
            "--v=1",
        ]

    def _kwok_args(self, kc: Path) -> list[str]:
        configs = [KWOK_CONFIG, *sorted(STAGES_DIR.glob("*.yaml"))]
        return [
            str(self.bin.kwok),
            f"--kubeconfig={kc}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-label-selector={fleet.KWOK_LABEL}={fleet.KWOK_LABEL_VALUE}",
            *(f"--config={c}" for c in configs),
            "--node-lease-duration-seconds=40",
            f"--cidr={self.pod_cidr}",
            "--node-ip=10.0.0.1",
        ]


async def _ensure_namespace(core: client.CoreV1Api, name: str) -> None:
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    except ApiException as exc:
        if exc.status != 409:
            raise


async def _wait_default_service_account(core: client.CoreV1Api, within: float) -> None:
    """The controller-manager creates each namespace's ``default`` SA; wait for it."""
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        async with asyncio.timeout(within):
            while True:
                try:
                    await core.read_namespaced_service_account("default", "default")
                    return
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                await asyncio.sleep(0.3)
    except TimeoutError:
        raise TimeoutError("controller-manager did not create the default ServiceAccount") from None
