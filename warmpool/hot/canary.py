"""The canary: a woken engine serves only after it generates what it generated before it slept (pure).

A wake can succeed and still serve wrong or corrupted output (vllm#16234, fixed for fp8 KV + level 2
in vllm PR #28783), so ``/is_sleeping`` is no readiness signal. The canary is a short greedy
completion (temperature 0, a fixed prompt and token count): the same weights give the same tokens, so
the answer recorded while the engine was awake is the reference for every later wake.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# A prompt whose greedy continuation any instruction-tuned model completes, and few enough tokens
# that the canary costs milliseconds on a woken engine.
CANARY_PROMPT = "The capital of France is"
CANARY_MAX_TOKENS = 4


def canary_request(model: str) -> dict[str, Any]:
    """The OpenAI-compatible ``/v1/completions`` body (vLLM and SGLang both serve it)."""
    return {"model": model, "prompt": CANARY_PROMPT, "max_tokens": CANARY_MAX_TOKENS, "temperature": 0.0,
            "seed": 0}


@dataclass(frozen=True)
class CanaryVerdict:
    ok: bool
    text: str | None
    why: str


def completion_text(body: Any) -> str | None:
    """``choices[0].text`` of a completion response, or ``None`` where the body has none."""
    if not isinstance(body, dict):
        return None
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    text = choices[0].get("text")
    return text if isinstance(text, str) else None


def judge(body: Any, reference: str | None) -> CanaryVerdict:
    """Pass where the completion has text and, when a reference was recorded, equals it."""
    text = completion_text(body)
    if text is None or not text.strip():
        return CanaryVerdict(False, text, "the canary completion has no text")
    if reference is not None and text != reference:
        return CanaryVerdict(False, text, f"the canary completion {text!r} differs from {reference!r} before the sleep")
    return CanaryVerdict(True, text, "ok")
