"""Every sample payload through every path: detection, parsing with auto and with the engine named."""

from __future__ import annotations

import math
import re

import pytest

from tests.servers import SAMPLES_DIR
from tests.signals.samples import DATA_DIR, DCGM_BY_POD, DCGM_SAMPLE, ENGINE_SAMPLES, Expected
from warmscale.signals.engines import dcgm, detect_engine, parse_payload
from warmscale.signals.engines.dcgm import gpu_usage
from warmscale.signals.model import ReplicaSignal
from warmscale.signals.parsing import PayloadError, parse_text

IDS = [e.file for e in ENGINE_SAMPLES]


def test_every_reference_sample_is_covered() -> None:
    covered = {e.file for e in ENGINE_SAMPLES} | {DCGM_SAMPLE}
    on_disk = {p.name for p in SAMPLES_DIR.glob("*.prom")}
    assert on_disk, f"no samples found in {SAMPLES_DIR}"
    assert on_disk <= covered, f"samples without a test: {sorted(on_disk - covered)}"


def approx(v: float | None) -> object:
    return None if v is None else pytest.approx(v, rel=1e-9, abs=1e-9)


def check(sig: ReplicaSignal, exp: Expected) -> None:
    assert sig.engine == exp.engine
    assert sig.waiting == approx(exp.waiting)
    assert sig.running == approx(exp.running)
    assert sig.kv_usage == approx(exp.kv)
    assert sig.prompt_tokens_total == approx(exp.prompt_tokens)
    assert sig.generation_tokens_total == approx(exp.generation_tokens)
    assert sig.requests_total == approx(exp.requests)
    assert sig.preemptions_total == approx(exp.preemptions)
    assert sig.max_running == approx(exp.max_running)
    assert sig.gpu_utilization == approx(exp.gpu)
    if exp.ttft_count is None:
        assert sig.ttft is None
    else:
        assert sig.ttft is not None
        assert sig.ttft.is_valid()
        assert sig.ttft.count == approx(exp.ttft_count)
        assert sig.ttft.buckets[-1] == (math.inf, pytest.approx(exp.ttft_count))
        if exp.ttft_sum is not None:
            assert sig.ttft.sum == approx(exp.ttft_sum)
    # Inter-token latency: every engine that has a histogram for it (Triton/TRT-LLM backend and the
    # Ray sample have none: unknown, never zero).
    if exp.itl_count is None:
        assert sig.itl is None
    else:
        assert sig.itl is not None and sig.itl.is_valid()
        assert sig.itl.count == approx(exp.itl_count)
        assert sig.itl.buckets[-1] == (math.inf, pytest.approx(exp.itl_count))
        assert sig.itl.sum == approx(exp.itl_sum)


@pytest.mark.parametrize("exp", ENGINE_SAMPLES, ids=IDS)
def test_sample_auto(exp: Expected) -> None:
    text = exp.text()
    assert detect_engine(text) == exp.engine
    check(parse_payload(text), exp)


@pytest.mark.parametrize("exp", ENGINE_SAMPLES, ids=IDS)
def test_sample_named_engine(exp: Expected) -> None:
    check(parse_payload(exp.text(), exp.engine), exp)


@pytest.mark.parametrize("exp", ENGINE_SAMPLES, ids=IDS)
def test_sample_round_trips_through_dict(exp: Expected) -> None:
    sig = parse_payload(exp.text())
    assert ReplicaSignal.from_dict(sig.to_dict()) == sig


@pytest.mark.parametrize("exp", ENGINE_SAMPLES, ids=IDS)
def test_sample_read_as_wrong_engine_is_an_error(exp: Expected) -> None:
    other = "sglang" if exp.engine != "sglang" else "tgi"
    with pytest.raises(PayloadError, match="missing required metric"):
        parse_payload(exp.text(), other)


def test_trtllm_serve_alias() -> None:
    exp = next(e for e in ENGINE_SAMPLES if e.engine == "trtllm")
    check(parse_payload(exp.text(), "trtllm-serve"), exp)


