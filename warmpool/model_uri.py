"""Model weight URIs and their node-local cache paths (pure).

Accepted forms::

    hf://org/name@revision        (revision defaults to "main"; pin a commit for reproducible caches)
    s3://bucket/prefix
    pvc://claim/path              (path inside the PersistentVolumeClaim)
    file:///absolute/path         (a path on the node, never a system path; the controller also needs
                                   it under --file-source-allow, see warmpool.cache_roots)

A cache entry is named for a :class:`CacheKey`, not for the URI alone: what the bytes depend on.
With ``model-sha256`` the content is pinned, so the key is the URI plus the digest (tenants naming the
same digest share one verified copy); without it the key is the URI plus the workload's namespace
(``pvc://`` reads that namespace's claim, ``hf://``/``s3://`` read with that namespace's credentials
Secret, which may also set the endpoint), so two namespaces never share unpinned bytes. The entry is
``<cache root>/ws-<scheme>-<sha256(identity)[:24]>``: built from a hex digest only, so no URI (``..``,
absolute paths, NUL, unicode tricks) can ever make it point outside the cache root.
:func:`cache_dir` checks that again after normalisation.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from warmscale.warmpool.cache_roots import system_path_conflict

SCHEMES = ("hf", "s3", "pvc", "file")
_HF_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_HF_REV = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]{0,251}[a-z0-9])?$")
_SAFE_SEGMENT = re.compile(r"^[^\x00-\x1f/\\]+$")


class ModelURIError(ValueError):
    """A model URI that is not one of the accepted forms."""


@dataclass(frozen=True)
class ModelURI:
    scheme: str
    location: str  # hf: org/name, s3: bucket, pvc: claim, file: ""
    path: str  # hf: "", s3: prefix, pvc: path in the claim, file: absolute path
    revision: str = ""  # hf only

    @property
    def canonical(self) -> str:
        if self.scheme == "hf":
            return f"hf://{self.location}@{self.revision}"
        if self.scheme == "file":
            return f"file://{self.path}"
        return f"{self.scheme}://{self.location}/{self.path}".rstrip("/")

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.canonical.encode()).hexdigest()

    @property
    def legacy_cache_name(self) -> str:
        """Entry name of layout 2 (keyed by the URI text alone, shared by every tenant): only ever
        removed by a clean-up Job of a label that an earlier controller set, never staged or served."""
        return f"ws-{self.scheme}-{self.digest[:24]}"

    def __str__(self) -> str:
        return self.canonical


@dataclass(frozen=True)
class CacheKey:
    """What a cache entry's bytes depend on (module docstring): the URI, and the content digest when
    pinned, else the namespace whose claim or credentials the bytes are read with."""

    uri: ModelURI
    namespace: str = ""  # the workload's namespace ("" for the stager run by hand)
    sha256: str | None = None  # model-sha256, lower-case hex

    @property
    def identity(self) -> str:
        if self.sha256:
            return f"{self.uri.canonical} sha256={self.sha256.lower()}"
        return f"{self.uri.canonical} ns={self.namespace}"

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.identity.encode()).hexdigest()

    @property
    def short_hash(self) -> str:
        """10 hex digits: used in node label keys and Job names."""
        return self.digest[:10]

    @property
    def cache_name(self) -> str:
        """Entry name in the cache root (layout 3). Entries of earlier layouts (``<scheme>-<hex>``, and
        ``ws-<scheme>-<hex>`` of the URI alone) never match it: a model is staged afresh."""
        return f"ws-{self.uri.scheme}-{self.digest[:24]}"

    def __str__(self) -> str:
        return self.identity


def _clean_relative(path: str, what: str) -> str:
    """A relative path of safe segments: no '..', '.', empty, control characters or backslashes."""
    segs = [s for s in path.split("/") if s != ""]
    for s in segs:
        if s in (".", "..") or not _SAFE_SEGMENT.match(s):
            raise ModelURIError(f"{what} has an unsafe path segment {s!r}")
    return "/".join(segs)


def parse_model_uri(raw: str) -> ModelURI:
    s = raw.strip()
    if "\x00" in s:
        raise ModelURIError("NUL in model URI")
    scheme, sep, rest = s.partition("://")
    if not sep or scheme not in SCHEMES:
        raise ModelURIError(f"expected one of {', '.join(s + '://' for s in SCHEMES)}, got {raw!r}")
    if "?" in rest or "#" in rest:
        raise ModelURIError("query strings and fragments are not supported (use model-size / model-sha256)")
    if scheme == "hf":
        repo, at, rev = rest.partition("@")
        parts = repo.split("/")
        if len(parts) != 2 or not all(_HF_PART.match(p) and ".." not in p for p in parts):
            raise ModelURIError(f"expected hf://org/name@revision, got {raw!r}")
        rev = rev if at else "main"
        if not _HF_REV.match(rev) or ".." in rev:
            raise ModelURIError(f"bad revision {rev!r}")
        return ModelURI("hf", repo, "", rev)
    if scheme == "s3":
        bucket, _, prefix = rest.partition("/")
        if not _BUCKET.match(bucket) or ".." in bucket:
            raise ModelURIError(f"bad S3 bucket {bucket!r}")
        return ModelURI("s3", bucket, _clean_relative(prefix, "s3 prefix"))
    if scheme == "pvc":
        claim, _, path = rest.partition("/")
        if not _DNS1123.match(claim):
            raise ModelURIError(f"bad PVC name {claim!r}")
        return ModelURI("pvc", claim, _clean_relative(path, "pvc path"))
    # file:///abs/path (empty authority)
    if not rest.startswith("/"):
        raise ModelURIError(f"expected file:///absolute/path, got {raw!r}")
    rel = _clean_relative(rest, "file path")
    if not rel:
        raise ModelURIError("file:/// needs a path")
    if (sys_path := system_path_conflict("/" + rel)) is not None:
        raise ModelURIError(f"file:///{rel} is a system path or overlaps one ({sys_path}); host paths like it "
                            "are never a model source")
    return ModelURI("file", "", "/" + rel)


def cache_dir(cache_root: str, key: CacheKey, *, name: str | None = None) -> str:
    """Absolute cache directory of ``key`` (or of the entry ``name``) under ``cache_root``; never outside it."""
    root = posixpath.normpath(cache_root)
    if not root.startswith("/"):
        raise ModelURIError(f"cache root must be absolute, got {cache_root!r}")
    out = posixpath.normpath(posixpath.join(root, name or key.cache_name))
    if PurePosixPath(out).parent != PurePosixPath(root):
        raise ModelURIError("cache path escapes the cache root")  # unreachable by construction
    return out


def staged_label_key(key: CacheKey) -> str:
    """Node label saying this cache entry is staged (complete and verified) on the node."""
    return f"warmscale.io/staged-{key.short_hash}"
