"""The weight cache under attack and under faults (issue 20: items 1, 2, 3, 5, 6, 18, 19).

Host paths as model sources, one tenant's bytes offered to another, eviction across tenants, a
trickling download holding the node, truncated and unverifiable downloads, broken listings, a full
disk, and a token following a redirect. Downloads go to a Hub stand-in on 127.0.0.1
(:mod:`tests.faults.hubserver`); the stager runs through its CLI entry (``warmscale stage``'s
``run``), so an exception escaping it fails the test like the traceback it would print.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults import hubserver as hs
from tests.warmpool.helpers import node, workload
from warmscale.warmpool import objects as ob
from warmscale.warmpool import stager
from warmscale.warmpool.annotations import AnnotationError, WarmConfig, parse_annotations
from warmscale.warmpool.model_uri import CacheKey, ModelURI, parse_model_uri, staged_label_key
from warmscale.warmpool.planning import plan
from warmscale.warmpool.webhook import config_for, review_response

P = "warmscale.io/"
HOST_PATHS = ("/etc", "/var/lib/kubelet/pods", "/root/.ssh", "/proc/1/root/etc", "/etc/hostname", "/",
              "/var/lib/kubelet", "/home/user/.kube", "/run/secrets")


def run(*argv: str) -> int:
    """The stager's exit code; a flag value argparse refuses (named in its message) is exit 2 too."""
    parser = argparse.ArgumentParser()
    stager.configure(parser)
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    return stager.run(args)


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[hs.Hub]:
    with hs.serve() as h:
        monkeypatch.setenv("HF_ENDPOINT", h.base)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setattr(stager, "BACKOFF_FIRST_S", 0.01, raising=False)  # retries stay, waits shrink
        yield h


def nothing_ready(root: Path) -> bool:
    return not any((d / stager.READY).exists() for d in root.iterdir()) if root.exists() else True


# ------------------------------------------------------------------ 1: host paths as model sources


@pytest.mark.parametrize("path", HOST_PATHS)
def test_host_system_paths_are_never_a_model_source(path: str) -> None:
    """The annotation is invalid (an Event naming model-uri, nothing created) wherever it is checked."""
    raw = "file://" + path if path != "/" else "file:///"
    with pytest.raises(AnnotationError) as exc:
        parse_annotations({P + "enabled": "true", P + "model-uri": raw})
    assert exc.value.key == P + "model-uri"
    wl = workload({P + "enabled": "true", P + "model-uri": raw, P + "prestage-nodes": "1", P + "standby": "1"})
    p = plan(wl, [node("h1")], [], [], None, _now(), file_sources=["/"])
    assert p.error is not None and p.events[0].reason == "InvalidAnnotation"
    assert not p.create_stage_jobs and not p.create_placeholders and not p.create_prepull


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def test_file_sources_only_under_the_allow_list_and_never_in_a_cache_root() -> None:
    ann = {P + "enabled": "true", P + "prestage-nodes": "1", P + "standby": "1", P + "model-uri": "file:///mnt/models/llama"}
    wl = workload(ann)
    refused = plan(wl, [node("h1")], [], [], None, _now())  # the default: no host path may be a source
    assert refused.events[0].reason == "ModelSourceRefused" and "--file-source-allow" in refused.events[0].message
    assert not refused.create_stage_jobs and not refused.create_prepull and not refused.create_placeholders
    ok = plan(wl, [node("h1")], [], [], None, _now(), file_sources=["/mnt/models"])
    assert ok.error is None and ok.create_stage_jobs == ["h1"]
    elsewhere = plan(wl, [node("h1")], [], [], None, _now(), file_sources=["/srv"])
    assert elsewhere.events[0].reason == "ModelSourceRefused"
    # another workload's cached copies are not a source either, whatever the allow-list says
    inside = workload({**ann, P + "model-uri": "file:///var/lib/warmscale/models/ws-pvc-0123456789abcdef01234567"})
    p = plan(inside, [node("h1")], [], [], None, _now(), file_sources=["/var/lib"])
    assert p.events[0].reason == "ModelSourceRefused" and "cache root" in p.events[0].message


