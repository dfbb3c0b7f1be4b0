"""The stager's Hub download (issue 19, requirement 5): parallel, resumable, pinned to the revision's
commit, huggingface_hub's environment variables honoured. Against the Hub stand-in on 127.0.0.1
(:mod:`tests.faults.hubserver`), through the CLI entry.
"""

from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.faults import hubserver as hs
from warmscale.warmpool import stager
from warmscale.warmpool.model_uri import CacheKey, parse_model_uri

COMMIT = "c0ffee" + "0" * 34


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    stager.configure(parser)
    return stager.run(parser.parse_args(list(argv)))


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Any:
    with hs.serve() as h:
        monkeypatch.setenv("HF_ENDPOINT", h.base)
        for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_DOWNLOAD_TIMEOUT"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setattr(stager, "BACKOFF_FIRST_S", 0.01)
        yield h


def _hf(root: Path, rev: str = "r1", *extra: str) -> int:
    return run("--uri", f"hf://org/model@{rev}", "--cache-root", str(root), "--namespace", "a", *extra)


def _data(root: Path, rev: str = "r1") -> Path:
    return Path(stager.cache_dir(str(root.resolve()), CacheKey(parse_model_uri(f"hf://org/model@{rev}"), "a"))) / "data"


def test_files_download_in_parallel(hub: hs.Hub, tmp_path: Path) -> None:
    """Each shard's route answers only once all three are in flight: one at a time would never finish."""
    shards = {f"model-0000{i}-of-00003.safetensors": os.urandom(10_000) for i in range(1, 4)}
    hs.model(hub, shards)
    together = threading.Barrier(len(shards), timeout=5)

    def held(data: bytes) -> hs.Route:
        def route(h: Any) -> None:
            try:
                together.wait()
            except threading.BrokenBarrierError:
                h.send_response(503)
                h.send_header("Content-Length", "0")
                h.end_headers()
                return
            hs.body(data)(h)

        return route

    for name, data in shards.items():
        hub.routes[f"/org/model/resolve/r1/{name}"] = held(data)
    root = tmp_path / "cache"
    assert _hf(root) == 0
    assert {p.name: p.read_bytes() for p in _data(root).iterdir()} == shards


def test_a_cut_download_resumes_where_it_stopped(hub: hs.Hub, tmp_path: Path) -> None:
    data = os.urandom(200_000)
    hs.model(hub, {"model.safetensors": data}, lfs={"model.safetensors"})
    sent = []

    def route(h: Any) -> None:
        rng = h.headers.get("Range")
        if rng is None:  # the first attempt: half the body, then the connection drops
            sent.append(100_000)
            hs.body(data[:100_000], length=len(data))(h)
            return
        start = int(rng.removeprefix("bytes=").rstrip("-"))
        sent.append(len(data) - start)
        h.send_response(206)
        h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.send_header("Content-Length", str(len(data) - start))
        h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.write(data[start:])

    hub.routes["/org/model/resolve/r1/model.safetensors"] = route
    root = tmp_path / "cache"
    assert _hf(root) == 0
    assert (_data(root) / "model.safetensors").read_bytes() == data  # and its LFS SHA-256 verified whole
    assert sent == [100_000, 100_000]  # the retry fetched the second half only
    rng = [hdrs.get("range") for p, hdrs in hub.seen if p.endswith("model.safetensors")]
    assert rng == [None, "bytes=100000-"]


def test_a_server_ignoring_range_sends_it_whole_and_a_wrong_range_restarts(hub: hs.Hub, tmp_path: Path) -> None:
    data = os.urandom(50_000)
    hs.model(hub, {"w.bin": data})
    calls = {"n": 0}

    def route(h: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            hs.body(data[:20_000], length=len(data))(h)
        elif calls["n"] == 2:  # a 206 for a range that is not the one asked for
            h.send_response(206)
            h.send_header("Content-Range", f"bytes 0-{len(data) - 1}/{len(data)}")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        else:  # no Range support: 200 with the whole body
            hs.body(data)(h)

    hub.routes["/org/model/resolve/r1/w.bin"] = route
    root = tmp_path / "cache"
    assert _hf(root) == 0 and (_data(root) / "w.bin").read_bytes() == data and calls["n"] == 3


def test_every_file_is_read_at_the_listings_commit(hub: hs.Hub, tmp_path: Path) -> None:
    """`main` resolves to a commit in the listing; files come from that commit, so a branch that moves
    during the download cannot mix two revisions."""
    files = {"config.json": b'{"model_type": "llama"}', "model.safetensors": os.urandom(4096)}
    hs.model(hub, files, rev="main", commit=COMMIT)
    hub.routes["/org/model/resolve/main/model.safetensors"] = hs.body(b"moved on" * 512)  # the branch's newer file
    root = tmp_path / "cache"
    assert _hf(root, "main") == 0
    assert (_data(root, "main") / "model.safetensors").read_bytes() == files["model.safetensors"]
    assert all(f"/resolve/{COMMIT}/" in p for p, _ in hub.seen if "/resolve/" in p)


def test_huggingface_hub_environment_variables(hub: hs.Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hs.model(hub, {"w.bin": b"w" * 100})
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_legacy")  # the older name, when HF_TOKEN is unset
    assert _hf(tmp_path / "c1") == 0
    assert all(h.get("authorization") == "Bearer hf_legacy" for _, h in hub.seen)
    monkeypatch.setenv("HF_TOKEN", "hf_new")  # HF_TOKEN wins
    assert _hf(tmp_path / "c2") == 0 and hub.seen[-1][1].get("authorization") == "Bearer hf_new"
    seen = len(hub.seen)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert _hf(tmp_path / "c3") == 5 and len(hub.seen) == seen  # offline: nothing requested
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "soon")
    assert _hf(tmp_path / "c4") == 2 and len(hub.seen) == seen  # a bad value names the variable, exit 2


def test_download_timeout_bounds_a_stalled_socket(hub: hs.Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_DOWNLOAD_TIMEOUT is the socket timeout: a server that stops sending is given up on."""
    stop = threading.Event()
    hs.model(hub, {"w.bin": b"x" * 1000})
    hub.routes["/org/model/resolve/r1/w.bin"] = hs.trickle(1000, 30, stop)  # the first byte after 30 s
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "0.5")
    monkeypatch.setattr(stager, "HTTP_ATTEMPTS", 2)
    try:
        assert _hf(tmp_path / "cache", "r1", "--deadline", "20") == 5
    finally:
        stop.set()


def test_a_refused_resume_starts_afresh(hub: hs.Hub, tmp_path: Path) -> None:
    data = os.urandom(30_000)
    hs.model(hub, {"w.bin": data})
    calls: list[str | None] = []

    def route(h: Any) -> None:
        calls.append(h.headers.get("Range"))
        if len(calls) == 1:
            hs.body(data[:10_000], length=len(data))(h)
        elif len(calls) == 2:
            hs.body(b"", status=416)(h)
        else:
            hs.body(data)(h)

    hub.routes["/org/model/resolve/r1/w.bin"] = route
    root = tmp_path / "cache"
    assert _hf(root) == 0 and (_data(root) / "w.bin").read_bytes() == data
    assert calls == [None, "bytes=10000-", None]
