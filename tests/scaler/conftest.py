"""Fixtures for the scaler's gRPC tests: scripted snapshot readers, in-process servers, clients
generated from both KEDA protos, and certificates for TLS / mutual TLS."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import pytest

from tests.scaler.keda_v2_20_2 import externalscaler_pb2 as pb_v2
from tests.scaler.keda_v2_20_2 import externalscaler_pb2_grpc as grpc_v2
from warmscale.proto import externalscaler_pb2 as pb_main
from warmscale.proto import externalscaler_pb2_grpc as grpc_main
from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.server import ScalerServer
from warmscale.scaler.server_options import ServerOptions
from warmscale.scaler.store import MemoryStore, RedisStore, Store
from warmscale.signals.model import ReplicaReading, ReplicaSignal, Snapshot

# Fast trackers: a decision every 0.1 s. 32 in-flight requests per replica (the targetInflightPerReplica
# override; these tests are about the tracker, not the capacity model), cold starts not held back
# (burstConfirmSeconds 0: tests/scaler/test_policy_v2.py covers the burst confirmation).
META: dict[str, str] = {
    "endpoints": "http://engine.test:8000/metrics",
    "targetInflightPerReplica": "32",
    "burstConfirmSeconds": "0",
    "minReplicas": "1",
    "maxReplicas": "20",
    "scrapeIntervalSeconds": "0.1",
    "scrapeTimeoutSeconds": "1",
}
META_ZERO: dict[str, str] = {**META, "scaleToZero": "true", "idleWindowSeconds": "0", "minReplicas": "0"}


class ScriptedReader:
    """A :data:`~scaler.tracker.SnapshotReader` whose engines report what the test sets."""

    def __init__(self, load: float = 0.0, replicas: int = 1) -> None:
        self.load = load
        self.replicas = replicas
        self.fail: Exception | None = None
        self.delay = 0.0
        self.calls = 0
        self.configs: list[ScalerConfig] = []

    def set(self, load: float) -> None:
        self.load = load

    async def __call__(self, cfg: ScalerConfig, now: float, scope: tuple[str, str] = ('', '')) -> Snapshot:
        self.calls += 1
        self.configs.append(cfg)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        n = self.replicas
        per = self.load / n
        readings = tuple(
            ReplicaReading(f"r{i}", observed_at=now, signal=ReplicaSignal(engine="vllm", waiting=0.0, running=per))
            for i in range(n)
        )
        return Snapshot(taken_at=now, replicas=readings)


class MaxRunningReader(ScriptedReader):
    """Engines that also report how many sequences one replica runs at most (SGLang-style)."""

    def __init__(self, load: float, replicas: int, max_running: float) -> None:
        super().__init__(load=load, replicas=replicas)
        self.max_running = max_running

    async def __call__(self, cfg: ScalerConfig, now: float, scope: tuple[str, str] = ("", "")) -> Snapshot:
        from dataclasses import replace

        snap = await super().__call__(cfg, now, scope)
        return replace(snap, replicas=tuple(
            replace(r, signal=replace(r.signal, engine="sglang", max_running=self.max_running))
            for r in snap.replicas if r.signal is not None))


@dataclass
class Client:
    """A KEDA-like client built from one of the two proto versions."""

    pb: ModuleType
    stub: Any
    channel: grpc.aio.Channel
    version: str

    def ref(self, name: str = "llm", namespace: str = "default", metadata: dict[str, str] | None = None) -> Any:
        meta = META if metadata is None else metadata
        return self.pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=meta)

    async def poll(self, ref: Any, metric: str = "warmscale-desired-replicas") -> tuple[Any, Any, bool]:
        """KEDA's poll: GetMetrics then IsActive -> (value, integer value, active); both values None
        where GetMetrics answers UNAVAILABLE (a hold with no count: the HPA keeps what runs)."""
        try:
            m = await self.stub.GetMetrics(self.pb.GetMetricsRequest(scaledObjectRef=ref, metricName=metric))
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            return None, None, (await self.stub.IsActive(ref)).result
        a = await self.stub.IsActive(ref)
        v = m.metricValues[0]
        return v.metricValueFloat, v.metricValue, a.result


VERSIONS = {"main": (pb_main, grpc_main), "v2.20.2": (pb_v2, grpc_v2)}


def make_client(port: int, version: str = "main", credentials: grpc.ChannelCredentials | None = None,
                options: list[tuple[str, Any]] | None = None) -> Client:
    pb, g = VERSIONS[version]
    target = f"127.0.0.1:{port}"
    if credentials is None:
        channel = grpc.aio.insecure_channel(target, options=options)
    else:
        channel = grpc.aio.secure_channel(target, credentials, options=options)
    return Client(pb=pb, stub=g.ExternalScalerStub(channel), channel=channel, version=version)


ServerFactory = Callable[..., Awaitable[ScalerServer]]


@pytest.fixture
async def make_server() -> AsyncIterator[ServerFactory]:
    started: list[ScalerServer] = []

    async def make(reader: Any, store: Store | None = None, **options: Any) -> ScalerServer:
        opts = {"host": "127.0.0.1", "grpc_port": 0, "metrics_port": 0, "grace_seconds": 1.0, **options}
        server = ScalerServer(ServerOptions(**opts), reader, store=store)
        await server.start()
        started.append(server)
        return server

    yield make
    for s in started:
        # Bounded: graceful shutdown has its own tests; a grpc-core shutdown that never completes in
        # teardown (seen once under full-suite load) must not hang the suite.
        try:
            await asyncio.wait_for(s.stop(0.2), timeout=30)
        except TimeoutError:
            warnings.warn("scaler server did not stop within 30 s in teardown", stacklevel=1)


@pytest.fixture
async def clients() -> AsyncIterator[Callable[..., Client]]:
    made: list[Client] = []

    def make(port: int, version: str = "main", **kw: Any) -> Client:
        c = make_client(port, version, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        with contextlib.suppress(TimeoutError):  # closing a channel stuck in a TLS handshake may not end
            await asyncio.wait_for(c.channel.close(), timeout=5)


async def status_of(aw: Any) -> tuple[grpc.StatusCode, str]:
    """(status code, details) an RPC ends with: OK and "" when it succeeds."""
    try:
        await aw
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 5.0, every: float = 0.05) -> float:
    """Poll ``check`` until true; returns the seconds it took. Fails after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    while True:
        if await check():
            return loop.time() - t0
        if loop.time() - t0 > within:
            raise AssertionError(f"condition not met within {within}s")
        await asyncio.sleep(every)


