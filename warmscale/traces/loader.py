"""The one reader of trace CSVs, for ``warmscale demo`` and every ``warmscale bench``: it checks each
row and names the first bad one as ``file:line:column`` (standard library only; the benchmarks turn
the rows into arrays).

Two kinds of file, told apart by the header (column order free, extra columns ignored):

- per-request: ``timestamp_s,input_tokens,output_tokens`` (seconds, token counts);
- rate curve: ``bucket_start_s,bucket_end_s`` and ``requests`` (a count per bucket) or ``rate_rps``.

A per-request trace may have a *block-hash sidecar* (``<stem>.hashes.gz``, :func:`read_block_hashes`):
the ids of its prompts' KV blocks, one line per data row, for the benchmarks' prefix cache.

Lines and columns count from 1; a column is the character where the bad field starts (the end of the
line for a missing field), as compilers report it.
"""

from __future__ import annotations

import gzip
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REQUEST_COLUMNS = ("timestamp_s", "input_tokens", "output_tokens")
RATE_BOUNDS = ("bucket_start_s", "bucket_end_s")
RATE_VALUES = ("requests", "rate_rps")
HASHES_SUFFIX = ".hashes.gz"  # the block-hash sidecar of ``<stem>.csv`` is ``<stem>.hashes.gz``
HASHES_HEADER = "# block_tokens="


class TraceError(ValueError):
    """A trace file that cannot be used; ``str()`` is ``file:line:column: what is wrong``."""

    def __init__(self, path: Path | str, message: str, line: int | None = None, column: int | None = None) -> None:
        where = str(path) + (f":{line}" if line is not None else "") + (f":{column}" if column is not None else "")
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.column = str(path), line, column


@dataclass(frozen=True)
class Rates:
    """A rate curve's buckets (in file order); ``value`` is a count or a rate, as ``column`` says."""

    start: list[float]
    end: list[float]
    value: list[float]
    column: str  # "requests" | "rate_rps"


def _open_lines(path: Path) -> Iterator[str]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            yield from f
    except UnicodeDecodeError as exc:
        raise TraceError(path, f"not a text (UTF-8) file: {exc.reason} at byte {exc.start}") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None


def _fields(line: str) -> list[tuple[str, int]]:
    """The comma-separated fields of one line (RFC 4180 quoting) with the 1-based column each starts at."""
    text = line.rstrip("\r\n")
    out: list[tuple[str, int]] = []
    i, n = 0, len(text)
    while True:
        begin = i
        if i < n and text[i] == '"':
            chars: list[str] = []
            i += 1
            while i < n:
                if text[i] == '"':
                    if i + 1 < n and text[i + 1] == '"':
                        chars.append('"')
                        i += 2
                        continue
                    i += 1
                    break
                chars.append(text[i])
                i += 1
            comma = text.find(",", i)
            stop = n if comma < 0 else comma
            value = "".join(chars) + text[i:stop]
        else:
            comma = text.find(",", i)
            stop = n if comma < 0 else comma
            value = text[i:stop]
        out.append((value, begin + 1))
        if comma < 0:
            return out
        i = comma + 1


def _rows(path: Path) -> Iterator[tuple[int, list[tuple[str, int]], int]]:
    """``(line number, fields, end column)`` of every non-blank line, header included."""
    for number, line in enumerate(_open_lines(path), start=1):
        if not line.strip():
            continue
        yield number, _fields(line), len(line.rstrip("\r\n")) + 1


def header(path: Path) -> list[str]:
    for _, fields, _ in _rows(path):
        return [v.strip().lower() for v, _ in fields]
    raise TraceError(path, "empty file (expected a header: " + ",".join(REQUEST_COLUMNS) + ")", line=1, column=1)


def detect_kind(path: Path) -> str:
    """``"requests"`` or ``"rate"``, from the header."""
    h = set(header(path))
    if set(REQUEST_COLUMNS) <= h:
        return "requests"
    if set(RATE_BOUNDS) <= h and h & set(RATE_VALUES):
        return "rate"
    raise TraceError(path, f"unknown trace header {','.join(header(path))}; expected {','.join(REQUEST_COLUMNS)} "
                     f"or {','.join(RATE_BOUNDS)},requests|rate_rps", line=1, column=1)


def _number(path: Path, line: int, value: str, column: int, name: str, *, integer: bool) -> float:
    text = value.strip()
    try:
        x = float(text)
    except ValueError:
        raise TraceError(path, f"{name}: {text!r} is not a number", line, column) from None
    if not math.isfinite(x):
        raise TraceError(path, f"{name}: {text!r} is not a finite number", line, column)
    if x < 0:
        raise TraceError(path, f"{name}: {text} is negative", line, column)
    if integer and x != int(x):
        raise TraceError(path, f"{name}: {text} is not a whole number of tokens", line, column)
    return x


