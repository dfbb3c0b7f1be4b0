"""What every ``warmscale`` subcommand's arguments share: checked value types (argparse then says
``argument --flag: ...`` and exits 2, before anything runs), the help layout with defaults, and the
global flags that work before or after the subcommand."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Iterator

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
LOG_FORMATS = ("json", "text")
# TCP ports: 0..65535 (what 0 means is the flag's: off, or any free port).
MAX_PORT = 65535


class UsageError(ValueError):
    """A bad argument found after parsing (a combination of flags, a file's content); the message
    names the flag or the file:line:column. The command line prints it in one line and exits 2."""


def user_errors() -> tuple[type[Exception], ...]:
    """What a subcommand may raise about its input (printed as one line, exit 2): :class:`UsageError`,
    a bad trace file, a trace that is not there."""
    from warmscale.traces import TraceNotFound
    from warmscale.traces.loader import TraceError

    return (UsageError, TraceError, TraceNotFound)


def key_value(text: str) -> str:
    """``KEY=VALUE`` (kept as written; split by the command)."""
    key, sep, _ = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return text


def _number(text: str, kind: type[int] | type[float]) -> float:
    try:
        x = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return x


def _at_least(text: str, kind: type[int] | type[float], lo: float, *, strictly: bool = False) -> float:
    x = _number(text, kind)
    if x < lo or (strictly and x == lo):
        bound = f"greater than {lo:g}" if strictly else "0 or more" if lo == 0 else f"at least {lo:g}"
        raise argparse.ArgumentTypeError(f"must be {bound} (got {text})")
    return x


def positive_float(text: str) -> float:
    return float(_at_least(text, float, 0, strictly=True))


def non_negative_float(text: str) -> float:
    return float(_at_least(text, float, 0))


def positive_int(text: str) -> int:
    return int(_at_least(text, int, 1))


def non_negative_int(text: str) -> int:
    return int(_at_least(text, int, 0))


def port(*, off: int | None = None) -> Callable[[str], int]:
    """A TCP port 0..65535 (the flag's help says what 0 means); ``off`` is an extra value that disables
    the listener (the scaler's ``--metrics-port -1``)."""

    def parse(text: str) -> int:
        x = int(_number(text, int))
        if off is not None and x == off:
            return x
        if not 0 <= x <= MAX_PORT:
            extra = f", or {off} for none" if off is not None else ""
            raise argparse.ArgumentTypeError(f"must be a port 0-{MAX_PORT}{extra} (got {text})")
        return x

    parse.__name__ = "port"
    return parse


def readable_file(text: str) -> str:
    """A path to a file this process can read (checked now: a typo fails before anything starts)."""
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"{text}: no such file" if not os.path.exists(text) else f"{text}: not a file")
    try:
        with open(text, "rb"):
            pass
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text}: cannot read: {exc.strerror or exc}") from None
    return text


def writable_path(text: str) -> str:
    """A file this process may create or replace ('' passes: "none"); checked before the work starts,
    so a typo in an output path does not cost a whole run."""
    if not text:
        return text
    parent = os.path.dirname(os.path.abspath(text))
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text}: is a directory")
    if not os.path.isdir(parent):
        raise argparse.ArgumentTypeError(f"{text}: no such directory {parent}")
    if not os.access(parent, os.W_OK) or (os.path.exists(text) and not os.access(text, os.W_OK)):
        raise argparse.ArgumentTypeError(f"{text}: not writable")
    return text


def log_level(text: str) -> str:
    level = text.strip().lower()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a log level (choose from {', '.join(LOG_LEVELS)})")
    return level


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written, and every option's default in its help unless the help already
    says what the default is (or there is none to show: a switch, an unset value)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (not text or "%(default)" in text or "default" in text.lower() or default in (None, False, "", [])
                or default is argparse.SUPPRESS or not action.option_strings):
            return action.help
        return text + " (default: %(default)s)"


def add_global_flags(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """``--log-level`` and ``--log-format``. On a subcommand's parser their default is SUPPRESS, so
    they override the top level's only when given there (``warmscale demo --log-level debug``)."""
    level_default = "info" if top else argparse.SUPPRESS
    format_default = "json" if top else argparse.SUPPRESS
    group = parser.add_argument_group("logging (before or after the subcommand)") if not top else parser
    group.add_argument("--log-level", type=log_level, default=level_default, metavar="LEVEL",
                       help=f"least severe log level shown: {', '.join(LOG_LEVELS)} (default: info)")
    group.add_argument("--log-format", choices=LOG_FORMATS, default=format_default,
                       help="log lines as JSON objects or plain text (default: json)")


def walk(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every subcommand parser under it, depth first."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for sub in action.choices.values():
                if id(sub) not in seen:  # aliases share a parser
                    seen.add(id(sub))
                    yield from walk(sub)
