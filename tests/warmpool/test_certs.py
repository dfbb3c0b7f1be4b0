"""Self-managed certificates: issuance, rotation before expiry, the CA bundle across a CA rotation,
and the scaler serving a rotated certificate without a restart (real gRPC, real TLS handshakes)."""

from __future__ import annotations

import datetime as dt
import ssl
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509

from warmscale.warmpool.certs import (
    CA_SECRET,
    KEDA_CLIENT_SECRET,
    SCALER_SECRET,
    WEBHOOK_SECRET,
    CertSpec,
    desired_secrets,
    next_check,
)

T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
SPEC = CertSpec(leaf_validity=dt.timedelta(days=90), ca_validity=dt.timedelta(days=3650))
NS = "warmscale"


def _apply(current: dict[Any, Any], now: dt.datetime, spec: CertSpec = SPEC) -> tuple[dict[Any, Any], Any]:
    want = desired_secrets(current, spec, now)
    out = dict(current)
    out.update(want.write)
    return out, want


def _cert(data: dict[str, bytes]) -> x509.Certificate:
    return x509.load_pem_x509_certificate(data["tls.crt"])


def test_first_issue_then_nothing_to_do() -> None:
    state, want = _apply({k: None for k in SPEC.secrets()}, T0)
    assert set(want.write) == {(NS, CA_SECRET), (NS, WEBHOOK_SECRET), (NS, SCALER_SECRET), ("keda", KEDA_CLIENT_SECRET)}
    ca = _cert(state[(NS, CA_SECRET)])
    for key in [(NS, WEBHOOK_SECRET), (NS, SCALER_SECRET), ("keda", KEDA_CLIENT_SECRET)]:
        leaf = _cert(state[key])
        leaf.verify_directly_issued_by(ca)
        assert state[key]["ca.crt"] == want.ca_bundle
    sans = _cert(state[(NS, SCALER_SECRET)]).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert "warmscale.warmscale.svc" in sans.value.get_values_for_type(x509.DNSName)
    webhook = _cert(state[(NS, WEBHOOK_SECRET)]).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert "warmscale-webhook.warmscale.svc" in webhook.value.get_values_for_type(x509.DNSName)
    client = _cert(state[("keda", KEDA_CLIENT_SECRET)])
    eku = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH in eku
    # a day later: nothing to write (idempotent)
    _, again = _apply(state, T0 + dt.timedelta(days=1))
    assert again.write == {}
    # the next check is when the leaves are due (60 of 90 days)
    assert abs(next_check(state, T0, at_most=dt.timedelta(days=365)) - dt.timedelta(days=60).total_seconds()) < 600


def test_leaves_rotate_before_expiry_under_the_same_ca() -> None:
    state, _ = _apply({k: None for k in SPEC.secrets()}, T0)
    later = T0 + dt.timedelta(days=61)
    state2, want = _apply(state, later)
    assert (NS, CA_SECRET) not in want.write
    assert {(NS, WEBHOOK_SECRET), (NS, SCALER_SECRET), ("keda", KEDA_CLIENT_SECRET)} <= set(want.write)
    for key in want.write:
        assert _cert(state2[key]).not_valid_before_utc > T0


def test_ca_rotation_keeps_the_old_ca_in_the_bundle() -> None:
    spec = CertSpec(leaf_validity=dt.timedelta(days=30), ca_validity=dt.timedelta(days=90))
    state, _ = _apply({k: None for k in spec.secrets()}, T0, spec)
    old_ca = _cert(state[(NS, CA_SECRET)])
    state2, want = _apply(state, T0 + dt.timedelta(days=61), spec)
    new_ca = _cert(state2[(NS, CA_SECRET)])
    assert new_ca.serial_number != old_ca.serial_number
    bundle = x509.load_pem_x509_certificates(want.ca_bundle)
    assert [c.serial_number for c in bundle] == [new_ca.serial_number, old_ca.serial_number]
    for key in [(NS, WEBHOOK_SECRET), (NS, SCALER_SECRET), ("keda", KEDA_CLIENT_SECRET)]:
        _cert(state2[key]).verify_directly_issued_by(new_ca)  # every leaf re-issued by the new CA
    # once the old CA has expired it leaves the bundle
    _, want3 = _apply(state2, T0 + dt.timedelta(days=91), spec)
    assert len(x509.load_pem_x509_certificates(want3.ca_bundle)) == 1