def _table(path: Path, wanted: tuple[str, ...], integer: frozenset[str]) -> tuple[list[list[float]], int]:
    """Columns ``wanted`` of every data row, checked; also the header's line number."""
    rows = _rows(path)
    first = next(rows, None)
    if first is None:
        raise TraceError(path, "empty file", line=1, column=1)
    head_line, head, _ = first
    names = [v.strip().lower() for v, _ in head]
    missing = [n for n in wanted if n not in names]
    if missing:
        raise TraceError(path, f"header has no {', '.join(missing)} column (it has {','.join(names)})", head_line, 1)
    index = [names.index(n) for n in wanted]
    need = max(index) + 1
    columns: list[list[float]] = [[] for _ in wanted]
    for number, fields, end in rows:
        if len(fields) < need:
            absent = wanted[next(k for k, i in enumerate(index) if i >= len(fields))]
            raise TraceError(path, f"short row: {len(fields)} of {len(names)} fields, no {absent}", number, end)
        for k, i in enumerate(index):
            value, column = fields[i]
            columns[k].append(_number(path, number, value, column, wanted[k], integer=wanted[k] in integer))
    if not columns[0]:
        raise TraceError(path, "no data rows after the header", head_line + 1, 1)
    return columns, head_line


def read_requests(path: Path | str) -> list[tuple[float, int, int]]:
    """Every request of a per-request trace, in file order: ``(timestamp_s, input_tokens, output_tokens)``."""
    p = Path(path)
    (t, inp, out), _ = _table(p, REQUEST_COLUMNS, frozenset(REQUEST_COLUMNS[1:]))
    return [(a, int(b), int(c)) for a, b, c in zip(t, inp, out, strict=True)]


def read_rates(path: Path | str) -> Rates:
    """The buckets of a rate curve; each must end after it starts."""
    p = Path(path)
    names = header(p)
    column = "requests" if "requests" in names else "rate_rps"
    (start, end, value), _ = _table(p, (*RATE_BOUNDS, column), frozenset())
    # Report the first empty bucket by its line: data rows follow the header, blank lines aside.
    for k, (a, b) in enumerate(zip(start, end, strict=True)):
        if b <= a:
            line = _data_line(p, k)
            raise TraceError(p, f"bucket_end_s {b:g} is not after bucket_start_s {a:g}", line, 1)
    return Rates(start, end, value, column)


def _data_line(path: Path, k: int) -> int:
    """The line number of data row ``k`` (0-based)."""
    rows = _rows(path)
    next(rows)
    for i, (number, _, _) in enumerate(rows):
        if i == k:
            return number
    raise IndexError(k)


@dataclass(frozen=True)
class BlockHashes:
    """A trace's prompt blocks: ``ids[i]`` are the ids of data row i's ``block_tokens``-token blocks, in
    prompt order (the last one possibly partial). Two prompts that share their first k ids share their
    first k blocks (Mooncake's ``hash_ids``: FAST25-release/traces README, one id per 512 tokens)."""

    block_tokens: int
    ids: list[tuple[int, ...]]


def _hash_line(path: Path, number: int, text: str) -> tuple[int, ...]:
    """``"0 14-16"`` as ``(0, 14, 15, 16)``; a bad field is reported at its column."""
    out: list[int] = []
    column = 1
    for field in text.split(" "):
        if field:
            lo, sep, hi = field.partition("-")
            try:
                a = int(lo)
                b = int(hi) if sep else a
            except ValueError:
                raise TraceError(path, f"block id {field!r} is not a whole number or a range a-b", number,
                                 column) from None
            if a < 0 or b < a:
                raise TraceError(path, f"block id range {field!r} is empty or negative", number, column)
            out.extend(range(a, b + 1))
        column += len(field) + 1
    return tuple(out)


def read_block_hashes(path: Path | str) -> BlockHashes:
    """A block-hash sidecar (gzip text): the line ``# block_tokens=N``, then one line per data row of
    its trace, the row's block ids separated by spaces (``a-b`` for a run of consecutive ids)."""
    p = Path(path)
    try:
        with gzip.open(p, "rt", encoding="utf-8", newline="") as f:
            lines = f.read().split("\n")
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceError(p, f"cannot read the block hashes (gzip text expected): {exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(p, f"not a text (UTF-8) file: {exc.reason} at byte {exc.start}") from None
    if lines and lines[-1] == "":
        lines.pop()
    if not lines or not lines[0].startswith(HASHES_HEADER):
        raise TraceError(p, f"the first line must be {HASHES_HEADER}N (tokens per block)", 1, 1)
    size = lines[0][len(HASHES_HEADER):].strip()
    if not size.isdigit() or int(size) <= 0:
        raise TraceError(p, f"block_tokens: {size!r} is not a positive whole number", 1, len(HASHES_HEADER) + 1)
    ids = [_hash_line(p, number, line.rstrip("\r")) for number, line in enumerate(lines[1:], start=2)]
    return BlockHashes(int(size), ids)


def check_block_hashes(hashes: BlockHashes, requests: list[tuple[float, int, int]], path: Path | str) -> None:
    """The sidecar fits its trace: one line per data row, and as many blocks as the prompt's tokens
    fill (``ceil(input_tokens / block_tokens)``)."""
    if len(hashes.ids) != len(requests):
        raise TraceError(path, f"{len(hashes.ids)} lines of block ids for {len(requests)} requests in the trace")
    bt = hashes.block_tokens
    for k, (ids, (_, inp, _)) in enumerate(zip(hashes.ids, requests, strict=True)):
        if len(ids) != -(-inp // bt):
            raise TraceError(path, f"{len(ids)} block ids for a prompt of {inp} tokens "
                             f"({-(-inp // bt)} blocks of {bt})", k + 2, 1)
