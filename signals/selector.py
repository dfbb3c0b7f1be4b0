"""Label matchers for directly scraped payloads (pure, no I/O): PromQL's ``label op "value"`` syntax.

Several models (or several Ray Serve deployments) served from one node share one ``/metrics``
payload; summing every series would merge them into one replica. The ``seriesSelector`` metadata key
keeps only the series that match, as ``prometheusSelector`` does on the Prometheus path:

>>> sel = parse_selector('model_name="llama-8b",engine!="1"')
>>> matches({"model_name": "llama-8b", "engine": "0"}, sel)
True

Operators ``=``, ``!=``, ``=~``, ``!~`` (regular expressions anchored at both ends, as in PromQL); a
label the series does not carry matches as the empty string (PromQL semantics).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

OPS = ("=~", "!~", "!=", "=")
# One matcher and its separator: a label name, an operator, a double-quoted value (``\\`` and ``\"``
# escaped), then a comma or the end.
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
# A selector this long is not a label selector (metadata values are small); bounds the regex work.
MAX_SELECTOR_CHARS = 1024


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str
    pattern: re.Pattern[str] | None = None

    def __call__(self, labels: Mapping[str, str]) -> bool:
        got = labels.get(self.label, "")
        if self.op == "=":
            return got == self.value
        if self.op == "!=":
            return got != self.value
        assert self.pattern is not None
        found = self.pattern.fullmatch(got) is not None
        return found if self.op == "=~" else not found


def parse_selector(text: str) -> tuple[Matcher, ...]:
    """The matchers of ``text`` (empty: none). Raises :class:`ValueError` naming what is wrong."""
    s = text.strip()
    if len(s) > MAX_SELECTOR_CHARS:
        raise ValueError(f"selector longer than {MAX_SELECTOR_CHARS} characters")
    s = s[1:-1].strip() if s.startswith("{") and s.endswith("}") else s
    out: list[Matcher] = []
    pos = 0
    while pos < len(s):
        m = _MATCHER.match(s, pos)
        if m is None or m.end() == pos:
            raise ValueError(f'expected label="value" (operators {", ".join(OPS)}) at {s[pos:pos + 40]!r}')
        label, op, raw = m.group(1), m.group(2), m.group(3)
        value = re.sub(r"\\(.)", r"\1", raw)
        pattern = None
        if op in ("=~", "!~"):
            try:
                pattern = re.compile(value)
            except re.error as exc:
                raise ValueError(f"{label}{op}: invalid regular expression {value[:80]!r}: {exc}") from None
        out.append(Matcher(label, op, value, pattern))
        pos = m.end()
    return tuple(out)


def matches(labels: Mapping[str, str], matchers: tuple[Matcher, ...]) -> bool:
    return all(m(labels) for m in matchers)
