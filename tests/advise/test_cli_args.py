"""`warmscale advise` arguments and text output (no cluster)."""

from __future__ import annotations

import argparse

import pytest

from tests.advise.test_detect import NOW, gangs, three_within_a_day
from warmscale.advise.cli import duration, policy_from, render_json, render_text
from warmscale.cli import build_parser
from warmscale.common.diagnostics.detect import advise


@pytest.mark.parametrize(("raw", "seconds"), [("90", 90), ("90s", 90), ("10m", 600), ("6h", 21600), ("1d", 86400),
                                              ("1.5h", 5400)])
def test_durations(raw: str, seconds: float) -> None:
    assert duration(raw) == seconds


@pytest.mark.parametrize("raw", ["", "0", "-1h", "6x", "1e3", "31d", "nan", "٣h"])
def test_bad_durations(raw: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        duration(raw)


def test_defaults_and_policy() -> None:
    args = build_parser().parse_args(["advise"])
    p = policy_from(args)
    assert (args.since, args.json, args.namespace, args.kubeconfig) == (21600, False, None, None)
    assert (p.min_episodes, p.window_s, p.pending_threshold_s, p.gang_threshold_s) == (3, 86400, 600, 300)
    args = build_parser().parse_args(["advise", "--min-episodes", "5", "--episode-window", "2d", "--json",
                                      "-n", "llm"])
    assert policy_from(args).min_episodes == 5 and policy_from(args).window_s == 172800 and args.namespace == "llm"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["advise", "--min-episodes", "0"])


def test_text_output() -> None:
    assert render_text([], ["no --prometheus"]).splitlines() == [
        "No repeated failure: no new layer needed.", "note: no --prometheus"]
    text = render_text(advise(gangs(three_within_a_day()), policy_from(build_parser().parse_args(["advise"])), NOW),
                       [])
    assert text.startswith("[partial-gang] llm/llama-405b: 3 times in 24 h")
    assert "next layer: gang admission" in text and text.count("  - ") == 3


def test_output_redacts_prometheus_credentials() -> None:
    """Issue 20 item 23: a note quoting ``--prometheus`` (and its error) printed the password verbatim."""
    note = ("prometheus http://admin:s3cret@prom:9090/?token=t0k not readable (ConnectionError: "
            "http://admin:s3cret@prom:9090/api/v1/query_range): cold-start not evaluated")
    text = render_text([], [note])
    assert "s3cret" not in text and "t0k" not in text and "http://***@prom:9090" in text
    doc = render_json([], [note], NOW)
    assert "s3cret" not in doc and "t0k" not in doc and "http://***@prom:9090" in doc
