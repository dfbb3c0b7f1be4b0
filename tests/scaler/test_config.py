"""Metadata validation: every bad value names its key; defaults are documented."""

from __future__ import annotations

import pytest

from warmscale.scaler.config import KEYS, ConfigError, ScalerConfig, defaults_table, parse_metadata

BASE = {"endpoints": "http://e:8000/metrics"}

BAD = [
    ({"bogus": "1"}, "bogus"),
    ({"engine": "llama.cpp"}, "engine"),
    ({"endpoints": "ftp://x/metrics"}, "endpoints"),
    ({"endpoints": " , "}, "endpoints"),
    ({"minReplicas": "-1"}, "minReplicas"),
    ({"maxReplicas": "zero"}, "maxReplicas"),
    ({"minReplicas": "5", "maxReplicas": "2"}, "maxReplicas"),
    ({"scaleToZero": "maybe"}, "scaleToZero"),
    ({"ttftSloSeconds": "NaN"}, "ttftSloSeconds"),
    ({"ttftSloSeconds": "-1"}, "ttftSloSeconds"),
    ({"ttftQuantile": "1.5"}, "ttftQuantile"),
    ({"itlSloSeconds": "NaN"}, "itlSloSeconds"),
    ({"itlSloSeconds": "0"}, "itlSloSeconds"),
    ({"itlSloSeconds": "fast"}, "itlSloSeconds"),
    ({"itlSloSeconds": "120"}, "itlSloSeconds"),
    ({"redisAddress": "localhost:6379"}, "redisQueue"),
    ({"redisQueue": "q"}, "redisAddress"),
    ({"redisAddress": "nohost"}, "redisAddress"),
    ({"metricsPort": "99999", "podSelector": "app=x"}, "metricsPort"),
    ({"hpaTolerance": "1"}, "hpaTolerance"),
    ({"maxPayloadBytes": "10"}, "maxPayloadBytes"),
]


@pytest.mark.parametrize(("extra", "key"), BAD, ids=[k for _, k in BAD])
def test_invalid_metadata_names_the_key(extra: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_metadata({**BASE, **extra})
    assert err.value.key == key
    assert key in str(err.value)


def test_no_source_is_an_error() -> None:
    with pytest.raises(ConfigError) as err:
        parse_metadata({})
    assert err.value.key == "endpoints"


def test_metrics_port_alone_scrapes_the_scale_target() -> None:
    cfg = parse_metadata({"metricsPort": "8000"})
    assert cfg.metrics_port == 8000 and cfg.pod_selector is None


def test_keda_keys_and_from_env_are_accepted() -> None:
    cfg = parse_metadata({**BASE, "scalerAddress": "warmscale:9090", "enableTLS": "true", "endpointsFromEnv": "X"})
    assert cfg.endpoints == ("http://e:8000/metrics",)


def test_defaults() -> None:
    cfg = parse_metadata(BASE)
    assert cfg == ScalerConfig(endpoints=("http://e:8000/metrics",))
    assert cfg.engine == "auto" and cfg.scale_to_zero is False and cfg.floor == 1
    assert parse_metadata({**BASE, "scaleToZero": "true"}).floor == 0


def test_every_key_is_documented() -> None:
    table = defaults_table()
    for key in KEYS:
        assert f"`{key.name}`" in table


def test_metadata_doc_is_current() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "metadata.md").read_text()
    assert defaults_table() in doc, "regenerate docs/metadata.md with python3 -m warmscale.scaler.config"


@pytest.mark.parametrize("key", ["kvBoundTarget", "kvCacheTarget"])
@pytest.mark.parametrize("raw", ["5e-324", "1e-300", "0.009"])
def test_kv_targets_too_small_to_divide_by_are_refused(key: str, raw: str) -> None:
    """A KV target of 5e-324 was accepted and overflowed the policy on every tick (found by the fuzz)."""
    with pytest.raises(ConfigError) as err:
        parse_metadata({"endpoints": "http://e:8000/metrics", key: raw})
    assert err.value.key == key


def test_at_most_fourteen_policy_keys_each_with_a_unit() -> None:
    from warmscale.scaler.config import KEYS, MAX_POLICY_KEYS, POLICY_KEYS, kind_of

    policy = [k.name for k in KEYS if kind_of(k.name) == "policy"]
    assert len(policy) <= MAX_POLICY_KEYS == 14
    assert sorted(policy) == sorted(POLICY_KEYS) and all(POLICY_KEYS.values())


@pytest.mark.parametrize(("key", "raw"), [("kvBoundTarget", "0.7"), ("kvCacheHigh", "0.95"),
                                          ("kvCacheTarget", "0.7"), ("targetWaitingPerReplica", "1"),
                                          ("scaleUpMaxStep", "4"), ("eppSaturationTarget", "1.2"),
                                          ("dcgmBusyUtilization", "1")])
def test_a_removed_key_is_accepted_ignored_and_named_with_its_replacement(key: str, raw: str) -> None:
    from warmscale.scaler.config import deprecations

    meta = {"endpoints": "http://e:8000/metrics", key: raw}
    assert parse_metadata(meta) == parse_metadata({"endpoints": "http://e:8000/metrics"})
    [(name, replacement)] = deprecations(meta)
    assert name == key and replacement.startswith("no key: ")


@pytest.mark.parametrize(("key", "raw"), [("kvBoundTarget", "5e-324"), ("scaleUpMaxStep", "fast"),
                                          ("kvCacheHigh", "0"), ("dcgmBusyUtilization", "nan")])
def test_a_malformed_removed_key_is_still_invalid(key: str, raw: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_metadata({"endpoints": "http://e:8000/metrics", key: raw})
    assert err.value.key == key


async def test_a_tracker_with_a_removed_key_logs_what_replaces_it(caplog: pytest.LogCaptureFixture) -> None:
    """Through the real tracker manager: the ScaledObject is tracked, and the removed key is one warning."""
    import logging

    from tests.scaler.conftest import META, ScriptedReader
    from warmscale.scaler.decision_log import DecisionLog
    from warmscale.scaler.metrics import ScalerMetrics
    from warmscale.scaler.store import MemoryStore
    from warmscale.scaler.tracker import TrackerManager

    m = TrackerManager(MemoryStore(), ScriptedReader(load=1.0), ScalerMetrics(), DecisionLog(10), instance_id="t")
    try:
        with caplog.at_level(logging.WARNING, logger="warmscale.scaler.tracker"):
            m.get("llm", "vllm", {**META, "scaleUpMaxStep": "4"})
        [rec] = [r for r in caplog.records if r.getMessage() == "removed metadata key ignored"]
        assert getattr(rec, "key", None) == "scaleUpMaxStep"
        assert "SCALE_UP_MAX_STEP" in getattr(rec, "replaced_by", "")
    finally:
        await m.stop()