# ------------------------------------------------------------------------------------------ TLS


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path  # signed by another CA
    rogue_key: Path

    def read(self, p: Path) -> bytes:
        return p.read_bytes()


def _key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject_key: Any, cn: str, issuer_key: Any, issuer_cn: str, *, ca: bool, server: bool = False) -> Any:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID

    now = dt.datetime.now(dt.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(issuer_cn))
        .public_key(subject_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                          content_commitment=False, key_encipherment=False, data_encipherment=False,
                                          key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if server:
            b = b.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.DNSName("warmscale-scaler.keda.svc"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            ]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _write(path: Path, cert: Any = None, key: Any = None) -> Path:
    from cryptography.hazmat.primitives import serialization

    if cert is not None:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    else:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return path


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca_key, rogue_ca_key = _key(), _key()
    ca = _cert(ca_key, "warmscale test CA", ca_key, "warmscale test CA", ca=True)
    s_key, c_key, r_key = _key(), _key(), _key()
    server = _cert(s_key, "warmscale-scaler", ca_key, "warmscale test CA", ca=False, server=True)
    client = _cert(c_key, "keda-operator", ca_key, "warmscale test CA", ca=False)
    rogue = _cert(r_key, "keda-operator", rogue_ca_key, "rogue CA", ca=False)
    return Pki(
        ca=_write(d / "ca.pem", cert=ca),
        server_cert=_write(d / "server.pem", cert=server),
        server_key=_write(d / "server-key.pem", key=s_key),
        client_cert=_write(d / "client.pem", cert=client),
        client_key=_write(d / "client-key.pem", key=c_key),
        rogue_cert=_write(d / "rogue.pem", cert=rogue),
        rogue_key=_write(d / "rogue-key.pem", key=r_key),
    )


@pytest.fixture(params=["memory", "redis"])  # the memory and the real-Redis store
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    redis_server = request.getfixturevalue("redis_server")
    s = RedisStore(redis_server.url, prefix=f"t{uuid.uuid4().hex[:8]}")
    yield s
    await s.close()
