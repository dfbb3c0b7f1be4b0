import posixpath

import pytest

from warmscale.warmpool.model_uri import CacheKey, ModelURIError, cache_dir, parse_model_uri, staged_label_key


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("hf://meta-llama/Llama-3.1-8B@5206a32", "hf://meta-llama/Llama-3.1-8B@5206a32"),
        ("hf://org/name", "hf://org/name@main"),
        ("s3://my-bucket/models/llama/", "s3://my-bucket/models/llama"),
        ("s3://my-bucket", "s3://my-bucket"),
        ("pvc://weights/llama//8b", "pvc://weights/llama/8b"),
        ("file:///srv/models/llama", "file:///srv/models/llama"),
        ("  file:///srv//x/  ", "file:///srv/x"),
    ],
)
def test_parse(raw: str, canonical: str) -> None:
    assert parse_model_uri(raw).canonical == canonical


@pytest.mark.parametrize(
    "raw",
    [
        "http://x/y",
        "hf://only-one-part",
        "hf://a/b/c@x",
        "hf://../x@main",
        "hf://org/..@main",
        "hf://org/name@..",
        "s3://UPPER/x",
        "s3://b/../x",
        "pvc://Bad_Claim/x",
        "pvc://c/a/../../..",
        "file://relative/x",
        "file:///",
        "file:///a/../b",
        "file:///a/./b",
        "file:///a\\b",
        "file:///a\x00b",
        "s3://bucket/x?y=1",
        "pvc://c/x\ny",
    ],
)
def test_reject(raw: str) -> None:
    with pytest.raises(ModelURIError):
        parse_model_uri(raw)


@pytest.mark.parametrize(
    "raw",
    [
        "hf://org/name@main",
        "s3://bucket/a/b",
        "pvc://claim/p",
        "file:///srv/models/x",
        "file:///x",
    ],
)
@pytest.mark.parametrize("root", ["/var/cache/ws", "/var/cache/ws/", "/c/./d/../e"])
def test_cache_dir_inside_root(raw: str, root: str) -> None:
    u = parse_model_uri(raw)
    d = cache_dir(root, CacheKey(u, "ns"))
    assert posixpath.dirname(d) == posixpath.normpath(root)
    assert posixpath.basename(d).startswith(f"ws-{u.scheme}-")
    assert ".." not in d.split("/")


def test_cache_root_must_be_absolute() -> None:
    with pytest.raises(ModelURIError):
        cache_dir("rel", CacheKey(parse_model_uri("hf://a/b")))


def test_distinct_revisions_distinct_caches_and_labels() -> None:
    a, b = CacheKey(parse_model_uri("hf://a/b@r1"), "ns"), CacheKey(parse_model_uri("hf://a/b@r2"), "ns")
    assert cache_dir("/c", a) != cache_dir("/c", b)
    assert staged_label_key(a) != staged_label_key(b)
    key = staged_label_key(a)
    assert key.startswith("warmscale.io/staged-") and len(key.split("/")[1]) <= 63
