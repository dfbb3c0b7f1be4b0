"""Issue 20, items 7, 11, 20 and 25 at the webhook's and the certificate manager's boundaries (real TLS
handshakes and HTTP on 127.0.0.1, bounded in count and time; the certificate pairs are real).

- 7: a corrupt or mismatched key in the webhook's Secret is refused and the previous certificate stays
  served; the manager repairs broken leaf keys and CA keys (another pair's included) once.
- 11: slow clients (no handshake, partial headers, a trickled body) are closed after the deadlines;
  connections beyond the cap are closed at once; the metrics port likewise.
- 20: malformed bodies get a 400 and one WARNING line; a review over the size limit an AdmissionReview
  allowing the pod, with a warning, counted.
- 25: a pod volume named ``warmscale-model-cache`` is never staged into.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from prometheus_client import CollectorRegistry

from warmscale.common.http_limits import ConnectionLimits, HttpMetrics, serve_metrics
from warmscale.warmpool.certs import (
    CA_SECRET,
    SCALER_SECRET,
    WEBHOOK_SECRET,
    CertSpec,
    SecretCertificate,
    desired_secrets,
    issue,
    new_ca,
)
from warmscale.warmpool.webhook import WebhookMetrics, review_response, serve

T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
SPEC = CertSpec(keda_namespace="", extra_webhook_names=("127.0.0.1",))
NS = SPEC.namespace
P = "warmscale.io/"
URI = "hf://org/model"
ON = {P + "enabled": "true", P + "model-uri": URI, P + "prestage-nodes": "1"}
IMAGE = "registry.example/warmscale:0.1.0"


def _state(now: dt.datetime = T0) -> dict[Any, Any]:
    state: dict[Any, Any] = {k: None for k in SPEC.secrets()}
    state.update(desired_secrets(state, SPEC, now).write)
    return state


def _served_serial(port: int, ca: bytes) -> int:
    import socket

    ctx = ssl.create_default_context(cadata=ca.decode())
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, ctx.wrap_socket(
            raw, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def _lister(workloads: list[dict[str, Any]]) -> Any:
    async def lister(_ns: str) -> list[dict[str, Any]]:
        return workloads

    return lister


def workload(ann: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "w", "namespace": "ns", "annotations": ann},
            "spec": {"selector": {"matchLabels": {"app": "m"}}}}


def pod_review(volumes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {"metadata": {"generateName": "m-", "labels": {"app": "m", P + "enabled": "true"}},
                           "spec": {"containers": [{"name": "engine", "image": "vllm"}]}}
    if volumes is not None:
        pod["spec"]["volumes"] = volumes
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "kind": {"kind": "Pod"}, "operation": "CREATE", "namespace": "ns",
                        "object": pod}}


# ------------------------------------------------------------------ 7: certificates


def test_manager_repairs_a_corrupt_or_mismatched_leaf_key() -> None:
    """Only a non-empty key was checked: a corrupt key, or another certificate's, stayed forever."""
    state = _state()
    other = state[(NS, SCALER_SECRET)]["tls.key"]
    for bad in (b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", other):
        broken = {**state, (NS, WEBHOOK_SECRET): {**state[(NS, WEBHOOK_SECRET)], "tls.key": bad}}
        want = desired_secrets(broken, SPEC, T0 + dt.timedelta(hours=1))
        fixed = want.write[(NS, WEBHOOK_SECRET)]
        cert = x509.load_pem_x509_certificate(fixed["tls.crt"])
        from cryptography.hazmat.primitives import serialization

        assert serialization.load_pem_private_key(fixed["tls.key"], None).public_key() == cert.public_key()
        assert [s for s, _ in want.problems] == [f"{NS}/{WEBHOOK_SECRET}"]
        assert set(want.write) == {(NS, WEBHOOK_SECRET)}  # the CA and the other leaves untouched


@pytest.mark.parametrize("ca_key", ["corrupt", "another pair"])
def test_a_broken_ca_key_gets_a_new_ca_once_and_never_raises(ca_key: str) -> None:
    """A corrupt CA key made every pass raise; another pair's key re-issued unverifiable leaves on every pass."""
    state = _state()
    bad = b"not a key" if ca_key == "corrupt" else new_ca(T0, dt.timedelta(days=10))[1]
    state[(NS, CA_SECRET)] = {**state[(NS, CA_SECRET)], "tls.key": bad}
    now = T0 + dt.timedelta(hours=1)
    want = desired_secrets(state, SPEC, now)  # no exception
    assert (f"{NS}/{CA_SECRET}") in [s for s, _ in want.problems]
    state.update(want.write)
    ca = x509.load_pem_x509_certificate(state[(NS, CA_SECRET)]["tls.crt"])
    for key in [(NS, WEBHOOK_SECRET), (NS, SCALER_SECRET)]:
        x509.load_pem_x509_certificate(state[key]["tls.crt"]).verify_directly_issued_by(ca)
    # the old CA stays trusted next to the new one, and the next pass has nothing to do
    assert len(x509.load_pem_x509_certificates(state[(NS, CA_SECRET)]["ca.crt"])) == 2
    again = desired_secrets(state, SPEC, now + dt.timedelta(minutes=1))
    assert again.write == {} and again.problems == []


async def test_a_bad_reload_keeps_the_previous_certificate(caplog: pytest.LogCaptureFixture) -> None:
    """After the Secret's key was replaced by a corrupt or mismatched one every new handshake failed."""
    state = _state()
    good = state[(NS, WEBHOOK_SECRET)]
    ca = state[(NS, CA_SECRET)]["ca.crt"]
    metrics = WebhookMetrics(CollectorRegistry())
    source = SecretCertificate(None, NS, metrics=metrics)
    assert source.offer(good["tls.crt"], good["tls.key"])
    runner = await serve(_lister([]), 0, None, None, host="127.0.0.1", context=source.context, metrics=metrics)
    port = next(iter(runner.sites)).port
    try:
        first = await asyncio.to_thread(_served_serial, port, ca)
        other_key = state[(NS, SCALER_SECRET)]["tls.key"]
        other_crt = issue(state[(NS, CA_SECRET)]["tls.crt"], state[(NS, CA_SECRET)]["tls.key"], "x", ["127.0.0.1"],
                          T0, dt.timedelta(days=1), server=True, client=False)[0]
        caplog.set_level(logging.WARNING, "warmscale.warmpool.certs")
        for crt, key in [(good["tls.crt"], b"corrupt"), (good["tls.crt"], other_key), (b"garbage", good["tls.key"]),
                         (other_crt, good["tls.key"]), (b"", b"")]:
            assert source.offer(crt, key)  # still serving
            assert metrics.certificate_refused._value.get() == 1
            assert await asyncio.to_thread(_served_serial, port, ca) == first
        assert source.refusals == 5 and source.loads == 1
        source.offer(b"", b"")  # the same bad content again: no new log line
        assert len([r for r in caplog.records if "refused" in r.getMessage()]) == 5
        # a good new pair is served at once
        renewed = desired_secrets({**state, (NS, WEBHOOK_SECRET): None}, SPEC, T0).write[(NS, WEBHOOK_SECRET)]
        assert source.offer(renewed["tls.crt"], renewed["tls.key"])
        assert metrics.certificate_refused._value.get() == 0
        assert await asyncio.to_thread(_served_serial, port, ca) == x509.load_pem_x509_certificate(
            renewed["tls.crt"]).serial_number
    finally:
        await runner.cleanup()


def test_a_bad_first_certificate_is_not_served() -> None:
    state = _state()
    source = SecretCertificate(None, NS, metrics=WebhookMetrics(CollectorRegistry()))
    assert not source.offer(state[(NS, WEBHOOK_SECRET)]["tls.crt"], state[(NS, SCALER_SECRET)]["tls.key"])


# ------------------------------------------------------------------ 20 and 25: review bodies


@pytest.fixture
async def webhook(tmp_path: Path) -> AsyncIterator[tuple[str, ssl.SSLContext, WebhookMetrics]]:
    from warmscale.warmpool.webhook import self_signed

    cert, key, ca = self_signed(["127.0.0.1"], tmp_path)
    metrics = WebhookMetrics(CollectorRegistry())
    runner = await serve(_lister([workload(ON)]), 0, str(cert), str(key), host="127.0.0.1", image=IMAGE,
                         metrics=metrics)
    try:
        port = next(iter(runner.sites)).port
        yield f"https://127.0.0.1:{port}/mutate", ssl.create_default_context(cadata=ca.decode()), metrics
    finally:
        await runner.cleanup()


def _count(metrics: WebhookMetrics, result: str) -> float:
    return float(metrics.reviews.labels(result)._value.get())


async def test_malformed_bodies_get_a_400_and_one_warning(
        webhook: tuple[str, ssl.SSLContext, WebhookMetrics], caplog: pytest.LogCaptureFixture) -> None:
    """They got a 500 and an ERROR traceback each."""
    url, ctx, metrics = webhook
    bodies = [b"{not json", b"[]", b'"text"', b"{}", b'{"request": []}', b'{"request": {"uid": 5}}', b"",
              b"\xff\xfe"]
    caplog.set_level(logging.INFO)
    async with aiohttp.ClientSession() as http:
        for body in bodies:
            caplog.clear()
            async with http.post(url, data=body, ssl=ctx, headers={"Content-Type": "application/json"}) as resp:
                assert resp.status == 400, body
                assert "error" in await resp.json()
            warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert [r.levelname for r in warnings] == ["WARNING"], body
            assert not any(r.exc_info for r in caplog.records)
        # a review with a uid but fields of the wrong shape: a proper AdmissionReview, allowed, with a warning
        for request in ({"uid": "u", "operation": "CREATE", "kind": {"kind": "Pod"}, "namespace": "ns",
                         "object": {"metadata": [], "spec": "x"}},
                        {"uid": "u", "operation": "CREATE", "kind": "Pod", "namespace": "ns", "object": []},
                        {"uid": "u", "operation": "CREATE", "kind": {"kind": "Pod"}, "namespace": 7, "object": {}}):
            caplog.clear()
            async with http.post(url, json={"request": request}, ssl=ctx) as resp:
                assert resp.status == 200
                out = (await resp.json())["response"]
            assert out["uid"] == "u" and out["allowed"] is True and "patch" not in out
            assert [r.levelname for r in caplog.records if r.levelno >= logging.WARNING] in (["WARNING"], [])
            assert not any(r.exc_info for r in caplog.records)
    assert _count(metrics, "malformed") >= len(bodies)


async def test_reviews_over_the_limit_are_answered_and_counted(
        webhook: tuple[str, ssl.SSLContext, WebhookMetrics]) -> None:
    """Over 1 MiB got a bare 413: the pod was admitted unmutated, counted nowhere."""
    url, ctx, metrics = webhook
    from warmscale.warmpool.webhook import MAX_REVIEW_BYTES

    async with aiohttp.ClientSession() as http:
        # a 2 MiB pod (fits the API server's 3 MiB request limit) is mutated as any other
        review = pod_review()
        review["request"]["object"]["metadata"]["annotations"] = {"big": "x" * (2 * 1024 * 1024)}
        async with http.post(url, json=review, ssl=ctx) as resp:
            assert resp.status == 200
            assert (await resp.json())["response"]["patchType"] == "JSONPatch"
        # over the limit: allowed, with a warning naming the limit, counted
        review["request"]["object"]["metadata"]["annotations"] = {"big": "x" * (MAX_REVIEW_BYTES + 10)}
        async with http.post(url, data=json.dumps(review).encode(), ssl=ctx,
                             headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 200
            out = (await resp.json())["response"]
        assert out["uid"] == "u-1" and out["allowed"] is True and "patch" not in out
        assert str(MAX_REVIEW_BYTES) in out["warnings"][0]
        # no uid to answer: 413, still counted
        async with http.post(url, data=b"[" + b"1," * MAX_REVIEW_BYTES + b"1]", ssl=ctx) as resp:
            assert resp.status == 413
    assert _count(metrics, "too_large") == 2 and _count(metrics, "mutated") == 1


def test_a_user_volume_of_the_reserved_name_is_never_staged_into() -> None:
    """The pod's own ``warmscale-model-cache`` volume was kept and the init container staged into it."""
    from warmscale.warmpool.webhook import CACHE_VOLUME, ENSURE_CONTAINER, SOURCE_VOLUME, answer

    for name in (CACHE_VOLUME, SOURCE_VOLUME):
        review = pod_review([{"name": name, "persistentVolumeClaim": {"claimName": "user-data"}}])
        out = answer(review, [workload(ON)], IMAGE)
        resp = out.review["response"]
        ops = json.loads(base64.b64decode(resp["patch"]))
        assert out.result == "volume_conflict" and resp["allowed"] is True
        assert [o["path"] for o in ops] == ["/spec/affinity"]  # the preference only: no mount, no init container
        assert name in resp["warnings"][0]
        assert not any(ENSURE_CONTAINER in json.dumps(o) for o in ops)
    # an ordinary pod still gets everything
    full = review_response(pod_review([{"name": "data", "emptyDir": {}}]), [workload(ON)], IMAGE)["response"]
    assert "/spec/initContainers" in [o["path"] for o in json.loads(base64.b64decode(full["patch"]))]


# ------------------------------------------------------------------ 11: slow clients


LIMITS = ConnectionLimits(max_connections=20, handshake_timeout_s=1.0, idle_timeout_s=1.0, body_timeout_s=1.0)
SLOW = 60  # slow clients per kind: 3x the cap


async def _closed_within(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, trickle: bytes,
                         within: float) -> float:
    """Trickle ``trickle`` a byte every 0.2 s until the server closes; returns when that happened."""
    start = time.monotonic()
    try:
        for i in range(int(within / 0.2) + 1):
            if reader.at_eof():
                break
            writer.write(trickle[i % len(trickle):i % len(trickle) + 1])
            await writer.drain()
            try:
                if await asyncio.wait_for(reader.read(1024), 0.2) == b"":
                    break
            except TimeoutError:
                pass
        else:
            return float("inf")
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()
    return time.monotonic() - start


async def _open(port: int, ctx: ssl.SSLContext | None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    try:
        return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=ctx,
                                                              server_hostname="127.0.0.1" if ctx else None), 5)
    except (ConnectionError, OSError, ssl.SSLError, TimeoutError):
        return None


async def _slow_clients(port: int, ctx: ssl.SSLContext | None, trickle: bytes, active: Any) -> None:
    conns = [c for c in await asyncio.gather(*(_open(port, ctx) for _ in range(SLOW))) if c is not None]
    await asyncio.sleep(0.1)
    assert active() <= LIMITS.max_connections
    held = await asyncio.gather(*(_closed_within(r, w, trickle, within=5.0) for r, w in conns))
    # every slow client is closed by the deadline (plus scheduling slack), none held on
    assert max(held) < LIMITS.idle_timeout_s + LIMITS.body_timeout_s + 1.5, sorted(held)[-5:]


async def test_slow_clients_are_bounded_on_the_webhook(tmp_path: Path) -> None:
    """3,000 slow TLS connections were held forever (48 -> 874 MiB)."""
    from warmscale.warmpool.webhook import self_signed

    cert, key, ca = self_signed(["127.0.0.1"], tmp_path)
    counts = HttpMetrics(CollectorRegistry())
    runner = await serve(_lister([]), 0, str(cert), str(key), host="127.0.0.1", limits=LIMITS, http_metrics=counts)
    site = next(iter(runner.sites))
    ctx = ssl.create_default_context(cadata=ca.decode())
    try:
        # no handshake at all: closed after the handshake deadline
        plain = [c for c in await asyncio.gather(*(_open(site.port, None) for _ in range(10))) if c]
        held = await asyncio.gather(*(_closed_within(r, w, b"\x16", within=5.0) for r, w in plain))
        assert max(held) < LIMITS.handshake_timeout_s + 1.5
        # partial headers trickled, then a body trickled after complete headers
        await _slow_clients(site.port, ctx, b"POST /mutate HTTP/1.1\r\nHost: x\r\nX-Slow: ", lambda: site.active)
        await _slow_clients(site.port, ctx, b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 99999\r\n\r\n{",
                            lambda: site.active)
        assert counts.refused.labels("webhook", "limit")._value.get() >= SLOW - LIMITS.max_connections
        # and the webhook still answers
        async with aiohttp.ClientSession() as http, http.post(
                f"https://127.0.0.1:{site.port}/mutate", json=pod_review(), ssl=ctx) as resp:
            assert resp.status == 200 and (await resp.json())["response"]["allowed"]
        assert site.active <= 1
    finally:
        await runner.cleanup()


async def test_slow_clients_are_bounded_on_the_metrics_port() -> None:
    """2,000 slow connections to the metrics port were held indefinitely."""
    counts = HttpMetrics(CollectorRegistry())
    runner, port = await serve_metrics(counts.registry, "127.0.0.1", 0, limits=LIMITS, metrics=counts)
    site = next(iter(runner.sites))
    try:
        await _slow_clients(port, None, b"GET /metrics HTTP/1.1\r\nX-Slow: ", lambda: site.active)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
                assert resp.status == 200 and "warmscale_http_connections_refused_total" in await resp.text()
            async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:  # the liveness probe's path
                assert resp.status == 200
    finally:
        await runner.cleanup()