def test_trtllm_serve_2025_build_has_no_queue_signal() -> None:
    text = (DATA_DIR / "trtllm-serve-2025.prom").read_text()
    assert detect_engine(text) is None
    with pytest.raises(PayloadError, match="trtllm_num_requests_waiting"):
        parse_payload(text, "trtllm")


def test_ttft_quantiles_are_plausible() -> None:
    sig = parse_payload(ENGINE_SAMPLES[0].text())
    assert sig.ttft is not None
    p50, p95 = sig.ttft.quantile(0.5), sig.ttft.quantile(0.95)
    assert p50 is not None and p95 is not None
    assert 0.1 < p50 < p95 < 2.5


@pytest.mark.parametrize("exp", [e for e in ENGINE_SAMPLES if e.itl_count], ids=lambda e: e.file)
def test_itl_quantiles_are_plausible(exp: Expected) -> None:
    """Per-token latencies of a loaded engine: p50 of some milliseconds to tens of them, p50 < p99,
    and the mean (sum/count) between them."""
    sig = parse_payload(exp.text())
    assert sig.itl is not None
    p50, p99 = sig.itl.quantile(0.5), sig.itl.quantile(0.99)
    assert p50 is not None and p99 is not None
    assert 0.002 < p50 <= p99 < 1.0
    assert 0.002 < sig.itl.sum / sig.itl.count < 0.2


# ------------------------------------------------------------------------------------- vLLM names


def test_vllm_0_11_payload_with_both_itl_names_reads_the_new_one_only() -> None:
    """0.11 emits inter_token_latency_seconds next to the deprecated time_per_output_token_seconds."""
    legacy = next(e for e in ENGINE_SAMPLES if e.file == "vllm-legacy-load.prom").text()
    old = "\n".join(line for line in legacy.splitlines() if "time_per_output_token_seconds" in line
                    and not line.startswith("vllm:time_per_output_token_seconds_created"))
    both = _v1() + old.replace("Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct") + "\n"
    sig = parse_payload(both)
    assert sig.itl is not None and sig.itl.count == pytest.approx(2025516 + 1936982)


def test_vllm_per_request_tpot_is_not_read_as_itl() -> None:
    text = re.sub(r"^vllm:inter_token_latency_seconds.*\n", "", _v1(), flags=re.M)
    assert "vllm:request_time_per_output_token_seconds_bucket" in text
    assert parse_payload(text).itl is None


def test_ray_reads_vllm_itl_under_its_prefix() -> None:
    ray = next(e for e in ENGINE_SAMPLES if e.engine == "ray").text()
    itl = "\n".join(line.replace("vllm:", "ray_vllm_") for line in _v1().splitlines()
                    if line.startswith("vllm:inter_token_latency_seconds") and "_created" not in line)
    sig = parse_payload(ray + "# TYPE ray_vllm_inter_token_latency_seconds histogram\n" + itl + "\n")
    assert sig.engine == "ray" and sig.itl is not None and sig.itl.count == pytest.approx(2025516 + 1936982)



def _v1() -> str:
    return ENGINE_SAMPLES[0].text()


def test_vllm_both_kv_names_read_once_new_name_wins() -> None:
    text = _v1() + (
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        'vllm:gpu_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.95\n'
        'vllm:gpu_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.97\n'
    )
    # The same engines under both names (0.9.2-0.10): the new name's value, per engine series.
    assert parse_payload(text).kv_usage == pytest.approx(0.6127)


def test_vllm_0_10_payload_with_both_name_sets_is_not_double_counted() -> None:
    """0.9.2-0.10 emit old and new names side by side; nothing is summed across them."""
    legacy = next(e for e in ENGINE_SAMPLES if e.file == "vllm-legacy-load.prom")
    text = legacy.text().replace("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc")
    text += "# TYPE vllm:gpu_cache_usage_perc gauge\n"
    text += 'vllm:gpu_cache_usage_perc{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 0.6041\n'
    sig = parse_payload(text)
    assert (sig.waiting, sig.running, sig.kv_usage) == (5, 37, pytest.approx(0.6041))