def test_webhook_mounts_no_refused_source() -> None:
    def wl(uri: str) -> dict[str, Any]:
        return {"metadata": {"name": "llm", "annotations": {P + "enabled": "true", P + "model-uri": uri}},
                "spec": {"selector": {"matchLabels": {"app": "llm"}}}}

    pod = {"metadata": {"labels": {"app": "llm"}}, "spec": {"containers": [{"name": "e", "image": "x"}]}}
    review = {"request": {"uid": "u", "operation": "CREATE", "kind": {"kind": "Pod"}, "namespace": "a", "object": pod}}
    for uri in ("file:///mnt/models/llama", "file:///var/lib/warmscale/models/x"):
        assert config_for(pod, [wl(uri)], file_sources=["/var/lib"] if "warmscale" in uri else ()) is None
        assert "patch" not in review_response(review, [wl(uri)], image="img")["response"]
    assert config_for(pod, [wl("file:///mnt/models/llama")], file_sources=["/mnt/models"]) is not None
    out = review_response(review, [wl("file:///mnt/models/llama")], image="img", file_sources=["/mnt/models"])
    assert "patch" in out["response"]


def test_the_allow_list_flag_itself_refuses_system_paths() -> None:
    from warmscale.warmpool.cache_roots import parse_file_source_allow

    assert parse_file_source_allow("") == ()  # the default: no file:// source at all
    assert parse_file_source_allow("/mnt/models/, /srv/weights") == ("/mnt/models", "/srv/weights")
    for bad in ("/", "/var", "/etc/models", "/home", "relative", "/mnt/../etc"):
        with pytest.raises(ValueError, match="--file-source-allow"):
            parse_file_source_allow(bad)


def test_a_pod_volume_under_the_caches_name_is_not_staged_into() -> None:
    """Issue 20 item 25: the pod's own `warmscale-model-cache` (here a hostPath on /etc) would have become
    the init container's read-write cache; the webhook now leaves such a pod's volumes and containers alone."""
    from warmscale.warmpool.webhook import CACHE_VOLUME, engine_patch

    cfg = parse_annotations({P + "enabled": "true", P + "model-uri": "hf://org/m@r"})
    pod = {"metadata": {"namespace": "a"}, "spec": {
        "containers": [{"name": "e"}], "volumes": [{"name": CACHE_VOLUME, "hostPath": {"path": "/etc"}}]}}
    assert engine_patch(pod, cfg, "img", "a") == []
    # the volume the webhook itself added (a pod admitted twice) is not a clash
    mine = engine_patch({"metadata": {}, "spec": {"containers": [{"name": "e"}]}}, cfg, "img", "a")
    [vols] = [op["value"] for op in mine if op["path"] == "/spec/volumes"]
    again = {"metadata": {}, "spec": {"containers": [{"name": "e"}], "volumes": vols}}
    assert any(op["path"] == "/spec/initContainers" for op in engine_patch(again, cfg, "img", "a"))


@pytest.mark.parametrize("path", ["/etc", "/proc/1/root/etc", "/var/lib/kubelet/pods"])
def test_no_job_or_pod_manifest_mounts_a_system_path(path: str) -> None:
    """Even a config that skipped the checks (built by hand) gets no hostPath on a system path."""
    cfg = WarmConfig(enabled=True, prestage_nodes=1, model_uri=ModelURI("file", "", path))
    with pytest.raises(ValueError, match="system path"):
        ob.stage_job(workload({P + "enabled": "true"}), cfg, "h1", "img")
    bad_root = WarmConfig(enabled=True, model_uri=parse_model_uri("hf://org/m@r"), cache_root=path)
    with pytest.raises(ValueError, match="system path"):
        ob.stager_volumes(bad_root, "c", "s", "/cache")


