"""What sizes each role of disaggregated (prefill/decode) serving (pure).

- ``prefill`` replicas saturate on compute and show it in TTFT: they are sized by the prompt tokens
  arriving per second and the waiting prompts (rule ``prefill``, the learned token capacity of
  scaler/capacity.py), the backlog (``queue``), the TTFT SLO (``ttft``, scaler/slo.py) and the
  picker's prefill saturation. The KV handoff to decode follows every prefill and adds to the TTFT a
  user sees, so the prefill stage's TTFT budget is the SLO less the mean KV-transfer time
  (:func:`ttft_budget`).
- ``decode`` replicas saturate on KV memory and show it in inter-token latency: they are sized by KV
  usage (``kv``), running sequences (``demand``), the inter-token-latency SLO (``itl``, where it is
  configured) and the picker's decode saturation.
- ``both`` (one combined pool) uses every rule.

``demand`` stays for every role: it is what activates a role from zero.
"""

from __future__ import annotations

ROLE_RULES: dict[str, frozenset[str]] = {
    "both": frozenset({"demand", "prefill", "queue", "kv", "ttft", "itl", "saturation"}),
    "prefill": frozenset({"demand", "prefill", "queue", "ttft", "saturation"}),
    "decode": frozenset({"demand", "kv", "itl", "saturation"}),
}


def select_rules(rules: dict[str, int], role: str) -> dict[str, int]:
    """The rules ``role`` is sized by."""
    allowed = ROLE_RULES.get(role, ROLE_RULES["both"])
    return {k: v for k, v in rules.items() if k in allowed}


def transfer_seconds(role: str, own: float | None, peer: float | None) -> float:
    """The KV-transfer time that follows this role's work before a user sees a first token: for the
    prefill role, the larger of what its own replicas and the group's decode role report (the
    connector counts it on one side only: vLLM NIXL on decode, SGLang on prefill); 0 otherwise."""
    if role != "prefill":
        return 0.0
    known = [x for x in (own, peer) if x is not None and x > 0]
    return max(known) if known else 0.0


def ttft_budget(slo: float, role: str, own: float | None, peer: float | None) -> float:
    """The part of the TTFT SLO this role's replicas may use (the SLO less the KV handoff after
    prefill). Can be <= 0: the handoff alone exceeds the SLO and no prefill replica helps."""
    return slo - transfer_seconds(role, own, peer)