def test_vllm_waiting_by_reason_is_not_waiting() -> None:
    text = re.sub(r"^vllm:num_requests_waiting\{.*\n", "", _v1(), flags=re.M)
    with pytest.raises(PayloadError, match="vllm:num_requests_waiting"):
        parse_payload(text)


def test_vllm_bare_counter_names_are_matched() -> None:
    """Counters exposed without _total (as the Python parser would otherwise hide) still count."""
    text = (
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"
        "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 2\n"
        "# TYPE vllm:request_success counter\nvllm:request_success 7\n"
    )
    assert parse_payload(text).requests_total == 7


# -------------------------------------------------------------------------------------------- DCGM


def test_dcgm_is_detected_but_carries_no_request_signal() -> None:
    text = (SAMPLES_DIR / DCGM_SAMPLE).read_text()
    assert detect_engine(text) == "dcgm"
    with pytest.raises(PayloadError, match="DCGM"):
        parse_payload(text)


def test_dcgm_utilisation_by_pod() -> None:
    by_pod = dcgm.parse((SAMPLES_DIR / DCGM_SAMPLE).read_text())
    assert by_pod.keys() == DCGM_BY_POD.keys()
    for k, v in DCGM_BY_POD.items():
        assert by_pod[k] == pytest.approx(v)


def test_dcgm_gpu_list_includes_unallocated_gpu_without_pod() -> None:
    gpus = gpu_usage(parse_text((SAMPLES_DIR / DCGM_SAMPLE).read_text()))
    assert [g.gpu for g in gpus] == ["0", "1", "2", "3"]
    assert gpus[3].pod is None and gpus[3].utilization == 0.0
    assert all(g.hostname == "gpu-node-h100-07" for g in gpus)


def test_dcgm_falls_back_to_gpu_util_percent_and_lowercase_hostname() -> None:
    text = (
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",hostname="n1",namespace="ns",pod="p"} 50\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",hostname="n1",exported_namespace="ns",'
        'exported_pod="q",namespace="gpu-operator",pod="dcgm-exporter-x"} 70\n'
    )
    assert dcgm.parse(text) == {("ns", "p"): pytest.approx(0.5), ("ns", "q"): pytest.approx(0.7)}
    sig = parse_payload(_v1())
    assert dcgm.with_gpu_utilization(sig, 0.5).gpu_utilization == 0.5


@pytest.mark.parametrize("exp", ENGINE_SAMPLES, ids=IDS)
def test_pruned_parse_equals_full_parse(exp: Expected) -> None:
    """parse_payload skips unused histogram buckets for speed; the signal must not change."""
    from warmscale.signals.engines import parse_index

    assert parse_payload(exp.text()) == parse_index(parse_text(exp.text()))


def test_vllm_prefill_time_and_prefix_hits_are_read_for_the_capacity_floor() -> None:
    """vLLM V1 (DP=2): the prefill-time histogram's sum/count, the per-request prompt tokens' sum and
    the prefix-cache hits (tokens), summed over engines; the legacy ``gpu_`` hits name is read once."""
    sig = parse_payload(_v1())
    assert sig.prefill_seconds_total == pytest.approx(516.1316517673565 + 523.1865704911377)
    assert sig.prefills_total == 6842 + 6719
    assert sig.prefix_cache_hits_total == 3755184 + 3806224
    assert sig.prefill_prompt_tokens_total == 10102300 + 10245485
    legacy = next(e for e in ENGINE_SAMPLES if e.file == "vllm-legacy-load.prom").text()
    assert parse_payload(legacy).prefix_cache_hits_total == 5695424
    text = re.sub(r"^vllm:(gpu_)?prefix_cache_hits.*\n", "", _v1(), flags=re.M)
    assert parse_payload(text).prefix_cache_hits_total is None  # absent: unknown (no floor), never 0
