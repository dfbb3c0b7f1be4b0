"""Model weight URIs and their node-local cache paths (pure).

Accepted forms::

    hf://org/name@revision        (revision defaults to "main"; pin a commit for reproducible caches)
    s3://bucket/prefix
    pvc://claim/path              (path inside the PersistentVolumeClaim)
    file:///absolute/path         (a path on the node; tests and pre-mounted volumes)

The cache directory of a URI is ``<cache root>/ws-<scheme>-<sha256(canonical URI)[:24]>``: it is built
from a hex digest only, so no URI (``..``, absolute paths, NUL, unicode tricks) can ever make it point
outside the cache root. :func:`cache_dir` checks that again after normalisation.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

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
    def short_hash(self) -> str:
        """10 hex digits: used in node label keys and Job names."""
        return self.digest[:10]

    @property
    def cache_name(self) -> str:
        """Entry name in the cache root. The ``ws-`` prefix (layout 2) keeps entries of earlier versions
        (``<scheme>-<hex>``, no ownership marker) apart: they are never touched, a model is staged afresh."""
        return f"ws-{self.scheme}-{self.digest[:24]}"

    def __str__(self) -> str:
        return self.canonical


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
    return ModelURI("file", "", "/" + rel)


def cache_dir(cache_root: str, uri: ModelURI) -> str:
    """Absolute cache directory of ``uri`` under ``cache_root``; never outside it."""
    root = posixpath.normpath(cache_root)
    if not root.startswith("/"):
        raise ModelURIError(f"cache root must be absolute, got {cache_root!r}")
    out = posixpath.normpath(posixpath.join(root, uri.cache_name))
    if PurePosixPath(out).parent != PurePosixPath(root):
        raise ModelURIError("cache path escapes the cache root")  # unreachable by construction
    return out


def staged_label_key(uri: ModelURI) -> str:
    """Node label saying this model revision is staged (complete and verified) on the node."""
    return f"warmscale.io/staged-{uri.short_hash}"
