"""The sample index and bad payloads: each bad input is a PayloadError (the replica is unknown)."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.signals.samples import ENGINE_SAMPLES
from warmscale.signals.engines import parse_payload
from warmscale.signals.parsing import PayloadError, label_is, parse_text

V1 = ENGINE_SAMPLES[0].text()
TGI = next(e for e in ENGINE_SAMPLES if e.engine == "tgi").text()
TRITON = next(e for e in ENGINE_SAMPLES if e.engine == "triton").text()


def test_counters_keep_their_wire_names() -> None:
    tgi = parse_text(TGI)
    assert "tgi_request_count" in tgi and "tgi_request_count_total" not in tgi
    assert tgi.total("tgi_request_count") == 18353
    triton = parse_text(TRITON)
    assert "nv_inference_request_success" in triton and "nv_inference_request_success_total" not in triton
    v1 = parse_text(V1)
    assert "vllm:prompt_tokens_total" in v1 and "vllm:prompt_tokens" not in v1
    assert "vllm:prompt_tokens_created" in v1  # the *_created gauge is its own family


def test_histogram_suffixes_and_prefix_traps() -> None:
    idx = parse_text(V1)
    assert "vllm:iteration_tokens_total_bucket" in idx  # a histogram whose name ends in _total
    assert idx.total("vllm:num_requests_waiting") == 6
    assert idx.total("vllm:num_requests_waiting_by_reason") == 6
    assert idx.total("vllm:num_requests_waiting", label_is("engine", "1")) == 2


def test_label_order_does_not_matter() -> None:
    a = (
        'vllm:num_requests_running{engine="0",model_name="m"} 3\n'
        'vllm:num_requests_waiting{model_name="m",engine="0"} 1\n'
    )
    sig = parse_payload(a)
    assert (sig.running, sig.waiting) == (3, 1)


def test_histogram_merges_series_across_engines() -> None:
    idx = parse_text(V1)
    h = idx.histogram("vllm:time_to_first_token_seconds")
    h0 = idx.histogram("vllm:time_to_first_token_seconds", label_is("engine", "0"))
    h1 = idx.histogram("vllm:time_to_first_token_seconds", label_is("engine", "1"))
    assert h is not None and h0 is not None and h1 is not None
    assert h == h0 + h1
    assert h.count == 6865 + 6740


def test_histogram_scale_converts_units() -> None:
    text = (
        "# TYPE x_ms histogram\n"
        'x_ms_bucket{le="100"} 1\nx_ms_bucket{le="1000"} 3\nx_ms_bucket{le="+Inf"} 4\nx_ms_sum 5000\nx_ms_count 4\n'
    )
    h = parse_text(text).histogram("x_ms", scale=1e-3)
    assert h is not None
    assert h.buckets == ((0.1, 1), (1.0, 3), (math.inf, 4))
    assert h.sum == pytest.approx(5.0)


def test_non_monotonic_histogram_is_dropped_not_the_replica() -> None:
    text = (
        "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n"
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        'vllm:time_to_first_token_seconds_bucket{le="0.1"} 5\n'
        'vllm:time_to_first_token_seconds_bucket{le="1"} 3\n'
        'vllm:time_to_first_token_seconds_bucket{le="+Inf"} 5\n'
        "vllm:time_to_first_token_seconds_count 5\nvllm:time_to_first_token_seconds_sum 1\n"
    )
    sig = parse_payload(text)
    assert sig.running == 1 and sig.ttft is None


GARBAGE = {
    "empty": "",
    "blank": "\n\n  \n",
    "html": "<html><body><h1>502 Bad Gateway</h1></body></html>\n",
    "json": '{"num_requests_running": 3}\n',
    "words": "this is not a metrics payload\n",
    "binary": "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\n",
    "bad_labels": 'vllm:num_requests_running{engine="0",model_name="m} 3\n',
    "bad_value": 'vllm:num_requests_running{engine="0"} three\n',
    "trtllm_json_stats": '[{"numActiveRequests": 3, "numQueuedRequests": 1}]\n',
}


@pytest.mark.parametrize("text", GARBAGE.values(), ids=GARBAGE.keys())
def test_garbage_is_a_payload_error(text: str) -> None:
    with pytest.raises(PayloadError):
        parse_payload(text)


@pytest.mark.parametrize("cut", [1, 17, 500, 2_000, 10_000, 40_000, len(V1) - 3])
def test_truncated_payload_is_a_payload_error(cut: int) -> None:
    with pytest.raises(PayloadError):
        parse_payload(V1[:cut])


def test_truncated_at_a_line_end_before_the_gauges_is_missing_metrics() -> None:
    head = V1[: V1.index("# HELP vllm:num_requests_waiting ")]
    with pytest.raises(PayloadError, match="missing required metric for waiting"):
        parse_payload(head)


@pytest.mark.parametrize("bad", ["NaN", "+Inf", "-Inf", "-1", "-0.5"])
@pytest.mark.parametrize(
    "metric", ["vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"]
)
def test_invalid_gauge_values_are_payload_errors(metric: str, bad: str) -> None:
    text = re.sub(rf"^({re.escape(metric)}\{{engine=\"1\"[^}}]*\}}) \S+$", rf"\1 {bad}", V1, count=1, flags=re.M)
    assert text != V1
    with pytest.raises(PayloadError, match=re.escape(metric)):
        parse_payload(text)


def test_kv_above_one_is_a_payload_error_but_rounding_is_clamped() -> None:
    over = re.sub(r"^(vllm:kv_cache_usage_perc\{engine=\"1\"[^}]*\}) \S+$", r"\1 1.7", V1, count=1, flags=re.M)
    with pytest.raises(PayloadError, match="fraction"):
        parse_payload(over)
    hair = re.sub(r"^(vllm:kv_cache_usage_perc\{engine=\"1\"[^}]*\}) \S+$", r"\1 1.0000000001", V1, count=1, flags=re.M)
    assert parse_payload(hair).kv_usage == 1.0


def test_invalid_counter_makes_the_counter_unknown_not_the_replica() -> None:
    text = re.sub(r"^(vllm:request_success_total\{engine=\"1\",finished_reason=\"stop\"[^}]*\}) \S+$",
                  r"\1 NaN", V1, count=1, flags=re.M)
    sig = parse_payload(text)
    assert sig.requests_total is None and sig.running == 44


def test_size_cap() -> None:
    with pytest.raises(PayloadError, match="cap"):
        parse_payload(V1, max_bytes=1024)
    assert parse_payload(V1, max_bytes=len(V1.encode())).running == 44


def test_unknown_payload_and_unknown_engine() -> None:
    with pytest.raises(PayloadError, match="unrecognised"):
        parse_payload("# TYPE up gauge\nup 1\n")
    with pytest.raises(ValueError, match="unknown engine"):
        parse_payload(V1, "llamacpp")


# --- the fast path's comment lines (one regular expression) against prometheus_client's parser

_COMMENT_WORDS = st.sampled_from([
    "HELP", "TYPE", "HELPX", "TYPEx", "EOF", "help", "counter", "gauge", "histogram", "summary", "untyped", "unknown",
    "COUNTER", "x", "vllm:num_requests_running", "x_total", "9bad", 'a"b', "a\\b", "\\n", "é", "", "two words",
])  # fmt: skip
_SEPARATORS = st.sampled_from([" ", "  ", "\t", " \t", "\x0b", "\x0c", "\u00a0", "\x1c", "\r", ""])
_VALID_SAMPLES = (
    'vllm:num_requests_running{engine="0"} 3\n'
    "x_total 4\n"
    "x 5\n"
)


@st.composite
def _comment_line(draw: st.DrawFn) -> str:
    out = draw(st.sampled_from(["#", "#", " #", "\t#", "\u00a0#"]))
    for word in draw(st.lists(st.one_of(_COMMENT_WORDS, st.text(max_size=4)), max_size=4)):
        out += draw(_SEPARATORS) + word
    return out + draw(st.sampled_from(["", " ", "\t"]))


@settings(max_examples=500, deadline=None)
@given(st.lists(_comment_line(), min_size=1, max_size=6))
def test_fast_path_comments_read_as_the_full_parser_reads_them(comments: list[str]) -> None:
    """Differential: whenever the fast path accepts a payload with these comment lines, prometheus_client's
    parser gives the same samples and the lax type scan the same declared types."""
    from warmscale.signals.parsing import _declared_types, _fast_parse, _full_samples

    text = "".join(c + "\n" for c in comments) + _VALID_SAMPLES
    fast = _fast_parse(text, None)
    if fast is None:
        return
    declared = _declared_types(text)
    assert declared == fast[1]
    full = _full_samples(text, declared)
    assert [(n, lbl, repr(v)) for n, lbl, v in full] == [(n, lbl, repr(v)) for n, lbl, v in fast[0]]


@pytest.mark.parametrize("comment, declared", [
    ("#", {}),
    ("# EOF", {}),
    ("# a comment with \"quotes\" and \\ backslashes", {}),
    ("# HELP x", {}),
    ("# HELP x Help text, \"quoted\" and \\n escaped.", {}),
    ("#\tHELP  x\ttext", {}),
    ("# TYPE x counter", {"x": "counter"}),
    ("#  TYPE\tvllm:num_requests_running   gauge", {"vllm:num_requests_running": "gauge"}),
    ("# HELPX anything", {}),
])  # fmt: skip
def test_fast_path_reads_the_comments_every_exporter_writes(comment: str, declared: dict[str, str]) -> None:
    from warmscale.signals.parsing import _fast_parse

    fast = _fast_parse(comment + "\n" + _VALID_SAMPLES, None)
    assert fast is not None and fast[1] == declared


@pytest.mark.parametrize("comment", [
    "#TYPE x counter", "# TYPE x", "# TYPE x counter extra", "# TYPE x COUNTER", "# TYPE", "# HELP", "# HELP 9bad x",
    '# HELP "x" quoted', "# HELP x\x0btext", "# TYPE x\x0bcounter", "# café", "# ctrl \x01", "#\x0bTYPE x counter",
])  # fmt: skip
def test_fast_path_leaves_unusual_comments_to_the_full_parser(comment: str) -> None:
    from warmscale.signals.parsing import _fast_parse

    assert _fast_parse(comment + "\n" + _VALID_SAMPLES, None) is None
