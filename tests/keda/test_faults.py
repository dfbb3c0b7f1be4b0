"""What the real KEDA and HPA do when the scaler is unreachable (measured; see docs/keda.md).

- down when the ScaledObject is created (kedacore/keda#7729 territory): what the HPA looks like
  meanwhile, and how long after the scaler comes up the Deployment follows its decisions;
- killed (SIGKILL) under load: the Deployment must not shrink while the scaler is gone (KEDA's
  ``fallback`` is configured; whether it fires for an external-push trigger is recorded, cf.
  kedacore/keda#8056), and it follows the scaler again once it is back on the same address.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.keda.conftest import E2E, report
from warmscale.localcluster.scaling import read_hpa, read_scaled_object, so_condition

FALLBACK = {"failureThreshold": 3, "replicas": 6}


def _metrics(hpa: Any) -> list[str]:
    if hpa is None:
        return ["<no HPA>"]
    out = []
    for m in hpa.spec.metrics or []:
        if m.type == "External" and m.external is not None:
            out.append(f"External/{m.external.metric.name}")
        elif m.type == "Resource" and m.resource is not None:
            out.append(f"Resource/{m.resource.name}")
        else:
            out.append(str(m.type))
    return out


async def _observe(e2e: E2E, name: str, seconds: float) -> dict[str, Any]:
    """Sample the HPA's metrics, the ScaledObject's Ready/Fallback conditions and the replicas."""
    seen: dict[str, Any] = {"hpa_metrics": set(), "hpa_values": set(), "hpa_desired": set(), "ready": set(),
                            "fallback": set(), "replicas": set()}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        hpa = await read_hpa(e2e.api, e2e.namespace, name)
        seen["hpa_metrics"].add(",".join(_metrics(hpa)))
        if hpa is not None and hpa.status is not None:
            # What the HPA last read and wanted: a failure's explanation (the values are not asserted on).
            for m in hpa.status.current_metrics or []:
                if m.external is not None and m.external.current is not None:
                    cur = m.external.current
                    seen["hpa_values"].add(str(cur.average_value or cur.value))
            seen["hpa_desired"].add(hpa.status.desired_replicas)
        so = await read_scaled_object(e2e.api, e2e.namespace, name)
        for kind in ("Ready", "Fallback"):
            c = so_condition(so, kind)
            seen[kind.lower()].add(f"{c['status']}:{c.get('reason', '')}" if c else "-")
        w = next(w for w in e2e.workloads if w.name == name)
        seen["replicas"].add(w.timeline.spec)
        await asyncio.sleep(0.5)
    return {k: sorted(str(x) for x in v) for k, v in seen.items()}


async def test_scaler_down_when_the_scaled_object_is_created(e2e: E2E, reserved_port: int) -> None:
    w = await e2e.workload("llm", 1)
    w.engines.set_concurrency(25)  # asks for 3 once the scaler is there
    address = f"127.0.0.1:{reserved_port}"
    await e2e.scale_with(w, address, e2e.metadata(w), min_replicas=1, max_replicas=8, fallback=FALLBACK)
    meanwhile = await _observe(e2e, "llm", 15)
    assert meanwhile["replicas"] == ["1"]  # nothing moved without the scaler
    t_up = time.monotonic()
    scaler = e2e.scaler(grpc_port=reserved_port)
    await w.timeline.wait(spec=3, within=120, what="replicas follow the scaler once it is up")
    follow = time.monotonic() - t_up
    hpa = await read_hpa(e2e.api, e2e.namespace, "llm")
    after = _metrics(hpa)
    assert any(m.startswith("External/") for m in after), after
    assert scaler.latest_desired(e2e.namespace, "llm") == 3
    report("scaler-down-at-creation", meanwhile=meanwhile, hpa_metrics_after=after,
           scaler_up_to_replicas_3_s=round(follow, 2))


async def test_scaler_killed_under_load(e2e: E2E, reserved_port: int) -> None:
    w = await e2e.workload("llm", 1)
    scaler = e2e.scaler(grpc_port=reserved_port)
    await e2e.scale_with(w, scaler, e2e.metadata(w), min_replicas=1, max_replicas=8, fallback=FALLBACK)
    w.engines.set_concurrency(25)
    await w.timeline.wait(spec=3, within=60, what="3 replicas under load")
    await asyncio.sleep(3)
    t_kill = time.monotonic()
    scaler.kill()
    w.engines.set_concurrency(10)  # the load drops while nobody watches: it must not matter
    meanwhile = await _observe(e2e, "llm", 40)
    specs_dead = w.timeline.specs_since(t_kill)
    # Absent data is never idle: nobody scales the Deployment down while the scaler is gone.
    assert min(specs_dead) >= 3, (specs_dead, meanwhile)
    fallback_fired = any(s == FALLBACK["replicas"] for s in specs_dead)
    t_fallback = w.timeline.first(t_kill, spec=FALLBACK["replicas"])
    t_back = time.monotonic()
    again = e2e.scaler(grpc_port=reserved_port)
    w.engines.set_concurrency(45)
    await w.timeline.wait(spec=5, within=120, what="replicas follow the restarted scaler")
    recover = time.monotonic() - t_back
    assert again.latest_desired(e2e.namespace, "llm") == 5
    report("scaler-killed-under-load", meanwhile=meanwhile, replicas_while_dead=specs_dead,
           fallback_fired=fallback_fired,
           kill_to_fallback_s=round(t_fallback - t_kill, 2) if t_fallback is not None else None,
           restart_to_replicas_5_s=round(recover, 2))
