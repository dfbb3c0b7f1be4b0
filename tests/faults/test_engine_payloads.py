"""Engine payloads read wrong (issue 20, items 9 and 13-17): each test fails on the code before the fix.

Real captures are in tests/signals/data/real (sources on their first lines); the multi-engine and
gateway cases below are built in the same exposition format, with the values the issue observed.
"""

from __future__ import annotations

import math
from pathlib import Path

import aiohttp
import pytest

from tests.scaler.test_policy import Run, cfg
from warmscale.scaler.config import ConfigError, parse_metadata
from warmscale.signals.engines import epp, parse_payload
from warmscale.signals.histogram import Histogram
from warmscale.signals.model import GatewayReading, ReplicaReading, ReplicaSignal
from warmscale.signals.parsing import PayloadError
from warmscale.signals.sources import Endpoint
from warmscale.signals.sources.scrape import scrape_endpoint

REAL = Path(__file__).parents[1] / "signals" / "data" / "real"
INF = math.inf
# vLLM <= 0.6 / Ray's TTFT layout tops out at 10 s (the "real layouts").
BOUNDS_10S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


def _ttft(finite: dict[float, int], above: int) -> Histogram:
    """A cumulative TTFT histogram: ``finite[le]`` observations in bucket ``le``, ``above`` past 10 s."""
    cum, out = 0.0, []
    for le in BOUNDS_10S:
        cum += finite.get(le, 0)
        out.append((le, cum))
    out.append((INF, cum + above))
    return Histogram.from_buckets(out, sum_=0.0, count=cum + above)


# ---- 13: a quantile in the +Inf bucket is above the top bound, and a breach --------------------------

def test_overloaded_sglang_capture_reads_above_the_top_bound() -> None:
    """The issue's capture: 77% of first tokens beyond 30 s; p95 read "30 s" before the fix."""
    sig = parse_payload((REAL / "sglang-0.4-overload.prom").read_text())
    assert sig.ttft is not None
    assert sig.ttft.quantile(0.95) == INF and sig.ttft.top_bound() == 30.0
    only_inf = Histogram.from_buckets([(INF, 5.0)], 100.0)
    assert only_inf.quantile(0.5) == INF  # was 0 (no finite bucket)


def _overload_run(slo: str, seconds: int = 20) -> object:
    """One replica, 13.5k prompt tokens/s in 1,400-token requests (the SLO-slack table of
    tests/scaler/test_policy_v2.py: one replica meets a loose SLO by the model), but every first token
    is slower than the layout's 10-s top bound."""
    run = Run(cfg(modelProfile="8b-h100", maxReplicas="10", burstWindowSeconds="10", ttftSloSeconds=slo))
    total = requests = 0.0
    above = 0
    d = None
    for _ in range(seconds):
        sig = ReplicaSignal(engine="vllm", waiting=0, running=20, kv_usage=0.1, prompt_tokens_total=total,
                            requests_total=requests, generation_tokens_total=requests * 100,
                            ttft=_ttft({}, above))
        d = run.step([ReplicaReading(replica="a", observed_at=0.0, signal=sig)], ready_replicas=1,
                     starting_replicas=0, current_replicas=1)
        total += 13_500.0
        requests += 13_500.0 / 1_400.0
        above += 10
    return d


@pytest.mark.parametrize("slo", ["10", "30"])
def test_slo_slack_never_lowers_the_count_when_first_tokens_exceed_the_top_bound(slo: str) -> None:
    """A TTFT SLO at or above the top bound: before the fix the quantile read 10 s (<= the SLO), the
    SLO-slack rule lowered the prefill need to 1 and no TTFT rule fired. Now: a breach."""
    d = _overload_run(slo)
    assert d.rules["prefill"] == 2  # the utilisation target stands (no slack)
    assert "ttft" in d.rules and d.rules["ttft"] >= 2  # the breach asks for more
    assert d.desired >= 2


def test_slo_model_answers_the_step_bound_above_the_top_bucket() -> None:
    from warmscale.scaler.slo import slo_count

    assert slo_count(INF, 2.0, 0.95, 2, 10_000.0, 5_000.0, 1_000.0, 6) == 6


