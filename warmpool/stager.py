"""``warmscale stage``: put a model's weights into the node-local cache, atomically.

Layout under the cache root (one directory per model URI, named by a digest of the URI, see
:func:`warmpool.model_uri.cache_dir`)::

    <root>/.lock                      flock held while staging or evicting
    <root>/.tmp-<name>-<random>/      work in progress (removed on the next run if we crash)
    <root>/<name>/.warmscale-entry    ownership marker (JSON: format, name, uri), written first
    <root>/<name>/data/...            the weights
    <root>/<name>/.ready              JSON marker written last (temp file + rename); its mtime is the
                                      last use (LRU); only directories with it are complete

``<name>`` is ``ws-<scheme>-<24 hex>``. The stager creates, replaces, evicts and cleans up **only its
own** entries and work dirs: a directory counts as its own when it carries the ownership marker naming
that very directory. Anything else in the root (other software's data, entries of earlier versions
without the marker, symlinks) is never modified, only reported; the LRU budget counts own entries
only. A system path (or a parent of one) is refused as the cache root.

Publishing is copy into ``.tmp-*`` -> verify size / SHA-256 -> fsync -> ``rename`` to ``<name>`` ->
write ``.ready``. A crash at any point leaves no ``.ready`` marker, so a half copy is never used.
The checksum of content that is a single file is that file's SHA-256; of a directory, the SHA-256
of its manifest, the sorted lines ``<sha256 of file>  <relative path>\\n``.

``--ensure`` (the init container the webhook adds to engine pods): a ready copy returns at once
without taking the lock; otherwise the model is staged as above.

Exit codes: 0 staged (or already staged), 2 bad arguments (or a system path as the root), 3 does
not fit the disk budget, 4 verification failed, 5 source error, 6 the entry's name is taken by a
directory that is not the stager's.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from warmscale.warmpool.cache_roots import system_path_conflict
from warmscale.warmpool.model_uri import ModelURI, ModelURIError, cache_dir, parse_model_uri
from warmscale.warmpool.quantity import parse_quantity

log = logging.getLogger("warmscale.stager")
READY = ".ready"
OWNER = ".warmscale-entry"  # ownership marker, written first into every work dir
OWNER_FORMAT = "warmscale.io/cache-entry/v1"
ENTRY_NAME = re.compile(r"ws-(hf|s3|pvc|file)-[0-9a-f]{24}")
DATA = "data"
CHUNK = 4 * 1024 * 1024


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
    """The cache root is (or overlaps) a system path."""

    exit_code = 2


@dataclass(frozen=True)
class StageResult:
    path: Path  # the data directory
    size: int
    sha256: str
    already: bool
    foreign: tuple[Path, ...] = ()  # what else is in the cache root (not ours: left alone)


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


# ---------------------------------------------------------------- sources


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
    with src.open("rb") as i, dest.open("wb") as o:
        while chunk := i.read(CHUNK):
            o.write(chunk)
        o.flush()
        os.fsync(o.fileno())


def _http_get(url: str, dest: Path, headers: dict[str, str], timeout: float = 60.0, attempts: int = 5) -> None:
    delay = 2.0
    for attempt in range(1, attempts + 1):
        try:
            req = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(req, timeout=timeout) as r, dest.open("wb") as o:
                while chunk := r.read(CHUNK):
                    o.write(chunk)
                o.flush()
                os.fsync(o.fileno())
            return
        except OSError as exc:
            if attempt == attempts:
                raise StageError(f"download {url} failed: {exc}") from exc
            log.warning("download failed, retrying", extra={"url": url, "attempt": attempt, "error": str(exc)})
            time.sleep(delay)
            delay = min(delay * 2, 60.0)


def _fetch_hf(uri: ModelURI, dest: Path) -> None:
    """Hugging Face Hub: list the revision's files, download each (token from HF_TOKEN)."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    headers = {"User-Agent": "warmscale-stager"}
    if token := os.environ.get("HF_TOKEN"):
        headers["Authorization"] = f"Bearer {token}"
    rev = urllib.parse.quote(uri.revision, safe="")
    listing = f"{endpoint}/api/models/{uri.location}/revision/{rev}"
    try:
        with urllib.request.urlopen(urllib.request.Request(listing, headers=headers), timeout=60) as r:
            info = json.load(r)
    except OSError as exc:
        raise StageError(f"listing {uri} failed: {exc}") from exc
    for sib in info.get("siblings") or []:
        rel = str(sib.get("rfilename", ""))
        target = _safe_join(dest, rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        url = f"{endpoint}/{uri.location}/resolve/{rev}/{urllib.parse.quote(rel)}"
        _http_get(url, target, headers)


def _fetch_s3(uri: ModelURI, dest: Path) -> None:
    """S3 (or compatible, AWS_ENDPOINT_URL): every object under the prefix, via boto3."""
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
            found = True
            target = _safe_join(dest, key[len(prefix):] or Path(key).name)
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(uri.location, key, str(target))
    if not found:
        raise StageError(f"no objects under {uri}")


def fetch(uri: ModelURI, dest: Path, pvc_root: Path) -> None:
    if uri.scheme == "file":
        _copy_local(Path(uri.path), dest)
    elif uri.scheme == "pvc":
        base = pvc_root / uri.location
        src = _safe_join(base, uri.path) if uri.path else base
        _copy_local(src, dest)
    elif uri.scheme == "hf":
        _fetch_hf(uri, dest)
    elif uri.scheme == "s3":
        _fetch_s3(uri, dest)
    else:  # pragma: no cover - parse_model_uri rejects others
        raise StageError(f"unsupported scheme {uri.scheme}")


# ---------------------------------------------------------------- cache


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _owner_record(name: str, uri: ModelURI) -> str:
    return json.dumps({"format": OWNER_FORMAT, "name": name, "uri": uri.canonical}, sort_keys=True)


def owned_name(d: Path) -> str | None:
    """The entry name ``d``'s ownership marker claims, if ``d`` is a real directory (not a symlink) with a
    valid marker of ours; else None (foreign, or an entry of an earlier version: never touched)."""
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
    return name if isinstance(name, str) and ENTRY_NAME.fullmatch(name) else None


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


def entries(root: Path) -> list[Entry]:
    """The stager's own entries under ``root`` (anything else there is not ours and not listed)."""
    out = []
    for d in root.iterdir() if root.exists() else []:
        if d.name.startswith(".") or not is_owned_entry(d):
            continue
        marker = d / READY
        ready = marker.is_file()
        data = d / DATA  # the budget counts the weights, not our small marker files
        out.append(Entry(d, ready, marker.stat().st_mtime if ready else 0.0, _du(data if data.is_dir() else d)))
    return out


def foreign(root: Path) -> list[Path]:
    """Everything under ``root`` that is not the stager's (left alone, reported)."""
    out = []
    for d in sorted(root.iterdir()) if root.exists() else []:
        if d.name == ".lock" or is_owned_entry(d) or is_owned_work_dir(d):
            continue
        out.append(d)
    return out


def is_ready(root: Path, uri: ModelURI) -> bool:
    final = Path(cache_dir(str(root), uri))
    return is_owned_entry(final) and (final / READY).is_file()


def _cleanup_incomplete(root: Path) -> None:
    """Under the lock: remove our crashed work dirs and our entries without a ``.ready`` marker."""
    for d in root.iterdir():
        if d.name.startswith(".tmp-") and is_owned_work_dir(d):
            shutil.rmtree(d, ignore_errors=True)
    for e in entries(root):
        if not e.ready:
            shutil.rmtree(e.path, ignore_errors=True)


def _report_foreign(root: Path) -> list[Path]:
    found = foreign(root)
    if found:
        log.warning("data in the cache root that is not the stager's: left alone", extra={
            "root": str(root), "count": len(found), "paths": [p.name for p in found[:20]]})
    return found


def evict(root: Path, budget: int, need: int, keep: Path | None = None) -> list[Path]:
    """Remove our least-recently-used complete entries until ``need`` more bytes fit in ``budget``.

    The budget counts the stager's own entries only: data that is not ours is never evicted."""
    mine = entries(root)
    es = sorted((e for e in mine if e.path != keep and e.ready), key=lambda e: e.last_used)
    used = sum(e.size for e in mine)
    removed = []
    for e in es:
        if used + need <= budget:
            break
        (e.path / READY).unlink(missing_ok=True)
        shutil.rmtree(e.path, ignore_errors=True)
        used -= e.size
        removed.append(e.path)
        log.info("evicted", extra={"path": str(e.path), "bytes": e.size})
    if used + need > budget:
        raise BudgetError(f"{need} bytes do not fit the cache budget {budget} ({used} in use after eviction)")
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


def stage(uri: ModelURI, root: Path, *, size: int | None = None, sha256: str | None = None,
          budget: int | None = None, pvc_root: Path = Path("/mnt/warmscale-pvc"),
          fetcher: Callable[[ModelURI, Path, Path], None] = fetch,
          clock: Callable[[], float] = time.time) -> StageResult:
    """Stage ``uri`` under ``root`` (idempotent: a complete copy is only touched for LRU).

    Creates, replaces and evicts only the stager's own entries (ownership marker); anything else in
    ``root`` is left alone and reported in :attr:`StageResult.foreign`."""
    check_root(root)
    root = root.resolve()
    check_root(root)
    final = Path(cache_dir(str(root), uri))
    marker = final / READY
    with _locked(root):
        others = _report_foreign(root)
        if final.exists() or final.is_symlink():
            if not is_owned_entry(final):
                raise OccupiedError(f"{final} exists and is not the stager's (no ownership marker): left alone")
            if marker.is_file():
                info = json.loads(marker.read_text())
                if (size is None or info.get("size") == size) and (sha256 is None or info.get("sha256") == sha256):
                    now = clock()
                    os.utime(marker, (now, now))
                    return StageResult(final / DATA, int(info["size"]), str(info["sha256"]), already=True,
                                       foreign=tuple(others))
                marker.unlink()  # the expectation changed: re-stage (our own entry)
            shutil.rmtree(final)
        _cleanup_incomplete(root)
        if budget is not None and size is not None:
            evict(root, budget, size)
        work = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=root))
        try:
            (work / OWNER).write_text(_owner_record(final.name, uri))  # first: the work dir is ours
            data = work / DATA
            data.mkdir()
            fetcher(uri, data, pvc_root)
            got_size, got_sha = content_digest(data)
            if size is not None and got_size != size:
                raise VerifyError(f"size mismatch: expected {size}, got {got_size}")
            if sha256 is not None and got_sha != sha256.lower():
                raise VerifyError(f"sha256 mismatch: expected {sha256}, got {got_sha}")
            if budget is not None:
                evict(root, budget, got_size, keep=work)
            _fsync_dir(work)
            os.rename(work, final)  # atomic on one filesystem; final does not exist here
            _fsync_dir(root)
            tmp_marker = final / (READY + ".tmp")
            tmp_marker.write_text(json.dumps({"uri": uri.canonical, "size": got_size, "sha256": got_sha,
                                              "staged_at": clock()}))
            with tmp_marker.open("rb") as f:
                os.fsync(f.fileno())
            os.rename(tmp_marker, marker)
            _fsync_dir(final)
            return StageResult(final / DATA, got_size, got_sha, already=False, foreign=tuple(others))
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            if is_owned_entry(final) and not marker.exists():
                shutil.rmtree(final, ignore_errors=True)
            raise


