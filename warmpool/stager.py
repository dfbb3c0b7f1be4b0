"""``warmscale stage``: put a model's weights into the node-local cache, atomically.

Layout under the cache root (one directory per cache identity, :class:`warmpool.model_uri.CacheKey`:
the URI plus the namespace, or plus the content digest; see :func:`warmpool.model_uri.cache_dir`)::

    <root>/.lock                      flock held briefly: clean-up, eviction, publishing (never a download)
    <root>/.lock-<name>               flock held while one entry is staged, replaced or evicted
    <root>/.tmp-<name>-<random>/      work in progress (removed by the next run once its entry lock is free)
    <root>/<name>/.warmscale-entry    ownership marker (JSON: format, name, uri, identity, namespace), first
    <root>/<name>/data/...            the weights
    <root>/<name>/.ready              JSON marker written last (temp file + rename); its mtime is the
                                      last use (LRU); only directories with it are complete

``<name>`` is ``ws-<scheme>-<24 hex>``. The stager creates, replaces, evicts and cleans up **only its
own** entries and work dirs: a directory counts as its own when it carries the ownership marker naming
that very directory. Anything else in the root (other software's data, entries of earlier versions
without the marker, symlinks) is never modified, only reported; the LRU budget counts own entries
only, and evicts only entries staged for the same namespace (never another tenant's; entries of an
earlier layout are removed only by the controller's clean-up Jobs). A system path (or a parent of
one) is refused as the cache root, and as a ``file://`` source, as is a source overlapping the root.

Publishing is copy into ``.tmp-*`` -> verify (every file against the source's own metadata: the Hub
listing's sizes and LFS SHA-256, Content-Length, S3 sizes; then ``--size`` / ``--sha256``) -> fsync ->
``rename`` to ``<name>`` -> write ``.ready``. A ready copy whose expectation changed is replaced only
by a verified one (a failed re-stage leaves it as it was). A crash at any point leaves no ``.ready``
marker, so a half copy is never used. The checksum of content that is a single file is that file's
SHA-256; of a directory, the SHA-256 of its manifest, the sorted lines ``<sha256 of file>  <relative
path>\\n``. ``--deadline`` bounds the whole run (lock wait, download, verification).

``--ensure`` (the init container the webhook adds to engine pods): a ready copy returns at once
without taking any lock; otherwise the model is staged as above.

Exit codes: 0 staged (or already staged), 2 bad arguments (or a system path as the root or source),
3 does not fit the disk budget (or the disk is full), 4 verification failed (or the source gives no
size to verify against), 5 source error (after retries), 6 the entry's name is taken by a directory
that is not the stager's, 7 the deadline passed.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import functools
import hashlib
import http.client
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from warmscale.common.quantity import parse_quantity
from warmscale.warmpool.cache_roots import system_path_conflict
from warmscale.warmpool.model_uri import CacheKey, ModelURI, ModelURIError, cache_dir, parse_model_uri

log = logging.getLogger("warmscale.stager")
T = TypeVar("T")
READY = ".ready"
OWNER = ".warmscale-entry"  # ownership marker, written first into every work dir
OWNER_FORMAT = "warmscale.io/cache-entry/v1"
ENTRY_NAME = re.compile(r"ws-(hf|s3|pvc|file)-[0-9a-f]{24}")
ROOT_LOCK = ".lock"
ENTRY_LOCK = ".lock-"  # + entry name
DATA = "data"
CHUNK = 4 * 1024 * 1024
SOCKET_TIMEOUT_S = 60.0  # one blocking socket operation (connect, one read); the deadline bounds the sum
DEFAULT_DEADLINE_S = 2 * 3600.0  # a whole run when --deadline is not given (objects.STAGE_DEADLINE_S)
LOCK_POLL_S = 0.2  # how often a stager waiting for a lock looks again (bounded by the deadline)
HTTP_ATTEMPTS = 5  # per request: resets, cut bodies, 5xx/429 are retried with back-off
BACKOFF_FIRST_S, BACKOFF_MAX_S = 2.0, 60.0
LISTING_MAX_BYTES = 64 * 1024 * 1024  # a Hub revision listing; the largest real ones are a few MB
# Below this, verified content is staged but logged as suspicious unless model-size/model-sha256 pinned it:
# the smallest real checkpoints (test-sized "tiny-random" models) are a few MB, an error page a few kB.
TINY_MODEL_BYTES = 1024 * 1024
SECRET_HEADERS = ("authorization", "cookie")  # never sent to another origin after a redirect
# Hub files downloaded at once: huggingface_hub's snapshot_download default (max_workers=8); more only
# splits the same link, fewer leaves a multi-shard model waiting on one file at a time.
HF_PARALLEL_FILES = 8
HF_TRUE = ("1", "true", "yes", "on")  # how huggingface_hub reads its boolean env variables
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class StageError(RuntimeError):
    exit_code = 5


class BudgetError(StageError):
    exit_code = 3


class VerifyError(StageError):
    exit_code = 4


class OccupiedError(StageError):
    """The model's entry name is taken by a directory that is not the stager's: never touched."""

    exit_code = 6


class RootError(StageError):
    """The cache root (or a file:// source) is, or overlaps, a system path."""

    exit_code = 2


class ConfigError(StageError):
    """A bad value in the stager's environment (e.g. HF_HUB_DOWNLOAD_TIMEOUT): a bad argument."""

    exit_code = 2


class DeadlineError(StageError):
    """The run's deadline (``--deadline``) passed: waiting for a lock, or downloading."""

    exit_code = 7


@dataclass(frozen=True)
class StageResult:
    path: Path  # the data directory
    size: int
    sha256: str
    already: bool
    foreign: tuple[Path, ...] = ()  # what else is in the cache root (not ours: left alone)


class Deadline:
    """Monotonic end of one run; ``remaining()`` is never negative, ``check()`` raises once it passed."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._end = None if seconds is None else clock() + seconds

    def remaining(self) -> float:
        return float("inf") if self._end is None else max(0.0, self._end - self._clock())

    def check(self, doing: str) -> None:
        if self.remaining() <= 0:
            raise DeadlineError(f"deadline passed while {doing}")

    def timeout(self, cap: float = SOCKET_TIMEOUT_S) -> float:
        """A socket timeout: at most ``cap``, never past the deadline (and never 0)."""
        return max(0.5, min(cap, self.remaining()))


def _as_key(k: CacheKey | ModelURI) -> CacheKey:
    return k if isinstance(k, CacheKey) else CacheKey(k)


def _safe_join(base: Path, rel: str) -> Path:
    """``base/rel`` for a relative path from a remote listing; refuses anything escaping ``base``."""
    parts = [p for p in rel.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts) or rel.startswith("/"):
        raise StageError(f"refusing unsafe path {rel!r} from the source")
    out = base.joinpath(*parts)
    if not out.resolve().is_relative_to(base.resolve()):
        raise StageError(f"refusing path {rel!r}: escapes the staging directory")
    return out


def tree_digest(path: Path) -> tuple[int, str]:
    """(total bytes, checksum) of a file or a directory tree (see the module docstring)."""
    if path.is_file():
        h = hashlib.sha256()
        with path.open("rb") as fh:
            while chunk := fh.read(CHUNK):
                h.update(chunk)
        return path.stat().st_size, h.hexdigest()
    lines, total = [], 0
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        size, digest = tree_digest(f)
        total += size
        lines.append(f"{digest}  {f.relative_to(path).as_posix()}\n")
    return total, hashlib.sha256("".join(lines).encode()).hexdigest()


def content_digest(data: Path) -> tuple[int, str]:
    """(bytes, checksum) of staged content: a lone file's own SHA-256, else the tree manifest's."""
    files = [p for p in data.rglob("*") if p.is_file()]
    if len(files) == 1 and files[0].parent == data:
        return tree_digest(files[0])
    return tree_digest(data)


def _du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _disk_error(exc: OSError, doing: str) -> StageError:
    """An OSError while writing the cache: a full disk (or quota) is the budget's exit code, else a source error."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return BudgetError(f"disk full while {doing}: {exc}")
    return StageError(f"{doing} failed: {exc}")


# ---------------------------------------------------------------- sources


def check_source(uri: ModelURI, root: Path) -> None:
    """Refuse a ``file://`` source that is (or overlaps) a system path, or overlaps the cache root: the
    controller and the webhook refuse it before (an Event, nothing mounted); this holds wherever the
    stager runs, also after symlinks are resolved."""
    if uri.scheme != "file":
        return
    r = root.resolve()
    for resolve in (False, True):  # the path as given first: resolving one under /proc may itself be refused
        try:
            p = Path(uri.path).resolve() if resolve else Path(uri.path)
        except OSError as exc:
            raise RootError(f"source {uri} cannot be resolved ({exc}); refused") from None
        if (s := system_path_conflict(str(p))) is not None:
            raise RootError(f"source {uri} is a system path or overlaps one ({s}); refused")
        if p == r or p.is_relative_to(r) or r.is_relative_to(p):
            raise RootError(f"source {uri} overlaps the cache root {r}; refused")


def _copy_local(src: Path, dest: Path) -> None:
    """Copy a file or tree (no symlinks followed out of the source) into ``dest``."""
    if not src.exists():
        raise StageError(f"source {src} does not exist")
    if src.is_file():
        dest.mkdir(parents=True, exist_ok=True)
        _copy_file(src, dest / src.name)
        return
    for f in sorted(src.rglob("*")):
        rel = f.relative_to(src)
        target = dest / rel
        if f.is_symlink():
            continue  # never follow links out of the source
        if f.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif f.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            _copy_file(f, target)


def _copy_file(src: Path, dest: Path) -> None:
    want = src.stat().st_size
    n = 0
    with src.open("rb") as i, dest.open("wb") as o:
        while chunk := i.read(CHUNK):
            o.write(chunk)
            n += len(chunk)
        o.flush()
        os.fsync(o.fileno())
    if n != want:
        raise VerifyError(f"{src} changed while copied: {n} bytes read, {want} expected")


def _origin(url: str) -> tuple[str, str, int | None]:
    u = urllib.parse.urlsplit(url)
    return u.scheme.lower(), (u.hostname or "").lower(), u.port


class _SameOriginCredentials(urllib.request.HTTPRedirectHandler):
    """Follows redirects, but sends credentials (HF_TOKEN) only to the origin they were given for: the Hub
    redirects file downloads to a CDN, which must never receive the token."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(newurl) != _origin(req.full_url):
            for name in list(new.headers):
                if name.lower() in SECRET_HEADERS:
                    new.remove_header(name)
        return new


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(_SameOriginCredentials())


class _Retry(Exception):
    """A transient failure of one attempt (reset, cut body, 5xx/429): tried again with back-off. ``verify``:
    the last attempt's failure is a verification failure (exit 4), not a source error."""

    def __init__(self, msg: str, verify: bool = False) -> None:
        super().__init__(msg)
        self.verify = verify


def _attempts(what: str, deadline: Deadline, fn: Callable[[], Any]) -> Any:
    """``fn()`` up to HTTP_ATTEMPTS times on transient failures, with back-off, within ``deadline``."""
    delay = BACKOFF_FIRST_S
    for attempt in range(1, HTTP_ATTEMPTS + 1):
        deadline.check(what)
        try:
            return fn()
        except urllib.error.HTTPError as exc:
            if exc.code != 429 and exc.code < 500:
                raise StageError(f"{what}: HTTP {exc.code} {exc.reason}") from None
            err: Exception = exc
        except (_Retry, http.client.HTTPException, TimeoutError, ConnectionError, urllib.error.URLError) as exc:
            err = exc
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise _disk_error(exc, what) from None
            err = exc
        if attempt == HTTP_ATTEMPTS:
            cls = VerifyError if isinstance(err, _Retry) and err.verify else StageError
            raise cls(f"{what} failed after {attempt} attempts: {err}") from None
        log.warning("transient failure, retrying", extra={"what": what, "attempt": attempt, "error": str(err)[:300]})
        time.sleep(min(delay, deadline.remaining()))
        delay = min(delay * 2, BACKOFF_MAX_S)
    raise AssertionError("unreachable")  # pragma: no cover


def _content_length(r: Any) -> int | None:
    raw = r.headers.get("Content-Length")
    try:
        n = int(raw) if raw is not None else None
    except ValueError:
        return None
    return n if n is not None and n >= 0 else None


def _http_read(url: str, headers: dict[str, str], deadline: Deadline, limit: int,
               check: Callable[[bytes], T]) -> T:
    """``check`` of a whole (small) response body, checked against its Content-Length; retried on transient
    failures, and when ``check`` raises :class:`_Retry` (e.g. a proxy's error page instead of JSON)."""

    def once() -> T:
        with _opener().open(urllib.request.Request(url, headers=headers), timeout=deadline.timeout()) as r:
            want = _content_length(r)
            buf = bytearray()
            while chunk := r.read1(CHUNK):
                deadline.check(f"reading {url}")
                buf += chunk
                if len(buf) > limit:
                    raise StageError(f"{url}: response larger than {limit} bytes")
        if want is not None and len(buf) != want:
            raise _Retry(f"{url}: body cut at {len(buf)} of {want} bytes")
        return check(bytes(buf))

    return _attempts(f"GET {url}", deadline, once)  # type: ignore[no-any-return]


def _resume_from(r: Any, have: int, dest: Path) -> int:
    """Where the body of response ``r`` starts in ``dest``: ``have`` for a 206 continuing it, else 0. A 206 for
    another range: the partial file is dropped and the attempt retried from byte 0."""
    if have <= 0 or getattr(r, "status", 200) != 206:
        return 0
    m = _CONTENT_RANGE.fullmatch((r.headers.get("Content-Range") or "").strip())
    if m is None or int(m.group(1)) != have:
        dest.unlink(missing_ok=True)
        raise _Retry(f"the server answered a resumed request with Content-Range {r.headers.get('Content-Range')!r}")
    return have


def _http_get(url: str, dest: Path, headers: dict[str, str], deadline: Deadline, *, size: int | None = None,
              sha256: str | None = None, socket_timeout: float = SOCKET_TIMEOUT_S,
              cancel: threading.Event | None = None) -> None:
    """Download ``url`` to ``dest``, verified: its byte count against ``size`` (the source's listing) and the
    response's Content-Length, its SHA-256 against ``sha256`` (an LFS entry's). With neither size known the
    download is refused (exit 4): nothing unverifiable is marked ready. A retry resumes where the cut body
    ended (``Range``; a server answering 200 instead sends it whole again). ``cancel``: set when another
    file of the model failed, so this one stops too."""

    def once() -> None:
        have = dest.stat().st_size if dest.exists() else 0
        if size is not None and have >= size:
            have = 0  # nothing left to resume: a fresh copy
        req = dict(headers, **({"Range": f"bytes={have}-"} if have else {}))
        try:
            resp = _opener().open(urllib.request.Request(url, headers=req), timeout=deadline.timeout(socket_timeout))
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and have:  # the partial file is not a prefix the server knows: start afresh
                dest.unlink(missing_ok=True)
                raise _Retry(f"{url}: resuming at byte {have} refused (416)") from None
            raise
        with resp as r:
            start = _resume_from(r, have, dest)
            length = _content_length(r)
            total = start + length if length is not None else None
            if size is not None and total is not None and total != size:
                raise VerifyError(f"{url}: the listing gives {size} bytes, the response {total}")
            h, n = hashlib.sha256(), start
            if start:
                with dest.open("rb") as prefix:  # the SHA-256 covers the whole file, resumed or not
                    while chunk := prefix.read(CHUNK):
                        h.update(chunk)
            with dest.open("ab" if start else "wb") as o:
                # read1 returns after each receive, so a body that trickles still meets the deadline check
                while chunk := r.read1(CHUNK):
                    deadline.check(f"downloading {url} ({n} bytes so far)")
                    if cancel is not None and cancel.is_set():
                        raise StageError(f"{url}: stopped, another file of the model failed")
                    o.write(chunk)
                    h.update(chunk)
                    n += len(chunk)
                o.flush()
                os.fsync(o.fileno())
        want = size if size is not None else total
        if want is None:
            raise VerifyError(f"{url}: neither the listing nor the response gives a size; refusing an unverifiable "
                              "download (set warmscale.io/model-size or model-sha256 only adds a check, it does not "
                              "replace this one)")
        if n != want:
            raise _Retry(f"{url}: body cut at {n} of {want} bytes")
        if sha256 is not None and h.hexdigest() != sha256:
            dest.unlink(missing_ok=True)  # never resume from bytes that do not hash
            raise _Retry(f"{url}: SHA-256 {h.hexdigest()} differs from the listing's {sha256}", verify=True)

    _attempts(f"download {url}", deadline, once)


@dataclass(frozen=True)
class RemoteFile:
    path: str  # relative path in the model
    size: int | None
    sha256: str | None


def _int_or_none(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _sha_or_none(v: object) -> str | None:
    return v.lower() if isinstance(v, str) and re.fullmatch(r"[0-9a-fA-F]{64}", v) else None


@dataclass(frozen=True)
class HubListing:
    commit: str | None  # the revision's commit (40 hex), when the Hub names it: every file is read at it
    files: tuple[RemoteFile, ...]


def parse_hf_listing(body: bytes, what: str) -> HubListing:
    """The files of a Hub revision listing (``/api/models/<repo>/revision/<rev>?blobs=true``), validated:
    not JSON (retried: :class:`_Retry`), no ``siblings`` list, an entry without a file name, a duplicate,
    a file that is also a directory of another, no files: a source error (exit 5), never a traceback."""
    try:
        info = json.loads(body)
    except ValueError as exc:  # a proxy's or gateway's page in its place: worth another try
        raise _Retry(f"{what}: the listing is not JSON ({exc})") from None
    sibs = info.get("siblings") if isinstance(info, dict) else None
    if not isinstance(sibs, list):
        raise StageError(f"{what}: the listing has no siblings list")
    out: dict[str, RemoteFile] = {}
    for sib in sibs:
        rel = sib.get("rfilename") if isinstance(sib, dict) else None
        if not isinstance(rel, str) or not rel.strip("/"):
            raise StageError(f"{what}: a listing entry has no file name: {str(sib)[:120]}")
        norm = "/".join(p for p in rel.replace("\\", "/").split("/") if p not in ("", "."))
        if norm in out:
            raise StageError(f"{what}: the listing names {rel!r} twice")
        lfs = sib.get("lfs") if isinstance(sib.get("lfs"), dict) else {}
        size = _int_or_none(lfs.get("size")) if lfs else None
        size = size if size is not None else _int_or_none(sib.get("size"))
        out[norm] = RemoteFile(rel, size, _sha_or_none(lfs.get("sha256") or lfs.get("oid")) if lfs else None)
    names = set(out)
    for n in names:
        parts = n.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in names:
                raise StageError(f"{what}: the listing has {'/'.join(parts[:i])!r} both as a file and as a directory")
    if not out:
        raise StageError(f"{what}: the listing has no files")
    commit = info.get("sha")
    return HubListing(commit if isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}", commit) else None,
                      tuple(out.values()))


def hub_env(env: dict[str, str] | os._Environ[str] = os.environ) -> tuple[str, dict[str, str], float]:
    """(endpoint, request headers, socket timeout) from huggingface_hub's variables: ``HF_ENDPOINT``,
    ``HF_TOKEN`` (else the older ``HUGGING_FACE_HUB_TOKEN``), ``HF_HUB_DOWNLOAD_TIMEOUT``; ``HF_HUB_OFFLINE``
    refuses any download (a source error: the copy is not on this node)."""
    if (env.get("HF_HUB_OFFLINE") or "").strip().lower() in HF_TRUE:
        raise StageError("HF_HUB_OFFLINE is set: not downloading (the copy is not staged on this node)")
    endpoint = (env.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    headers = {"User-Agent": "warmscale-stager"}
    if token := (env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN") or "").strip():
        headers["Authorization"] = f"Bearer {token}"
    raw = env.get("HF_HUB_DOWNLOAD_TIMEOUT")
    try:
        timeout = float(raw) if raw else SOCKET_TIMEOUT_S
    except ValueError:
        timeout = -1.0
    if not timeout > 0 or timeout == float("inf"):
        raise ConfigError(f"HF_HUB_DOWNLOAD_TIMEOUT: expected a positive number of seconds, got {raw!r}")
    return endpoint, headers, timeout


def _fetch_hf(uri: ModelURI, dest: Path, deadline: Deadline) -> None:
    """Hugging Face Hub: list the revision's files with their sizes and LFS digests, then download them, up
    to HF_PARALLEL_FILES at once, every one at the listing's commit (a branch moving meanwhile cannot mix
    two revisions), resumed after a cut, verified (token only ever sent to HF_ENDPOINT's origin)."""
    endpoint, headers, socket_timeout = hub_env()
    rev = urllib.parse.quote(uri.revision, safe="")
    listing = f"{endpoint}/api/models/{uri.location}/revision/{rev}?blobs=true"
    hub = _http_read(listing, headers, deadline, LISTING_MAX_BYTES,
                     functools.partial(parse_hf_listing, what=f"listing {uri}"))
    at = hub.commit or rev
    if hub.commit and hub.commit != uri.revision:
        log.info("revision resolved", extra={"uri": uri.canonical, "commit": hub.commit})
    jobs = []
    for f in sorted(hub.files, key=lambda f: -(f.size or 0)):  # the largest first: they bound the wall time
        target = _safe_join(dest, f.path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _disk_error(exc, f"creating {target.parent}") from None
        jobs.append((f"{endpoint}/{uri.location}/resolve/{at}/{urllib.parse.quote(f.path)}", target, f))
    cancel = threading.Event()

    def one(job: tuple[str, Path, RemoteFile]) -> None:
        url, target, f = job
        _http_get(url, target, headers, deadline, size=f.size, sha256=f.sha256, socket_timeout=socket_timeout,
                  cancel=cancel)

    first: BaseException | None = None
    with ThreadPoolExecutor(max_workers=max(1, min(HF_PARALLEL_FILES, len(jobs))),
                            thread_name_prefix="hf-download") as pool:
        for fut in as_completed([pool.submit(one, j) for j in jobs]):
            if (exc := fut.exception()) is not None and first is None:
                first = exc
                cancel.set()  # the others stop at their next receive
    if first is not None:
        raise first


def _fetch_s3(uri: ModelURI, dest: Path, deadline: Deadline) -> None:
    """S3 (or compatible, AWS_ENDPOINT_URL): every object under the prefix, via boto3, sizes verified."""
    try:
        import boto3
    except ImportError as exc:
        raise StageError("s3:// needs boto3 in the stager image") from exc
    s3 = boto3.client("s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None)
    prefix = uri.path + "/" if uri.path else ""
    found = False
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=uri.location, Prefix=prefix):
        for obj in page.get("Contents", []):
            key = obj["Key"]
            if key.endswith("/"):
                continue
            deadline.check(f"downloading {uri}")
            found = True
            target = _safe_join(dest, key[len(prefix):] or Path(key).name)
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(uri.location, key, str(target))
            if (want := _int_or_none(obj.get("Size"))) is not None and target.stat().st_size != want:
                raise VerifyError(f"s3://{uri.location}/{key}: {target.stat().st_size} bytes, the listing says {want}")
    if not found:
        raise StageError(f"no objects under {uri}")


def fetch(uri: ModelURI, dest: Path, pvc_root: Path, deadline: Deadline | None = None) -> None:
    dl = deadline or Deadline(None)
    if uri.scheme == "file":
        _copy_local(Path(uri.path), dest)
    elif uri.scheme == "pvc":
        base = pvc_root / uri.location
        src = _safe_join(base, uri.path) if uri.path else base
        _copy_local(src, dest)
    elif uri.scheme == "hf":
        _fetch_hf(uri, dest, dl)
    elif uri.scheme == "s3":
        _fetch_s3(uri, dest, dl)
    else:  # pragma: no cover - parse_model_uri rejects others
        raise StageError(f"unsupported scheme {uri.scheme}")


# ---------------------------------------------------------------- cache


@contextlib.contextmanager
def _locked(path: Path, deadline: Deadline, what: str) -> Iterator[None]:
    """flock ``path`` (created), waiting at most until ``deadline``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                deadline.check(f"waiting for the lock of {what} (another stager holds it)")
                time.sleep(min(LOCK_POLL_S, max(0.01, deadline.remaining())))
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def _try_entry_lock(root: Path, name: str) -> Iterator[bool]:
    """The entry lock of ``name`` if free right now (True), else False: for clean-up and eviction, which skip
    an entry another stager is working on."""
    path = root / (ENTRY_LOCK + name)
    try:
        f = path.open("a")
    except OSError:
        yield False
        return
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _owner_record(name: str, uri: ModelURI | CacheKey) -> str:
    key = _as_key(uri)
    return json.dumps({"format": OWNER_FORMAT, "name": name, "uri": key.uri.canonical, "identity": key.identity,
                       "namespace": key.namespace}, sort_keys=True)


def _read_owner(d: Path) -> dict[str, Any] | None:
    """``d``'s ownership record, if ``d`` is a real directory (not a symlink) with a valid marker of ours."""
    try:
        if d.is_symlink() or not d.is_dir():
            return None
        marker = d / OWNER
        if marker.is_symlink() or not marker.is_file():
            return None
        rec = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("format") != OWNER_FORMAT:
        return None
    name = rec.get("name")
    return rec if isinstance(name, str) and ENTRY_NAME.fullmatch(name) else None


def owned_name(d: Path) -> str | None:
    """The entry name ``d``'s ownership marker claims, else None (foreign, or an entry of an earlier version
    without the marker: never touched)."""
    rec = _read_owner(d)
    return str(rec["name"]) if rec is not None else None


def is_owned_entry(d: Path) -> bool:
    return owned_name(d) == d.name


def is_owned_work_dir(d: Path) -> bool:
    name = owned_name(d)
    return name is not None and d.name.startswith(f".tmp-{name}-")


@dataclass(frozen=True)
class Entry:
    path: Path
    ready: bool
    last_used: float
    size: int
    namespace: str | None = None  # the tenant it was staged for (None: an earlier layout's shared entry)


def entries(root: Path) -> list[Entry]:
    """The stager's own entries under ``root`` (anything else there is not ours and not listed)."""
    out = []
    for d in root.iterdir() if root.exists() else []:
        if d.name.startswith(".") or (rec := _read_owner(d)) is None or rec["name"] != d.name:
            continue
        marker = d / READY
        ready = marker.is_file()
        data = d / DATA  # the budget counts the weights, not our small marker files
        ns = rec.get("namespace") if "identity" in rec else None
        out.append(Entry(d, ready, marker.stat().st_mtime if ready else 0.0, _du(data if data.is_dir() else d),
                         ns if isinstance(ns, str) else None))
    return out


def foreign(root: Path) -> list[Path]:
    """Everything under ``root`` that is not the stager's (left alone, reported)."""
    out = []
    for d in sorted(root.iterdir()) if root.exists() else []:
        if d.name == ROOT_LOCK or (d.name.startswith(ENTRY_LOCK) and ENTRY_NAME.fullmatch(d.name[len(ENTRY_LOCK):])
                                   and d.is_file() and not d.is_symlink()):
            continue
        if is_owned_entry(d) or is_owned_work_dir(d):
            continue
        out.append(d)
    return out


def is_ready(root: Path, key: CacheKey | ModelURI) -> bool:
    final = Path(cache_dir(str(root), _as_key(key)))
    return is_owned_entry(final) and (final / READY).is_file()


def _cleanup_incomplete(root: Path, mine: str) -> None:
    """Under the root lock: remove our crashed work dirs and our entries without a ``.ready`` marker, except
    those another stager is working on right now (its entry lock is held). ``mine``: the entry whose lock
    this stager holds."""
    for d in list(root.iterdir()):
        if d.name.startswith(".tmp-") and (name := owned_name(d)) is not None and is_owned_work_dir(d):
            if name == mine:
                shutil.rmtree(d, ignore_errors=True)
                continue
            with _try_entry_lock(root, name) as free:
                if free:
                    shutil.rmtree(d, ignore_errors=True)
    for e in entries(root):
        if e.ready:
            continue
        if e.path.name == mine:
            shutil.rmtree(e.path, ignore_errors=True)
            continue
        with _try_entry_lock(root, e.path.name) as free:
            if free:
                shutil.rmtree(e.path, ignore_errors=True)


def _report_foreign(root: Path) -> list[Path]:
    found = foreign(root)
    if found:
        log.warning("data in the cache root that is not the stager's: left alone", extra={
            "root": str(root), "count": len(found), "paths": [p.name for p in found[:20]]})
    return found


def evict(root: Path, budget: int, need: int, keep: Path | None = None, namespace: str | None = "") -> list[Path]:
    """Remove our least-recently-used complete entries until ``need`` more bytes fit in ``budget``.

    The budget counts the stager's own entries only: data that is not ours is never evicted. Only entries
    staged for ``namespace`` are evicted (another tenant's copies, and shared entries of an earlier layout,
    count against the budget but are never removed here), and none another stager is working on."""
    mine = entries(root)
    es = sorted((e for e in mine if e.path != keep and e.ready and e.namespace is not None
                 and e.namespace == namespace), key=lambda e: e.last_used)
    used = sum(e.size for e in mine if e.path != keep)
    removed = []
    for e in es:
        if used + need <= budget:
            break
        with _try_entry_lock(root, e.path.name) as free:
            if not free:
                continue
            (e.path / READY).unlink(missing_ok=True)
            shutil.rmtree(e.path, ignore_errors=True)
        used -= e.size
        removed.append(e.path)
        log.info("evicted", extra={"path": str(e.path), "bytes": e.size})
    if used + need > budget:
        raise BudgetError(f"{need} bytes do not fit the cache budget {budget} ({used} in use after eviction; "
                          "only this namespace's own copies are ever evicted for it)")
    return removed


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_root(root: Path) -> None:
    """Refuse a cache root that is (or overlaps) a system path, whatever mounted it."""
    if (s := system_path_conflict(str(root))) is not None:
        raise RootError(f"cache root {root} is a system path or overlaps one ({s}); refused")


def _ready_info(final: Path) -> dict[str, Any] | None:
    try:
        info = json.loads((final / READY).read_text()) if is_owned_entry(final) else None
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not isinstance(info.get("size"), int) or not isinstance(info.get("sha256"), str):
        return None
    return info


def _matches(info: dict[str, Any] | None, size: int | None, sha256: str | None) -> bool:
    return info is not None and (size is None or info.get("size") == size) and (
        sha256 is None or info.get("sha256") == sha256.lower())


def _publish(root: Path, work: Path, final: Path, key: CacheKey, got_size: int, got_sha: str,
             clock: Callable[[], float]) -> None:
    """Under the root lock: ``work`` becomes ``final`` (a ready copy there is moved aside first, then
    removed), then the ``.ready`` marker is written."""
    _fsync_dir(work)
    old = None
    if final.exists():
        old = root / f".tmp-{final.name}-old{os.getpid()}"
        (final / READY).unlink(missing_ok=True)
        os.rename(final, old)
    os.rename(work, final)  # atomic on one filesystem; final does not exist here
    _fsync_dir(root)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    tmp_marker = final / (READY + ".tmp")
    tmp_marker.write_text(json.dumps({"uri": key.uri.canonical, "identity": key.identity, "size": got_size,
                                      "sha256": got_sha, "staged_at": clock()}))
    with tmp_marker.open("rb") as f:
        os.fsync(f.fileno())
    os.rename(tmp_marker, final / READY)
    _fsync_dir(final)


def stage(uri: CacheKey | ModelURI, root: Path, *, size: int | None = None, sha256: str | None = None,
          budget: int | None = None, pvc_root: Path = Path("/mnt/warmscale-pvc"),
          fetcher: Callable[[ModelURI, Path, Path], None] | None = None,
          clock: Callable[[], float] = time.time, deadline: Deadline | None = None) -> StageResult:
    """Stage the entry of ``uri`` (a :class:`CacheKey`; a bare URI is the key of namespace "") under ``root``
    (idempotent: a complete copy is only touched for LRU).

    Creates, replaces and evicts only the stager's own entries (ownership marker); anything else in
    ``root`` is left alone and reported in :attr:`StageResult.foreign`. One stager per entry at a time (the
    entry's lock); the root lock is held only for bookkeeping, so other models' stagers never wait for a
    download."""
    key = _as_key(uri)
    dl = deadline or Deadline(None)
    check_root(root)
    root = root.resolve()
    check_root(root)
    check_source(key.uri, root)
    final = Path(cache_dir(str(root), key))
    marker = final / READY
    get = fetcher or functools.partial(fetch, deadline=dl)
    try:
        return _stage_locked(key, root, final, marker, size, sha256, budget, pvc_root, get, clock, dl)
    except OSError as exc:
        raise _disk_error(exc, f"staging {key.uri}") from None


def _stage_locked(key: CacheKey, root: Path, final: Path, marker: Path, size: int | None, sha256: str | None,
                  budget: int | None, pvc_root: Path, get: Callable[[ModelURI, Path, Path], None],
                  clock: Callable[[], float], dl: Deadline) -> StageResult:
    with _locked(root / (ENTRY_LOCK + final.name), dl, f"entry {final.name}"):
        with _locked(root / ROOT_LOCK, dl, "the cache root"):
            others = _report_foreign(root)
            if (final.exists() or final.is_symlink()) and not is_owned_entry(final):
                raise OccupiedError(f"{final} exists and is not the stager's (no ownership marker): left alone")
            info = _ready_info(final) if marker.is_file() else None
            if _matches(info, size, sha256):
                assert info is not None
                now = clock()
                os.utime(marker, (now, now))
                return StageResult(final / DATA, int(info["size"]), str(info["sha256"]), already=True,
                                   foreign=tuple(others))
            _cleanup_incomplete(root, final.name)  # our own entry without .ready included
            if budget is not None and size is not None:
                evict(root, budget, size, keep=final, namespace=key.namespace)
            work = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=root))
        try:
            (work / OWNER).write_text(_owner_record(final.name, key))  # first: the work dir is ours
            data = work / DATA
            data.mkdir()
            get(key.uri, data, pvc_root)
            dl.check(f"verifying {key.uri}")
            got_size, got_sha = content_digest(data)
            if got_size == 0:
                raise VerifyError(f"{key.uri} gave no bytes: nothing to serve")
            if got_size < TINY_MODEL_BYTES and size is None and sha256 is None:
                log.warning("the staged model is tiny and nothing pinned it (model-size / model-sha256): check the "
                            "source", extra={"uri": key.uri.canonical, "bytes": got_size})
            if size is not None and got_size != size:
                raise VerifyError(f"size mismatch: expected {size}, got {got_size}")
            if sha256 is not None and got_sha != sha256.lower():
                raise VerifyError(f"sha256 mismatch: expected {sha256}, got {got_sha}")
            with _locked(root / ROOT_LOCK, dl, "the cache root"):
                if budget is not None:
                    evict(root, budget, got_size, keep=final, namespace=key.namespace)
                _publish(root, work, final, key, got_size, got_sha, clock)
            return StageResult(final / DATA, got_size, got_sha, already=False, foreign=tuple(others))
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            if is_owned_entry(final) and not marker.exists():
                shutil.rmtree(final, ignore_errors=True)
            raise


def ensure(uri: CacheKey | ModelURI, root: Path, *, size: int | None = None, sha256: str | None = None,
           budget: int | None = None, pvc_root: Path = Path("/mnt/warmscale-pvc"),
           fetcher: Callable[[ModelURI, Path, Path], None] | None = None,
           clock: Callable[[], float] = time.time, deadline: Deadline | None = None) -> StageResult:
    """The engine pod's init container: return at once when the copy is ready on this node (no lock
    taken, so a staging Job of another model never delays it), else stage it here (under the entry's
    lock: a staging Job of the same model in progress is waited for, then found ready)."""
    key = _as_key(uri)
    check_root(root)
    root = root.resolve()
    final = Path(cache_dir(str(root), key))
    info = _ready_info(final)
    if _matches(info, size, sha256):
        assert info is not None
        now = clock()
        with contextlib.suppress(OSError):  # a read-only view of the cache still serves
            os.utime(final / READY, (now, now))
        return StageResult(final / DATA, int(info["size"]), str(info["sha256"]), already=True)
    return stage(key, root, size=size, sha256=sha256, budget=budget, pvc_root=pvc_root, fetcher=fetcher,
                 clock=clock, deadline=deadline)


def remove(uri: CacheKey | ModelURI, root: Path, *, legacy: bool = False, deadline: Deadline | None = None) -> bool:
    """Evict the entry of ``uri`` (and any crashed work dir of it) under its lock; True if something was removed.

    ``legacy``: the entry an earlier controller staged for the URI alone (layout 2). Only the stager's own
    entry is removed (a directory of that name without our ownership marker is left alone and reported).
    The ``.ready`` marker goes first, so a concurrent reader never sees a marked, half-deleted entry."""
    key = _as_key(uri)
    dl = deadline or Deadline(None)
    check_root(root)
    root = root.resolve()
    final = Path(cache_dir(str(root), key, name=key.uri.legacy_cache_name if legacy else None))
    removed = False
    with _locked(root / (ENTRY_LOCK + final.name), dl, f"entry {final.name}"), \
            _locked(root / ROOT_LOCK, dl, "the cache root"):
        if final.exists() or final.is_symlink():
            if is_owned_entry(final):
                (final / READY).unlink(missing_ok=True)
                _fsync_dir(final)
                shutil.rmtree(final, ignore_errors=True)
                removed = True
            else:
                log.warning("not evicting a directory that is not the stager's", extra={"path": str(final)})
        for d in root.iterdir():
            if d.name.startswith(f".tmp-{final.name}-") and is_owned_work_dir(d):
                shutil.rmtree(d, ignore_errors=True)
                removed = True
    return removed


# ---------------------------------------------------------------- CLI


def _checked(check: Callable[[str], object]) -> Callable[[str], str]:
    """An argparse type that validates a flag's value with ``check`` and keeps the text, so a bad value
    is reported as ``argument --flag: ...`` (exit 2) before anything runs."""

    def parse(text: str) -> str:
        try:
            check(text)
        except (ModelURIError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    return parse


def _sha256_arg(text: str) -> None:
    if not re.fullmatch(r"[0-9a-f]{64}", text.strip().lower()):
        raise ValueError(f"expected 64 hex digits, got {text!r}")


def _bytes_arg(text: str) -> None:
    v = parse_quantity(text)
    if not v > 0:
        raise ValueError(f"expected a positive size (bytes or a quantity such as 16Gi), got {text!r}")


def _seconds_arg(text: str) -> None:
    if not float(text) > 0:
        raise ValueError(f"expected a positive number of seconds, got {text!r}")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--uri", required=True, type=_checked(parse_model_uri),
                        help="hf://org/name@rev, s3://bucket/prefix, pvc://claim/path, file:///p")
    parser.add_argument("--cache-root", required=True, help="node-local cache directory")
    parser.add_argument("--namespace", default="",
                        help="the workload's namespace: part of the cache identity unless --sha256 pins the content")
    parser.add_argument("--size", type=_checked(_bytes_arg), help="expected total bytes (or a quantity such as 16Gi)")
    parser.add_argument("--sha256", type=_checked(_sha256_arg),
                        help="expected SHA-256 (file, or directory manifest); also the cache identity")
    parser.add_argument("--budget", type=_checked(_bytes_arg),
                        help="disk budget of the cache root (bytes or quantity); LRU eviction")
    parser.add_argument("--pvc-root", default="/mnt/warmscale-pvc", help="where pvc:// claims are mounted")
    parser.add_argument("--deadline", default=str(int(DEFAULT_DEADLINE_S)), type=_checked(_seconds_arg),
                        help="seconds the whole run may take (lock wait, download, verification); exit 7 after")
    parser.add_argument("--evict", action="store_true",
                        help="remove the model's cache entry instead of staging it (clean-up Jobs)")
    parser.add_argument("--legacy-entry", action="store_true",
                        help="with --evict: the entry an earlier version staged for the URI alone")
    parser.add_argument("--ensure", action="store_true",
                        help="init-container mode: return at once when the copy is ready on this node, "
                             "else stage it (the engine pod then loads $WARMSCALE_MODEL_PATH)")


def run(args: argparse.Namespace) -> int:
    try:
        uri = parse_model_uri(args.uri)
        size = int(parse_quantity(args.size)) if args.size else None
        budget = int(parse_quantity(args.budget)) if args.budget else None
        sha = args.sha256.strip().lower() if args.sha256 else None
        if sha is not None and not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise ValueError("--sha256: expected 64 hex digits")
        secs = float(getattr(args, "deadline", None) or DEFAULT_DEADLINE_S)
        if not secs > 0:
            raise ValueError("--deadline: expected a positive number of seconds")
    except (ModelURIError, ValueError) as exc:
        log.error("bad arguments", extra={"error": str(exc)})
        return 2
    key = CacheKey(uri, getattr(args, "namespace", "") or "", sha)
    deadline = Deadline(secs)
    try:
        if getattr(args, "evict", False):
            gone = remove(key, Path(args.cache_root), legacy=getattr(args, "legacy_entry", False), deadline=deadline)
            log.info("evicted" if gone else "nothing to evict", extra={"uri": uri.canonical})
            return 0
        do = ensure if getattr(args, "ensure", False) else stage
        res = do(key, Path(args.cache_root), size=size, sha256=sha, budget=budget, pvc_root=Path(args.pvc_root),
                 deadline=deadline)
    except StageError as exc:
        log.error("staging failed", extra={"uri": uri.canonical, "error": str(exc), "exit_code": exc.exit_code})
        return exc.exit_code
    except OSError as exc:  # the cache itself (outside a download): a full disk is the budget's code
        err = _disk_error(exc, "writing the cache")
        log.error("staging failed", extra={"uri": uri.canonical, "error": str(err), "exit_code": err.exit_code})
        return err.exit_code
    log.info("staged", extra={"uri": uri.canonical, "identity": key.identity, "path": str(res.path),
                              "bytes": res.size, "sha256": res.sha256, "already": res.already,
                              "foreign": len(res.foreign)})
    return 0