# ---- 14: TGI rejections are not completions ---------------------------------------------------------

TGI = """# TYPE tgi_queue_size gauge
tgi_queue_size 120
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 32
# TYPE tgi_request_success counter
tgi_request_success 1000
# TYPE tgi_request_failure counter
tgi_request_failure{err="validation"} 40
tgi_request_failure{err="overloaded"} 600
tgi_request_failure{err="generation"} 3
tgi_request_failure{err="incomplete_generation"} 2
"""


def test_tgi_rejected_requests_are_not_completions() -> None:
    """1,000 successes + 5 failures after the batch took them; 640 refused (validation, overloaded)."""
    assert parse_payload(TGI).requests_total == 1005  # was 1645


# ---- 15: old and new vLLM names per series; one model of several ------------------------------------

def _ray_engine(worker: str, model: str, kv_name: str, kv: float, running: float) -> str:
    labels = f'WorkerId="{worker}",engine="0",model_name="{model}"'
    return (f"ray_vllm_num_requests_running{{{labels}}} {running}\n"
            f"ray_vllm_num_requests_waiting{{{labels}}} 0\n"
            f"ray_vllm_{kv_name}{{{labels}}} {kv}\n")


def test_ray_node_engine_with_only_the_old_kv_name_is_read() -> None:
    """Two engines on one Ray node, one of a release exporting only ``gpu_cache_usage_perc``: it was
    dropped because the other exports ``kv_cache_usage_perc`` (read 0.0 instead of 5.9e-05)."""
    payload = ("# TYPE ray_vllm_kv_cache_usage_perc gauge\n# TYPE ray_vllm_gpu_cache_usage_perc gauge\n"
               + _ray_engine("a", "m", "kv_cache_usage_perc", 0.0, 1)
               + _ray_engine("b", "m", "gpu_cache_usage_perc", 5.9e-05, 2))
    sig = parse_payload(payload)
    assert sig.engine == "ray" and sig.running == 3
    assert sig.kv_usage == pytest.approx(5.9e-05)


def test_counter_aliases_are_chosen_per_engine() -> None:
    """Engine a exports ``prompt_tokens_total``, engine b (older build) only ``prompt_tokens``."""
    payload = ('vllm:num_requests_running{engine="0"} 1\nvllm:num_requests_waiting{engine="0"} 0\n'
               'vllm:prompt_tokens_total{engine="0"} 100\nvllm:prompt_tokens{engine="1"} 50\n'
               'vllm:prompt_tokens{engine="0"} 999\n')  # engine 0's alias: read once, from the new name
    assert parse_payload(payload).prompt_tokens_total == 150


TWO_MODELS = (REAL / "vllm-0.30-awake.prom").read_text() + "".join(
    f'vllm:{n}{{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}} {v}\n'
    for n, v in (("num_requests_running", 30), ("num_requests_waiting", 7), ("kv_cache_usage_perc", 0.9)))


def test_series_selector_keeps_one_model_of_several_on_a_node() -> None:
    merged = parse_payload(TWO_MODELS)
    assert (merged.running, merged.waiting) == (30, 7)  # without a selector: one replica of both models
    small = parse_payload(TWO_MODELS, selector='model_name="Qwen/Qwen2.5-0.5B-Instruct"')
    assert (small.running, small.waiting, small.kv_usage) == (0, 0, 0.0)
    large = parse_payload(TWO_MODELS, selector='model_name=~"meta-llama/.*"')
    assert (large.running, large.waiting, large.kv_usage) == (30, 7, 0.9)
    with pytest.raises(PayloadError, match="no series"):
        parse_payload(TWO_MODELS, selector='model_name="typo"')  # unknown, never idle


