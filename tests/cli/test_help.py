"""Every ``--help``: user-facing (no internal references), every option explained, every default shown."""

from __future__ import annotations

import argparse
import re

import pytest

from warmscale.cli import build_parser
from warmscale.cliargs import walk

# What a user cannot act on: tracker numbers, the development machines' folders, source file names.
INTERNAL = re.compile(r"\bissues? \d|\bshared/|development machines|\b[\w/]+\.py\b")


def _parsers() -> list[argparse.ArgumentParser]:
    return list(walk(build_parser()))


def _options(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions if a.option_strings and not isinstance(a, (argparse._HelpAction,
                                                                              argparse._VersionAction))]


def test_the_top_level_help_is_for_users() -> None:
    text = build_parser().format_help()
    assert "warmscale demo" in text and "warmscale validate" in text
    assert "configure(parser)" not in text and "heavy imports" not in text


@pytest.mark.parametrize("parser", _parsers(), ids=lambda p: p.prog)
def test_no_internal_references(parser: argparse.ArgumentParser) -> None:
    found = INTERNAL.findall(parser.format_help())
    assert not found, found


@pytest.mark.parametrize("parser", _parsers(), ids=lambda p: p.prog)
def test_every_option_has_help_and_shows_its_default(parser: argparse.ArgumentParser) -> None:
    formatter = parser._get_formatter()
    for action in _options(parser):
        assert action.help, f"{parser.prog} {action.option_strings[0]}: no help"
        shown = formatter._expand_help(action) if "%(" in (formatter._get_help_string(action) or "") else \
            formatter._get_help_string(action)
        if action.default not in (None, False, "", [], argparse.SUPPRESS):
            assert "default" in (shown or "").lower(), f"{parser.prog} {action.option_strings[0]}: {shown!r}"


def test_global_flags_work_after_the_subcommand() -> None:
    parser = build_parser()
    args = parser.parse_args(["validate", "-f", "x.yaml", "--log-level", "DEBUG", "--log-format", "text"])
    assert (args.log_level, args.log_format) == ("debug", "text")
    args = parser.parse_args(["--log-level", "warning", "validate", "-f", "x.yaml"])
    assert (args.log_level, args.log_format) == ("warning", "json")  # the top level's, not overridden
    args = parser.parse_args(["bench", "trace", "--log-level", "error"])
    assert args.log_level == "error"


def test_scaler_metrics_port_defaults_to_the_manifests_port() -> None:
    args = build_parser().parse_args(["scaler"])
    assert args.metrics_port == 9091
