from datetime import UTC, datetime

import pytest

from warmscale.warmpool.annotations import (
    AnnotationError,
    defaults_table,
    is_enabled,
    parse_annotations,
    parse_min_ready,
)

P = "warmscale.io/"


def at(s: str) -> datetime:
    return datetime.fromisoformat(s).replace(tzinfo=UTC) if "+" not in s else datetime.fromisoformat(s)


def test_defaults() -> None:
    cfg = parse_annotations({})
    assert not cfg.enabled and cfg.standby == 0 and cfg.prestage_nodes == 0 and cfg.model_uri is None
    assert cfg.scale_to_zero.mode == "never" and not cfg.autoscale and cfg.max_replicas == 10
    assert cfg.floor_at(at("2026-01-05T12:00:00")) == (1, True)  # floor 0 raised: scale-to-zero never


def test_full_set() -> None:
    cfg = parse_annotations(
        {
            P + "enabled": "true",
            P + "min-ready": "3",
            P + "standby": "2",
            P + "prestage-nodes": "4",
            P + "model-uri": "hf://meta-llama/Llama-3.1-8B@abc123",
            P + "model-size": "16Gi",
            P + "model-sha256": "A" * 64,
            P + "autoscale": "true",
            P + "max-replicas": "8",
            P + "ttft-slo-seconds": "1.5",
            P + "scaler-address": "scaler.ns:9090",
            P + "trigger-metadata": '{"metricsPort": "8000"}',
            P + "stage-pod-annotations": '{"a": "b"}',
            P + "status": "anything (written by the controller)",
            "other.io/x": "ignored",
        }
    )
    assert cfg.enabled and cfg.standby == 2 and cfg.prestage_nodes == 4
    assert cfg.model_uri is not None and cfg.model_uri.canonical == "hf://meta-llama/Llama-3.1-8B@abc123"
    assert cfg.model_size == 16 * 1024**3 and cfg.model_sha256 == "a" * 64
    assert cfg.max_replicas == 8 and cfg.ttft_slo_seconds == 1.5 and cfg.trigger_metadata == {"metricsPort": "8000"}
    assert cfg.floor_at(at("2026-01-05T12:00:00")) == (3, False)


SCHEDULE = "tz=Europe/Berlin; mon-fri 08:00-20:00=4; sat,sun 10:00-16:00=1; fri 22:00-02:00=2; default=0"


@pytest.mark.parametrize(
    ("when", "floor"),
    [
        ("2026-01-05T07:30:00+00:00", 4),  # Monday 08:30 Berlin (UTC+1)
        ("2026-01-05T06:59:00+00:00", 0),  # Monday 07:59 Berlin
        ("2026-01-05T19:00:00+00:00", 0),  # Monday 20:00 Berlin: end is exclusive
        ("2026-01-10T09:00:00+00:00", 1),  # Saturday 10:00 Berlin
        ("2026-01-09T22:30:00+00:00", 2),  # Friday 23:30 Berlin
        ("2026-01-10T00:30:00+00:00", 2),  # Saturday 01:30 Berlin: Friday's window crossing midnight
        ("2026-01-10T01:00:00+00:00", 0),  # Saturday 02:00 Berlin
        ("2026-07-06T06:30:00+00:00", 4),  # Monday 08:30 Berlin in summer time (UTC+2)
    ],
)
def test_schedule_floor(when: str, floor: int) -> None:
    assert parse_min_ready(SCHEDULE).floor_at(datetime.fromisoformat(when)) == floor


def test_overlap_takes_max_and_full_day() -> None:
    s = parse_min_ready("* 00:00-24:00=1; mon 09:00-10:00=5; daily 09:30-11:00=3")
    assert s.floor_at(at("2026-01-05T09:45:00")) == 5
    assert s.floor_at(at("2026-01-05T10:30:00")) == 3
    assert s.floor_at(at("2026-01-06T23:59:00")) == 1
    assert s.maximum == 5


@pytest.mark.parametrize(
    ("value", "when", "floor", "raised"),
    [
        ("never", "2026-01-10T12:00:00", 1, True),
        ("allowed", "2026-01-10T12:00:00", 0, False),
        ("allowed: sat-sun 00:00-24:00", "2026-01-10T12:00:00", 0, False),  # Saturday
        ("allowed: sat-sun 00:00-24:00", "2026-01-07T12:00:00", 1, True),  # Wednesday
    ],
)
def test_scale_to_zero(value: str, when: str, floor: int, raised: bool) -> None:
    cfg = parse_annotations({P + "min-ready": "default=0; mon 08:00-09:00=2", P + "scale-to-zero": value})
    assert cfg.floor_at(at(when)) == (floor, raised)


def test_scale_to_zero_uses_schedule_timezone() -> None:
    cfg = parse_annotations(
        {P + "min-ready": "tz=Asia/Tokyo; default=0", P + "scale-to-zero": "allowed: mon 00:00-01:00"}
    )
    assert cfg.scale_to_zero.tz == "Asia/Tokyo"
    assert cfg.floor_at(at("2026-01-04T15:30:00")) == (0, False)  # Monday 00:30 in Tokyo


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("enabled", "maybe"),
        ("min-ready", "-1"),
        ("min-ready", "tz=Mars/Olympus; default=1"),
        ("min-ready", "mon-fri 8-20=3"),
        ("min-ready", "funday 08:00-09:00=1"),
        ("min-ready", "mon 08:00-25:00=1"),
        ("min-ready", "mon 08:00-09:00"),
        ("scale-to-zero", "sometimes"),
        ("scale-to-zero", "allowed:"),
        ("standby", "two"),
        ("prestage-nodes", "1.5"),
        ("model-uri", "ftp://x/y"),
        ("model-uri", "pvc://claim/../../etc"),
        ("model-size", "-3Gi"),
        ("model-sha256", "abc"),
        ("cache-root", "relative/path"),
        ("cache-budget", "lots"),
        ("autoscale", "yes please"),
        ("max-replicas", "x"),
        ("ttft-slo-seconds", "0"),
        ("scaler-address", "nohost"),
        ("trigger-metadata", "[1]"),
        ("stage-pod-annotations", '{"a": 1}'),
        ("bogus-key", "1"),
    ],
)
def test_invalid_names_key(key: str, value: str) -> None:
    ann = {P + "enabled": "true", P + key: value}
    if key == "model-sha256":
        ann[P + "model-uri"] = "s3://bucket/x"
    with pytest.raises(AnnotationError) as ei:
        parse_annotations(ann)
    assert ei.value.key == P + key
    assert (P + key) in str(ei.value)


def test_cross_key_errors() -> None:
    with pytest.raises(AnnotationError) as ei:
        parse_annotations({P + "model-size": "1Gi"})
    assert ei.value.key == P + "model-uri"
    with pytest.raises(AnnotationError) as ei:
        parse_annotations({P + "autoscale": "true", P + "min-ready": "5", P + "max-replicas": "2"})
    assert ei.value.key == P + "max-replicas"


def test_is_enabled_and_table() -> None:
    assert is_enabled({P + "enabled": "true"}) and is_enabled({P + "enabled": "garbage"})
    assert not is_enabled({}) and not is_enabled({P + "enabled": "false"})
    table = defaults_table()
    assert "`warmscale.io/min-ready`" in table and "`warmscale.io/scale-to-zero`" in table