def test_series_selector_metadata_is_validated() -> None:
    ok = parse_metadata({"endpoints": "http://e:8000/metrics", "seriesSelector": 'model_name="a", engine!="1"'})
    assert ok.series_selector == 'model_name="a", engine!="1"'
    for bad in ('model_name=a', 'model_name=~"("', 'model_name="a" engine="0"'):
        with pytest.raises(ConfigError) as e:
            parse_metadata({"endpoints": "http://e:8000/metrics", "seriesSelector": bad})
        assert e.value.key == "seriesSelector"
    with pytest.raises(ConfigError) as e:
        parse_metadata({"prometheusAddress": "http://p:9090", "seriesSelector": 'model_name="a"'})
    assert e.value.key == "seriesSelector"


@pytest.mark.servers
async def test_direct_scrape_applies_the_series_selector(fake_engine: object) -> None:
    engine = fake_engine(TWO_MODELS)  # type: ignore[operator]
    async with aiohttp.ClientSession() as session:
        r = await scrape_endpoint(session, Endpoint("r", engine.url), 1.0, timeout_s=5.0,
                                  selector='model_name="meta-llama/Llama-3.1-8B-Instruct"')
    assert r.signal is not None and (r.signal.running, r.signal.waiting) == (30, 7)


# ---- 16: SGLang 0.3 and GAIE 1.0 names ---------------------------------------------------------------

def test_sglang_0_3_capture_is_recognised() -> None:
    sig = parse_payload((REAL / "sglang-0.3-idle.prom").read_text())  # was "unrecognised payload"
    assert (sig.engine, sig.waiting, sig.running) == ("sglang", 0, 0)


def test_gaie_1_0_running_requests_are_read() -> None:
    sig = epp.parse_payload((REAL / "gaie-1.0-fixtures.prom").read_text())  # was "not a picker payload"
    assert sig.running == 2


# ---- 9: a gateway-only pool: unknown running is never idle -------------------------------------------

GAIE_80 = ("# TYPE inference_model_running_requests gauge\n"
           'inference_model_running_requests{model_name="llama"} 80\n'
           "# TYPE inference_pool_average_queue_size gauge\n"
           'inference_pool_average_queue_size{name="pool"} 0\n')
# A picker that has just restarted: its pool gauges are back, no request has gone through it yet.
RESTARTED = "# TYPE inference_pool_average_queue_size gauge\n" 'inference_pool_average_queue_size{name="pool"} 0\n'
GATEWAY_ONLY = {"eppAddress": "http://epp:9090/metrics", "scaleToZero": "true", "minReplicas": "0",
                "idleWindowSeconds": "30", "scaleDownStabilizationSeconds": "0", "maxReplicas": "50",
                "targetInflightPerReplica": "8"}


def _gateway_run(payload: str, steps: int, current: int) -> list[object]:
    run = Run(parse_metadata(GATEWAY_ONLY))
    out = []
    for _ in range(steps):
        reading = GatewayReading("pool", 0.0, epp.parse_payload(payload))
        out.append(run.step([], dt=1.0, gateways=(reading,), current_replicas=current))
    return out


def test_busy_gateway_only_pool_with_an_older_picker_is_sized_by_its_running_requests() -> None:
    """GAIE 1.0 reporting 80 running requests: was queue 0 / running unknown, 1 then 0."""
    decisions = _gateway_run(GAIE_80, steps=40, current=10)  # 40 s: past the 30-s idle window
    assert all(d.desired == 10 for d in decisions), [d.desired for d in decisions]  # 80 / 8 per replica
    assert all(d.active for d in decisions)


def test_restarted_picker_without_running_requests_holds_what_runs() -> None:
    """Running unknown (no series yet): never idle, so 15 stays 15 (was 15 -> 0)."""
    decisions = _gateway_run(RESTARTED, steps=40, current=15)
    assert [d.desired for d in decisions] == [15] * 40
    assert all(d.active for d in decisions)