def ensure(uri: ModelURI, root: Path, *, size: int | None = None, sha256: str | None = None,
           budget: int | None = None, pvc_root: Path = Path("/mnt/warmscale-pvc"),
           fetcher: Callable[[ModelURI, Path, Path], None] = fetch,
           clock: Callable[[], float] = time.time) -> StageResult:
    """The engine pod's init container: return at once when the copy is ready on this node (no lock
    taken, so a staging Job of another model never delays it), else stage it here (under the lock: a
    staging Job of the same model in progress is waited for, then found ready)."""
    check_root(root)
    root = root.resolve()
    final = Path(cache_dir(str(root), uri))
    marker = final / READY
    try:
        info = json.loads(marker.read_text()) if is_owned_entry(final) else None
    except (OSError, ValueError):
        info = None
    if isinstance(info, dict) and (size is None or info.get("size") == size) and (
            sha256 is None or info.get("sha256") == sha256.lower()):
        now = clock()
        with contextlib.suppress(OSError):  # a read-only view of the cache still serves
            os.utime(marker, (now, now))
        return StageResult(final / DATA, int(info["size"]), str(info["sha256"]), already=True)
    return stage(uri, root, size=size, sha256=sha256, budget=budget, pvc_root=pvc_root, fetcher=fetcher,
                 clock=clock)