def test_no_keda_namespace_no_client_certificate() -> None:
    spec = CertSpec(keda_namespace="")
    _, want = _apply({k: None for k in spec.secrets()}, T0, spec)
    assert not any(name == KEDA_CLIENT_SECRET for _, name in want.write)


def _write(d: Path, data: dict[str, bytes]) -> None:
    for k, v in data.items():
        (d / k).write_bytes(v)


@pytest.mark.parametrize("rotate_ca", [False, True])
async def test_scaler_serves_a_rotated_certificate_without_restart(tmp_path: Path, rotate_ca: bool) -> None:
    """The scaler's mTLS files are rewritten (as the kubelet does for a mounted Secret); new
    connections get the new certificate, KEDA's client certificate from the same CA is accepted."""
    from tests.scaler.conftest import ScriptedReader
    from warmscale.scaler.server import ScalerServer
    from warmscale.scaler.server_options import ServerOptions
    from warmscale.scaler.store import MemoryStore

    now = dt.datetime.now(dt.UTC)
    spec = CertSpec(leaf_validity=dt.timedelta(days=8), ca_validity=dt.timedelta(days=9),
                    extra_scaler_names=("localhost",))
    # issued in the past, so that now the leaves (and, 7 days back, the CA too) are due for renewal
    issued = now - dt.timedelta(days=7 if rotate_ca else 5.5)
    state, _ = _apply({k: None for k in spec.secrets()}, issued, spec)
    srv_dir, cli_dir = tmp_path / "scaler", tmp_path / "keda"
    srv_dir.mkdir()
    cli_dir.mkdir()
    _write(srv_dir, state[(NS, SCALER_SECRET)])
    _write(cli_dir, state[("keda", KEDA_CLIENT_SECRET)])
    opts = ServerOptions(host="127.0.0.1", grpc_port=0, metrics_port=0, tls_cert=str(srv_dir / "tls.crt"),
                         tls_key=str(srv_dir / "tls.key"), tls_client_ca=str(srv_dir / "ca.crt"))
    server = ScalerServer(opts, ScriptedReader(load=1.0), store=MemoryStore())
    await server.start()
    try:
        def served_serial() -> int:
            """The certificate a new TLS handshake (as KEDA: client certificate, h2) is served."""
            import socket

            ctx = ssl.create_default_context(cafile=str(cli_dir / "ca.crt"))
            ctx.load_cert_chain(cli_dir / "tls.crt", cli_dir / "tls.key")
            ctx.set_alpn_protocols(["h2"])
            with socket.create_connection(("127.0.0.1", server.grpc_port), timeout=5) as raw, \
                    ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                der = tls.getpeercert(binary_form=True)
            assert der is not None
            return x509.load_der_x509_certificate(der).serial_number

        async def health() -> None:
            from grpc_health.v1 import health_pb2, health_pb2_grpc

            creds = grpc.ssl_channel_credentials(root_certificates=(cli_dir / "ca.crt").read_bytes(),
                                                 private_key=(cli_dir / "tls.key").read_bytes(),
                                                 certificate_chain=(cli_dir / "tls.crt").read_bytes())
            async with grpc.aio.secure_channel(f"localhost:{server.grpc_port}", creds) as ch:
                resp = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
                assert resp.status == health_pb2.HealthCheckResponse.SERVING

        import asyncio

        first = await asyncio.to_thread(served_serial)
        assert first == _cert(state[(NS, SCALER_SECRET)]).serial_number
        await health()
        state2, want = _apply(state, now, spec)
        assert (NS, SCALER_SECRET) in want.write and ((NS, CA_SECRET) in want.write) == rotate_ca
        _write(srv_dir, state2[(NS, SCALER_SECRET)])
        _write(cli_dir, state2[("keda", KEDA_CLIENT_SECRET)])
        await asyncio.sleep(1.1)  # the reload check runs at most once a second
        await asyncio.to_thread(served_serial)  # this handshake triggers the reload
        second = await asyncio.to_thread(served_serial)
        assert second == _cert(state2[(NS, SCALER_SECRET)]).serial_number != first
        await health()  # KEDA with the new client certificate (and the new CA bundle)
    finally:
        await server.stop(0)


