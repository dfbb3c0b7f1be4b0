import argparse
import hashlib
import json
import multiprocessing
import os
import signal
from pathlib import Path

import pytest

from warmscale.warmpool import stager as stager_cli
from warmscale.warmpool.model_uri import CacheKey, ModelURI, cache_dir, parse_model_uri
from warmscale.warmpool.stager import (
    OWNER,
    READY,
    BudgetError,
    Deadline,
    OccupiedError,
    RootError,
    StageError,
    VerifyError,
    _owner_record,
    _safe_join,
    entries,
    is_ready,
    stage,
    tree_digest,
)


def make_model(d: Path, n: int = 3, size: int = 1000) -> Path:
    d.mkdir(parents=True)
    for i in range(n):
        (d / f"shard-{i}.safetensors").write_bytes(bytes([i]) * size)
    (d / "sub").mkdir()
    (d / "sub" / "config.json").write_text('{"a": 1}')
    return d


def test_stage_directory_and_idempotent(tmp_path: Path) -> None:
    src = make_model(tmp_path / "src")
    uri = parse_model_uri(f"file://{src}")
    size, digest = tree_digest(src)
    root = tmp_path / "cache"
    r = stage(uri, root, size=size, sha256=digest)
    assert not r.already and r.size == size and r.sha256 == digest
    assert (r.path / "sub" / "config.json").read_text() == '{"a": 1}'
    assert is_ready(root, uri) and Path(cache_dir(str(root), CacheKey(uri))).parent == root.resolve()
    again = stage(uri, root, size=size, sha256=digest)
    assert again.already
    assert not [p for p in root.iterdir() if p.name.startswith(".tmp-")]


def test_single_file_checksum_is_file_sha(tmp_path: Path) -> None:
    f = tmp_path / "model.gguf"
    f.write_bytes(b"x" * 5000)
    r = stage(parse_model_uri(f"file://{f}"), tmp_path / "c", sha256=hashlib.sha256(b"x" * 5000).hexdigest())
    assert (r.path / "model.gguf").stat().st_size == 5000


@pytest.mark.parametrize(("size", "sha"), [(1, None), (None, "0" * 64)])
def test_verification_failure_leaves_nothing(tmp_path: Path, size: int | None, sha: str | None) -> None:
    src = make_model(tmp_path / "src")
    uri = parse_model_uri(f"file://{src}")
    root = tmp_path / "cache"
    with pytest.raises(VerifyError):
        stage(uri, root, size=size, sha256=sha)
    assert not is_ready(root, uri)
    assert all(p.name.startswith(".lock") and p.is_file() for p in root.iterdir())  # only the (empty) lock files