def test_picker_without_running_requests_never_reads_as_idle() -> None:
    """The rule, whatever the picker: a known queue but unknown running requests (``None``) in a
    gateway-only pool holds what runs, from the first decision, and never scales to zero."""
    from warmscale.signals.model import GatewaySignal

    run = Run(parse_metadata(GATEWAY_ONLY))
    unknown_running = GatewaySignal(flavor="llm-d", queue=0.0, saturation={"effective": 0.2}, running=None)
    decisions = [run.step([], dt=1.0, gateways=(GatewayReading("pool", 0.0, unknown_running),), current_replicas=15)
                 for _ in range(40)]
    assert [d.desired for d in decisions] == [15] * 40, [(d.desired, d.reason) for d in decisions]
    # A picker that reports 0 running is idle evidence as before: the pool may go to zero.
    idle = GatewaySignal(flavor="llm-d", queue=0.0, saturation={"effective": 0.0}, running=0.0)
    run = Run(parse_metadata(GATEWAY_ONLY))
    last = [run.step([], dt=1.0, gateways=(GatewayReading("pool", 0.0, idle),), current_replicas=1)
            for _ in range(40)][-1]
    assert (last.desired, last.active) == (0, False)


# ---- 17: a sleeping engine is not ready capacity, not idle ------------------------------------------

SLEEPING = (REAL / "vllm-0.30-awake.prom").read_text().replace(
    'sleep_state="awake"} 1.0',
    'sleep_state="awake"} 0.0\nvllm:engine_sleep_state{engine="0",model_name="Qwen/Qwen2.5-0.5B-Instruct",'
    'sleep_state="weights_offloaded"} 1.0')


def test_sleep_state_is_parsed() -> None:
    assert parse_payload(SLEEPING).sleeping is True
    assert parse_payload((REAL / "vllm-0.30-awake.prom").read_text()).sleeping is False


def test_sleeping_replica_is_not_idle_ready_capacity() -> None:
    """Two pods: one awake and busy, one asleep. The sleeping one is not ready (the demand is carried
    by one replica), and the pair is never scaled down or to zero while it sleeps."""
    run = Run(cfg(scaleToZero="true", minReplicas="0", idleWindowSeconds="10", targetInflightPerReplica="8",
                  scaleDownStabilizationSeconds="0"))
    busy = parse_payload((REAL / "vllm-0.30-awake.prom").read_text())
    busy = ReplicaSignal(**{**busy.__dict__, "running": 8.0})
    asleep = parse_payload(SLEEPING)
    decisions = [run.step([ReplicaReading("awake", 0.0, busy), ReplicaReading("asleep", 0.0, asleep)], dt=1.0,
                          ready_replicas=2, current_replicas=2) for _ in range(20)]
    assert all(d.ready == 1 for d in decisions), [d.ready for d in decisions]  # was 2: idle ready capacity
    # Alone and asleep: not idle, never zero (its zero load was idle evidence before the fix).
    alone = Run(cfg(scaleToZero="true", minReplicas="0", idleWindowSeconds="10", scaleDownStabilizationSeconds="0"))
    lone = [alone.step([ReplicaReading("asleep", 0.0, asleep)], dt=1.0, ready_replicas=1, current_replicas=1)
            for _ in range(20)]
    assert all(d.desired >= 1 and d.active for d in lone), [(d.desired, d.reason) for d in lone]


def test_prometheus_path_reads_the_sleep_state() -> None:
    """The same signal through Prometheus: ``max(vllm:engine_sleep_state{sleep_state!="awake"})``."""
    from warmscale.signals import promql

    q = promql.replica_query("vllm")
    assert 'vllm:engine_sleep_state{sleep_state!="awake"}' in q and '"asleep"' in q

    def sig(name: str, value: float, pod: str) -> dict[str, object]:
        return {"metric": {"pod": pod, promql.SIGNAL_LABEL: name, promql.ENGINE_LABEL: "vllm"},
                "value": [1000.0, str(value)]}

    result = [sig("waiting", 0, "a"), sig("running", 0, "a"), sig("asleep", 1, "a"),
              sig("waiting", 0, "b"), sig("running", 0, "b"), sig("asleep", 0, "b"),
              sig("waiting", 0, "c"), sig("running", 0, "c")]
    got = {r.replica: r.signal.sleeping for r in promql.decode_replicas(result, now=1000.0) if r.signal}
    assert got == {"a": True, "b": False, "c": None}
