"""The one trace reader (demo and bench): what it accepts, and the file:line:column of what it does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from warmscale.traces import PACKAGE_DIR, shipped
from warmscale.traces.loader import TraceError, _fields, detect_kind, read_rates, read_requests


def test_fields_and_their_columns() -> None:
    assert _fields("0,10,5\n") == [("0", 1), ("10", 3), ("5", 6)]
    assert _fields('1,"2,5",3\r\n') == [("1", 1), ("2,5", 3), ("3", 9)]
    assert _fields('"a ""b""",c') == [('a "b"', 1), ("c", 11)]
    assert _fields("1,,") == [("1", 1), ("", 3), ("", 4)]


def test_column_order_extra_columns_blank_lines_and_crlf(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_bytes(b"output_tokens,extra,timestamp_s,input_tokens\r\n5,x,0,10\r\n\r\n7,y,1.5,20\r\n")
    assert detect_kind(p) == "requests"
    assert read_requests(p) == [(0.0, 10, 5), (1.5, 20, 7)]


def test_the_bad_field_is_pointed_at(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text('timestamp_s,input_tokens,output_tokens\n0,10,5\n\n1,"1,5",3\n')
    with pytest.raises(TraceError) as exc:
        read_requests(p)
    assert str(exc.value) == f"{p}:4:3: input_tokens: '1,5' is not a number"
    assert (exc.value.line, exc.value.column) == (4, 3)


def test_rate_curves(tmp_path: Path) -> None:
    p = tmp_path / "r.csv"
    p.write_text("bucket_start_s,bucket_end_s,rate_rps\n0,600,1.5\n600,1200,2\n")
    assert detect_kind(p) == "rate"
    r = read_rates(p)
    assert (r.start, r.end, r.value, r.column) == ([0.0, 600.0], [600.0, 1200.0], [1.5, 2.0], "rate_rps")


def test_every_shipped_trace_reads() -> None:
    for t in shipped():
        path = PACKAGE_DIR / t.file
        if t.kind == "requests":
            assert len(read_requests(path)) > 1000
        else:
            assert len(read_rates(path).start) > 10