def test_source_error_and_partial_copy(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    uri = parse_model_uri("file:///does/not/exist")
    with pytest.raises(StageError):
        stage(uri, root)

    def partial(u: ModelURI, dest: Path, _pvc: Path) -> None:
        (dest / "half").write_bytes(b"x" * 10)
        raise StageError("network reset")

    with pytest.raises(StageError):
        stage(parse_model_uri("hf://a/b@r"), root, fetcher=partial)
    assert entries(root) == [] and not is_ready(root, parse_model_uri("hf://a/b@r"))


def _crashing_stage(root: str) -> None:
    def fetcher(u: ModelURI, dest: Path, _pvc: Path) -> None:
        (dest / "shard-0").write_bytes(b"y" * 100)
        os.kill(os.getpid(), signal.SIGKILL)  # crash mid-copy

    stage(parse_model_uri("hf://org/crash@r1"), Path(root), fetcher=fetcher)


def test_crash_mid_copy_never_ready_and_recovers(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    proc = multiprocessing.get_context("fork").Process(target=_crashing_stage, args=(str(root),))
    proc.start()
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL
    uri = parse_model_uri("hf://org/crash@r1")
    assert not is_ready(root, uri)
    assert any(p.name.startswith(".tmp-") for p in root.iterdir())  # the leftover work dir
    assert not list(root.rglob(READY))

    def ok(u: ModelURI, dest: Path, _pvc: Path) -> None:
        (dest / "shard-0").write_bytes(b"z" * 100)

    r = stage(uri, root, fetcher=ok)
    assert r.size == 100 and is_ready(root, uri)
    assert not any(p.name.startswith(".tmp-") for p in root.iterdir())


def test_crash_after_rename_before_marker_is_cleaned(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    uri = parse_model_uri("hf://org/m@r")
    final = Path(cache_dir(str(root), CacheKey(uri)))
    (final / "data").mkdir(parents=True)
    (final / "data" / "x").write_bytes(b"partial")
    (final / OWNER).write_text(_owner_record(final.name, uri))  # ours: renamed from our work dir
    assert not is_ready(root, uri)

    def ok(u: ModelURI, dest: Path, _pvc: Path) -> None:
        (dest / "x").write_bytes(b"complete")

    assert stage(uri, root, fetcher=ok).size == len(b"complete")
    assert (final / "data" / "x").read_bytes() == b"complete"


def test_lru_eviction_under_budget(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    clock = [1000.0]

    def writer(n: int):
        def f(u: ModelURI, dest: Path, _pvc: Path) -> None:
            (dest / "w").write_bytes(b"a" * n)

        return f

    a, b, c = (parse_model_uri(f"hf://org/{x}@r") for x in "abc")
    stage(a, root, fetcher=writer(400), budget=1000, clock=lambda: clock[0])
    os.utime(Path(cache_dir(str(root), CacheKey(a))) / READY, (1000, 1000))
    stage(b, root, fetcher=writer(400), budget=1000)
    os.utime(Path(cache_dir(str(root), CacheKey(b))) / READY, (2000, 2000))
    clock[0] = 3000.0
    stage(a, root, fetcher=writer(400), budget=1000, clock=lambda: clock[0])  # touch: a is now the newest
    stage(c, root, fetcher=writer(400), budget=1000, size=400)
    assert is_ready(root, a) and is_ready(root, c) and not is_ready(root, b)
    with pytest.raises(BudgetError):
        stage(parse_model_uri("hf://org/huge@r"), root, fetcher=writer(5000), budget=1000)
    assert is_ready(root, a) is False or True  # may have been evicted trying; never a partial entry
    assert all(e.ready for e in entries(root))


def test_pvc_source(tmp_path: Path) -> None:
    make_model(tmp_path / "pvcs" / "weights" / "llama")
    r = stage(parse_model_uri("pvc://weights/llama"), tmp_path / "cache", pvc_root=tmp_path / "pvcs")
    assert (r.path / "shard-0.safetensors").exists()


@pytest.mark.parametrize("rel", ["../x", "/etc/passwd", "a/../../b", "", "."])
def test_remote_listing_cannot_escape(tmp_path: Path, rel: str) -> None:
    with pytest.raises(StageError):
        _safe_join(tmp_path, rel)
    assert _safe_join(tmp_path, "a/./b") == tmp_path / "a" / "b"


def test_symlinks_in_source_are_not_followed(tmp_path: Path) -> None:
    src = make_model(tmp_path / "src")
    secret = tmp_path / "secret"
    secret.write_text("nope")
    (src / "link").symlink_to(secret)
    r = stage(parse_model_uri(f"file://{src}"), tmp_path / "cache")
    assert not (r.path / "link").exists()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd")
    stager_cli.configure(sub.add_parser("stage"))
    args = parser.parse_args([a for a in argv if a not in ("--log-format", "text")])
    return stager_cli.run(args)


def test_cli(tmp_path: Path) -> None:
    src = make_model(tmp_path / "src")
    size, digest = tree_digest(src)
    root = tmp_path / "cache"
    base = ["--log-format", "text", "stage", "--uri", f"file://{src}", "--cache-root", str(root)]
    assert main([*base, "--size", str(size), "--sha256", digest, "--budget", "1Mi"]) == 0
    assert main([*base, "--sha256", "1" * 64]) == 4
    with pytest.raises(SystemExit) as bad:  # argparse names the flag: "argument --uri: ..."
        main(["stage", "--uri", "ftp://x", "--cache-root", str(root)])
    assert bad.value.code == 2
    assert main(["stage", "--uri", f"file://{src}", "--cache-root", str(tmp_path / "c2"), "--budget", "10"]) == 3


def test_evict_removes_only_that_model(tmp_path: Path) -> None:
    from warmscale.warmpool.stager import remove

    a, b = make_model(tmp_path / "a"), make_model(tmp_path / "b", n=2)
    ua, ub = parse_model_uri(f"file://{a}"), parse_model_uri(f"file://{b}")
    root = tmp_path / "cache"
    stage(ua, root)
    stage(ub, root)
    crashed = root / f".tmp-{Path(cache_dir(str(root), CacheKey(ua))).name}-crash"  # a crashed work dir of a (ours)
    crashed.mkdir()
    (crashed / OWNER).write_text(_owner_record(Path(cache_dir(str(root), CacheKey(ua))).name, ua))
    assert remove(ua, root)
    assert not is_ready(root, ua) and not Path(cache_dir(str(root), CacheKey(ua))).exists()
    assert is_ready(root, ub)
    assert not [p for p in root.iterdir() if p.name.startswith(".tmp-")]
    assert not remove(ua, root)  # idempotent
    args = argparse.Namespace(uri=f"file://{b}", cache_root=str(root), size=None, sha256=None, budget=None,
                              pvc_root="/nonexistent", evict=True)
    assert stager_cli.run(args) == 0 and not is_ready(root, ub)


def test_ensure_returns_at_once_when_ready_and_stages_otherwise(tmp_path: Path) -> None:
    """The init container's mode, in process (the process itself: tests/warmpool/test_cluster.py)."""
    from warmscale.warmpool.stager import _locked, ensure, fetch

    src = tmp_path / "src"
    src.mkdir()
    (src / "w.bin").write_bytes(b"weights" * 100)
    root = tmp_path / "cache"
    root.mkdir()
    uri = parse_model_uri(f"file://{src}")
    calls: list[str] = []

    def fetcher(u: ModelURI, dest: Path, pvc: Path) -> None:
        calls.append(u.canonical)
        fetch(u, dest, pvc)

    first = ensure(uri, root, fetcher=fetcher)
    assert not first.already and calls == [uri.canonical] and (first.path / "w.bin").is_file()
    # ready: returns without the lock even while another staging holds it
    entry = Path(cache_dir(str(root.resolve()), CacheKey(uri))).name
    with _locked(root.resolve() / ".lock", Deadline(1), "root"), \
            _locked(root.resolve() / f".lock-{entry}", Deadline(1), "entry"):
        again = ensure(uri, root, fetcher=fetcher)
    assert again.already and calls == [uri.canonical] and again.path == first.path
    # a copy that does not match the expected size is not "ready": re-staged (and verified)
    from warmscale.warmpool.stager import VerifyError

    with pytest.raises(VerifyError):
        ensure(uri, root, size=1, fetcher=fetcher)
    assert len(calls) == 2


# ---------------------------------------------------------------- ownership: only our own entries


def _foreign_tree(root: Path) -> dict[str, bytes]:
    """Data of others in the cache root: another program's directories (with and without a `.ready`),
    an entry of an earlier stager version (no ownership marker), a dot dir, a loose file."""
    files = {
        "models--Qwen--Qwen2.5/blobs/abc": b"hf cache of the engine" * 50,
        "other-app/.ready": b"{}",
        "other-app/weights.bin": b"w" * 3000,
        "plain-dir/x": b"x" * 10,
        f"hf-{'a' * 24}/.ready": b'{"uri": "hf://org/old@r", "size": 5, "sha256": "00"}',  # layout 1 entry
        f"hf-{'a' * 24}/data/w": b"old!!",
        ".tmp-someone-else/y": b"y",
        "loose.txt": b"hello",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def _snapshot(root: Path, files: dict[str, bytes]) -> dict[str, bytes]:
    return {rel: (root / rel).read_bytes() for rel in files if (root / rel).exists()}


def test_foreign_data_never_deleted_evicted_or_counted(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    files = _foreign_tree(root)

    def writer(n: int):
        def f(u: ModelURI, dest: Path, _pvc: Path) -> None:
            (dest / "w").write_bytes(b"a" * n)

        return f

    a, b = parse_model_uri("hf://org/a@r"), parse_model_uri("hf://org/b@r")
    ra = stage(a, root, fetcher=writer(600), budget=1000)
    names = {p.name for p in ra.foreign}
    assert {"models--Qwen--Qwen2.5", "other-app", "plain-dir", f"hf-{'a' * 24}", ".tmp-someone-else",
            "loose.txt"} <= names  # reported
    stage(b, root, fetcher=writer(600), budget=1000)  # evicts a (ours), never the others
    assert not is_ready(root, a) and is_ready(root, b)
    assert _snapshot(root, files) == files  # every foreign byte is still there
    # the budget counts our own entries only (the foreign 4 KB do not make 600 bytes not fit)
    assert {e.path.name for e in entries(root)} == {Path(cache_dir(str(root), CacheKey(b))).name}
    from warmscale.warmpool.stager import remove

    assert remove(b, root) and _snapshot(root, files) == files


def test_earlier_version_entry_left_alone_and_staged_afresh(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    uri = parse_model_uri("hf://org/m@r")
    legacy = root / uri.legacy_cache_name.removeprefix("ws-")  # layout 1: <scheme>-<hex>, no ownership marker
    (legacy / "data").mkdir(parents=True)
    (legacy / "data" / "w").write_bytes(b"old")
    (legacy / READY).write_text("{}")

    def ok(u: ModelURI, dest: Path, _pvc: Path) -> None:
        (dest / "w").write_bytes(b"new")

    r = stage(uri, root, fetcher=ok)
    assert not r.already and (r.path / "w").read_bytes() == b"new" and legacy in r.foreign
    assert (legacy / "data" / "w").read_bytes() == b"old" and (legacy / READY).exists()
    assert json.loads((r.path.parent / OWNER).read_text())["name"] == r.path.parent.name


def test_entry_name_taken_by_foreign_dir_is_refused_untouched(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    uri = parse_model_uri("hf://org/m@r")
    final = Path(cache_dir(str(root), CacheKey(uri)))
    (final / "data").mkdir(parents=True)
    (final / "data" / "keep").write_bytes(b"k")
    (final / READY).write_text('{"size": 1, "sha256": "x"}')  # a .ready, but no ownership marker
    with pytest.raises(OccupiedError) as exc:
        stage(uri, root, fetcher=lambda *_: None)
    assert exc.value.exit_code == 6
    from warmscale.warmpool.stager import remove

    assert not remove(uri, root)
    assert (final / "data" / "keep").read_bytes() == b"k" and (final / READY).exists()
    # a symlink under our name (pointing at someone's data) is never followed or removed either
    final2 = Path(cache_dir(str(root), CacheKey(parse_model_uri("hf://org/n@r"))))
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "f").write_text("v")
    final2.symlink_to(victim)
    with pytest.raises(OccupiedError):
        stage(parse_model_uri("hf://org/n@r"), root, fetcher=lambda *_: None)
    assert not remove(parse_model_uri("hf://org/n@r"), root)
    assert (victim / "f").read_text() == "v" and final2.is_symlink()


def test_forged_marker_naming_another_entry_is_not_ours(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    d = root / "precious"
    d.mkdir(parents=True)
    (d / OWNER).write_text(_owner_record("ws-hf-" + "0" * 24, parse_model_uri("hf://a/b")))
    stage(parse_model_uri("hf://org/m@r"), root, fetcher=lambda u, dest, p: (dest / "w").write_bytes(b"1"))
    assert d.exists() and (d / OWNER).exists()


@pytest.mark.parametrize("bad", ["/", "/etc", "/proc", "/var/lib/kubelet", "/var/lib/kubelet/pods", "/var/lib",
                                 "/usr/lib/x", "/etc/../etc"])
def test_system_roots_refused_before_touching_anything(bad: str) -> None:
    uri = parse_model_uri("hf://org/m@r")
    with pytest.raises(RootError):
        stage(uri, Path(bad), fetcher=lambda *_: pytest.fail("fetched"))
    from warmscale.warmpool.stager import remove

    with pytest.raises(RootError):
        remove(uri, Path(bad))
    args = argparse.Namespace(uri="hf://org/m@r", cache_root=bad, size=None, sha256=None, budget=None,
                              pvc_root="/nonexistent", evict=False)
    assert stager_cli.run(args) == 2
