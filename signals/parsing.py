"""Prometheus text exposition -> an index of samples keyed by the name *on the wire* (pure, no I/O).

The parsing itself is prometheus_client's (:func:`prometheus_client.parser.text_string_to_metric_families`).
That parser rewrites a counter sample exposed without ``_total`` (TGI, Triton) to ``<name>_total``;
:func:`parse_text` undoes the rewrite so that engine modules match the names engines really emit
(see ``engine-metrics.md`` section 0).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from warmscale.signals.histogram import Histogram, merge

Labels = Mapping[str, str]
Series = tuple[Labels, float]


class PayloadError(ValueError):
    """A metrics payload that can't be turned into a signal (garbage, truncated, invalid values,
    missing required metrics). The replica it came from is *unknown*, never idle."""


@dataclass(frozen=True)
class MetricIndex:
    """Samples by wire name; ``types`` maps a family's declared name to its ``# TYPE``."""

    samples: Mapping[str, tuple[Series, ...]]
    types: Mapping[str, str] = field(default_factory=dict)

    def __contains__(self, name: object) -> bool:
        return name in self.samples

    def names(self) -> frozenset[str]:
        return frozenset(self.samples)

    def series(self, name: str, where: Callable[[Labels], bool] | None = None) -> tuple[Series, ...]:
        got = self.samples.get(name, ())
        if where is None:
            return got
        return tuple(s for s in got if where(s[0]))

    def first_present(self, *names: str) -> str | None:
        """The first of ``names`` present in the payload (used for renamed/aliased metrics, so that a
        payload carrying both spellings is read once)."""
        for n in names:
            if n in self.samples:
                return n
        return None

    def select(self, where: Callable[[Labels], bool]) -> MetricIndex:
        """The series ``where`` accepts (every family, the declared types kept)."""
        kept: dict[str, tuple[Series, ...]] = {}
        for name, got in self.samples.items():
            chosen = tuple(s for s in got if where(s[0]))
            if chosen:
                kept[name] = chosen
        return MetricIndex(samples=kept, types=self.types)

    def has_prefix(self, *prefixes: str) -> bool:
        return any(n.startswith(prefixes) for n in self.samples)

    def total(self, name: str, where: Callable[[Labels], bool] | None = None) -> float | None:
        """Sum of the series of ``name`` (``None`` when absent); no validation."""
        got = self.series(name, where)
        if not got:
            return None
        return math.fsum(v for _, v in got)

    def histogram(
        self, base: str, where: Callable[[Labels], bool] | None = None, *, scale: float = 1.0
    ) -> Histogram | None:
        """The series of histogram ``base`` (``_bucket``/``_sum``/``_count``) merged into one, bucket
        bounds multiplied by ``scale``; ``None`` if absent or any series is invalid."""
        groups: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        for labels, value in self.series(base + "_bucket", where):
            le_raw = labels.get("le")
            if le_raw is None:
                return None
            try:
                le = float(le_raw)
            except ValueError:
                return None
            if math.isnan(le):
                return None
            key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
            groups.setdefault(key, []).append((le * scale if math.isfinite(le) else le, value))
        if not groups:
            return None
        sums = {_key(lbl): v for lbl, v in self.series(base + "_sum", where)}
        counts = {_key(lbl): v for lbl, v in self.series(base + "_count", where)}
        hists: list[Histogram] = []
        for key, buckets in groups.items():
            if not any(math.isinf(le) for le, _ in buckets) and key not in counts:
                return None
            h = Histogram.from_buckets(buckets, sums.get(key, 0.0) * scale, counts.get(key))
            if not h.is_valid() or (key in counts and h.buckets[-1][1] != h.count):
                return None
            hists.append(h)
        return merge(hists)


