# ruff: noqa: RUF001  (the hostile characters are the point)
"""Issue 10: hostile ``warmscale.io/*`` annotations and model URIs (hypothesis, bounded budget).

Every input is accepted, or rejected with a ConfigError (AnnotationError) naming the offending key -
never another exception. What is accepted then goes through the controller's pure plan and the
manifests it would create without an exception, and every name derived from it is a valid Kubernetes
name; an accepted URI's cache entry lies directly under the cache root."""

from __future__ import annotations

import posixpath
import re
from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.warmpool.helpers import node, workload
from warmscale.scaler.config import ConfigError
from warmscale.warmpool import objects as ob
from warmscale.warmpool.annotations import KEYS, PREFIX, AnnotationError, parse_annotations
from warmscale.warmpool.model_uri import CacheKey, ModelURI, ModelURIError, cache_dir, parse_model_uri, staged_label_key
from warmscale.warmpool.planning import plan

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
NAMES = [PREFIX + k.name for k in KEYS]
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
SETTINGS = settings(max_examples=400, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

HOSTILE = [
    "", " ", "true", "TRUE", "yes", "0", "1", "-1", "2", "10000", "10001", "9" * 40, str(2**63), "1e308", "5e-324",
    "nan", "inf", "-inf", "²", "١٠", "１０", "1_0", "0x10", "16Gi", "1Ei", "1e30", "0.5", "-16Gi", "3Mi ",
    "never", "allowed", "allowed: ", "allowed: mon-fri 22:00-06:00", "allowed: xyz", "tz=Mars/Base; default=1",
    "tz=Europe/Berlin; mon-fri 08:00-20:00=4; default=1", "mon 25:00-26:00=1", "fri 22:00-02:00=3", "*=1",
    "daily 00:00-24:00=2", "sun-sat 10:00-10:00=1", ";;;", "default=", "tz=", "tz=../../etc/passwd",
    "/", "/etc", "/proc/self", "/var/lib/kubelet", "/var/lib/warmscale/models", "/var/lib/warmscale/../../etc",
    "relative/path", "/a\x00b", "/mnt/models", "//var//lib//warmscale", "/var/lib/warmscale/models/",
    "{}", "[]", "{\"a\": 1}", "{\"a\": \"b\"}", "{\"\": \"\"}", "{", "null", "\"s\"", "{\"a\": {\"b\": \"c\"}}",
    "host:9090", "host:0", "host:65536", "host:99999", ":9090", "host:", "[::1]:9090", "host:१२",
    "a" * 70000, "\u202e", "\x00", "0" * 64, "A" * 64, "g" * 64, "0" * 63,
    "hf://org/name@main", "hf://org/name", "hf://../x@r", "hf://org/name@..", "hf://org/na me@r",
    "s3://bucket/prefix", "s3://B/x", "s3://bu/../../x", "pvc://claim/path", "pvc://Claim/x", "pvc://c/../x",
    "file:///models/llama", "file:///", "file://relative", "file:///a/../../etc", "ftp://x/y", "hf://org/name@r?x=1",
]


def _value() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(HOSTILE), st.text(max_size=40),
                     st.integers(min_value=-(2**70), max_value=2**70).map(str),
                     st.floats(allow_nan=True, allow_infinity=True).map(repr))


annotations = st.dictionaries(
    st.one_of(st.sampled_from(NAMES), st.sampled_from([PREFIX + "bogus", PREFIX, PREFIX + "status", "other/key", ""]),
              st.text(max_size=20).map(lambda s: PREFIX + s)),
    _value(), max_size=8,
).map(lambda d: {PREFIX + "enabled": "true", **d})


def _check_names(cfg_uri: object, wl_name: str) -> None:
    if cfg_uri is None:
        return
    assert isinstance(cfg_uri, ModelURI)
    ck = CacheKey(cfg_uri, "ns")
    key = staged_label_key(ck)
    assert LABEL_KEY.match(key), key
    assert DNS1123.match(ob.stage_job_name(ck, "node-1"))
    assert DNS1123.match(ob.evict_job_name(key, "node-1"))