def test_stager_refuses_host_paths_itself(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    for path in ("/etc/hostname", "/proc/1/root/etc/hostname"):
        assert run("--uri", f"file://{path}", "--cache-root", str(root)) == 2
        with pytest.raises(stager.RootError):
            stager.stage(ModelURI("file", "", path), root)  # past the parser: still refused
    # a link from an innocent-looking source to a system path is refused once resolved
    (tmp_path / "innocent").symlink_to("/etc")
    with pytest.raises(stager.RootError):
        stager.stage(ModelURI("file", "", str(tmp_path / "innocent")), root)
    # and so is a source overlapping the cache root (other entries would be copied)
    root.mkdir(exist_ok=True)
    assert run("--uri", f"file://{root}", "--cache-root", str(root)) == 2
    assert nothing_ready(root)


# ------------------------------------------------------------------ 2: one tenant's bytes never another's


def test_pvc_of_another_namespace_is_not_served(tmp_path: Path) -> None:
    """Namespace b staged pvc://models/llama from b's claim; a's init container must copy a's claim."""
    root = tmp_path / "cache"
    for ns, content in (("a", b"tenant A weights"), ("b", b"tenant B weights")):
        (tmp_path / f"pvc-{ns}" / "models" / "llama").mkdir(parents=True)
        (tmp_path / f"pvc-{ns}" / "models" / "llama" / "w.bin").write_bytes(content)
    size = str(len(b"tenant B weights"))  # model-size set and equal: it used to be shared anyway
    base = ["--uri", "pvc://models/llama", "--cache-root", str(root), "--size", size]
    assert run(*base, "--namespace", "b", "--pvc-root", str(tmp_path / "pvc-b")) == 0
    assert run(*base, "--namespace", "a", "--pvc-root", str(tmp_path / "pvc-a"), "--ensure") == 0
    uri = parse_model_uri("pvc://models/llama")
    got = {ns: (Path(stager.cache_dir(str(root.resolve()), CacheKey(uri, ns))) / "data" / "w.bin").read_bytes()
           for ns in ("a", "b")}
    assert got == {"a": b"tenant A weights", "b": b"tenant B weights"}
    # the planner of a does not take b's node label for its own copy
    wl_a = workload({P + "enabled": "true", P + "prestage-nodes": "1", P + "standby": "0",
                     P + "model-uri": "pvc://models/llama", P + "model-size": size}, namespace="a")
    staged_by_b = node("h1")
    staged_by_b["metadata"]["labels"][staged_label_key(CacheKey(uri, "b"))] = "true"
    p = plan(wl_a, [staged_by_b], [], [], None, _now())
    assert p.staged_nodes == [] and p.create_stage_jobs == ["h1"]


@pytest.mark.parametrize("uri", ["hf://org/m@main", "s3://bucket/llama", "pvc://models/llama"])
def test_identity_names_the_namespace_unless_the_digest_pins_the_bytes(uri: str) -> None:
    u = parse_model_uri(uri)
    a, b = CacheKey(u, "a"), CacheKey(u, "b")
    assert a.cache_name != b.cache_name and staged_label_key(a) != staged_label_key(b)
    assert ob.stage_job_name(a, "h1") != ob.stage_job_name(b, "h1")
    sha = "ab" * 32
    assert CacheKey(u, "a", sha).cache_name == CacheKey(u, "b", sha).cache_name  # same verified bytes: shared
    assert CacheKey(u, "a", sha).cache_name != CacheKey(u, "a", "cd" * 32).cache_name
    # what the webhook mounts follows the same identity as what the Job stages
    from warmscale.warmpool.webhook import engine_patch, model_path

    cfg = parse_annotations({P + "enabled": "true", P + "model-uri": uri})
    assert model_path(cfg, "a") != model_path(cfg, "b")
    patch = engine_patch({"metadata": {}, "spec": {"containers": [{"name": "e"}]}}, cfg, "img", "a")
    init = next(op["value"][0] for op in patch if op["path"] == "/spec/initContainers")
    assert init["command"][init["command"].index("--namespace") + 1] == "a"


# ------------------------------------------------------------------ 5: eviction and re-verification


def _writer(data: bytes) -> Any:
    def f(_u: ModelURI, dest: Path, _pvc: Path) -> None:
        (dest / "w.bin").write_bytes(data)

    return f


def test_budget_never_evicts_another_tenants_copies(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    b1, b2 = CacheKey(parse_model_uri("hf://org/one@r"), "b"), CacheKey(parse_model_uri("hf://org/two@r"), "b")
    stager.stage(b1, root, fetcher=_writer(b"1" * 400), budget=1000)
    stager.stage(b2, root, fetcher=_writer(b"2" * 400), budget=1000)
    with open(Path(stager.cache_dir(str(root.resolve()), b1)) / "data" / "w.bin", "rb"):  # held open by b's engine
        mine = CacheKey(parse_model_uri("hf://org/mine@r"), "a")
        with pytest.raises(stager.BudgetError):  # a's budget equals its own model: b's copies are not a's to evict
            stager.stage(mine, root, size=600, fetcher=_writer(b"a" * 600), budget=600)
    assert stager.is_ready(root, b1) and stager.is_ready(root, b2) and not stager.is_ready(root, mine)
    # a's own older copy is evicted for it
    old = CacheKey(parse_model_uri("hf://org/old@r"), "a")
    stager.stage(old, root, fetcher=_writer(b"o" * 100), budget=1000)
    stager.stage(mine, root, fetcher=_writer(b"a" * 200), budget=1000)
    assert not stager.is_ready(root, old) and stager.is_ready(root, mine)
    assert stager.is_ready(root, b1) and stager.is_ready(root, b2)


def test_conflicting_size_keeps_the_good_copy(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    key = CacheKey(parse_model_uri("hf://org/m@r"), "a")
    good = stager.stage(key, root, size=100, fetcher=_writer(b"g" * 100))
    with pytest.raises(stager.VerifyError):
        stager.ensure(key, root, size=999, fetcher=_writer(b"g" * 100))  # another workload's wrong model-size
    assert stager.is_ready(root, key) and (good.path / "w.bin").read_bytes() == b"g" * 100
    assert stager.ensure(key, root, size=100, fetcher=_writer(b"never fetched")).already


# ------------------------------------------------------------------ 6: one download never holds the node


def test_a_trickling_download_delays_no_other_model_and_meets_its_deadline(hub: hs.Hub, tmp_path: Path) -> None:
    stop = threading.Event()
    hub.routes["/api/models/org/slow/revision/r1"] = hs.body(hs.listing({"w.bin": b"x" * 1000}))
    hub.routes["/org/slow/resolve/r1/w.bin"] = hs.trickle(1000, 0.5, stop)
    root = tmp_path / "cache"
    small = tmp_path / "small"
    small.mkdir()
    (small / "w.bin").write_bytes(b"s" * 1024)
    codes: list[int] = []
    slow = threading.Thread(target=lambda: codes.append(run("--uri", "hf://org/slow@r1", "--cache-root", str(root),
                                                            "--namespace", "a", "--deadline", "4")))
    t0 = time.monotonic()
    slow.start()
    try:
        assert hs.wait_until(lambda: hub.hits("/org/slow/resolve/r1/w.bin") > 0, 5)
        t1 = time.monotonic()
        assert run("--uri", f"file://{small}", "--cache-root", str(root), "--ensure", "--deadline", "10") == 0
        assert time.monotonic() - t1 < 3.0  # not behind the trickle
        slow.join(15)
        assert codes == [7] and time.monotonic() - t0 < 10  # the deadline ended it, not the socket timeout
    finally:
        stop.set()
        slow.join(5)
    assert not stager.is_ready(root, CacheKey(parse_model_uri("hf://org/slow@r1"), "a"))


def test_waiting_for_the_same_model_is_bounded_by_the_deadline(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    key = CacheKey(parse_model_uri("hf://org/m@r1"), "a")
    with stager._locked(root / f".lock-{key.cache_name}", stager.Deadline(1), "held"):
        t0 = time.monotonic()
        assert run("--uri", "hf://org/m@r1", "--cache-root", str(root), "--namespace", "a", "--ensure",
                   "--deadline", "1") == 7
        assert time.monotonic() - t0 < 5


# ------------------------------------------------------------------ 3: downloads verified before .ready


def _hf(root: Path, *extra: str) -> int:
    return run("--uri", "hf://org/model@r1", "--cache-root", str(root), "--namespace", "a", *extra)


def test_truncated_body_is_retried_and_never_marked_ready(hub: hs.Hub, tmp_path: Path) -> None:
    data = os.urandom(100_000)
    hs.model(hub, {"model.safetensors": data})
    hub.routes["/org/model/resolve/r1/model.safetensors"] = hs.body(data[:1000], length=100_000)
    root = tmp_path / "cache"
    assert _hf(root) == 5
    assert hub.hits("/org/model/resolve/r1/model.safetensors") == stager.HTTP_ATTEMPTS and nothing_ready(root)
    # the listing's size disagrees with what the server sends (and announces): a verification failure
    hub.routes["/org/model/resolve/r1/model.safetensors"] = hs.body(data[:1000])
    assert _hf(root) == 4 and nothing_ready(root)


def test_a_body_without_length_needs_the_listing_size(hub: hs.Hub, tmp_path: Path) -> None:
    data = b"tiny"
    hs.model(hub, {"model.safetensors": data}, sizes=False)
    hub.routes["/org/model/resolve/r1/model.safetensors"] = hs.body(data, length=-1)
    root = tmp_path / "cache"
    assert _hf(root) == 4 and nothing_ready(root)  # nothing says how long it should be: not accepted
    hs.model(hub, {"model.safetensors": os.urandom(5000)})
    hub.routes["/org/model/resolve/r1/model.safetensors"] = hs.body(b"short", length=-1)  # cut, no length
    assert _hf(root) == 5 and nothing_ready(root)


def test_a_tiny_unpinned_model_is_not_accepted_silently(hub: hs.Hub, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    hs.model(hub, {"model.safetensors": b"hello"})  # the listing and the body agree on 5 bytes
    with caplog.at_level("WARNING", logger="warmscale.stager"):
        assert _hf(tmp_path / "c1") == 0
    assert any("tiny" in r.getMessage() and getattr(r, "bytes", None) == 5 for r in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING", logger="warmscale.stager"):
        assert _hf(tmp_path / "c2", "--size", "5") == 0  # pinned by model-size: as intended
    assert not any("tiny" in r.getMessage() for r in caplog.records)


def test_lfs_digest_verified(hub: hs.Hub, tmp_path: Path) -> None:
    data = os.urandom(4096)
    hs.model(hub, {"model.safetensors": data, "config.json": b"{}"}, lfs={"model.safetensors"})
    hub.routes["/org/model/resolve/r1/model.safetensors"] = hs.body(bytes(reversed(data)))  # same size, other bytes
    root = tmp_path / "cache"
    assert _hf(root) == 4 and nothing_ready(root)
    hub.routes["/org/model/resolve/r1/model.safetensors"] = hs.body(data)
    assert _hf(root) == 0
    entry = Path(stager.cache_dir(str(root.resolve()), CacheKey(parse_model_uri("hf://org/model@r1"), "a")))
    assert (entry / "data" / "model.safetensors").read_bytes() == data


# ------------------------------------------------------------------ 18: every failure has its exit code


def test_cut_chunked_body_is_retried_then_exit_5(hub: hs.Hub, tmp_path: Path) -> None:
    data = b"a" * 3000
    hs.model(hub, {"w.bin": data}, sizes=False)
    hub.routes["/org/model/resolve/r1/w.bin"] = hs.chunked([data[:1000]], cut=True)
    root = tmp_path / "cache"
    assert _hf(root) == 5 and nothing_ready(root)
    assert hub.hits("/org/model/resolve/r1/w.bin") == stager.HTTP_ATTEMPTS
    # cut once, whole the next time: the retry stages it
    calls = {"n": 0}

    def flaky(h: Any) -> None:
        calls["n"] += 1
        (hs.chunked([data[:1000]], cut=True) if calls["n"] == 1 else hs.body(data))(h)

    hub.routes["/org/model/resolve/r1/w.bin"] = flaky
    assert _hf(root) == 0 and calls["n"] == 2


@pytest.mark.parametrize("listing", [
    b"<html>502 Bad Gateway</html>",  # a proxy's error page
    b'{"siblings": "none"}',
    b'{"siblings": [1, {"size": 3}]}',  # entries without file names
    b'[]',
    b'{"siblings": [{"rfilename": "a"}, {"rfilename": "a/b"}]}',  # a is a file and a directory
    b'{"siblings": [{"rfilename": "a", "size": 1}, {"rfilename": "./a", "size": 1}]}',  # twice
    b'{"siblings": []}',  # nothing to serve
])
def test_broken_listings_are_source_errors(hub: hs.Hub, tmp_path: Path, listing: bytes) -> None:
    hub.routes["/api/models/org/model/revision/r1"] = hs.body(listing)
    hub.routes["/org/model/resolve/r1/a"] = hs.body(b"x")
    root = tmp_path / "cache"
    assert _hf(root) == 5 and nothing_ready(root)
    # a page that is not JSON may be a proxy's, and is tried again; a malformed listing is not
    want = stager.HTTP_ATTEMPTS if not listing.lstrip().startswith((b"{", b"[")) else 1
    assert hub.hits("/api/models/org/model/revision/r1") == want


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_full_disk_is_exit_3_and_leaves_nothing(hub: hs.Hub, tmp_path: Path) -> None:
    data = os.urandom(512 * 1024)
    hs.model(hub, {"model.safetensors": data})
    with small_disk(tmp_path / "disk", "256k") as root:
        assert _hf(root) == 3
        assert nothing_ready(root) and not [d for d in root.iterdir() if d.name.startswith(".tmp-")]
        src = tmp_path / "src"
        src.mkdir()
        (src / "w.bin").write_bytes(data)
        assert run("--uri", f"file://{src}", "--cache-root", str(root)) == 3  # a local copy too
        assert nothing_ready(root)


# ------------------------------------------------------------------ 19: the token stays with its origin


def test_token_not_sent_to_another_origin_after_a_redirect(hub: hs.Hub, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    data = os.urandom(2048)
    hs.model(hub, {"model.safetensors": data, "config.json": b"{}"}, lfs={"model.safetensors"})
    with hs.serve() as cdn:
        cdn.routes["/blob"] = hs.body(data)
        hub.routes["/org/model/resolve/r1/model.safetensors"] = hs.redirect(cdn.base + "/blob")
        hub.routes["/org/model/resolve/r1/config.json"] = hs.redirect("/same-origin/config.json")
        hub.routes["/same-origin/config.json"] = hs.body(b"{}")
        assert _hf(tmp_path / "cache") == 0
        [(_, cdn_headers)] = cdn.seen
    assert "authorization" not in cdn_headers
    listing_headers = hub.seen[0][1]
    assert listing_headers.get("authorization") == "Bearer hf_secret"
    same = next(h for p, h in hub.seen if p == "/same-origin/config.json")
    assert same.get("authorization") == "Bearer hf_secret"  # the Hub's own redirects keep it


def test_hash_helper_matches_the_listing() -> None:
    """The stand-in's LFS digests are plain SHA-256 of the bytes, as the Hub's are."""
    assert hs.listing({"a": b"x"}, lfs={"a"}).count(hashlib.sha256(b"x").hexdigest().encode()) == 1


# ------------------------------------------------------------------ upgrade: labels and entries of URI-only keys


def test_an_earlier_controllers_labels_and_entries_are_cleaned_up(tmp_path: Path) -> None:
    """Labels keyed by the URI alone are stale after the upgrade (no workload uses that key): the clean-up
    Job removes the URI-only entry (``--legacy-entry``), never the tenants' new ones."""
    import json

    from warmscale.warmpool.planning import cleanup_plan

    uri = parse_model_uri("hf://org/m@r1")
    old_key = "warmscale.io/staged-" + hashlib.sha256(uri.canonical.encode()).hexdigest()[:10]
    n = node("n1")
    n["metadata"]["labels"][old_key] = "true"
    n["metadata"]["annotations"] = {old_key: json.dumps({"ns": "a", "uri": uri.canonical,
                                                         "root": "/var/lib/warmscale/models"})}
    new_key = staged_label_key(CacheKey(uri, "a"))
    p = cleanup_plan([n], [], {new_key})
    assert p.create_evict_jobs == [("a", old_key, uri.canonical, "/var/lib/warmscale/models", "n1", "legacy")]
    job = ob.evict_job(*p.create_evict_jobs[0][:5], "img", pinned="legacy")
    args = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--legacy-entry" in args and args[args.index("--namespace") + 1] == "a"
    # on the node: the URI-only entry goes, the namespace's own entry stays
    root = tmp_path / "cache"
    stager.stage(CacheKey(uri, "a"), root, fetcher=_writer(b"new"))
    legacy = root.resolve() / uri.legacy_cache_name
    (legacy / "data").mkdir(parents=True)
    (legacy / "data" / "w.bin").write_bytes(b"old")
    (legacy / stager.OWNER).write_text(json.dumps({"format": stager.OWNER_FORMAT, "name": legacy.name,
                                                   "uri": uri.canonical}))
    (legacy / stager.READY).write_text(json.dumps({"uri": uri.canonical, "size": 3, "sha256": "0" * 64}))
    assert run("--evict", "--legacy-entry", "--uri", uri.canonical, "--cache-root", str(root), "--namespace", "a") == 0
    assert not legacy.exists() and stager.is_ready(root, CacheKey(uri, "a"))
    # a digest-keyed record names its digest, so the Job finds that entry
    sha = "ab" * 32
    n["metadata"]["annotations"][new_key] = ob.staged_record("a", uri.canonical, "/var/lib/warmscale/models", sha)
    n["metadata"]["labels"][new_key] = "true"
    jobs = {j[1]: j for j in cleanup_plan([n], [], set()).create_evict_jobs}
    assert jobs[new_key][-1] == sha and jobs[old_key][-1] == "legacy"
