# ruff: noqa: RUF001  (the hostile digits are the point)
"""Issue 10, item 9: hostile metadata. Every input is accepted within the declared ranges, or
rejected with a ConfigError naming a key -- never another exception, never an OverflowError later in
the policy. (The gRPC side of the same promise, through the real CLI process, is in test_intake.py.)"""

from __future__ import annotations

import math
from dataclasses import fields

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from warmscale.scaler.config import DEPRECATED_KEYS, KEYS, ConfigError, Range, ScalerConfig, parse_metadata
from warmscale.scaler.observation import observe
from warmscale.scaler.policy import decide
from warmscale.scaler.state import ScalerState
from warmscale.signals.model import ReplicaReading, ReplicaSignal, Snapshot

BASE = {"endpoints": "http://127.0.0.1:9/metrics"}
NAMES = [k.name for k in KEYS]
NUMERIC = [k for k in KEYS if k.range is not None]

# Hostile numerals: non-ASCII digits, underscores, overflow, subnormals, huge integers.
NASTY_NUMBERS = [
    "1e308", "5e-324", "1e999", "-0", "0x10", "1_0", "²", "١٠", "٣", "１０", "9" * 80, str(2**63),
    str(2**63 + 7), "-" + str(2**63), "inf", "-inf", "nan", "NaN", "Infinity", " 5 ", "5\n", "\u00a05", "",
    "1e-400", "3.", ".5", "+1", "--1", "1e", "e5", "1.2.3", "0", "-1", "65535", "65536", "99999",
]
URLS = [
    "http://127.0.0.1:99999/metrics", "http://127.0.0.1:0/metrics", "http://127.0.0.1:１２/m",
    "http://127.0.0.1:²/m", "http://[::1/m", "http://[::1]x/m", "http://:80/m", "http://h:/m",
    "http://admin:pw@127.0.0.1:9090", "http://127.0.0.1:8080/metrics?token=abc", "ftp://h/x",
    "http://h\u0000/x", "http://h/ x", "http://" + "a" * 3000, "redis://127.0.0.1:6379/0",
    "127.0.0.1:６３７９", "127.0.0.1:6379", "unix:///tmp/redis.sock", "http://h:65535/m",
]


def _value_strategy() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(NASTY_NUMBERS),
        st.sampled_from(URLS),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.integers(min_value=-(2**70), max_value=2**70).map(str),
        st.text(max_size=12),
        st.sampled_from(["true", "false", "yes", "maybe", "vllm", "auto", "list", "/metrics", "metrics"]),
    )


metadata_strategy = st.dictionaries(
    st.one_of(st.sampled_from(NAMES), st.sampled_from(["scalerAddress", "bogus", "endpointsFromEnv", ""])),
    _value_strategy(),
    max_size=6,
).map(lambda extra: {**BASE, **extra})


def _run_policy(cfg: ScalerConfig) -> None:
    """An accepted config must survive the policy with extreme loads (no OverflowError, no NaN)."""
    now = 1_000_000.0
    state = ScalerState()
    for load in (0.0, 1e9, 3.0):
        sig = ReplicaSignal(engine="vllm", waiting=load, running=load, kv_usage=1.0)
        snap = Snapshot(taken_at=now, replicas=(ReplicaReading("r0", now, sig),), current_replicas=cfg.max_replicas)
        obs, state = observe(snap, state, cfg)
        d, state = decide(obs, state, cfg, now)
        assert 0 <= d.desired <= cfg.max_replicas
        assert math.isfinite(d.metric_value)
        now += cfg.scrape_interval_seconds


def _check_ranges(cfg: ScalerConfig) -> None:
    values = {f.name: getattr(cfg, f.name) for f in fields(cfg)}
    for k in NUMERIC:
        v = values[k.field]
        if v is not None:
            assert k.range is not None and v in k.range, (k.name, v)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(metadata_strategy)
def test_metadata_is_accepted_within_ranges_or_rejected_naming_a_key(meta: dict[str, str]) -> None:
    try:
        cfg = parse_metadata(meta)
    except ConfigError as exc:
        assert exc.key in meta or exc.key in NAMES, exc  # the bad key, or the other key of an inconsistent pair
        assert "pw@" not in str(exc) and "token=abc" not in str(exc)
        return
    _check_ranges(cfg)
    _run_policy(cfg)


@pytest.mark.parametrize("raw", ["²", "١٠", "1_0", "１０", "0x10", "1e308", "5e-324", str(2**63), "inf"])
@pytest.mark.parametrize("key", ["maxReplicas", "targetInflightPerReplica", "scrapeTimeoutSeconds", "maxPayloadBytes"])
def test_reported_hostile_numbers_are_refused(key: str, raw: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_metadata({**BASE, key: raw})
    assert err.value.key == key


def test_reported_cases() -> None:
    """The exact inputs from the issue."""
    for meta, _key in [
        ({"maxPayloadBytes": "1000000000000"}, "maxPayloadBytes"),
        ({"scrapeTimeoutSeconds": "1e308"}, "scrapeTimeoutSeconds"),
        ({"targetInflightPerReplica": "5e-324"}, "targetInflightPerReplica"),
        ({"minReplicas": str(2**63), "maxReplicas": str(2**63)}, "maxReplicas"),
        ({"endpoints": "http://127.0.0.1:99999/metrics"}, "endpoints"),
        ({"prometheusAddress": "http://127.0.0.1:99999"}, "prometheusAddress"),
        ({"redisAddress": "127.0.0.1:99999", "redisQueue": "q"}, "redisAddress"),
        ({"metricsPort": "80²", "podSelector": "a=b"}, "metricsPort"),
    ]:
        with pytest.raises(ConfigError) as err:
            parse_metadata({**BASE, **meta})
        assert err.value.key in meta, (meta, err.value)


def test_every_numeric_key_has_a_finite_declared_range() -> None:
    numeric_fields = {f.name for f in fields(ScalerConfig) if f.type in ("int", "float", "int | None",
                                                                        "float | None")}
    # a removed key's field stays (its value is still validated, then ignored: DEPRECATED_KEYS)
    removed = [k for k, _ in DEPRECATED_KEYS]
    declared = {k.field for k in NUMERIC} | {k.field for k in removed}
    assert numeric_fields <= declared, numeric_fields - declared
    for k in (*NUMERIC, *(k for k in removed if k.field in numeric_fields)):
        assert isinstance(k.range, Range) and math.isfinite(k.range.lo) and math.isfinite(k.range.hi), k.name
