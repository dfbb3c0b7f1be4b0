"""Progress bars with an ETA for long work (``bench suite``, ``bench trace`` ensembles and long
replays, the cluster build), on an interactive terminal only.

A bar is shown when the work is not ``quiet``, standard error is a terminal, ``CI`` is not set to a
true value and tqdm (the ``demo`` extra) is installed; otherwise :func:`bar` returns a stand-in that
does nothing but pass messages through, so CI logs keep their lines and gain no carriage returns.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TextIO

CI_TRUE = ("1", "true", "yes")


class Bar(Protocol):
    def update(self, n: float = 1) -> Any: ...

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> Any: ...

    def write(self, message: str) -> None: ...


class _Silent:
    """No bar: messages go to the stream as lines."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def update(self, n: float = 1) -> None:
        return None

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        return None

    def write(self, message: str) -> None:
        print(message, file=self._stream, flush=True)


class _Tqdm:
    def __init__(self, inner: Any, stream: TextIO) -> None:
        self._inner, self._stream = inner, stream

    def update(self, n: float = 1) -> None:
        self._inner.update(n)

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self._inner.set_postfix_str(s, refresh=refresh)

    def write(self, message: str) -> None:
        self._inner.write(message, file=self._stream)  # above the bar, which is redrawn below it


def wanted(quiet: bool = False, stream: TextIO | None = None, env: dict[str, str] | None = None) -> bool:
    """Whether a bar would be drawn (see the module docstring)."""
    stream = stream if stream is not None else sys.stderr
    env = env if env is not None else dict(os.environ)
    if quiet or env.get("CI", "").strip().lower() in CI_TRUE:
        return False
    try:
        if not stream.isatty():
            return False
    except (AttributeError, ValueError):  # a closed or odd stream
        return False
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return False
    return True


@contextmanager
def bar(total: float, desc: str, *, unit: str = "it", quiet: bool = False, stream: TextIO | None = None,
        env: dict[str, str] | None = None) -> Iterator[Bar]:
    """A bar of ``total`` units (fractions allowed: weigh steps by their expected duration)."""
    out = stream if stream is not None else sys.stderr
    if not wanted(quiet, out, env):
        yield _Silent(out)
        return
    from tqdm import tqdm

    inner = tqdm(total=total, desc=desc, unit=unit, file=out, dynamic_ncols=True, leave=True,
                 bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} {unit} [{elapsed}<{remaining}{postfix}]")
    try:
        yield _Tqdm(inner, out)
    finally:
        inner.close()