@pytest.mark.cluster
async def test_rotation_through_the_api_reaches_the_webhook_and_its_configuration(
    k8s_admin: Any, k8s_namespace: str
) -> None:
    """CertManager against the real API server with 12 s leaves (renewed after 8 s): the Secrets are
    rewritten, the webhook configuration's caBundle follows, and the webhook server (SecretCertificate,
    as every controller replica runs it) serves the renewed certificate to new handshakes without a
    restart."""
    import asyncio
    import socket

    from kubernetes_asyncio import client

    from tests.cluster.fixtures import wait_for
    from warmscale.warmpool.certs import CertManager, SecretCertificate
    from warmscale.warmpool.webhook import serve, webhook_configuration

    ns = k8s_namespace
    adm = client.AdmissionregistrationV1Api(k8s_admin)
    name = f"warmscale-rotation-{ns}"
    spec = CertSpec(namespace=ns, keda_namespace="", leaf_validity=dt.timedelta(seconds=12),
                    extra_webhook_names=("127.0.0.1",))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = webhook_configuration(name, b"", url=f"https://127.0.0.1:{port}/mutate",
                                namespace_selector={"matchLabels": {"kubernetes.io/metadata.name": ns}})
    del cfg["webhooks"][0]["clientConfig"]["caBundle"]
    await adm.create_mutating_webhook_configuration(cfg)
    manager = CertManager(k8s_admin, spec, webhook_configuration=name)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(manager.run(stop))]
    source = SecretCertificate(k8s_admin, ns, every_s=1.0)
    runner = None
    try:
        assert await asyncio.wait_for(source.wait_ready(stop), 30)

        async def lister(_ns: str) -> list[Any]:
            return []

        runner = await serve(lister, port, None, None, host="127.0.0.1", context=source.context)
        tasks.append(asyncio.create_task(source.run(stop)))

        def served() -> int:
            pem = ssl.get_server_certificate(("127.0.0.1", port))
            return x509.load_pem_x509_certificate(pem.encode()).serial_number

        async def ca_bundle() -> bytes:
            hook = await adm.read_mutating_webhook_configuration(name)
            import base64

            return base64.b64decode(hook.webhooks[0].client_config.ca_bundle or "")

        first = await asyncio.to_thread(served)
        assert await wait_for(ca_bundle, within=10, what="caBundle patched")

        async def renewed() -> int | None:
            serial = await asyncio.to_thread(served)
            return serial if serial != first else None

        second = await wait_for(renewed, within=30, what="the webhook serving the renewed certificate")
        assert second != first and source.loads >= 2 and manager.rotations >= 2
        # the renewed leaf is issued by the CA the webhook configuration trusts
        bundle = x509.load_pem_x509_certificates(await ca_bundle())
        pem = await asyncio.to_thread(ssl.get_server_certificate, ("127.0.0.1", port))
        x509.load_pem_x509_certificate(pem.encode()).verify_directly_issued_by(bundle[0])
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if runner is not None:
            await runner.cleanup()
        await adm.delete_mutating_webhook_configuration(name)
