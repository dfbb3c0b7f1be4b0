"""Each engine's sleep and wake surface, as the HTTP calls to make (pure; sources in
docs/hot-tier.md and the reference facts it cites).

- vLLM (``--enable-sleep-mode`` with ``VLLM_SERVER_DEV_MODE=1``): ``POST /sleep?level=L&mode=wait``
  drains the requests in flight, then sleeps; ``POST /wake_up`` wakes level 1; level 2 dropped the
  weights too, so the wake is ``/wake_up?tags=weights``, ``/collective_rpc {"method":
  "reload_weights"}``, ``/wake_up?tags=kv_cache``. State: ``GET /is_sleeping``.
- SGLang (``--enable-memory-saver --enable-weights-cpu-backup``): ``/pause_generation`` then
  ``/release_memory_occupation``; wake: ``/resume_memory_occupation`` then ``/continue_generation``.
  A release with a request in flight kills the engine process, so the release is only ever sent
  after the engine reported nothing in flight while paused (:mod:`.client` checks it).
- TensorRT-LLM, Ray Serve LLM: sleep exists only in-process (``LLM.release()``) or as deployment-handle
  methods (``LLMServer.sleep()``), not over HTTP; TGI has none. The tier stays off for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# vLLM's sleep levels: 1 offloads the weights to host RAM and drops the KV cache; 2 drops both.
LEVEL_OFFLOAD = 1
LEVEL_DISCARD = 2
LEVELS = (LEVEL_OFFLOAD, LEVEL_DISCARD)
# ``vllm:engine_sleep_state``'s ``sleep_state`` label at each level (0: awake).
SLEEP_STATES_BY_LEVEL = ("awake", "weights_offloaded", "discard_all")
# The memory an SGLang release frees and a resume restores (its memory types; cuda_graph stays).
SGLANG_TAGS = ("weights", "kv_cache")
# How an SGLang pause treats requests in flight: ``in_place`` keeps them where they are, so a pause
# that finds one can be undone by /continue_generation without losing it ("abort" would drop them).
SGLANG_PAUSE_MODE = "in_place"


@dataclass(frozen=True)
class Call:
    """One HTTP request to an engine: ``method path?query`` with a JSON ``body`` (or none)."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...] = ()
    body: dict[str, Any] | None = None
    # Check before this call that the engine has nothing in flight (and stop if it has).
    needs_idle: bool = False


@dataclass(frozen=True)
class Support:
    """Whether the hot tier can sleep and wake ``engine`` over HTTP; if not, why (for an Event)."""

    engine: str
    supported: bool
    reason: str = ""  # the Event's reason where unsupported
    message: str = ""  # the Event's message where unsupported
    flags: tuple[str, ...] = field(default_factory=tuple)  # what the engine must be started with


SUPPORT: dict[str, Support] = {
    "vllm": Support("vllm", True, flags=("--enable-sleep-mode", "VLLM_SERVER_DEV_MODE=1")),
    "sglang": Support("sglang", True, flags=("--enable-memory-saver", "--enable-weights-cpu-backup")),
    "trtllm": Support("trtllm", False, "HotStandbyUnsupported",
                      "TensorRT-LLM sleeps only in-process (LLM.release()/resume(), a prototype); trtllm-serve has "
                      "no HTTP endpoint for it, so warmscale.io/hot-standby is off for this workload"),
    "triton": Support("triton", False, "HotStandbyUnsupported",
                      "Triton/TensorRT-LLM has no sleep or wake endpoint; warmscale.io/hot-standby is off for "
                      "this workload"),
    "ray": Support("ray", False, "HotStandbyUnsupported",
                   "Ray Serve LLM sleeps through deployment-handle methods (LLMServer.sleep()/wakeup()), not over "
                   "HTTP; warmscale.io/hot-standby is off for this workload"),
    "tgi": Support("tgi", False, "HotStandbyUnsupported",
                   "TGI has no sleep mode; warmscale.io/hot-standby is off for this workload"),
}


def support(engine: str) -> Support:
    """The tier's support for ``engine``; an unknown engine is unsupported, with a message naming it."""
    known = SUPPORT.get(engine)
    if known is not None:
        return known
    return Support(engine, False, "HotStandbyUnknownEngine",
                   f"engine {engine!r} is not one the hot tier knows (vllm, sglang); set warmscale.io/engine, "
                   "or remove warmscale.io/hot-standby")


class UnsupportedEngine(ValueError):
    def __init__(self, s: Support) -> None:
        super().__init__(s.message)
        self.support = s


def _check(engine: str, level: int) -> None:
    s = support(engine)
    if not s.supported:
        raise UnsupportedEngine(s)
    if level not in LEVELS:
        raise ValueError(f"sleep level must be one of {LEVELS}, got {level!r}")


def sleep_calls(engine: str, level: int = LEVEL_OFFLOAD) -> tuple[Call, ...]:
    """The calls that put ``engine`` to sleep, after it has finished what it serves."""
    _check(engine, level)
    if engine == "vllm":
        return (Call("POST", "/sleep", (("level", str(level)), ("mode", "wait"))),)
    tags = list(SGLANG_TAGS)
    return (Call("POST", "/pause_generation", body={"mode": SGLANG_PAUSE_MODE}),
            Call("POST", "/release_memory_occupation", body={"tags": tags}, needs_idle=True))


def wake_calls(engine: str, level: int = LEVEL_OFFLOAD) -> tuple[Call, ...]:
    """The calls that wake ``engine`` from ``level`` (before the canary)."""
    _check(engine, level)
    if engine == "vllm":
        if level == LEVEL_OFFLOAD:
            return (Call("POST", "/wake_up"),)
        return (Call("POST", "/wake_up", (("tags", "weights"),)),
                Call("POST", "/collective_rpc", body={"method": "reload_weights"}),
                Call("POST", "/wake_up", (("tags", "kv_cache"),)))
    return (Call("POST", "/resume_memory_occupation", body={"tags": list(SGLANG_TAGS)}),
            Call("POST", "/continue_generation"))


def undo_pause(engine: str) -> tuple[Call, ...]:
    """What undoes a sleep that stopped before the release (SGLang found a request in flight)."""
    return (Call("POST", "/continue_generation"),) if engine == "sglang" else ()


def state_call(engine: str) -> Call | None:
    """The call that reports whether the engine sleeps (vLLM); SGLang has none (its state is what
    the adapter last did, and its ``/metrics`` in-flight counts)."""
    return Call("GET", "/is_sleeping") if engine == "vllm" else None


def is_sleeping(engine: str, body: Any) -> bool | None:
    """The state call's answer read; ``None`` where the body says nothing (unknown, never awake)."""
    if engine == "vllm" and isinstance(body, dict) and isinstance(body.get("is_sleeping"), bool):
        return bool(body["is_sleeping"])
    return None