def _key(labels: Labels) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _declared_types(text: str) -> dict[str, str]:
    """``# TYPE name type`` lines, read the same lax way prometheus_client reads them."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        s = line.strip()
        if not s.startswith("#"):
            continue
        parts = s[1:].split(None, 2)
        if len(parts) == 3 and parts[0] == "TYPE":
            name_type = parts[2].rsplit(None, 1)
            if len(name_type) == 2:
                out[name_type[0].strip('"')] = name_type[1]
            elif len(name_type) == 1:
                out[parts[1].strip('"')] = name_type[0]
    return out


def _sample_name(line: str) -> str:
    end = len(line)
    for ch in "{ \t":
        i = line.find(ch)
        if 0 <= i < end:
            end = i
    return line[:end]


def _prune(text: str, keep_buckets: Callable[[str], bool]) -> str:
    """Drop ``_created`` samples and the ``_bucket`` samples of histograms nobody reads. Engines expose
    dozens of histograms; skipping their buckets makes parsing several times faster."""
    out = []
    for line in text.splitlines(keepends=True):
        stripped = line.lstrip()
        if stripped and not stripped.startswith("#"):
            name = _sample_name(stripped)
            if name.endswith("_created") or (name.endswith("_bucket") and not keep_buckets(name[: -len("_bucket")])):
                continue
        out.append(line)
    return "".join(out)


_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_FAST_SAMPLE = re.compile(
    rf"({_NAME})(?:\{{((?:[a-zA-Z_][a-zA-Z0-9_]*=\"[^\"\\\n]*\",?)*)\}})?[ \t]+"
    r"([-+]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?|Inf|NaN))"
    r"(?:[ \t]+-?[0-9]+)?"
)
_FAST_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"\\\n]*)"')
# A comment line (stripped) in one match: "#" alone or followed by blanks, then "HELP name [text]",
# "TYPE name type" or any other printable-ASCII text whose first word is not HELP or TYPE. Anything
# else -- a non-ASCII or control character, "#TYPE", a quoted (UTF-8) or invalid name, an unknown
# type, words after the type, separators other than space and tab -- is left to the full parser.
_FAST_COMMENT = re.compile(
    rf"#(?:[ \t]++(?:HELP[ \t]++({_NAME})(?:[ \t][\x20-\x7e\t]*+)?"
    rf"|TYPE[ \t]++({_NAME})[ \t]++(counter|gauge|histogram|summary|untyped|unknown)"
    r"|(?!(?:HELP|TYPE)(?:[ \t]|$))[\x20-\x7e\t]*+))?"
)


def _fast_parse(
    text: str, keep_buckets: Callable[[str], bool] | None
) -> tuple[list[tuple[str, dict[str, str], float]], dict[str, str]] | None:
    """Samples and declared types of a payload in the canonical form every exporter writes (plain
    names, quoted label values without escapes, plain numbers), in one pass with two regular
    expressions — an order of magnitude faster than prometheus_client's character-by-character
    parser. ``None`` as soon as any line is not in that form: the caller then prunes and uses
    prometheus_client's parser, so the result (or the error) is always the one the full parser gives.
    Lines the pruning drops (``_created``, unread ``_bucket``) are skipped unread, as there."""
    out: list[tuple[str, dict[str, str], float]] = []
    declared: dict[str, str] = {}
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line[0] == "#":
            c = _FAST_COMMENT.fullmatch(line)
            if c is None:
                return None
            if c.group(2) is not None:
                declared[c.group(2)] = c.group(3)
            continue
        if keep_buckets is not None:
            name = _sample_name(line)
            if name.endswith("_created") or (name.endswith("_bucket") and not keep_buckets(name[: -len("_bucket")])):
                continue
        m = _FAST_SAMPLE.fullmatch(line)
        if m is None:
            return None
        labels: dict[str, str] = {}
        if m.group(2):
            for k, v in _FAST_LABEL.findall(m.group(2)):
                if k in labels:
                    return None
                labels[k] = v
        out.append((m.group(1), labels, float(m.group(3))))
    for name, typ in declared.items():
        if typ == "counter" and declared.get(name + "_total") == "counter":
            return None  # the full parser's counter renaming would differ from the wire names
    return out, declared


def parse_text(
    text: str, *, max_bytes: int | None = None, keep_buckets: Callable[[str], bool] | None = None
) -> MetricIndex:
    """Parse one exposition payload. Raises :class:`PayloadError` on anything unparseable, including
    a series (name and label set) that appears twice.

    With ``keep_buckets``, only histograms whose base name it accepts keep their buckets, and
    ``*_created`` samples are skipped (their ``_sum``/``_count`` stay)."""
    if max_bytes is not None:
        size = len(text.encode("utf-8", "replace"))
        if size > max_bytes:
            raise PayloadError(f"payload of {size} bytes exceeds the {max_bytes}-byte cap")
    if "\x00" in text:
        raise PayloadError("payload is binary (contains NUL bytes), not Prometheus text")
    if not text.strip():
        raise PayloadError("empty payload")
    if not text.endswith("\n"):
        # The text format ends every line, the last one included, with a line feed; exporters
        # (prometheus_client, prometheus-cpp, Go expfmt, metrics-exporter-prometheus) all do.
        raise PayloadError("payload does not end with a line feed: truncated")
    fast = _fast_parse(text, keep_buckets)
    if fast is not None:
        triples, declared = fast
    else:
        if keep_buckets is not None:
            text = _prune(text, keep_buckets)
        declared = _declared_types(text)
        triples = _full_samples(text, declared)
    samples: dict[str, list[Series]] = {}
    seen: set[tuple[str, frozenset[tuple[str, str]]]] = set()
    for name, labels, value in triples:
        key = (name, frozenset(labels.items()))
        if key in seen:
            # The same series twice: the exporter is broken (or two payloads were glued
            # together). Summing would double the load; the replica is unknown instead.
            shown = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            raise PayloadError(f"duplicate series {name}{{{shown}}}"[:300])
        seen.add(key)
        samples.setdefault(name, []).append((labels, value))
    if not samples:
        raise PayloadError("payload has no samples")
    return MetricIndex(samples={k: tuple(v) for k, v in samples.items()}, types=declared)


def _full_samples(text: str, declared: Mapping[str, str]) -> list[tuple[str, dict[str, str], float]]:
    """Every sample through prometheus_client's parser, by wire name."""
    out: list[tuple[str, dict[str, str], float]] = []
    try:
        for family in text_string_to_metric_families(text):
            # Undo the parser's counter rewrite: a counter declared without ``_total`` was exposed
            # without it (TGI, Triton); one declared with it keeps it.
            bare_counter = (
                family.type == "counter"
                and declared.get(family.name) == "counter"
                and declared.get(family.name + "_total") != "counter"
            )
            for s in family.samples:
                name = s.name
                if bare_counter and name == family.name + "_total":
                    name = family.name
                out.append((name, dict(s.labels), float(s.value)))
    except Exception as exc:  # the parser raises ValueError, IndexError, TypeError... on garbage
        raise PayloadError(f"not Prometheus text exposition: {type(exc).__name__}: {exc}"[:300]) from None
    return out


def label_is(key: str, *values: str) -> Callable[[Labels], bool]:
    """A series filter: label ``key`` has one of ``values``."""
    wanted = frozenset(values)
    return lambda labels: labels.get(key) in wanted