@SETTINGS
@given(annotations)
def test_annotations_accepted_or_config_error_naming_the_key(ann: dict[str, str]) -> None:
    try:
        cfg = parse_annotations(ann)
    except AnnotationError as exc:
        assert isinstance(exc, ConfigError)
        assert exc.key.startswith(PREFIX) and (exc.key in ann or exc.key in NAMES), exc.key
        assert str(exc).startswith(exc.key)
        # the controller's plan turns it into an Event naming the key, and changes nothing
        p = plan(workload(ann), [node("h1")], [], [], None, NOW)
        assert p.error is not None and p.events and p.events[0].message.startswith(exc.key)
        assert not (p.create_stage_jobs or p.create_placeholders or p.create_prepull or p.label_nodes)
        return
    # accepted: the pure plan and every manifest it would create are built without an exception
    wl = workload(ann)
    p = plan(wl, [node("h1"), node("h2")], [], [], None, NOW)
    if p.error is not None:  # only a refused cache root is an error of an accepted annotation set
        assert p.error.key == PREFIX + "cache-root" and p.events[0].reason == "CacheRootRefused"
        return
    assert p.config is not None
    _check_names(cfg.model_uri, wl.name)
    for n in p.create_stage_jobs:
        ob.stage_job(wl, cfg, n, "img")
    for i in p.create_placeholders:
        ob.placeholder_pod(wl, i, p.pinned)
    if p.scaledobject_body is not None:
        assert p.scaledobject_body["spec"]["maxReplicaCount"] == cfg.max_replicas


def _uri_text() -> st.SearchStrategy[str]:
    seg = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
    ascii_seg = st.text(alphabet="abcAZ09-_.~/@?#%:\\ \t", max_size=16)
    return st.one_of(
        st.sampled_from([h for h in HOSTILE if "://" in h]),
        st.builds(lambda s, a, b: f"{s}://{a}{b}", st.sampled_from(["hf", "s3", "pvc", "file", "HF", "http", ""]),
                  st.one_of(ascii_seg, seg), st.one_of(ascii_seg, seg)),
        st.text(max_size=60),
    )


@SETTINGS
@given(_uri_text())
def test_model_uris_parse_or_model_uri_error(raw: str) -> None:
    try:
        uri = parse_model_uri(raw)
    except ModelURIError:
        try:
            parse_annotations({PREFIX + "model-uri": raw})
        except AnnotationError as exc:
            assert exc.key == PREFIX + "model-uri"
        else:  # parse_annotations strips nothing parse_model_uri does not
            raise AssertionError(f"{raw!r} rejected alone but accepted as an annotation")
        return
    assert parse_model_uri(uri.canonical) == uri  # canonical form round-trips
    for root in ("/var/lib/warmscale/models", "/var/lib/warmscale"):
        d = cache_dir(root, CacheKey(uri, "ns"))
        assert posixpath.dirname(d) == root and ".." not in d.split("/") and "\x00" not in d
    _check_names(uri, "llm")


def test_numbers_are_ascii_digits_only() -> None:
    for key, value in [("standby", "١٠"), ("standby", "１０"), ("prestage-nodes", "٣"), ("max-replicas", "²"),
                       ("min-ready", "mon-fri ٠٨:00-20:00=4"), ("min-ready", "default=١"),
                       ("cache-budget", "١٦Gi"), ("model-size", "１Gi")]:
        extra = {PREFIX + "model-uri": "hf://org/m@r"} if key == "model-size" else {}
        try:
            parse_annotations({PREFIX + "enabled": "true", PREFIX + key: value, **extra})
        except AnnotationError as exc:
            assert exc.key == PREFIX + key
        else:
            raise AssertionError(f"{key}={value!r} accepted")
