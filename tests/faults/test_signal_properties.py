"""Property-based fuzzing of metrics payloads (bounded budget): the parsers never raise anything but
``PayloadError``, a duplicated series is always malformed, and through the real scrape path a
malformed payload is an unknown replica, never a number."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.servers import FakeEngine
from warmscale.signals.engines import parse_payload
from warmscale.signals.parsing import PayloadError, parse_text
from warmscale.signals.sources.base import Endpoint
from warmscale.signals.sources.scrape import scrape_endpoint

NAMES = st.sampled_from([
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:request_success_total", "vllm:time_to_first_token_seconds_bucket", "sglang:num_running_reqs",
    "sglang:num_queue_reqs", "tgi_queue_size", "tgi_batch_current_size", "x", "a_b_c", "9bad", "",
])  # fmt: skip
LABEL_VALUES = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)
LABELS = st.dictionaries(st.sampled_from(["engine", "model_name", "le", "pod", "x y", '"']), LABEL_VALUES, max_size=3)
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10, 10**6).map(str),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e309", "0x10", "", "abc", "1 2 3"]),
)


@st.composite
def sample_line(draw: st.DrawFn) -> str:
    name = draw(NAMES)
    labels = draw(LABELS)
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{body}}} {draw(VALUES)}" if labels or draw(st.booleans()) else f"{name} {draw(VALUES)}"


LINE = st.one_of(
    sample_line(),
    st.sampled_from(["# TYPE vllm:num_requests_running gauge", "# TYPE x counter", "# HELP x help text",
                     "# TYPE tgi_queue_size histogram", "#", "# EOF", ""]),
    st.text(max_size=30),
)
PAYLOAD = st.lists(LINE, max_size=25).map(lambda lines: "\n".join(lines)) | st.text(max_size=200)
ENDING = st.sampled_from(["\n", "", "\r\n", "\x00"])

VALID = (
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{engine="0",model_name="m"} 3\n'
    "# TYPE vllm:num_requests_waiting gauge\n"
    'vllm:num_requests_waiting{engine="0",model_name="m"} 1\n'
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PAYLOAD, ENDING, st.sampled_from(["auto", "vllm", "sglang", "tgi", "trtllm", "triton", "ray"]))
def test_parsers_raise_only_payload_errors(body: str, ending: str, engine: str) -> None:
    try:
        sig = parse_payload(body + ending, engine, max_bytes=64 * 1024)
    except PayloadError:
        return
    assert math.isfinite(sig.waiting) and sig.waiting >= 0
    assert math.isfinite(sig.running) and sig.running >= 0


@settings(max_examples=200, deadline=None)
@given(PAYLOAD, st.data())
def test_a_duplicated_series_is_always_malformed(body: str, data: st.DataObject) -> None:
    text = VALID + body + "\n"
    try:
        idx = parse_text(text)
    except PayloadError:
        return
    # the parser's lines (split on "\n", stripped): a whitespace-only line is empty, not a series
    lines = [ln for ln in text.split("\n") if ln.strip() and not ln.strip().startswith("#")]
    dup = data.draw(st.sampled_from(lines))
    with pytest.raises(PayloadError):
        parse_text(text + dup + "\n")
    assert idx.samples  # the valid one parsed


@pytest.fixture(scope="module")
def engine() -> Iterator[FakeEngine]:
    e = FakeEngine(VALID)
    yield e
    e.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(PAYLOAD, st.booleans())
def test_a_malformed_payload_is_an_unknown_replica(engine: FakeEngine, body: str, duplicate: bool) -> None:
    base = VALID + body + "\n"
    text = base + ('vllm:num_requests_running{engine="0",model_name="m"} 3\n' if duplicate else "")
    engine.serve(text)

    async def scrape() -> object:
        async with aiohttp.ClientSession() as s:
            return await scrape_endpoint(s, Endpoint("r", engine.url), 1.0, engine="vllm", timeout_s=5,
                                         max_bytes=64 * 1024)

    reading = asyncio.run(scrape())
    try:
        parse_payload(text, "vllm", max_bytes=64 * 1024)
        malformed = False
    except PayloadError:
        malformed = True
    assert reading.known is not malformed  # type: ignore[attr-defined]
    if duplicate:
        assert not reading.known  # type: ignore[attr-defined]
        try:
            parse_payload(base, "vllm", max_bytes=64 * 1024)
        except PayloadError:
            return
        assert "duplicate series" in (reading.error or "")  # type: ignore[attr-defined]


@settings(max_examples=400, deadline=None)
@given(PAYLOAD, st.booleans())
def test_the_fast_path_reads_exactly_what_the_full_parser_reads(body: str, prune: bool) -> None:
    """Differential: whenever the regex fast path accepts a payload, pruning + prometheus_client's
    parser give the same samples and types (and never an error)."""
    from warmscale.signals.engines import is_ttft_histogram
    from warmscale.signals.parsing import _declared_types, _fast_parse, _full_samples, _prune

    text = VALID + body + "\n"
    keep = is_ttft_histogram if prune else None
    fast = _fast_parse(text, keep)
    if fast is None:
        return
    pruned = _prune(text, keep) if keep is not None else text
    declared = _declared_types(pruned)

    def comparable(xs: list[tuple[str, dict[str, str], float]]) -> list[tuple[str, dict[str, str], str]]:
        return [(n, lbl, repr(v)) for n, lbl, v in xs]  # NaN == NaN

    assert comparable(_full_samples(pruned, declared)) == comparable(fast[0])
    assert declared == fast[1]
