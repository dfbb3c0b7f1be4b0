"""Event-loop and garbage-collector probe for the scaler's processes (benchmarks only).

``python -m warmscale.benchmarks.rpc_load --loop-probe DIR`` puts this directory first on the scaler's
``PYTHONPATH`` with ``WARMSCALE_LOOP_PROBE=DIR``; Python imports ``sitecustomize`` at start-up, in
the scaler process and in the RPC front it spawns. Every asyncio callback is timed in thread CPU
time (what the callback itself cost, whatever else runs on the machine) and wall time, every garbage
collection likewise; each process writes ``DIR/loop-<main|front>-<pid>.json`` every 2 s and at exit.
Costs about a microsecond per callback. Not imported by anything else.
"""

from __future__ import annotations

import os

if os.environ.get("WARMSCALE_LOOP_PROBE"):
    import asyncio.events
    import atexit
    import gc
    import json
    import sys
    import threading
    import time
    from typing import Any

    _DIR = os.environ["WARMSCALE_LOOP_PROBE"]
    _thread_time, _perf = time.thread_time, time.perf_counter
    _counts = {"callbacks": 0, "cpu_over_5ms": 0, "wall_over_5ms": 0, "wall_over_20ms": 0}
    _slow: dict[str, list[float]] = {}  # callback -> [count, max cpu s, sum cpu s, max wall s] (cpu > 2 ms)
    _collections: list[tuple[float, int, float, float, int]] = []  # (unix time, generation, wall ms, cpu ms, freed)
    _run = asyncio.events.Handle._run

    def _timed_run(self: Any) -> None:
        c0, w0 = _thread_time(), _perf()
        _run(self)
        cpu, wall = _thread_time() - c0, _perf() - w0
        _counts["callbacks"] += 1
        _counts["cpu_over_5ms"] += cpu > 0.005
        _counts["wall_over_5ms"] += wall > 0.005
        _counts["wall_over_20ms"] += wall > 0.020
        if cpu > 0.002:
            cb = self._callback
            owner = getattr(cb, "__self__", None)
            if isinstance(owner, asyncio.Task):
                coro = owner.get_coro()
                key = f"task {getattr(coro, '__qualname__', coro)}"
            else:
                key = getattr(cb, "__qualname__", None) or type(cb).__name__
            s = _slow.setdefault(key, [0, 0.0, 0.0, 0.0])
            s[0] += 1
            s[1] = max(s[1], cpu)
            s[2] += cpu
            s[3] = max(s[3], wall)

    asyncio.events.Handle._run = _timed_run  # type: ignore[method-assign]
    _gc_start = [0.0, 0.0]

    def _on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            _gc_start[0], _gc_start[1] = _perf(), _thread_time()
        else:
            _collections.append((round(time.time(), 3), int(info["generation"]),
                                 round((_perf() - _gc_start[0]) * 1e3, 3),
                                 round((_thread_time() - _gc_start[1]) * 1e3, 3), int(info.get("collected", 0))))

    gc.callbacks.append(_on_gc)

    def _role() -> str | None:
        argv = " ".join(sys.argv)
        if "rpcfront" in argv:
            return "front"
        if "warmscale" in argv and " scaler" in argv:
            return "main"
        return None

    def _dump() -> None:
        role = _role()
        if role is None:
            return
        slow = sorted(([k, *v] for k, v in _slow.items()), key=lambda x: -x[3])[:30]
        doc = {"role": role, "pid": os.getpid(), "written": time.time(), "counts": _counts,
               "slow_callbacks": [{"callback": k, "count": int(n), "max_cpu_ms": round(mx * 1e3, 3),
                                   "sum_cpu_s": round(sm, 4), "max_wall_ms": round(mw * 1e3, 3)}
                                  for k, n, mx, sm, mw in slow],
               "collections": _collections}
        tmp = f"{_DIR}/.loop-{role}-{os.getpid()}.json"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, f"{_DIR}/loop-{role}-{os.getpid()}.json")

    def _every() -> None:
        while True:
            time.sleep(2.0)
            try:
                _dump()
            except OSError:
                pass

    threading.Thread(target=_every, name="loop probe", daemon=True).start()
    atexit.register(_dump)