def remove(uri: ModelURI, root: Path) -> bool:
    """Evict ``uri``'s entry (and any crashed work dir of it) under the lock; True if something was removed.

    Only the stager's own entry is removed (a directory of that name without our ownership marker is
    left alone and reported). The ``.ready`` marker goes first, so a concurrent reader never sees a
    marked, half-deleted entry."""
    check_root(root)
    root = root.resolve()
    final = Path(cache_dir(str(root), uri))
    removed = False
    with _locked(root):
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


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--uri", required=True, help="hf://org/name@rev, s3://bucket/prefix, pvc://claim/path, file:///p")
    parser.add_argument("--cache-root", required=True, help="node-local cache directory")
    parser.add_argument("--size", help="expected total bytes (or a quantity such as 16Gi)")
    parser.add_argument("--sha256", help="expected SHA-256 (file, or directory manifest)")
    parser.add_argument("--budget", help="disk budget of the cache root (bytes or quantity); LRU eviction")
    parser.add_argument("--pvc-root", default="/mnt/warmscale-pvc", help="where pvc:// claims are mounted")
    parser.add_argument("--evict", action="store_true",
                        help="remove the model's cache entry instead of staging it (clean-up Jobs)")
    parser.add_argument("--ensure", action="store_true",
                        help="init-container mode: return at once when the copy is ready on this node, "
                             "else stage it (the engine pod then loads $WARMSCALE_MODEL_PATH)")


def run(args: argparse.Namespace) -> int:
    try:
        uri = parse_model_uri(args.uri)
        size = int(parse_quantity(args.size)) if args.size else None
        budget = int(parse_quantity(args.budget)) if args.budget else None
    except (ModelURIError, ValueError) as exc:
        log.error("bad arguments", extra={"error": str(exc)})
        return 2
    if getattr(args, "evict", False):
        try:
            gone = remove(uri, Path(args.cache_root))
        except StageError as exc:
            log.error("eviction refused", extra={"uri": uri.canonical, "error": str(exc)})
            return exc.exit_code
        log.info("evicted" if gone else "nothing to evict", extra={"uri": uri.canonical})
        return 0
    do = ensure if getattr(args, "ensure", False) else stage
    try:
        res = do(uri, Path(args.cache_root), size=size, sha256=args.sha256, budget=budget,
                 pvc_root=Path(args.pvc_root))
    except StageError as exc:
        log.error("staging failed", extra={"uri": uri.canonical, "error": str(exc)})
        return exc.exit_code
    log.info("staged", extra={"uri": uri.canonical, "path": str(res.path), "bytes": res.size,
                              "sha256": res.sha256, "already": res.already, "foreign": len(res.foreign)})
    return 0
