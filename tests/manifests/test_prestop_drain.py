"""The shipped examples drain before SIGTERM: every engine container's preStop hook, run as shipped
(only its metrics URL pointed at a local stand-in), waits while the engine holds requests and returns
once it holds none; and every example's grace period is set to fit its longest request."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "manifests" / "examples"
URL = re.compile(r'URL, HELD = "(http://127\.0\.0\.1:\d+/metrics)"')
# Seconds the stand-in engine holds requests after the hook starts (past the hook's 5 s lead).
HOLD_S = 7.0

# What each engine's /metrics says while it holds requests (the names its hook reads, and one it
# must not: Triton's "max" request slots are no load).
BUSY = {
    "vllm": ('vllm:num_requests_running{model_name="m",engine="0"} 3.0\n'
             'vllm:num_requests_waiting{model_name="m",engine="0"} 1.0\n'),
    "sglang": 'sglang:num_running_reqs{model_name="m"} 2\nsglang:num_queue_reqs{model_name="m"} 0\n',
    "tgi": "tgi_queue_size 1\ntgi_batch_current_size 2\n",
    "trtllm": ('nv_inference_pending_request_count{model="ensemble",version="1"} 1\n'
               'nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 2\n'),
}
IDLE_EXTRA = {"trtllm": 'nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="max",version="1"} 256\n'}


def _flavour(script: str) -> str:
    for name, key in (("vllm", "vllm:"), ("sglang", "sglang:"), ("tgi", "tgi_"), ("trtllm", "nv_")):
        if key in script:
            return name
    raise AssertionError(f"unknown engine in {script[:80]!r}")


def hooks() -> list[tuple[str, int, str]]:
    """(file, grace seconds, preStop script) of every container with a python3 preStop."""
    out = []
    for f in sorted(EXAMPLES.rglob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if not isinstance(doc, dict):
                continue
            spec = doc.get("spec") or {}
            templates: list[dict[str, Any]] = [spec.get("template") or {}]
            lws = spec.get("leaderWorkerTemplate") or {}
            templates += [lws.get("leaderTemplate") or {}, lws.get("workerTemplate") or {}]
            for t in templates:
                pod = t.get("spec") or {}
                for c in pod.get("containers") or []:
                    cmd = (((c.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command")
                    if cmd and cmd[0] == "python3":
                        grace = int(pod.get("terminationGracePeriodSeconds", 30))
                        out.append((str(f.relative_to(ROOT)), grace, cmd[2]))
    return out


def test_every_inference_example_has_a_drain_and_a_grace_for_its_longest_request() -> None:
    found = hooks()
    files = {f for f, _, _ in found}
    for name in ("vllm/deployment.yaml", "sglang/deployment.yaml", "tgi/deployment.yaml",
                 "trtllm-triton/deployment.yaml", "vllm-lws/leaderworkerset.yaml", "llm-d-pd/decode.yaml",
                 "llm-d-pd/prefill.yaml"):
        assert f"manifests/examples/{name}" in files
    for f, grace, _ in found:
        # Kubernetes' default is 30 s; the longest request of every example is minutes long.
        assert grace >= 120, f
        text = (ROOT / f).read_text()
        assert "ai-dynamo/dynamo#13559" in text, f


async def _run(script: str, busy: str, idle: str) -> tuple[int, float]:
    started = time.monotonic()

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=busy if time.monotonic() - started < HOLD_S else idle)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    m = URL.search(script)
    assert m is not None
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c",
                                                script.replace(m.group(1), f"http://127.0.0.1:{port}/metrics"))
    try:
        rc = await asyncio.wait_for(proc.wait(), timeout=60)
    finally:
        await runner.cleanup()
    return rc, time.monotonic() - started


async def test_the_prestop_hooks_wait_until_the_engine_holds_no_request() -> None:
    found = hooks()
    jobs = []
    for _, _, script in found:
        fl = _flavour(script)
        idle = re.sub(r" [0-9.]+\n", " 0\n", BUSY[fl]) + IDLE_EXTRA.get(fl, "")
        jobs.append(_run(script, BUSY[fl] + IDLE_EXTRA.get(fl, ""), idle))
    results = await asyncio.gather(*jobs)
    for (f, _, _), (rc, took) in zip(found, results, strict=True):
        assert rc == 0, f
        # Held while the engine had requests, then two idle reads one second apart.
        assert HOLD_S <= took < HOLD_S + 15, (f, took)
