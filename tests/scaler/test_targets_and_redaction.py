"""--allow-targets rules (pure), ScaledObjectRef names, and the one redaction function at its boundaries."""

from __future__ import annotations

import ipaddress
import json
import logging

import pytest

from warmscale.logs import JsonFormatter
from warmscale.scaler.targets import AllowTargets, invalid_ref, ip, url_host
from warmscale.signals.redact import redact, redact_value
from warmscale.warmpool.kube import EventRecorder


def test_allow_targets_parse_and_membership() -> None:
    a = AllowTargets.parse(" 10.0.0.0/8, 192.168.1.5 ,fd00::/8, prometheus.monitoring.svc ")
    assert a.hostnames == ("prometheus.monitoring.svc",)
    assert a.allows("10.1.2.3") and a.allows("192.168.1.5") and a.allows("fd00::1")
    assert a.allows("::ffff:10.0.0.1")  # IPv4-mapped IPv6 is the IPv4 address
    assert not a.allows("192.168.1.6") and not a.allows("169.254.169.254") and not a.allows("not-an-ip")
    prom = ipaddress.ip_address("172.16.0.9")
    assert a.allows("172.16.0.9", [prom])  # an address of an allowed host name
    assert a.refused(["10.0.0.1", "8.8.8.8"]) == ["8.8.8.8"]


@pytest.mark.parametrize("spec", ["", " , ", "10.0.0.0/33", "bad host!", "http://x"])
def test_allow_targets_bad_flag(spec: str) -> None:
    with pytest.raises(ValueError):
        AllowTargets.parse(spec)


def test_url_host_and_ip() -> None:
    assert url_host("http://u:p@[::1]:80/m") == ("http", "::1")
    assert url_host("unix:///tmp/r.sock") == ("unix", None)
    assert ip("[fe80::1%eth0]") == ipaddress.ip_address("fe80::1")


def test_scaled_object_ref_names() -> None:
    assert invalid_ref("llm", "chat-1.v2") is None
    assert invalid_ref("", "x") is not None and invalid_ref("LLM", "x") is not None
    bad = invalid_ref("a", "http://a:b@c")
    assert bad is not None and bad[0] == "name"
    assert invalid_ref("a", "x" * 300) is not None


@pytest.mark.parametrize(("raw", "shown"), [
    ("http://admin:pw@prom:9090/x", "http://***@prom:9090/x"),
    ("redis://:s3cret@redis:6379/0", "redis://***@redis:6379/0"),
    ("s3://b/k?X-Amz-Credential=AK&X-Amz-Signature=ff&x=1", "s3://b/k?X-Amz-Credential=***&X-Amz-Signature=***&x=1"),
    ("hf://org/m?token=hf_abc", "hf://org/m?token=***"),
    ("https://h/p?apikey=1&api_key=2&access_token=3&password=4&secret=5&sig=6&signature=7&key=8",
     "https://h/p?apikey=***&api_key=***&access_token=***&password=***&secret=***&sig=***&signature=***&key=***"),
    ("http://h/p?keyword=ok&monkey=ok", "http://h/p?keyword=ok&monkey=ok"),
    ("plain text, a@b and x=y", "plain text, a@b and x=y"),
])
def test_redact(raw: str, shown: str) -> None:
    assert redact(raw) == shown
    assert redact(redact(raw)) == shown


def test_log_lines_are_redacted() -> None:
    rec = logging.LogRecord("t", logging.WARNING, __file__, 1, "failed on %s", ("http://u:pw@h/x",), None)
    rec.error = "prometheus http://u:pw2@h?token=t0k"
    rec.nested = {"urls": ["http://u:pw3@h"]}
    line = JsonFormatter().format(rec)
    assert all(s not in line for s in ("u:pw@", "pw2", "pw3", "t0k")), line
    assert json.loads(line)["error"] == "prometheus http://***@h?token=***"
    assert redact_value({"a": ("http://x:y@z",)}) == {"a": ("http://***@z",)}


async def test_events_are_redacted() -> None:
    sent: list[dict[str, object]] = []

    class Core:
        async def create_namespaced_event(self, namespace: str, body: dict[str, object]) -> None:
            sent.append(body)

    rec = EventRecorder(Core())
    await rec.emit({"uid": "1", "name": "w", "namespace": "ns", "kind": "Deployment"}, "Warning", "StagingFailed",
                   "staging s3://b/m?X-Amz-Signature=abc on node n failed; https://u:p@hub/x")
    assert sent and "abc" not in str(sent[0]["message"]) and "u:p@" not in str(sent[0]["message"])


def test_allow_targets_private_keyword() -> None:
    """``private``: the ranges pod and service networks come from (the shipped install's value)."""
    a = AllowTargets.parse("private, prometheus.example.com")
    assert a.hostnames == ("prometheus.example.com",)
    for ok in ("10.96.0.10", "172.20.1.2", "192.168.3.4", "100.64.0.5", "fd12::1"):
        assert a.allows(ok), ok
    for bad in ("127.0.0.1", "::1", "169.254.169.254", "fe80::1", "8.8.8.8", "0.0.0.0", "224.0.0.1", "2001:db8::1"):
        assert not a.allows(bad), bad
